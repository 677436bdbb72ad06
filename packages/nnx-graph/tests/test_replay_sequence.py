"""`PopulationGraph.replay_sequence`: the whole-sequence replay equals the step-by-step one.

The graph computes the populations that do not need the history (before the scan) and
the read-outs (after it) for all ``T * B`` samples at once and scans only the rest; the
outputs, per-sample regularization, metrics, final carry and parameter gradients must
be those of replaying one step at a time with resets where episodes ended.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.networks.graph import PopulationGraph, _replay
from nnx_ppo.networks.types import StatefulModule, StatefulModuleOutput, reset_where

T, B = 7, 3


class Penalized(StatefulModule):
    """A carry-free linear transform with a per-sample penalty and a metric."""

    def __init__(self, n_in: int, n_out: int, rngs: nnx.Rngs):
        self.kernel = nnx.Param(jax.random.normal(rngs.params(), (n_in, n_out)) / n_in)

    def __call__(self, state, x, rollout_extras=None):
        y = x @ self.kernel[...]
        return StatefulModuleOutput(
            next_state=state,
            output=y,
            regularization_loss=1e-2 * jnp.sum(y * y, axis=-1),
            metrics={"mean": jnp.mean(y)},
            rollout_extras=(),
        )


class Leaky(StatefulModule):
    """A transform with a carry: a leaky trace of its input (makes its target 'core').

    Emits its carry as extras; a replay handed other extras than the rollout's for the
    same step (beyond rounding) returns NaN."""

    def __init__(self, n: int, rngs: nnx.Rngs):
        self.kernel = nnx.Param(jax.random.normal(rngs.params(), (n, n)) / n)

    def initialize_state(self, batch_size):
        return jnp.zeros((batch_size, self.kernel.shape[0]))

    def __call__(self, state, x, rollout_extras=None):
        if rollout_extras is not None:
            # Equal up to rounding: the replay computes the input in another batch shape.
            same = jnp.all(jnp.abs(rollout_extras - state) < 1e-5, axis=-1, keepdims=True)
            x = jnp.where(same, x, jnp.nan)
        trace = 0.5 * state + x
        return StatefulModuleOutput(
            next_state=trace,
            output=trace @ self.kernel[...],
            regularization_loss=jnp.zeros(()),
            metrics={"trace": jnp.mean(trace)},
            rollout_extras=state,
        )


def _ring(record: bool = False) -> PopulationGraph:
    """The benchmark's topology, smaller: a ring with delays 1 and 2 and two read-outs."""
    g = PopulationGraph(nnx.Rngs(0), record_populations=record)
    g.add_input("obs", size=3, input_from="obs")
    for i in range(4):
        g.add_population(f"p{i}", size=5, activation=nnx.tanh)
    g.add_output("a", size=2)
    g.add_output("v", size=1)
    for i in range(4):
        g.connect("obs", f"p{i}")
        g.connect(f"p{(i - 1) % 4}", f"p{i}", delay=1)
        g.connect(f"p{(i + 1) % 4}", f"p{i}", delay=2)
        g.connect(f"p{i}", "a")
        g.connect(f"p{i}", "v")
    g.finalize()
    return g


def _mixed() -> PopulationGraph:
    """Every stage and edge case: a carry-free penalized encoder before the scan, a
    transform with a carry, an input population read with a delay, a delay-0 chain into
    the core, and a two-level read-out with a penalty after the scan."""
    rngs = nnx.Rngs(1)
    g = PopulationGraph(rngs, record_populations=True)
    g.add_input("obs", size=3, input_from="obs")
    g.add_population("enc", size=4, activation=nnx.relu)
    g.add_input("cue", size=2, input_from="cue")  # read with a delay: in the core
    g.add_population("mem", size=4, activation=nnx.tanh)
    g.add_population("mix", size=4)
    g.add_population("ro", size=3, activation=nnx.swish)
    g.add_output("out", size=2)
    g.connect("obs", "enc", transform=Penalized(3, 4, rngs))
    g.connect("enc", "mem")
    g.connect("cue", "mem", delay=2)
    g.connect("mem", "mem", delay=1)
    g.connect("enc", "mix", transform=Leaky(4, rngs))
    g.connect("mem", "mix")
    g.connect("mix", "cue", delay=1)
    g.connect("mix", "ro")
    g.connect("enc", "ro")
    g.connect("ro", "out", transform=Penalized(3, 2, rngs))
    g.finalize()
    return g


def _feedforward() -> PopulationGraph:
    """No delays and no carries: the graph's carry is empty, one batched call."""
    g = PopulationGraph(nnx.Rngs(2))
    g.add_input("obs", size=3, input_from="obs")
    g.add_population("h", size=4, activation=nnx.tanh)
    g.add_output("y", size=2)
    g.connect("obs", "h")
    g.connect("h", "y")
    g.finalize()
    return g


def _leaky_dale() -> PopulationGraph:
    """Leaky populations (fixed and learned time constants) and sign-constrained ones
    where the staging would otherwise batch them: ``smooth`` is fed by the observation
    alone (a *before* population if it had no leak), ``out`` is a read-out (an *after*
    one); an excitatory / inhibitory pair with a delayed loop; ``v`` stays *after*."""
    g = PopulationGraph(nnx.Rngs(3), dt=0.1, record_populations=True)
    g.add_input("obs", size=3, input_from="obs", sign="excitatory")
    g.add_population("smooth", size=4, activation=nnx.relu, tau=0.3)
    g.add_population("e", size=5, activation=nnx.relu, tau=0.5, learn_tau=True, sign="excitatory")
    g.add_population("i", size=3, activation=nnx.relu, sign="inhibitory")
    g.add_output("out", size=2, tau=0.2)
    g.add_output("v", size=1)
    g.connect("obs", "smooth")
    g.connect("obs", "e")
    g.connect("smooth", "e")
    g.connect("e", "i")
    g.connect("i", "e", delay=1)
    g.connect("e", "out")
    g.connect("i", "out")
    g.connect("smooth", "v")
    g.connect("e", "v")
    g.finalize()
    return g


