"""Leaky populations: ``a_t = a_{t-1} + (dt / tau) * (f(input_t) - a_{t-1})``.

Hand-derived trajectories (fixed and learned time constants), the ``tau == dt`` limit
against a non-leaky graph (bitwise), the learned-tau parametrisation under training,
and the guard that graphs without the new options keep their state structure.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from nnx_ppo.networks.graph import PopulationGraph
from nnx_ppo.networks.graph._leak import mix
from nnx_ppo.networks.types import StatelessModule, reset_where


class Times(StatelessModule):
    def __init__(self, factor: float):
        self.factor = factor

    def forward(self, x):
        return self.factor * x


@pytest.mark.parametrize("learn_tau", [False, True], ids=["fixed", "learned"])
def test_two_step_leaky_trajectory_by_hand(learn_tau):
    # dt = 1, tau = 4: leak factor alpha = dt / tau = 0.25, so
    #   h_t = 0.75 h_{t-1} + 0.25 relu(x_t),  h_{-1} = 0 at each episode start,
    #   y_t = h_t + 10 h_{t-1}                 (delay 0 and delay 1 reads of h).
    # env 0, x = 4, 8:  h_0 = 0.25 * 4 = 1            y_0 = 1
    #                   h_1 = 0.75 * 1 + 0.25 * 8 = 2.75    y_1 = 2.75 + 10 * 1 = 12.75
    # env 1, x = -4, 8: h_0 = 0.25 * relu(-4) = 0     y_0 = 0
    #                   h_1 = 0.25 * 8 = 2            y_1 = 2
    # Env 0 then resets (activity and buffer back to 0); both see x = 8:
    # env 0:            h_2 = 0.25 * 8 = 2            y_2 = 2 + 10 * 0 = 2
    # env 1:            h_2 = 0.75 * 2 + 0.25 * 8 = 3.5     y_2 = 3.5 + 10 * 2 = 23.5
    g = PopulationGraph(nnx.Rngs(0))
    g.add_input("x", size=1, input_from="x")
    g.add_population("h", size=1, activation=jax.nn.relu, tau=4.0, learn_tau=learn_tau)
    g.add_output("y", size=1)
    g.connect("x", "h", transform=Times(1.0))
    g.connect("h", "y", transform=Times(1.0))
    g.connect("h", "y", transform=Times(10.0), delay=1)
    g.finalize()
    # A learned tau starts at the declared value (through softplus and its inverse).
    np.testing.assert_allclose(g.time_constant("h"), [4.0], rtol=1e-6)
    check = np.testing.assert_allclose if learn_tau else np.testing.assert_array_equal
    kwargs = {"rtol": 1e-6} if learn_tau else {}

    state = g.initialize_state(2)
    assert state["activity"]["h"].shape == (2, 1) and state["activity"]["h"].dtype == jnp.float32
    ys, hs = [], []
    for t, x in enumerate([[4.0, -4.0], [8.0, 8.0], [8.0, 8.0]]):
        if t == 2:
            state = reset_where(g, jnp.array([True, False]), state)
        out = g(state, {"x": jnp.array(x)[:, None]})
        state = out.next_state
        ys.append(out.output["y"][:, 0])
        hs.append(state["activity"]["h"][:, 0])
    check(np.stack(hs), [[1.0, 0.0], [2.75, 2.0], [2.0, 3.5]], **kwargs)
    check(np.stack(ys), [[1.0, 0.0], [12.75, 2.0], [2.0, 23.5]], **kwargs)
    # The buffer of h holds the leaky activity (what the delay-1 read saw).
    check(state["buffers"]["h"][:, 0, 0], [2.0, 3.5], **kwargs)
    fresh = g.reset_state(state)
    jax.tree.map(np.testing.assert_array_equal, fresh, g.initialize_state(2))


def _pair(tau: float | None) -> PopulationGraph:
    g = PopulationGraph(nnx.Rngs(3), dt=0.05)
    g.add_input("x", size=3, input_from="x")
    g.add_population("h", size=5, activation=nnx.tanh, tau=tau)
    g.add_output("y", size=2, tau=tau)
    g.connect("x", "h")
    g.connect("h", "h", delay=1)
    g.connect("h", "y")
    g.finalize()
    return g


def test_the_leak_factor_one_returns_the_new_value_bit_for_bit():
    previous = jnp.array([0.3, -1e30, 7.0, 0.0])
    value = jnp.array([0.1, 2.5, -3.0, 1e-30])
    mixed = jax.jit(mix)(previous, value, 1.0)
    np.testing.assert_array_equal(mixed, value)


def test_leaky_with_tau_equal_to_dt_is_the_non_leaky_graph():
    # The update is exact (the test above), but the two graphs are two programs, which
    # XLA may fuse differently: at optimization level 0 (the test sessions') their
    # activations differ by an ulp, at the default level they agree bit for bit.
    plain, leaky = _pair(None), _pair(0.05)
    params = nnx.state(plain, nnx.Param)
    # Same seed, same declarations: the same parameters, and no new ones for a fixed tau.
    jax.tree.map(np.testing.assert_array_equal, nnx.state(leaky, nnx.Param), params)

    @jax.jit
    def run(xs, done):
        def rollout(g):
            def step(state, inputs):
                out = g(state, {"x": inputs[0]})
                ys = (out.output["y"], out.next_state["buffers"]["h"])
                return reset_where(g, inputs[1], out.next_state), ys

            return jax.lax.scan(step, g.initialize_state(3), (xs, done))[1]

        return rollout(plain), rollout(leaky)

    xs = 3.0 * jax.random.normal(jax.random.key(0), (5, 3, 3))
    done = jnp.zeros((5, 3), bool).at[2, 1].set(True)
    want, got = run(xs, done)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=0, atol=2e-6), got, want)
    assert float(jnp.abs(want[0]).min()) > 0  # non-trivial outputs


def test_learned_tau_is_a_parameter_and_stays_above_dt_under_training():
    # tau = dt + softplus(raw): a loss that drives tau towards zero (and below) can only
    # bring it down to dt, where the leak factor dt / tau reaches 1, never beyond.
    g = PopulationGraph(nnx.Rngs(0), dt=0.5)
    g.add_input("x", size=2, input_from="x")
    g.add_population("h", size=3, activation=nnx.tanh, tau=2.0, learn_tau=True)
    g.add_output("y", size=1)
    g.connect("x", "h")
    g.connect("h", "y")
    g.finalize()
    graphdef, params, rest = nnx.split(g, nnx.Param, ...)
    assert params["raw_tau"]["h"].shape == (3,)
    x = {"x": jnp.ones((4, 2))}

    def loss(params):
        model = nnx.merge(graphdef, params, rest)
        y = model(model.initialize_state(4), x).output["y"]
        return jnp.sum(model.time_constant("h") ** 2) + jnp.mean(y**2)

    tx = optax.adam(1.0)
    opt_state = tx.init(params)

    @jax.jit
    def train_step(params, opt_state):
        grads = jax.grad(loss)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, grads

    for step in range(10):
        params, opt_state, grads = train_step(params, opt_state)
        if step == 0:  # tau's own term and the forward both reach the parameter
            assert bool(jnp.all(grads["raw_tau"]["h"][...] > 0))
    tau = nnx.merge(graphdef, params, rest).time_constant("h")
    assert bool(jnp.all(tau >= 0.5)) and bool(jnp.all(tau < 0.6)), tau
    alpha = 0.5 / tau
    assert bool(jnp.all((alpha > 0) & (alpha <= 1)))


def test_graphs_without_the_new_options_keep_their_state_structure():
    # Checkpoints of existing graphs restore unchanged: only the transforms hold
    # parameters, and the carry has no "activity" entry.
    g = _pair(None)
    paths = {path for path, _ in nnx.to_flat_state(nnx.state(g))}
    assert paths == {
        ("transforms", name, "linear", leaf)
        for name in ("x->h", "h->h@1", "h->y")
        for leaf in ("kernel", "bias")
    }
    assert set(g.initialize_state(1)) == {"buffers", "positions", "transforms"}
    assert "tau" not in g.describe() and "tau" not in g.to_mermaid()
    leaky = _pair(0.1)
    assert set(leaky.initialize_state(1)["activity"]) == {"h", "y"}
    assert "size 5, tanh, tau 0.1, buffer 1" in leaky.describe()


def test_time_constant_of_a_non_leaky_population_is_an_error():
    with pytest.raises(ValueError, match=r"time_constant\('h'\): not a leaky population"):
        _pair(None).time_constant("h")
