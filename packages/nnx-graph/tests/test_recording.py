"""Activation recording (nnx_ppo.networks.recording) of a PopulationGraph.

A graph inside a container is recorded as one entry, ``{population: [B, size]}``, at
its path. Checked against a numpy step-by-step reference of the graph's semantics,
with the recording copy stepped inside a jitted ``lax.scan`` and episodes restarting;
also with leaky and sign-constrained populations (the leaky activity is recorded).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.networks.containers import Concat, Sequential
from nnx_ppo.networks.feedforward import Dense
from nnx_ppo.networks.graph import PopulationGraph, SignedDense
from nnx_ppo.networks.recording import ACTIVATION_KEY, extract_activations, with_recording
from nnx_ppo.networks.types import reset_where

# Leak factors dt / tau of the leaky variant (dt = 0.1): hidden 0.5 (learned tau), motor 0.25.
_LEAKS = {"hidden": 0.5, "motor": 0.25}


def _graph(leaky: bool = False) -> PopulationGraph:
    """With ``leaky``: hidden and motor are leaky, sense excitatory, hidden inhibitory."""
    g = PopulationGraph(nnx.Rngs(0), dt=0.1)
    if leaky:
        g.add_input("sense", 3, input_from="x", sign="excitatory")
        g.add_population(
            "hidden", 4, activation=nnx.tanh, tau=0.2, learn_tau=True, sign="inhibitory"
        )
        g.add_output("motor", 2, tau=0.4)
    else:
        g.add_input("sense", 3, input_from="x")
        g.add_population("hidden", 4, activation=nnx.tanh)
        g.add_output("motor", 2)
    g.connect("sense", "hidden")
    g.connect("hidden", "hidden", delay=1)
    g.connect("hidden", "motor")
    g.connect("sense", "motor", delay=2)
    g.finalize()
    return g


def _reference(
    g: PopulationGraph, xs: np.ndarray, start: np.ndarray, leaks: dict[str, float]
) -> dict[str, np.ndarray]:
    """Populations ``[T, B, size]``: history kept in full, zeros before an episode; a
    leaky population mixes ``a = (1 - leak) a_prev + leak f(input)`` (a_prev = 0 at an
    episode start)."""
    dense = {}
    for name in ("sense->hidden", "hidden->hidden@1", "hidden->motor", "sense->motor@2"):
        module = g.transforms[name]
        if isinstance(module, SignedDense):  # weights sign * |kernel|
            dense[name] = (np.asarray(module.weight), np.asarray(module.bias[...]))
        else:
            linear = module.linear
            dense[name] = (np.asarray(linear.kernel[...]), np.asarray(linear.bias[...]))

    def apply(name: str, v: np.ndarray) -> np.ndarray:
        kernel, bias = dense[name]
        return v @ kernel + bias

    T, B = start.shape
    out = {
        "sense": np.zeros((T, B, 3)),
        "hidden": np.zeros((T, B, 4)),
        "motor": np.zeros((T, B, 2)),
    }
    for b in range(B):
        first = 0
        for t in range(T):
            first = t if start[t, b] else first

            def past(pop: str, k: int, t: int = t, b: int = b, first: int = first) -> np.ndarray:
                return out[pop][t - k, b] if t - k >= first else np.zeros(out[pop].shape[-1])

            def leak(pop: str, value: np.ndarray) -> np.ndarray:
                if pop not in leaks:
                    return value
                return (1 - leaks[pop]) * past(pop, 1) + leaks[pop] * value

            out["sense"][t, b] = xs[t, b]
            out["hidden"][t, b] = leak(
                "hidden",
                np.tanh(
                    apply("sense->hidden", out["sense"][t, b])
                    + apply("hidden->hidden@1", past("hidden", 1))
                ),
            )
            out["motor"][t, b] = leak(
                "motor",
                apply("hidden->motor", out["hidden"][t, b])
                + apply("sense->motor@2", past("sense", 2)),
            )
    return out


@pytest.mark.parametrize("leaky", [False, True], ids=["plain", "leaky_signed"])
def test_graph_populations_equal_the_numpy_reference_inside_a_scan(leaky):
    g = _graph(leaky)
    net = Sequential([g, Concat(motor=Dense(2, 1, rngs=nnx.Rngs(1)))])  # the graph at path 0
    recording = with_recording(net)
    graphdef, variables = nnx.split(recording)
    T, B = 8, 3
    xs = np.random.default_rng(0).normal(size=(T, B, 3)).astype(np.float32)
    start = np.zeros((T, B), bool)
    start[3, 1] = start[6, 2] = True

    @jax.jit
    def run(variables, xs, start):
        def step(carry, inputs):
            x, s = inputs
            module = nnx.merge(graphdef, variables)
            out = module(reset_where(module, s, carry), {"x": x})
            return out.next_state, extract_activations(out.metrics)

        model = nnx.merge(graphdef, variables)
        return jax.lax.scan(step, model.initialize_state(B), (xs, start))[1]

    acts = run(variables, jnp.asarray(xs), jnp.asarray(start))
    assert set(acts) == {0, 1} and set(acts[0]) == {"sense", "hidden", "motor"}
    if leaky:  # the learned time constant starts at the declared tau = 0.2
        np.testing.assert_allclose(g.time_constant("hidden"), 0.1 / _LEAKS["hidden"], rtol=1e-6)
    expected = _reference(g, xs, start, _LEAKS if leaky else {})
    for pop, values in expected.items():
        np.testing.assert_allclose(acts[0][pop], values, rtol=1e-5, atol=1e-6, err_msg=pop)
    assert acts[1]["motor"].shape == (T, B, 1)  # the Dense after the graph


@pytest.mark.parametrize("leaky", [False, True], ids=["plain", "leaky_signed"])
def test_recording_copy_of_a_graph_is_bitwise_the_graph_and_leaves_it_alone(leaky):
    g = _graph(leaky)
    recording = with_recording(g)
    state = g.initialize_state(2)
    x = {"x": jnp.arange(6.0).reshape(2, 3)}
    plain, recorded = g(state, x), recording(state, x)
    for a, b in zip(
        jax.tree.leaves((plain.output, plain.next_state)),
        jax.tree.leaves((recorded.output, recorded.next_state)),
        strict=True,
    ):
        np.testing.assert_array_equal(a, b)
    assert g.record_populations is False and "populations" not in plain.metrics
    # The populations moved to the recording channel (not duplicated in the metrics).
    assert set(recorded.metrics) == {ACTIVATION_KEY}
    np.testing.assert_array_equal(recorded.metrics[ACTIVATION_KEY]["motor"], plain.output["motor"])


def test_record_activations_is_nnx_ppos_name_for_record_populations():
    import pytest

    g = PopulationGraph(nnx.Rngs(0))
    assert g.record_activations is False
    g.record_activations = True
    assert g.record_populations is True and g.record_activations is True
    with pytest.raises(TypeError, match="record_activations must be a bool"):
        g.record_activations = 1