GRAPHS = {"ring": _ring, "ring_recorded": lambda: _ring(record=True), "mixed": _mixed}
GRAPHS["feedforward"] = _feedforward
GRAPHS["leaky_dale"] = _leaky_dale


def _data(g: PopulationGraph, seed: int) -> tuple[Any, jax.Array]:
    keys = jax.random.split(jax.random.key(seed), 3)
    xs = {
        "obs": jax.random.normal(keys[0], (T, B, 3)),
        "cue": jax.random.normal(keys[1], (T, B, 2)),
    }
    done = jax.random.bernoulli(keys[2], 0.3, (T, B))
    return xs, done


def _rollout_extras(g: PopulationGraph, state: Any, xs: Any, done: jax.Array) -> Any:
    def step(carry, inputs):
        x, d = inputs
        out = g(carry, x)
        return reset_where(g, d, out.next_state), out.rollout_extras

    return jax.lax.scan(step, state, (xs, done))[1]


def _stepwise(g: PopulationGraph, state: Any, xs: Any, extras: Any, done: jax.Array) -> Any:
    def step(carry, inputs):
        x, e, d = inputs
        out = g(carry, x, e)
        reg = jnp.broadcast_to(out.regularization_loss, d.shape)
        return reset_where(g, d, out.next_state), (out.output, reg, out.metrics)

    return jax.lax.scan(step, state, (xs, extras, done))


@pytest.mark.parametrize("name", list(GRAPHS))
def test_replay_sequence_equals_the_step_by_step_replay(name):
    g = GRAPHS[name]()
    xs, done = _data(g, seed=0)
    assert 0 < int(done.sum()) < T * B
    state = g.initialize_state(B)
    extras = _rollout_extras(g, state, xs, done)
    graphdef, params, rest = nnx.split(g, nnx.Param, ...)

    def replay(params):
        model = nnx.merge(graphdef, params, rest)
        final, out = model.replay_sequence(state, xs, extras, done)
        return final, out.output, out.regularization_loss, out.metrics

    def stepwise(params):
        model = nnx.merge(graphdef, params, rest)
        final, (out, reg, metrics) = _stepwise(model, state, xs, extras, done)
        return final, out, reg, metrics

    def loss(run):
        def of(params):
            return sum(
                jnp.sum(jnp.sin(v) * jnp.arange(v.size).reshape(v.shape))
                for v in jax.tree.leaves(run(params)[1])
            )

        return of

    @jax.jit  # one compilation for both replays and both gradients
    def compare(params):
        grads = [jax.grad(loss(run))(params) for run in (replay, stepwise)]
        return replay(params), stepwise(params), grads

    got, want, grads = compare(params)
    close = lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    jax.tree.map(close, got[0], want[0])  # final carry
    jax.tree.map(close, got[1], want[1])  # outputs [T, B, ...]
    close(jnp.broadcast_to(got[2], (T, B)), want[2])  # regularization
    # Metrics: those of batched stages are repeated over time, so compare means.
    assert jax.tree.structure(got[3]) == jax.tree.structure(want[3])
    jax.tree.map(lambda a, b: close(np.mean(a), np.mean(b)), got[3], want[3])
    if name == "ring_recorded":
        assert got[3]["populations"]["p0"].shape == (T, B, 5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5), *grads)
    assert any(np.any(np.asarray(leaf) != 0) for leaf in jax.tree.leaves(grads[0]))


def _scan_products(graph_fn, xs, extras, done, state) -> Counter:
    jaxpr = jax.make_jaxpr(lambda s: graph_fn(s, xs, extras, done))(state)
    counts: Counter = Counter()

    def walk(j, in_scan):
        for eqn in j.eqns:
            counts[(eqn.primitive.name, in_scan)] += 1
            for p in eqn.params.values():
                for sub in p if isinstance(p, (list, tuple)) else [p]:
                    inner = getattr(sub, "jaxpr", sub)
                    if hasattr(inner, "eqns"):
                        walk(inner, in_scan or eqn.primitive.name == "scan")

    walk(jaxpr.jaxpr, False)
    return counts


def test_only_the_recurrent_connections_are_scanned():
    # The ring: 4 observation encoders and 8 read-out connections run outside the
    # scan; inside it only the 8 delayed ring connections.
    g = _ring()
    xs, done = _data(g, seed=1)
    state = g.initialize_state(B)
    extras = _rollout_extras(g, state, xs, done)
    counts = _scan_products(g.replay_sequence, xs, extras, done, state)
    assert counts[("scan", False)] == 1
    assert counts[("dot_general", True)] == 8
    assert counts[("dot_general", False)] == 4 + 8


def test_leaky_populations_are_always_scanned():
    g = _leaky_dale()
    plan = g._plan
    carry_less = {c.name for c in g.connections}  # every transform here is carry-free
    before, after = _replay.stages(plan, g.connections, carry_less)
    assert before == {"obs"} and after == {"v"}
