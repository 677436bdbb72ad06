"""Dale's law: the outgoing weights of excitatory / inhibitory populations keep their sign.

`SignedDense` uses the weights ``sign * |kernel|``. Checked: what the graph builds for
signed populations, the initial scale, the gradient at a zero kernel, and the
acceptance test of the feature: the signs hold after Adam steps with a large learning
rate on a loss that pushes every weight across zero (an unconstrained control
connection does cross).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from nnx_ppo.networks.feedforward import Dense
from nnx_ppo.networks.graph import PopulationGraph, SignedDense
from nnx_ppo.networks.graph.signed_dense import SIGNS


def _dale_graph(init_fan_in: str = "population") -> PopulationGraph:
    """An E/I circuit: excitatory input and E population, inhibitory I population, a
    plain population ``u`` as the unconstrained control, one read-out."""
    g = PopulationGraph(nnx.Rngs(0), init_fan_in=init_fan_in)
    g.add_input("x", size=3, input_from="x", sign="excitatory")
    g.add_population("e", size=4, activation=nnx.relu, sign="excitatory")
    g.add_population("i", size=3, activation=nnx.relu, sign="inhibitory")
    g.add_population("u", size=2, activation=nnx.tanh)
    g.add_output("y", size=2)
    g.connect("x", "e")
    g.connect("x", "u")
    g.connect("e", "i")
    g.connect("i", "e", delay=1)
    g.connect("e", "e", delay=1)
    g.connect("e", "y")
    g.connect("i", "y")
    g.connect("u", "y")
    g.finalize()
    return g


def test_outgoing_connections_of_signed_populations_are_signed_dense():
    g = _dale_graph()
    signs = {p.name: p.sign for p in g.populations}
    for c in g.connections:
        module = g.transforms[c.name]
        if signs[c.src] is None:
            assert type(module) is Dense, c.name
        else:
            assert isinstance(module, SignedDense) and module.sign == signs[c.src], c.name
    # Into the inhibitory population i, from the excitatory e: weights >= 0; out of i: <= 0.
    assert bool(jnp.all(g.transforms["e->i"].weight >= 0))
    assert bool(jnp.all(g.transforms["i->e@1"].weight <= 0))
    assert "size 3, relu, inhibitory" in g.describe()
    assert "SignedDense(4, 3, excitatory)" in g.describe()
    assert "e<br/>size 4, relu, excitatory" in g.to_mermaid()


def test_signed_defaults_get_the_population_fan_in_scale():
    # e's fan-in is x (3) + i (3) + e (4) = 10: x->e is scaled by sqrt(3/10) like a Dense.
    scaled, plain = _dale_graph("population"), _dale_graph("connection")
    np.testing.assert_allclose(
        scaled.transforms["x->e"].kernel[...],
        plain.transforms["x->e"].kernel[...] * math.sqrt(3 / 10),
        rtol=1e-6,
    )
    # Magnitudes of a LeCun-normal draw: E|w| = sqrt(2 / pi) / sqrt(fan_in).
    big = SignedDense(256, 64, sign="excitatory", rngs=nnx.Rngs(1))
    mean = float(jnp.mean(big.weight))
    assert abs(mean - math.sqrt(2 / math.pi) / 16) < 0.1 / 16


def test_gradient_reaches_a_kernel_at_exactly_zero():
    # JAX differentiates |k| at 0 as +1, so a weight at zero is not stuck.
    layer = SignedDense(2, 1, sign="inhibitory", rngs=nnx.Rngs(0), use_bias=False)
    layer.kernel[...] = jnp.zeros((2, 1))
    graphdef, params = nnx.split(layer)

    def out(params):
        return jnp.sum(nnx.merge(graphdef, params).forward(jnp.array([[1.0, 2.0]])))

    # d/dk of -(|k1| * 1 + |k2| * 2) at k = 0: -[1, 2].
    grad = jax.grad(out)(params)["kernel"][...]
    np.testing.assert_array_equal(grad, [[-1.0], [-2.0]])


def test_dale_signs_hold_after_adam_steps_that_push_weights_across_zero():
    g = _dale_graph()
    graphdef, params, rest = nnx.split(g, nnx.Param, ...)
    sign_of = {p.name: p.sign for p in g.populations}
    signed = [c.name for c in g.connections if sign_of[c.src] is not None]
    assert len(signed) == 7  # everything out of x, e and i
    control = "u->y"
    control_sign = np.sign(np.asarray(g.transforms[control].linear.kernel[...]))
    x = {"x": jax.random.normal(jax.random.key(0), (8, 3))}

    def weights(model):
        return {name: model.transforms[name].weight for name in signed}

    def loss(params):
        # Each signed weight is pulled towards 2 on the wrong side of zero (-2 for an
        # excitatory source, +2 for an inhibitory one), the control's towards the
        # opposite of its initial sign; plus the forward, so gradients also come
        # through the graph's step.
        model = nnx.merge(graphdef, params, rest)
        total = sum(
            jnp.sum((w + 2.0 * SIGNS[sign_of[name.split("->")[0]]]) ** 2)
            for name, w in weights(model).items()
        )
        total += jnp.sum((model.transforms[control].linear.kernel[...] + 2.0 * control_sign) ** 2)
        y = model(model.initialize_state(8), x).output["y"]
        return total + jnp.mean(y**2)

    tx = optax.adam(0.5)
    opt_state = tx.init(params)

    @jax.jit
    def train_step(params, opt_state):
        updates, opt_state = tx.update(jax.grad(loss)(params), opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    for _ in range(15):
        params, opt_state = train_step(params, opt_state)
    model = nnx.merge(graphdef, params, rest)
    for name, w in weights(model).items():
        if sign_of[name.split("->")[0]] == "excitatory":
            assert bool(jnp.all(w >= 0)), (name, w)
        else:
            assert bool(jnp.all(w <= 0)), (name, w)
        # Held near zero, where the loss would have them cross.
        assert float(jnp.abs(w).max()) < 1.0, (name, w)
    # The loss does push across zero: the unconstrained kernel crossed everywhere, and
    # the signed kernels' raw parameters crossed (the absolute value reflected them).
    control_kernel = np.asarray(model.transforms[control].linear.kernel[...])
    assert np.all(np.sign(control_kernel) == -control_sign)
    raw = np.concatenate([np.ravel(model.transforms[n].kernel[...]) for n in signed])
    assert np.any(raw < 0)
