"""Hand-derived behaviour of PopulationGraph: delays, integration, routing, reset, jit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.networks.feedforward import Dense
from nnx_ppo.networks.graph import PopulationGraph
from nnx_ppo.networks.types import (
    StatefulModule,
    StatefulModuleOutput,
    StatelessModule,
    reset_where,
)


class Identity(StatelessModule):
    def forward(self, x):
        return x


class Times(StatelessModule):
    def __init__(self, factor: float):
        self.factor = factor

    def forward(self, x):
        return self.factor * x


class Seen(nnx.Variable):
    """Test-only statistic written by ``Tap.update_statistics``."""


class Tap(StatefulModule):
    """Identity transform with a step counter carry, to check the graph's routing.

    Carry: int32 [B] step count. Emits the count as rollout_extras, as per-sample
    regularization (scaled by ``weight``) and as a metric; records whether it was
    replayed, and ``update_statistics`` stores the sum of the extras it receives.
    """

    def __init__(self, weight: float):
        self.weight = weight
        self.seen = Seen(jnp.zeros((), jnp.int32))

    def initialize_state(self, batch_size):
        return jnp.zeros((batch_size,), jnp.int32)

    def __call__(self, state, x, rollout_extras=None):
        replayed = jnp.asarray(rollout_extras is not None)
        if rollout_extras is not None:
            # Replay must hand back exactly what the rollout emitted for this step.
            x = jnp.where((rollout_extras == state)[:, None], x, jnp.nan)
        return StatefulModuleOutput(
            next_state=state + 1,
            output=x,
            regularization_loss=self.weight * state.astype(jnp.float32),
            metrics={"count": state, "replayed": replayed},
            rollout_extras=state,
        )

    def update_statistics(self, rollout_extras):
        self.seen[...] = jnp.sum(rollout_extras)


def _delay_1_and_3() -> PopulationGraph:
    g = PopulationGraph(nnx.Rngs(0))
    g.add_input("s", size=1, input_from="s")
    g.add_output("d1", size=1)
    g.add_output("d3", size=1)
    g.connect("s", "d1", transform=Identity(), delay=1)
    g.connect("s", "d3", transform=Identity(), delay=3)
    g.finalize()
    return g


def _run(g, state, inputs):
    """Step ``g`` over a list of observation dicts; returns outputs stacked as numpy."""
    outs = []
    for obs in inputs:
        out = g(state, obs)
        state = out.next_state
        outs.append(out.output)
    return state, jax.tree.map(lambda *xs: np.stack(xs), *outs)


def test_delays_1_and_3_share_one_buffer():
    g = _delay_1_and_3()
    state = g.initialize_state(2)
    # One buffer, for "s" only, sized to its longest outgoing delay (3).
    assert set(state["buffers"]) == {"s"}
    assert state["buffers"]["s"].shape == (2, 3, 1)
    assert state["positions"]["s"].dtype == jnp.int32
    # env 0 observes s_t = t + 1, env 1 observes 10 (t + 1), for t = 0..5.
    inputs = [{"s": jnp.array([[t + 1.0], [10.0 * (t + 1)]])} for t in range(6)]
    _, out = _run(g, state, inputs)
    # d1_t = s_{t-1}, d3_t = s_{t-3}, zero before the history exists.
    np.testing.assert_array_equal(out["d1"][:, 0, 0], [0, 1, 2, 3, 4, 5])
    np.testing.assert_array_equal(out["d3"][:, 0, 0], [0, 0, 0, 1, 2, 3])
    np.testing.assert_array_equal(out["d1"][:, 1, 0], [0, 10, 20, 30, 40, 50])
    np.testing.assert_array_equal(out["d3"][:, 1, 0], [0, 0, 0, 10, 20, 30])


def test_buffer_of_length_one_self_loop_accumulates():
    g = PopulationGraph(nnx.Rngs(0))
    g.add_input("h", size=1, input_from="s")
    g.add_output("y", size=1)
    g.connect("h", "h", transform=Identity(), delay=1)
    g.connect("h", "y", transform=Identity())
    g.finalize()
    state = g.initialize_state(1)
    assert state["buffers"]["h"].shape == (1, 1, 1)
    # h_t = s_t + h_{t-1}: with s = 1, 2, 3, 4 the running sums are 1, 3, 6, 10; y reads h
    # with delay 0, i.e. this step's value.
    _, out = _run(g, state, [{"s": jnp.array([[float(t)]])} for t in (1, 2, 3, 4)])
    np.testing.assert_array_equal(out["y"][:, 0, 0], [1, 3, 6, 10])


def test_reset_mid_episode_zeroes_only_that_envs_history():
    g = _delay_1_and_3()
    state = g.initialize_state(2)
    state, _ = _run(g, state, [{"s": jnp.full((2, 1), t + 1.0)} for t in range(2)])
    # After two steps (s = 1, 2) env 0's episode ends; env 1 continues.
    state = reset_where(g, jnp.array([True, False]), state)
    np.testing.assert_array_equal(state["positions"]["s"], [0, 2])
    np.testing.assert_array_equal(state["buffers"]["s"][0], np.zeros((3, 1)))
    _, out = _run(g, state, [{"s": jnp.full((2, 1), t + 1.0)} for t in range(2, 6)])
    # Steps t = 2..5 observe s = 3..6.
    # env 1 keeps its history: d1 = s_{t-1} = 2..5, d3 = s_{t-3} = 0 (t=2), 1, 2, 3.
    np.testing.assert_array_equal(out["d1"][:, 1, 0], [2, 3, 4, 5])
    np.testing.assert_array_equal(out["d3"][:, 1, 0], [0, 1, 2, 3])
    # env 0's history restarts at t = 2: d1 = 0, 3, 4, 5; d3 = 0, 0, 0, 3.
    np.testing.assert_array_equal(out["d1"][:, 0, 0], [0, 3, 4, 5])
    np.testing.assert_array_equal(out["d3"][:, 0, 0], [0, 0, 0, 3])


def test_delay_zero_runs_in_topological_order_and_activation_applies_once():
    g = PopulationGraph(nnx.Rngs(0))
    # Declared out of order on purpose: "c" reads "b", which is declared after it.
    g.add_output("c", size=1)
    g.add_population("b", size=1, activation=jax.nn.relu)
    g.add_input("a", size=1, input_from="x")
    g.connect("b", "c", transform=Identity())
    g.connect("a", "c", transform=Identity())
    g.connect("a", "b", transform=Identity())
    g.connect("a", "b", transform=Times(-2.0), delay=1)
    g.finalize()
    assert g.execution_order == ("a", "b", "c")
    state = g.initialize_state(2)
    # Step 0, a = [1, -1] (delayed read of a is 0):
    #   b = relu(a + 0) = [1, 0]        c = a + b = [2, -1]
    # Step 1, a = [3, -3], delayed a = [1, -1]:
    #   b = relu(a - 2 * [1, -1]) = relu([1, -1]) = [1, 0]  (applied once to the sum;
    #   relu per connection would give relu(3) + relu(-2) = 3)
    #   c = a + b = [4, -3]
    inputs = [{"x": jnp.array([[1.0], [-1.0]])}, {"x": jnp.array([[3.0], [-3.0]])}]
    _, out = _run(g, state, inputs)
    np.testing.assert_array_equal(out["c"][:, :, 0], [[2, -1], [4, -3]])


def test_output_to_renames_and_extra_obs_keys_are_ignored():
    g = PopulationGraph(nnx.Rngs(0))
    g.add_input("a", size=2, input_from="x")
    g.add_output("head", size=2, output_to="logits")
    g.connect("a", "head", transform=Times(3.0))
    g.finalize()
    out = g(g.initialize_state(1), {"x": jnp.array([[1.0, 2.0]]), "unused": jnp.ones((1, 7))})
    assert set(out.output) == {"logits"}
    np.testing.assert_array_equal(out.output["logits"], [[3.0, 6.0]])


def test_one_transform_on_two_connections_shares_its_weights():
    identity = Times(1.0)
    g = PopulationGraph(nnx.Rngs(0))
    g.add_input("a", size=2, input_from="x")
    g.add_output("b", size=3)
    g.add_output("c", size=3)
    dense = Dense(2, 3, rngs=nnx.Rngs(1))
    g.connect("a", "b", transform=dense)
    g.connect("a", "c", transform=dense, delay=1)
    g.connect("b", "c", transform=identity)
    g.finalize()
    # One kernel and one bias in the graph's parameters, not two of each.
    assert len(jax.tree.leaves(nnx.state(g, nnx.Param))) == 2
    state = g.initialize_state(1)
    x0, x1 = jnp.array([[1.0, 2.0]]), jnp.array([[-1.0, 0.5]])
    out0 = g(state, {"x": x0})
    out1 = g(out0.next_state, {"x": x1})
    # c_1 = dense(a_0) (delay 1) + b_1 = dense(x0) + dense(x1).
    expected = dense.forward(x0) + dense.forward(x1)
    np.testing.assert_allclose(out1.output["c"], expected, rtol=1e-6)


def _tapped_graph(record: bool = False) -> PopulationGraph:
    g = PopulationGraph(nnx.Rngs(0), record_populations=record)
    g.add_input("a", size=2, input_from="x")
    g.add_population("h", size=2, activation=jnp.tanh)
    g.add_output("y", size=2)
    g.connect("a", "h", transform=Tap(weight=1.0))
    g.connect("h", "h", transform=Tap(weight=10.0), delay=2)
    g.connect("h", "y")  # default Dense: stateless, no metrics
    g.finalize()
    return g


def test_transform_carry_extras_losses_and_metrics_are_routed_by_connection_name():
    g = _tapped_graph()
    names = {"a->h", "h->h@2", "h->y"}
    assert set(g.transforms) == names
    state = g.initialize_state(3)
    assert set(state["transforms"]) == names
    state["transforms"]["a->h"] = jnp.array([0, 1, 2], jnp.int32)
    state["transforms"]["h->h@2"] = jnp.array([5, 5, 5], jnp.int32)
    out = g(state, {"x": jnp.ones((3, 2))})
    np.testing.assert_array_equal(out.next_state["transforms"]["a->h"], [1, 2, 3])
    np.testing.assert_array_equal(out.next_state["transforms"]["h->h@2"], [6, 6, 6])
    assert out.next_state["transforms"]["h->y"] == ()
    # Per-sample regularization: 1 * [0, 1, 2] + 10 * [5, 5, 5].
    assert out.regularization_loss.shape == (3,)
    np.testing.assert_array_equal(out.regularization_loss, [50, 51, 52])
    # Metrics only for the connections that emit some; no population recording.
    assert set(out.metrics) == {"transforms"}
    assert set(out.metrics["transforms"]) == {"a->h", "h->h@2"}
    np.testing.assert_array_equal(out.metrics["transforms"]["a->h"]["count"], [0, 1, 2])
    assert out.rollout_extras["transforms"]["h->y"] == ()
    np.testing.assert_array_equal(out.rollout_extras["transforms"]["h->h@2"], [5, 5, 5])


def test_replay_routes_each_connections_extras():
    g = _tapped_graph()
    state = g.initialize_state(2)
    obs = {"x": jnp.array([[0.3, -0.2], [1.0, 0.5]])}
    rollout = g(state, obs)
    replay = g(state, obs, rollout.rollout_extras)
    # Tap returns NaN if it gets extras other than its own (see Tap.__call__).
    np.testing.assert_array_equal(replay.output["y"], rollout.output["y"])
    assert bool(replay.metrics["transforms"]["a->h"]["replayed"])
    assert not bool(rollout.metrics["transforms"]["a->h"]["replayed"])


def test_update_statistics_routes_stacked_extras():
    g = _tapped_graph()
    state = g.initialize_state(2)
    extras = []
    for _ in range(3):
        out = g(state, {"x": jnp.ones((2, 2))})
        extras.append(out.rollout_extras)
        state = out.next_state
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *extras)  # leaves [T=3, B=2]
    g.update_statistics(stacked)
    # Each Tap emitted its counts 0, 1, 2 for both envs: sum = 2 * (0 + 1 + 2) = 6.
    assert int(g.transforms["a->h"].seen[...]) == 6
    assert int(g.transforms["h->h@2"].seen[...]) == 6


def test_record_populations_puts_every_population_output_in_metrics():
    g = _tapped_graph(record=True)
    out = g(g.initialize_state(2), {"x": jnp.array([[1.0, -1.0], [0.0, 2.0]])})
    pops = out.metrics["populations"]
    assert set(pops) == {"a", "h", "y"}
    # The input population passes its observation through (no activation, no input
    # connections), the output population equals the forward output.
    np.testing.assert_array_equal(pops["a"], [[1.0, -1.0], [0.0, 2.0]])
    np.testing.assert_array_equal(pops["y"], out.output["y"])
    assert pops["h"].shape == (2, 2)
    unrecorded = _tapped_graph()(g.initialize_state(2), {"x": jnp.ones((2, 2))})
    assert "populations" not in unrecorded.metrics


def test_reset_state_restores_the_initial_state_and_keeps_structure():
    g = _tapped_graph()
    state0 = g.initialize_state(2)
    state = state0
    for _ in range(3):
        state = g(state, {"x": jnp.ones((2, 2))}).next_state
    # Structure, shapes and dtypes are stable across steps.
    assert jax.tree.structure(state) == jax.tree.structure(state0)
    assert jax.tree.map(lambda a: (a.shape, a.dtype), state) == jax.tree.map(
        lambda a: (a.shape, a.dtype), state0
    )
    assert float(jnp.abs(state["buffers"]["h"]).sum()) > 0
    fresh = g.reset_state(state)
    jax.tree.map(np.testing.assert_array_equal, fresh, state0)


def test_jit_matches_eager_and_does_not_retrace():
    g = _tapped_graph()
    traces = []

    @nnx.jit
    def step(graph, state, obs):
        traces.append(None)
        out = graph(state, obs)
        return out.next_state, out.output

    key = jax.random.key(0)
    state_j = state_e = g.initialize_state(2)
    for t in range(4):
        obs = {"x": jax.random.normal(jax.random.fold_in(key, t), (2, 2))}
        state_j, y_j = step(g, state_j, obs)
        out = g(state_e, obs)
        state_e = out.next_state
        np.testing.assert_allclose(y_j["y"], out.output["y"], rtol=1e-6, atol=1e-6)
    assert len(traces) == 1


@pytest.mark.parametrize("batch", [1, 5])
def test_graph_with_dense_defaults_in_a_scan(batch):
    # The spec's worked example, stepped inside lax.scan through split/merge.
    g = PopulationGraph(nnx.Rngs(0))
    g.add_input("in_x", size=3, input_from="x")
    g.add_population("hidden", size=4, activation=nnx.swish)
    g.connect("in_x", "hidden")
    g.connect("hidden", "hidden", delay=1)
    g.add_output("value", size=1)
    g.connect("hidden", "value")
    g.finalize()
    graphdef, params = nnx.split(g)

    def body(state, obs):
        out = nnx.merge(graphdef, params)(state, obs)
        return out.next_state, out.output["value"]

    xs = {"x": jnp.ones((6, batch, 3))}
    _, values = jax.lax.scan(body, g.initialize_state(batch), xs)
    assert values.shape == (6, batch, 1)
    # Constant input, but the recurrence makes the value change between steps 0 and 1.
    assert not np.allclose(values[0], values[1])
