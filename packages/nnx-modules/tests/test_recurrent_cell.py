"""`RecurrentCell`: a cell written by a user gets replay, reset, export and recording.

``AdaptingCell`` below is such a cell (two carry entries, a few lines); the export and
recording checks run it next to the library's `SimpleRNN`, a noisy `CTRNN` and a noisy
`LowRankRNN` in one network (export is noise-free and leaves the noise keys out;
recording in training mode records the noisy states, and replays them).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.containers import Sequential
from nnx_ppo.networks.export import DeterministicPolicy, export_policy, load_stablehlo
from nnx_ppo.networks.feedforward import Dense
from nnx_ppo.networks.low_rank import LowRankRNN
from nnx_ppo.networks.recording import extract_activations, with_recording
from nnx_ppo.networks.recurrent import CTRNN, GRU, LSTM, SimpleRNN
from nnx_ppo.networks.recurrent_cell import RecurrentCell
from nnx_ppo.networks.sampling_layers import NormalTanhSampler
from nnx_ppo.networks.types import reset_where


class AdaptingCell(RecurrentCell):
    """Units with adaptation: h' = tanh(x W + h U + b - a), a' = 0.5 a + 0.5 h'."""

    carry_names = ("a", "h")

    def _step(self, state: dict[str, jax.Array], projected: jax.Array) -> dict[str, jax.Array]:
        h = jnp.tanh(projected + self.recurrent_proj(state["h"]) - state["a"])
        return {"a": 0.5 * state["a"] + 0.5 * h, "h": h}


def test_user_cell_step_by_hand():
    # 1 unit, all weights 1, bias 0; x = 2, h = 0.5, a = 1:
    # h' = tanh(2 + 0.5 - 1) = tanh(1.5), a' = 0.5 * 1 + 0.5 * tanh(1.5).
    ones = nnx.initializers.ones_init()
    cell = AdaptingCell(1, 1, rngs=nnx.Rngs(0), kernel_init=ones, recurrent_kernel_init=ones)
    out = cell({"a": jnp.ones((1, 1)), "h": jnp.full((1, 1), 0.5)}, jnp.full((1, 1), 2.0))
    np.testing.assert_allclose(out.output, [[np.tanh(1.5)]], rtol=1e-6)
    np.testing.assert_allclose(out.next_state["a"], [[0.5 + 0.5 * np.tanh(1.5)]], rtol=1e-6)


def test_user_cell_gets_replay_and_reset():
    cell = AdaptingCell(3, 4, rngs=nnx.Rngs(0), trainable_initial_state=True)
    cell.initial_state["a"][...] = jnp.full((4,), 0.3)
    cell.initial_state["h"][...] = jnp.full((4,), -0.2)
    T, B = 5, 2
    xs = jax.random.normal(jax.random.key(0), (T, B, 3))
    done = jnp.zeros((T, B), bool).at[1, 1].set(True)
    state0 = cell.initialize_state(B)
    np.testing.assert_array_equal(state0["a"], np.full((B, 4), 0.3, np.float32))
    final, seq = cell.replay_sequence(state0, xs, None, done)
    state, outputs = state0, []
    for t in range(T):
        step = cell(state, xs[t])
        outputs.append(step.output)
        state = reset_where(cell, done[t], step.next_state)
        if done[t, 1]:  # env 1 is back at the learned initial carry
            jax.tree.map(lambda s, s0: np.testing.assert_array_equal(s[1], s0[1]), state, state0)
    np.testing.assert_allclose(seq.output, jnp.stack(outputs), rtol=1e-5, atol=1e-6)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), final, state)
    jax.tree.map(np.testing.assert_array_equal, cell.reset_state(final), state0)


class _NoH(RecurrentCell):
    carry_names = ("v",)


class _NoGates(RecurrentCell):
    n_gates = 0


class _WrongKeys(RecurrentCell):
    def _step(self, state: Any, projected: jax.Array) -> Any:
        return {"hidden": projected}


