"""Analysis of population graphs (nnx_ppo.networks.analysis): the canonical carry and
the carry map.

A graph's delay buffers are circular, with an integer write position per population;
`PopulationGraph.canonical_state` rolls every buffer to position 0. Checked here: the
canonical form's slot order (by hand, against the recorded population outputs), that
the graph computes the same from a carry and from its canonical form (graphs with
different delays, per-environment positions), and that `CarryMap` of a graph network
(the factory's, and a leaky Dale's-law graph with delays 2 and 3) equals stepping the
policy and canonicalising, with fixed points that are fixed.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.analysis import CarryMap, find_fixed_points
from nnx_ppo.networks.containers import Sequential
from nnx_ppo.networks.feedforward import Dense
from nnx_ppo.networks.graph import PopulationGraph, make_graph_actor_critic
from nnx_ppo.networks.sampling_layers import NormalTanhSampler
from nnx_ppo.networks.types import reset_where
from nnx_ppo.networks.utils import Filter

B = 3


def _as_obs(x: jax.Array) -> dict[str, jax.Array]:
    return {"obs": x}


def _dale_network() -> PPOAdapter:
    """obs -> e (excitatory, leaky, relu) -> i (inhibitory) -> e at delay 2, e -> e at
    delay 3, e -> y: buffers of 3 (e) and 2 (i) slots, so the positions cycle apart."""
    g = PopulationGraph(nnx.Rngs(0), dt=0.5)
    g.add_input("x", size=4, input_from="obs")
    g.add_population("e", size=5, activation=nnx.relu, tau=1.0, sign="excitatory")
    g.add_population("i", size=3, activation=nnx.relu, sign="inhibitory")
    g.connect("x", "e")
    g.connect("e", "i")
    g.connect("i", "e", delay=2)
    g.connect("e", "e", delay=3)
    g.add_output("action_params", size=2)
    g.connect("e", "action_params")
    g.finalize()
    rngs = nnx.Rngs(1)
    return PPOAdapter(
        action=Sequential([Filter(_as_obs), g, Filter("action_params"), NormalTanhSampler(rngs)]),
        value=Dense(4, 1, rngs=rngs),
    )


def _visited(step, carry, steps: int, seed: int = 0) -> dict[str, jax.Array]:
    """The carry after ``steps`` policy steps (``step``, jitted) on random observations."""
    for t in range(steps):
        carry, _ = step(carry, jax.random.normal(jax.random.key(seed + t), (B, 4)))
    return carry


# --------------------------------------------------------------------------- the graph


def _delay_graph(delays: tuple[int, ...]) -> PopulationGraph:
    g = PopulationGraph(nnx.Rngs(0), record_populations=True)
    g.add_input("x", size=2, input_from="x")
    g.add_population("h", size=3, activation=nnx.tanh)
    g.connect("x", "h")
    for d in delays:
        g.connect("h", "h", delay=d)
    g.add_output("y", size=2)
    g.connect("h", "y")
    g.connect("x", "y", delay=1)  # the input population is buffered too (1 slot)
    g.finalize()
    return g


@pytest.mark.parametrize("delays", [(1,), (2,), (4, 2)], ids=str)
def test_a_graph_computes_the_same_from_its_canonical_carry(delays: tuple[int, ...]) -> None:
    g = _delay_graph(delays)
    length = max(delays)
    state, history = g.initialize_state(B), []
    for t in range(6):
        if t == 2:  # env 0 starts a new episode: its positions differ from the others'
            state = reset_where(g, jnp.array([True, False, False]), state)
            history = [h.at[0].set(0.0) for h in history]
        out = g(state, {"x": jax.random.normal(jax.random.key(t), (B, 2))})
        state = out.next_state
        history.append(out.metrics["populations"]["h"])
    positions = np.asarray(state["positions"]["h"])
    # env 0 has written 4 entries since its reset, the others 6.
    np.testing.assert_array_equal(positions, [4 % length, 6 % length, 6 % length])
    canonical = g.canonical_state(state)
    assert jax.tree.structure(canonical) == jax.tree.structure(state)
    for a, b in zip(jax.tree.leaves(canonical), jax.tree.leaves(state), strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
    np.testing.assert_array_equal(canonical["positions"]["h"], 0)
    # Slot L - 1 holds the newest entry, slot L - 1 - k the entry of k steps before
    # (env 0's history was zeroed at its reset, as its buffer was).
    for k in range(length):
        np.testing.assert_array_equal(canonical["buffers"]["h"][:, length - 1 - k], history[-1 - k])
    # Canonicalising twice changes nothing; the step is the same function of both forms.
    jax.tree.map(np.testing.assert_array_equal, g.canonical_state(canonical), canonical)
    x = {"x": jax.random.normal(jax.random.key(9), (B, 2))}
    from_state, from_canonical = g(state, x), g(canonical, x)
    np.testing.assert_allclose(from_state.output["y"], from_canonical.output["y"], atol=1e-6)
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6),
        g.canonical_state(from_state.next_state),
        g.canonical_state(from_canonical.next_state),
    )


# --------------------------------------------------------------------------- the map


@pytest.fixture(scope="module")
def dale_map() -> CarryMap:
    return CarryMap(_dale_network(), 4, obs=jnp.array([0.5, -1.0, 0.2, 1.0]))


def test_a_dale_graph_map_is_the_canonical_policy_step(dale_map: CarryMap) -> None:
    F, policy = dale_map, dale_map.policy
    step = jax.jit(policy.step)
    prefix = "carry/action/1"
    assert F.names == (  # the carry dict's sorted keys
        f"{prefix}/activity/e",
        f"{prefix}/buffers/e",
        f"{prefix}/buffers/i",
    )
    assert F.size == 5 + 3 * 5 + 2 * 3  # activity [5], buffers [3, 5] and [2, 3]
    assert sorted(F.held) == [f"{prefix}/positions/e", f"{prefix}/positions/i"]
    carry = _visited(step, policy.initial_carry(B), 7)
    # 7 steps: positions 7 % 3 = 1 and 7 % 2 = 1, not the canonical 0.
    assert int(carry[f"{prefix}/positions/e"][0]) == 1
    assert int(carry[f"{prefix}/positions/i"][0]) == 1
    stepped, _ = step(carry, jnp.broadcast_to(F.obs[0], (B, 4)))
    h = F.flatten(F.canonical(carry))
    np.testing.assert_allclose(F(h), F.flatten(F.canonical(stepped)), atol=1e-6)
    np.testing.assert_allclose(F(h[1]), F(h)[1], atol=1e-6)
    # The actions are the same from the carry and from its canonical form.
    _, action = step(carry, jnp.ones((B, 4)))
    _, canonical_action = step(F.carry(h), jnp.ones((B, 4)))
    np.testing.assert_allclose(action, canonical_action, atol=1e-6)
    # A rollout visits the canonical states of stepping the policy.
    obs = jax.random.normal(jax.random.key(5), (4, B, 4))
    states = F.rollout(obs, h)
    for t in range(4):
        carry, _ = step(carry, obs[t])
        np.testing.assert_allclose(states[t], F.flatten(F.canonical(carry)), atol=1e-6)


def test_fixed_points_of_a_dale_graph_hold_a_constant_history(dale_map: CarryMap) -> None:
    F = dale_map
    starts = F.rollout(jax.random.normal(jax.random.key(20), (5, B, 4)))[-1]
    found = find_fixed_points(F, starts, steps=100, newton_steps=3)
    assert len(found) >= 1
    point = found.points[0]
    np.testing.assert_allclose(F(point), point, atol=1e-4)
    # At a fixed point every slot of a buffer holds the same activity, the current one.
    carry = F.unflatten(point[None])
    e = carry["carry/action/1/buffers/e"][0]
    np.testing.assert_allclose(e, np.broadcast_to(e[-1], e.shape), atol=1e-4)
    np.testing.assert_allclose(carry["carry/action/1/activity/e"][0], e[-1], atol=1e-4)


def test_the_graph_actor_critic_is_analysed() -> None:
    # The factory's network (small heads: the carry is the same, one memory buffer).
    network = make_graph_actor_critic(4, 1, memory_size=8, actor_hidden_sizes=(8,),
                                      critic_hidden_sizes=(8,), rngs=nnx.Rngs(0))  # fmt: skip
    F = CarryMap(network, 4, obs=jnp.zeros(4))
    assert F.names == ("carry/2/action/0/buffers/r",) and F.size == 8
    assert list(F.held) == ["carry/2/action/0/positions/r"]
    step = jax.jit(F.policy.step)
    carry = _visited(step, F.policy.initial_carry(B), 3)
    stepped, _ = step(carry, jnp.zeros((B, 4)))
    np.testing.assert_allclose(
        F(F.flatten(F.canonical(carry))), F.flatten(F.canonical(stepped)), atol=1e-6
    )
    found = find_fixed_points(F, F.flatten(carry), steps=200, newton_steps=5)
    assert len(found) >= 1
    np.testing.assert_allclose(F(found.points[0]), found.points[0], atol=1e-4)
