"""Recurrent noise in a graph's leaky populations (``add_population(sigma_rec=...)``).

A Dale's-law E/I graph with noisy leaky populations: the noise is exactly the published
increment added to the noise-free step; a rollout with resets is replayed exactly
(ratio 1) step by step and by `replay_sequence`; ``eval()`` is the noise-free graph bit
for bit, which export and the carry map use (the noise key left out).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.analysis import CarryMap
from nnx_ppo.networks.containers import Sequential
from nnx_ppo.networks.feedforward import Dense
from nnx_ppo.networks.graph import PopulationGraph
from nnx_ppo.networks.recurrent_noise import split_keys
from nnx_ppo.networks.sampling_layers import NormalTanhSampler
from nnx_ppo.networks.types import reset_where
from nnx_ppo.networks.utils import Filter

T, B, OBS = 7, 3, 2
DT, TAU_E, TAU_I = 0.5, 2.0, 1.0


def _graph(sigma: float, rngs: nnx.Rngs) -> PopulationGraph:
    g = PopulationGraph(rngs, dt=DT)
    g.add_input("obs", size=OBS, input_from="obs")
    g.add_population(
        "e", size=4, activation=nnx.relu, tau=TAU_E, sign="excitatory", sigma_rec=sigma
    )
    g.add_population(
        "i", size=2, activation=nnx.relu, tau=TAU_I, sign="inhibitory", sigma_rec=sigma
    )
    for dst in ("e", "i"):
        g.connect("obs", dst)
        for src in ("e", "i"):
            g.connect(src, dst, delay=1)
    g.add_output("out", size=3)
    g.connect("e", "out")
    g.finalize()
    return g


def _network(sigma: float) -> Sequential:
    rngs = nnx.Rngs(0)
    actor = Sequential(
        [
            Filter(lambda x: {"obs": x}),
            _graph(sigma, nnx.Rngs(1)),  # its own stream: the same weights around it
            Filter("out"),
            Dense(3, 2, rngs=rngs),
            NormalTanhSampler(rngs),
        ]
    )
    return Sequential([PPOAdapter(action=actor, value=Dense(OBS, 1, rngs=rngs))])


def test_noise_is_the_published_increment_and_off_in_eval() -> None:
    clean, noisy = _graph(0.0, nnx.Rngs(0)), _graph(0.3, nnx.Rngs(0))
    assert "noise_key" not in clean.initialize_state(B)  # no noise: the old carry
    state = noisy.initialize_state(B)
    x = {"obs": jax.random.normal(jax.random.key(1), (B, OBS))}
    # A visited state (non-zero activity and buffers) for the comparison.
    state = noisy(state, x).next_state
    clean_state = {k: v for k, v in state.items() if k != "noise_key"}
    want = clean(clean_state, x, None)
    out = noisy(state, x)
    # a_t = (noise-free a_t) + sqrt(2 dt / tau) sigma xi, xi drawn for e then i.
    keys, xi = split_keys(state["noise_key"], (6,))
    std = 0.3 * np.sqrt(2 * DT / np.array([TAU_E] * 4 + [TAU_I] * 2))
    got = np.concatenate([out.next_state["activity"]["e"], out.next_state["activity"]["i"]], 1)
    ref = np.concatenate([want.next_state["activity"]["e"], want.next_state["activity"]["i"]], 1)
    np.testing.assert_allclose(got, ref + std * np.asarray(xi), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(out.next_state["noise_key"], keys)
    # eval(): the noise-free graph, bit for bit, and the key does not move.
    noisy.eval()
    evaluated = noisy(state, x)
    jax.tree.map(np.testing.assert_array_equal, evaluated.output, want.output)
    np.testing.assert_array_equal(evaluated.next_state["noise_key"], state["noise_key"])
    # A reset zeroes the history and gives every environment a fresh key.
    reset = noisy.reset_state(out.next_state)
    assert not np.any(np.asarray(reset["noise_key"]) == np.asarray(out.next_state["noise_key"]))
    with pytest.raises(ValueError, match=r"sigma_rec=0\.2 needs a leaky population"):
        PopulationGraph(nnx.Rngs(0)).add_population("h", size=2, sigma_rec=0.2)


@functools.partial(jax.jit, static_argnames="graphdef")
def _collect(params: Any, carry0: Any, obs: jax.Array, done: jax.Array, *, graphdef: Any) -> Any:
    """A rollout as the trainer collects one: the module state threaded through, each
    environment's carry reset where ``done``."""

    def step(loop: Any, inputs: Any) -> Any:
        params, carry = loop
        model = nnx.merge(graphdef, params)
        out = model(carry, inputs[0])
        return (nnx.state(model), reset_where(model, inputs[1], out.next_state)), out

    return jax.lax.scan(step, (params, carry0), (obs, done))[1]


def test_noisy_graph_replays_exactly_and_is_analysed_noise_free() -> None:
    net = _network(sigma=0.5)
    graphdef, params = nnx.split(net)
    carry0 = net.initialize_state(B)
    obs = jax.random.normal(jax.random.key(2), (T, B, OBS))
    done = np.zeros((T, B), bool)
    done[2, 0] = done[4, 2] = True
    done = jnp.asarray(done)
    outputs = _collect(params, carry0, obs, done, graphdef=graphdef)
    extras, loglik = outputs.rollout_extras, outputs.output.loglikelihoods

    def replays(params: Any) -> Any:
        model = nnx.merge(graphdef, params)

        def step(carry: Any, inputs: Any) -> Any:
            obs_t, done_t, extras_t = inputs
            out = model(carry, obs_t, extras_t)
            return reset_where(model, done_t, out.next_state), out.output.loglikelihoods

        final, ll = jax.lax.scan(step, carry0, (obs, done, extras))
        seq_final, seq = model.replay_sequence(carry0, obs, extras, done)
        return final, ll, seq_final, seq.output.loglikelihoods

    final, ll, seq_final, seq_ll = jax.jit(replays)(params)
    np.testing.assert_allclose(jnp.exp(ll - loglik), 1.0, rtol=1e-5)
    np.testing.assert_allclose(seq_ll, ll, rtol=1e-5, atol=1e-5)
    close = lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    jax.tree.map(close, seq_final, final)
    # Export and analysis: the noise-free policy (eval(), test above), without the key
    # in its carry; the carry map's state is the activity and the buffers.
    F = CarryMap(net, OBS, obs=jnp.zeros(OBS))
    assert not any("noise_key" in name for name in (*F.policy.carry_names, *F.held))
    assert F.size == 4 + 2 + 4 + 2  # the leaky activity and one step of buffer, e and i