class _WrongShape(RecurrentCell):
    def _step(self, state: Any, projected: jax.Array) -> Any:
        return {"h": projected[:, :1]}


@pytest.mark.parametrize(
    ("cls", "error", "match"),
    [
        (_NoH, TypeError, r"_NoH.carry_names must be a tuple .* includes 'h'.*got \('v',\)"),
        (_NoGates, TypeError, "_NoGates.n_gates must be a positive int.*got 0"),
        (_WrongKeys, ValueError, r"_WrongKeys._step must return .* \['h'\], got \['hidden'\]"),
        (_WrongShape, ValueError, r"_WrongShape._step returned 'h' of shape \(2, 1\)"),
        (RecurrentCell, NotImplementedError, "RecurrentCell must implement _step"),
    ],
)
def test_subclass_mistakes_are_named(cls, error, match):
    with pytest.raises(error, match=match):
        cell = cls(3, 4, rngs=nnx.Rngs(0))
        cell(cell.initialize_state(2), jnp.ones((2, 3)))


# ------------------------------------------------------------------ export and recording


def _network() -> Sequential:
    rngs = nnx.Rngs(1)
    return Sequential(
        [
            SimpleRNN(4, 8, activation="relu", rngs=rngs),
            CTRNN(8, 8, dt=0.5, tau=[1.0, 2.0] * 4, learn_tau=True, sigma_rec=0.3, rngs=rngs),
            AdaptingCell(8, 8, rngs=rngs),
            LowRankRNN(8, 8, rank=2, tau=2.0, dt=0.5, g=0.5, sigma_rec=0.3, rngs=rngs),
            PPOAdapter(
                action=Sequential([Dense(8, 4, rngs=rngs), NormalTanhSampler(rngs)]),
                value=Dense(8, 1, rngs=rngs),
            ),
        ]
    )


T, B = 8, 3
_DONE = np.zeros((T, B), bool)
_DONE[3, 1] = _DONE[5, 0] = True


def test_export_reproduces_the_jax_actions(tmp_path):
    pytest.importorskip("flatbuffers")
    network = _network()
    network.eval()
    obs = jax.random.normal(jax.random.key(2), (T, B, 4))

    @nnx.jit
    def reference(network: Any, carry: Any, obs_t: jax.Array, done_t: jax.Array) -> Any:
        out = network(carry, obs_t)
        return reset_where(network, done_t, out.next_state), out.output.actions

    carry, want = network.initialize_state(B), []
    for t in range(T):
        carry, action = reference(network, carry, obs[t], _DONE[t])
        want.append(action)

    policy = DeterministicPolicy(network, 4)
    assert policy.carry_names == (
        "carry/0/h",
        "carry/1/h",
        "carry/2/a",
        "carry/2/h",
        "carry/3/h",
    )  # no carry/1/key nor carry/3/key: in eval() the noise is off
    loaded = load_stablehlo(export_policy(policy, None, tmp_path / "art", format="stablehlo"))
    hlo_carry = loaded.initial_carry(B)
    for t in range(T):
        result = loaded.step({"obs": np.asarray(obs[t]), **hlo_carry})
        hlo_carry = {c["input"]: result[c["output"]] for c in loaded.manifest["carry"]}
        hlo_carry = {
            c["input"]: loaded.reset({**hlo_carry, "done": _DONE[t]})[c["output"]]
            for c in loaded.manifest["carry"]
        }
        np.testing.assert_allclose(result["action"], want[t], atol=1e-5, rtol=0, err_msg=f"{t}")
    assert np.abs(np.asarray(want)).min() > 0


