"""Policy export: `DeterministicPolicy`, StableHLO and ONNX artefacts, bad input.

Parity is checked on a closed-loop rollout of a small pure-JAX system (the actions feed
the next observation, episodes end at staggered steps so each environment's carry is
reset mid-rollout): the network in ``eval()`` mode with ``reset_where`` is the
reference, and every exported form is stepped on the *same* observations while feeding
back its own carry. The rollouts with the package's environments, brax and the
population graph are in ``apps/export/tests``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.containers import Concat, Sequential, Splitter
from nnx_ppo.networks.delay import Delay
from nnx_ppo.networks.export import (
    DeterministicPolicy,
    ExportError,
    export_policy,
    load_stablehlo,
    observation_spec_from_sizes,
    read_manifest,
)
from nnx_ppo.networks.factories import make_lstm_actor_critic, make_mlp_actor_critic
from nnx_ppo.networks.feedforward import MLP, Dense
from nnx_ppo.networks.linear_recurrent import LRU, MinGRU
from nnx_ppo.networks.normalizer import Normalizer
from nnx_ppo.networks.recurrent import GRU, LSTM, SimpleRNN
from nnx_ppo.networks.residual import ResidualMLP
from nnx_ppo.networks.sampling_layers import CategoricalSampler, NormalTanhSampler
from nnx_ppo.networks.types import StatelessModule, reset_where
from nnx_ppo.networks.utils import Map
from nnx_ppo.networks.variational import VariationalBottleneck

B, T, EPISODE = 3, 200, 70
ATOL = 1e-5
DICT_OBS = {"goal": (2,), "proprio": (3,)}


def _flat_action(action: Any) -> jax.Array:
    leaves = [jnp.asarray(a, jnp.float32).reshape(a.shape[0], -1) for a in jax.tree.leaves(action)]
    return jnp.concatenate(leaves, axis=-1)


def _dynamics(spec: Any) -> Any:
    """A closed-loop system: next obs = 0.9 obs + 0.3 tanh(W action) + noise."""
    leaves = jax.tree.leaves(observation_spec_from_sizes(spec))
    sizes = [int(np.prod(s.shape)) for s in leaves]

    def step(obs: Any, action: Any, key: jax.Array, fresh: jax.Array) -> Any:
        a = _flat_action(action)
        w = jax.random.normal(jax.random.key(7), (a.shape[-1], sum(sizes)))
        drive = jnp.tanh(a @ w)
        noise = jax.random.normal(key, drive.shape)
        flat = jnp.concatenate([x.reshape(x.shape[0], -1) for x in jax.tree.leaves(obs)], -1)
        new = 0.9 * flat + 0.3 * drive + 0.1 * noise
        restart = 2.0 * jax.random.normal(jax.random.fold_in(key, 1), new.shape)
        new = jnp.where(fresh[:, None], restart, new)
        parts, start = [], 0
        for size, s in zip(sizes, leaves, strict=True):
            parts.append(new[:, start : start + size].reshape(new.shape[0], *s.shape))
            start += size
        return jax.tree.unflatten(jax.tree.structure(observation_spec_from_sizes(spec)), parts)

    return step


def _done(t: int) -> np.ndarray:
    """Staggered episode ends: env b ends an episode when (t + 23 b) % 70 == 69."""
    return np.array([(t + 23 * b) % EPISODE == EPISODE - 1 for b in range(B)])


def _reference_rollout(network: Any, spec: Any) -> tuple[list[Any], list[Any]]:
    """The network in eval() mode: (observations, actions) for T steps."""
    network.eval()
    dynamics = _dynamics(spec)

    @jax.jit
    def one(carry: Any, obs: Any, key: jax.Array, done: jax.Array) -> Any:
        out = network(carry, obs)
        action = out.output.actions
        carry = reset_where(network, done, out.next_state)
        return carry, action, dynamics(obs, action, key, done)

    key = jax.random.key(3)
    obs = jax.tree.map(
        lambda s: 2.0 * jax.random.normal(key, (B, *s.shape)), observation_spec_from_sizes(spec)
    )
    carry = network.initialize_state(B)
    observations, actions = [], []
    for t in range(T):
        observations.append(obs)
        carry, action, obs = one(carry, obs, jax.random.fold_in(key, t), jnp.asarray(_done(t)))
        actions.append(action)
    return observations, actions


def _assert_close(got: Any, want: Any, where: str) -> None:
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=ATOL, rtol=0, err_msg=where)


# ----------------------------------------------------------------------------- networks


def _with_statistics(network: Any, spec: Any) -> Any:
    """Give the first Normalizer non-trivial statistics (mean ~3, std ~2)."""
    norm = network.layers[0]
    data = jax.tree.map(
        lambda s: 3.0 + 2.0 * jax.random.normal(jax.random.key(1), (10, 4, *s.shape)),
        observation_spec_from_sizes(spec),
    )
    norm.update_statistics(data)
    return network


def _dense_heads(
    width: int, action_params: int, rngs: nnx.Rngs, sampler: Any = NormalTanhSampler
) -> PPOAdapter:
    """One `Dense` per port: ``action_params`` sampler parameters, then the value."""
    action = Sequential([Dense(width, action_params, rngs=rngs), sampler(rngs)])
    return PPOAdapter(action=action, value=Dense(width, 1, rngs=rngs))


def _mlp() -> Any:
    net = make_mlp_actor_critic(4, 2, (16, 16), (16,), rngs=nnx.Rngs(0))
    return _with_statistics(net, 4)


def _lstm() -> Any:
    net = make_lstm_actor_critic(4, 2, 16, (16,), (16,), rngs=nnx.Rngs(1))
    return _with_statistics(net, 4)


def _gru() -> Any:
    rngs = nnx.Rngs(2)
    return Sequential(
        [
            Normalizer(4),
            GRU(4, 16, rngs=rngs),
            _dense_heads(16, 4, rngs),
        ]
    )


def _delay() -> Any:
    rngs = nnx.Rngs(3)
    return Sequential(
        [
            Normalizer(4),
            Delay(jnp.zeros((4,)), k_steps=2, initial_value=0.5),
            PPOAdapter(
                action=Sequential([MLP(4, [16], 4, rngs=rngs), NormalTanhSampler(rngs)]),
                value=Dense(4, 1, rngs=rngs),
            ),
        ]
    )


def _dict() -> Any:
    rngs = nnx.Rngs(4)
    net = Sequential(
        [
            Normalizer({"proprio": 3, "goal": 2}),
            Concat(
                proprio=Dense(3, 8, rngs=rngs, activation=nnx.swish),
                goal=Dense(2, 8, rngs=rngs, activation=nnx.swish),
            ),
            PPOAdapter(
                action=Sequential(
                    [
                        MLP(16, [16], 2 * 2 + 2 * 1, rngs=rngs),
                        Splitter(arm=4, gripper=2),
                        Map(arm=NormalTanhSampler(rngs), gripper=NormalTanhSampler(rngs)),
                    ]
                ),
                value=MLP(16, [16], 1, rngs=rngs),
            ),
        ]
    )
    return _with_statistics(net, DICT_OBS)


def _categorical() -> Any:
    rngs = nnx.Rngs(5)
    return Sequential(
        [
            Dense(4, 8, rngs=rngs, activation=nnx.tanh),
            _dense_heads(8, 3, rngs, CategoricalSampler),
        ]
    )


def _variational() -> Any:
    rngs = nnx.Rngs(6)
    return Sequential(
        [
            GRU(4, 8, rngs=rngs),
            VariationalBottleneck(8, 4, rngs=rngs, kl_weight=1e-3),
            _dense_heads(4, 4, rngs),
        ]
    )


def _new_cells() -> Any:
    """Every memory cell added with the linear recurrences, in one network: a residual
    torso, the LayerNorm LSTM and GRU, a residual SimpleRNN, MinGRU and LRU."""
    rngs = nnx.Rngs(7)
    net = Sequential(
        [
            Normalizer(4),
            ResidualMLP(4, 8, rngs, n_blocks=1),
            LSTM(8, 8, rngs, layer_norm=True),
            GRU(8, 8, rngs, layer_norm=True),
            SimpleRNN(8, 8, rngs=rngs, residual=True),
            MinGRU(8, 8, rngs, activation="tanh"),
            LRU(8, 8, rngs, state_features=6, r_min=0.5, trainable_initial_state=True),
            _dense_heads(8, 4, rngs),
        ]
    )
    lru = net.layers[6]
    lru.initial_state["h_re"][...] = jnp.full((6,), 0.3)  # a reset is not a zero carry
    return _with_statistics(net, 4)


NETWORKS = {
    "mlp_normalizer": (_mlp, 4),
    "lstm": (_lstm, 4),
    "gru": (_gru, 4),
    "delay": (_delay, 4),
    "dict_obs_action": (_dict, DICT_OBS),
    "categorical": (_categorical, 4),
    "variational": (_variational, 4),
    "new_cells": (_new_cells, 4),
}


# ----------------------------------------------------------------------------- runners


def _named_obs(policy: DeterministicPolicy, obs: Any) -> dict[str, np.ndarray]:
    leaves = jax.tree.leaves(obs)
    return {n: np.asarray(x) for n, x in zip(policy.observation_names, leaves, strict=True)}


def _run_policy(policy: DeterministicPolicy, observations: list[Any]) -> list[Any]:
    step, reset = jax.jit(policy.step), jax.jit(policy.reset)
    carry, actions = policy.initial_carry(B), []
    for t, obs in enumerate(observations):
        carry, action = step(carry, obs)
        carry = reset(carry, jnp.asarray(_done(t)))
        actions.append(action)
    return actions


def _run_artefact(
    helpers: Any,
    manifest: dict,
    call_step: Any,
    call_reset: Any,
    policy: DeterministicPolicy,
    observations: list,
) -> list[Any]:
    """Step an artefact through ``call_step`` / ``call_reset`` ({name: array} -> {name: array})
    with nothing but its manifest: initial carry = reset(zeros, done=True) (``helpers``:
    ``testing_modules``)."""
    carry = helpers.artefact_initial_carry(manifest, call_reset, B)
    actions = []
    for t, obs in enumerate(observations):
        out = call_step({**_named_obs(policy, obs), **carry})
        carry = helpers.artefact_carry(manifest, out)
        if manifest["reset"] is not None:
            carry = helpers.artefact_carry(manifest, call_reset({**carry, "done": _done(t)}))
        actions.append(jax.tree.unflatten(policy._action_def, [out[n] for n in manifest["action"]]))
    return actions


def _ort_caller(path: Path) -> Any:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return lambda inputs: dict(zip(names, session.run(None, inputs), strict=True))


@pytest.fixture(scope="module", params=list(NETWORKS))
def case(request: pytest.FixtureRequest) -> tuple[str, Any, Any, list, list]:
    make, spec = NETWORKS[request.param]
    network = make()
    observations, actions = _reference_rollout(network, spec)
    return request.param, network, spec, observations, actions


# ----------------------------------------------------------------------------- parity


def test_policy_matches_eval_network(case: tuple) -> None:
    name, network, spec, observations, want = case
    policy = DeterministicPolicy(network, spec)
    got = _run_policy(policy, observations)
    for t in range(T):
        _assert_close(got[t], want[t], f"{name} step {t}")


def test_stablehlo_artefact_matches(case: tuple, tmp_path: Path, testing_modules: Any) -> None:
    pytest.importorskip("flatbuffers")
    name, network, spec, observations, want = case
    policy = DeterministicPolicy(network, spec)
    out = export_policy(policy, None, tmp_path / "art", format="stablehlo")
    loaded = load_stablehlo(out)
    got = _run_artefact(
        testing_modules, loaded.manifest, loaded.step, loaded.reset, policy, observations
    )
    for t in range(T):
        _assert_close(got[t], want[t], f"{name} step {t}")
    text = (out / "step.mlir").read_text()
    assert "module @jit_flat_step" in text and "stablehlo." in text


def test_onnx_artefact_matches(case: tuple, tmp_path: Path, testing_modules: Any) -> None:
    pytest.importorskip("jax2onnx")
    pytest.importorskip("onnxruntime")
    onnx = pytest.importorskip("onnx")
    name, network, spec, observations, want = case
    policy = DeterministicPolicy(network, spec)
    out = export_policy(policy, None, tmp_path / "art", format="onnx")
    manifest = read_manifest(out)
    model = onnx.load(str(out / "step.onnx"))
    assert {o.version for o in model.opset_import if o.domain in ("", "ai.onnx")} == {17}
    onnx.checker.check_model(model, full_check=True)  # valid graph, shapes infer
    batch_dims = {d.dim_param for t in model.graph.input for d in t.type.tensor_type.shape.dim[:1]}
    assert batch_dims == {"B"}  # the batch dimension is symbolic
    step = _ort_caller(out / "step.onnx")
    reset = _ort_caller(out / "reset.onnx") if manifest["reset"] else None
    got = _run_artefact(testing_modules, manifest, step, reset, policy, observations)
    for t in range(T):
        _assert_close(got[t], want[t], f"{name} step {t}")


# ----------------------------------------------------------------------------- signature


def test_value_head_and_its_carry_dropped_unless_asked() -> None:
    net = _lstm()
    actions_only = DeterministicPolicy(net, 4)
    assert actions_only.carry_names == ("carry/1/action/0/c", "carry/1/action/0/h")
    assert actions_only.value_names == ()
    with_value = DeterministicPolicy(net, 4, include_value=True)
    assert set(with_value.carry_names) == {
        "carry/1/action/0/c",
        "carry/1/action/0/h",
        "carry/1/value/0/c",
        "carry/1/value/0/h",
    }
    obs = jnp.ones((B, 4))
    _, action, value = with_value.step(with_value.initial_carry(B), obs)
    net.eval()
    out = net(net.initialize_state(B), obs)
    _assert_close(value, out.output.value_estimates, "value")
    _assert_close(action, out.output.actions, "action")
    assert value.shape == (B,)


def test_variational_keys_are_not_exported() -> None:
    """In eval() the bottleneck emits its mean, so its noise keys are dead carry."""
    policy = DeterministicPolicy(_variational(), 4)
    assert policy.carry_names == ("carry/0/h",)


def test_manifest_names_shapes_and_carry_pairs(tmp_path: Path) -> None:
    pytest.importorskip("flatbuffers")
    out = export_policy(_dict(), DICT_OBS, tmp_path / "d", format="stablehlo")
    manifest = json.loads((out / "policy.json").read_text())
    assert manifest["format"] == "stablehlo" and manifest["reset"] is None
    assert manifest["step"]["inputs"] == [
        {"name": "obs/goal", "shape": ["B", 2], "dtype": "float32"},
        {"name": "obs/proprio", "shape": ["B", 3], "dtype": "float32"},
    ]
    assert [t["name"] for t in manifest["step"]["outputs"]] == ["action/arm", "action/gripper"]
    assert [t["shape"] for t in manifest["step"]["outputs"]] == [["B", 2], ["B", 1]]
    assert "source" not in manifest  # only when given
    source = {"run": "runs/a", "step": 1200}
    out = export_policy(
        _gru(), 4, tmp_path / "g", format="stablehlo", include_value=True, source=source
    )
    manifest = read_manifest(out)
    assert manifest["source"] == source
    assert manifest["carry"] == [{"input": "carry/1/h", "output": "next_carry/1/h"}]
    assert [t["name"] for t in manifest["step"]["outputs"]] == [
        "action",
        "next_carry/1/h",
        "value",
    ]
    assert manifest["reset"]["inputs"][-1] == {"name": "done", "shape": ["B"], "dtype": "bool"}
    assert sorted(p.name for p in out.iterdir()) == [
        "README.md",
        "policy.json",
        "reset.mlir",
        "reset.stablehlo",
        "step.mlir",
        "step.stablehlo",
    ]


def test_stablehlo_batch_dimension_is_symbolic(tmp_path: Path) -> None:
    pytest.importorskip("flatbuffers")
    out = export_policy(_lstm(), 4, tmp_path / "a", format="stablehlo")
    loaded = load_stablehlo(out)
    for batch in (1, 7):
        carry = loaded.initial_carry(batch)
        result = loaded.step({"obs": np.ones((batch, 4), np.float32), **carry})
        assert result["action"].shape == (batch, 2)


def test_policy_is_a_snapshot() -> None:
    net = _mlp()
    policy = DeterministicPolicy(net, 4)
    obs = jnp.ones((B, 4))
    before = policy.step({}, obs)[1]
    net.layers[0].update_statistics(jnp.full((2, 2, 4), 100.0))  # the original moves on
    net.train()
    _assert_close(policy.step({}, obs)[1], before, "snapshot")


# ----------------------------------------------------------------------------- bad input


class _NotPPO(StatelessModule):
    def forward(self, x: Any) -> Any:
        return x * 2.0


class _HostCallback(StatelessModule):
    def forward(self, x: Any) -> Any:
        shape = jax.ShapeDtypeStruct(x.shape, x.dtype)
        return jax.pure_callback(lambda a: np.asarray(a) + 1.0, shape, x)


def _callback_network() -> Any:
    rngs = nnx.Rngs(0)
    return Sequential(
        [
            _HostCallback(),
            _dense_heads(4, 4, rngs),
        ]
    )


def test_error_network_output_is_not_ppo() -> None:
    with pytest.raises(TypeError, match=r"_NotPPO's output is a .*not a PPONetworkOutput"):
        DeterministicPolicy(_NotPPO(), 4)


def test_error_not_a_module() -> None:
    with pytest.raises(TypeError, match="network must be a StatefulModule, got dict"):
        DeterministicPolicy({"a": 1}, 4)  # type: ignore[arg-type]


def test_error_observation_spec_does_not_match() -> None:
    with pytest.raises(ValueError, match=r"cannot run on observations.*shape \(2, 5\)"):
        DeterministicPolicy(_mlp(), 5)
    with pytest.raises(ValueError, match="cannot run on observations"):
        DeterministicPolicy(_dict(), {"goal": 2})
    with pytest.raises(TypeError, match=r"observation_spec\['x'\] is 'eight'"):
        DeterministicPolicy(_mlp(), {"x": "eight"})
    with pytest.raises(ValueError, match="non-positive size"):
        DeterministicPolicy(_mlp(), (0, 4))


def test_error_unknown_format_and_opset(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"format='tflite' is not a known format.*'onnx'"):
        export_policy(_mlp(), 4, tmp_path / "a", format="tflite")
    with pytest.raises(ValueError, match="opset=13 must be an int >= 17"):
        export_policy(_mlp(), 4, tmp_path / "a", format="onnx", opset=13)
    with pytest.raises(ValueError, match=r"platforms=.* applies to format='stablehlo' only"):
        export_policy(_mlp(), 4, tmp_path / "a", format="onnx", platforms=("cpu",))
    with pytest.raises(ValueError, match="observation_spec is required"):
        export_policy(_mlp(), None, tmp_path / "a")
    assert not (tmp_path / "a").exists()


def test_error_existing_output_and_overwrite(tmp_path: Path) -> None:
    pytest.importorskip("flatbuffers")
    out = tmp_path / "art"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    with pytest.raises(FileExistsError, match="already exists; pass overwrite=True"):
        export_policy(_mlp(), 4, out, format="stablehlo")
    assert (out / "mine.txt").read_text() == "keep"
    export_policy(_mlp(), 4, out, format="stablehlo", overwrite=True)
    assert not (out / "mine.txt").exists() and (out / "step.stablehlo").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["art"]  # no leftovers


@pytest.mark.parametrize("format", ["stablehlo", "onnx"])
def test_error_inexpressible_module_leaves_nothing(tmp_path: Path, format: str) -> None:
    pytest.importorskip("flatbuffers")
    if format == "onnx":
        pytest.importorskip("jax2onnx")
    out = tmp_path / "art"
    with pytest.raises(
        ExportError, match=r"into Python \(operation 'pure_callback' at .*test_export"
    ):
        export_policy(_callback_network(), 4, out, format=format)
    assert list(tmp_path.iterdir()) == []  # nothing half-written


def test_error_source_is_not_json(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"source=.*JSON values only"):
        export_policy(_gru(), 4, tmp_path / "s", source={"run": Path("runs/a")})
    with pytest.raises(TypeError, match="must be a mapping"):
        export_policy(_gru(), 4, tmp_path / "s", source=["runs/a"])
    assert not (tmp_path / "s").exists()


def test_error_carry_of_wrong_keys() -> None:
    policy = DeterministicPolicy(_gru(), 4)
    with pytest.raises(ValueError, match=r"carry must be a dict with the keys \['carry/1/h'\]"):
        policy.step({"h": jnp.zeros((B, 16))}, jnp.ones((B, 4)))


def test_error_stablehlo_input_of_wrong_shape(tmp_path: Path) -> None:
    pytest.importorskip("flatbuffers")
    loaded = load_stablehlo(export_policy(_gru(), 4, tmp_path / "g", format="stablehlo"))
    carry = loaded.initial_carry(2)
    with pytest.raises(ValueError, match=r"input 'obs' has shape \(2, 5\), expected \['B', 4\]"):
        loaded.step({"obs": np.zeros((2, 5), np.float32), **carry})
    with pytest.raises(KeyError, match=r"missing inputs \['carry/1/h'\]"):
        loaded.step({"obs": np.zeros((2, 4), np.float32)})


def test_stablehlo_for_several_platforms(tmp_path: Path) -> None:
    """A policy lowered for CPU and CUDA on a CPU-only machine still runs here."""
    pytest.importorskip("flatbuffers")
    out = export_policy(_gru(), 4, tmp_path / "a", format="stablehlo", platforms=("cpu", "cuda"))
    loaded = load_stablehlo(out)
    assert loaded.manifest["platforms"] == ["cpu", "cuda"]
    result = loaded.step({"obs": np.ones((2, 4), np.float32), **loaded.initial_carry(2)})
    assert result["action"].shape == (2, 2)
    with pytest.raises(TypeError, match="platforms='cuda' must be a tuple"):
        export_policy(_gru(), 4, tmp_path / "b", format="stablehlo", platforms="cuda")  # type: ignore[arg-type]