def test_recording_reports_each_cells_hidden_state():
    rngs = nnx.Rngs(1)
    cells = Sequential(
        [
            SimpleRNN(4, 8, activation="relu", rngs=rngs),
            CTRNN(8, 8, dt=0.5, tau=[1.0, 2.0] * 4, learn_tau=True, sigma_rec=0.3, rngs=rngs),
            AdaptingCell(8, 8, rngs=rngs),
            LowRankRNN(8, 8, rank=2, tau=2.0, dt=0.5, g=0.5, sigma_rec=0.3, rngs=rngs),
        ]
    )
    recording = with_recording(cells)
    obs = jax.random.normal(jax.random.key(3), (T, B, 4))
    state = cells.initialize_state(B)
    out = recording(state, obs[0])
    acts = extract_activations(out.metrics)
    for i in range(4):
        np.testing.assert_array_equal(acts[i], out.next_state[i]["h"])
        assert acts[i].shape == (B, 8)
    # Loss replay records the same per step, [T, B, 8], the noise included.
    _, replayed = recording.replay_sequence(state, obs, [()] * 4, jnp.asarray(_DONE))
    replayed_acts = extract_activations(replayed.metrics)
    assert replayed_acts[2].shape == (T, B, 8)
    np.testing.assert_allclose(replayed_acts[1][0], acts[1], atol=1e-6)
    np.testing.assert_allclose(replayed_acts[3][0], acts[3], atol=1e-6)
    # ... and it is noisy: the same cells in eval() record other states.
    cells.eval()
    clean = extract_activations(with_recording(cells)(state, obs[0]).metrics)
    assert np.abs(np.asarray(clean[3]) - np.asarray(acts[3])).max() > 1e-3


# -- the shared keywords (CellOptions), owned by the base ------------------------------------

_EVERY_CELL = {
    "LSTM": lambda **kw: LSTM(3, 4, nnx.Rngs(0), **kw),
    "GRU": lambda **kw: GRU(3, 4, nnx.Rngs(0), **kw),
    "SimpleRNN": lambda **kw: SimpleRNN(3, 4, rngs=nnx.Rngs(0), **kw),
    "CTRNN": lambda **kw: CTRNN(3, 4, tau=2.0, rngs=nnx.Rngs(0), **kw),
}


@pytest.mark.parametrize("name", sorted(_EVERY_CELL))
def test_every_cell_forwards_the_shared_keywords_to_the_base(name):
    # Each keyword of CellOptions reaches RecurrentCell.__init__: the initialisers set
    # the kernels and biases (ones, twos and threes cannot come from the defaults), the
    # dtype the parameters and carry, and trainable_initial_state the learned carry.
    cell = _EVERY_CELL[name](
        trainable_initial_state=True,
        kernel_init=nnx.initializers.constant(1.0),
        recurrent_kernel_init=nnx.initializers.constant(2.0),
        bias_init=nnx.initializers.constant(3.0),
        param_dtype=jnp.float16,
    )
    assert isinstance(cell, RecurrentCell)
    assert cell.trainable_initial_state and cell.initial_state is not None
    assert set(cell.initial_state) == set(cell.carry_names)
    assert bool(jnp.all(cell.input_proj.kernel[...] == 1.0))
    assert bool(jnp.all(cell.recurrent_proj.kernel[...] == 2.0))
    assert bool(jnp.all(cell.recurrent_proj.bias[...] == 3.0))
    assert cell.input_proj.kernel[...].dtype == jnp.float16
    assert cell.initialize_state(2)["h"].dtype == jnp.float16
    # Only the GRU's input projection has a bias of its own (the PyTorch formulation).
    assert (cell.input_proj.bias is not None) == (name == "GRU")


@pytest.mark.parametrize("name", sorted(_EVERY_CELL))
def test_every_cell_refuses_keywords_it_does_not_take(name):
    with pytest.raises(TypeError, match="unexpected keyword argument 'kernel_initializer'"):
        _EVERY_CELL[name](kernel_initializer=None)
    with pytest.raises(TypeError, match="input_bias"):  # the cell's structure, not an option
        _EVERY_CELL[name](input_bias=True)
