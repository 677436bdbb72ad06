"""Initialisation of default connections: one LeCun-normal layer per population."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.networks.feedforward import Dense
from nnx_ppo.networks.graph import PopulationGraph


def _fan_in_graph(init_fan_in: str, custom: Dense | None = None) -> PopulationGraph:
    """``a`` (3) and ``b`` (5) feed ``h`` (4); ``h`` feeds ``y`` (2) alone."""
    g = PopulationGraph(nnx.Rngs(0), init_fan_in=init_fan_in)
    g.add_input("a", size=3, input_from="a")
    g.add_input("b", size=5, input_from="b")
    g.add_population("h", size=4, activation=nnx.tanh)
    g.add_output("y", size=2)
    g.connect("a", "h")
    g.connect("b", "h", transform=custom)
    g.connect("h", "y")
    g.finalize()
    return g


def _kernel(g: PopulationGraph, name: str) -> np.ndarray:
    return np.asarray(g.transforms[name].linear.kernel[...])


def test_default_kernels_are_scaled_by_the_population_fan_in() -> None:
    # h's fan-in is 3 + 5 = 8: a->h is scaled by sqrt(3/8), b->h by sqrt(5/8); y has
    # one incoming connection (fan-in 4 = h.size), so h->y is left as initialised.
    scaled, plain = _fan_in_graph("population"), _fan_in_graph("connection")
    np.testing.assert_allclose(
        _kernel(scaled, "a->h"), _kernel(plain, "a->h") * math.sqrt(3 / 8), rtol=1e-6
    )
    np.testing.assert_allclose(
        _kernel(scaled, "b->h"), _kernel(plain, "b->h") * math.sqrt(5 / 8), rtol=1e-6
    )
    np.testing.assert_array_equal(_kernel(scaled, "h->y"), _kernel(plain, "h->y"))


def test_custom_transforms_count_in_the_fan_in_but_are_not_changed() -> None:
    custom = Dense(5, 4, rngs=nnx.Rngs(7))
    before = np.asarray(custom.linear.kernel[...])
    g = _fan_in_graph("population", custom=custom)
    np.testing.assert_array_equal(_kernel(g, "b->h"), before)
    reference = _fan_in_graph("connection")
    np.testing.assert_allclose(
        _kernel(g, "a->h"), _kernel(reference, "a->h") * math.sqrt(3 / 8), rtol=1e-6
    )


def _readout_std(init_fan_in: str, n_sources: int) -> float:
    """Std of a linear read-out summing ``n_sources`` populations of 16 unit-variance
    units, over 4096 samples."""
    g = PopulationGraph(nnx.Rngs(1), init_fan_in=init_fan_in)
    for i in range(n_sources):
        g.add_input(f"s{i}", size=16, input_from=f"s{i}")
    g.add_output("y", size=1)
    for i in range(n_sources):
        g.connect(f"s{i}", "y")
    g.finalize()
    keys = jax.random.split(jax.random.PRNGKey(2), n_sources)
    x = {f"s{i}": jax.random.normal(k, (4096, 16)) for i, k in enumerate(keys)}
    y = g(g.initialize_state(4096), x).output["y"]
    return float(jnp.std(y))


def test_a_sum_of_connections_starts_with_the_scale_of_one_layer() -> None:
    # LeCun normal keeps unit variance through one layer: std(y) ~ 1 for any number of
    # incoming populations with the population fan-in; with per-connection fan-in the
    # variance adds up over the 8 connections (std ~ sqrt(8) ~ 2.8). A kernel of 128
    # draws has a relative spread of about 1/sqrt(128 / 2) ~ 12%, hence the bounds.
    assert 0.7 < _readout_std("population", 8) < 1.3
    assert 0.7 < _readout_std("population", 1) < 1.3
    assert 2.0 < _readout_std("connection", 8) < 3.6


def test_unknown_init_fan_in_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"init_fan_in must be one of .*'fan_in'"):
        PopulationGraph(nnx.Rngs(0), init_fan_in="fan_in")


def _rnn_graph(init_fan_in: str = "recurrent", rngs: int = 0) -> PopulationGraph:
    """A SimpleRNN spelled out as a graph: ``obs`` (5) drives ``r`` (64, tanh) with a
    delay-1 self-loop; ``r`` feeds a linear read-out ``y`` (2)."""
    g = PopulationGraph(nnx.Rngs(rngs), init_fan_in=init_fan_in)
    g.add_input("obs", size=5, input_from="obs")
    g.add_population("r", size=64, activation=nnx.tanh)
    g.add_output("y", size=2)
    g.connect("obs", "r")
    g.connect("r", "r", delay=1)
    g.connect("r", "y")
    g.finalize()
    return g


def test_recurrent_init_starts_a_population_like_a_simple_rnn_cell() -> None:
    # r's drive is obs alone (delay 0, fan-in 5 = obs.size): left LeCun normal, as
    # SimpleRNN's W_in; its recurrence is the self-loop alone: orthogonal, as W_rec
    # (W^T W = I, every eigenvalue on the unit circle). "population" instead divides
    # the fan-in 5 + 64 among both: the drive shrinks by sqrt(5 / 69) ~ 0.27.
    g, plain, old = _rnn_graph(), _rnn_graph("connection"), _rnn_graph("population")
    np.testing.assert_array_equal(_kernel(g, "obs->r"), _kernel(plain, "obs->r"))
    w = _kernel(g, "r->r@1")
    np.testing.assert_allclose(w.T @ w, np.eye(64), atol=1e-5)
    np.testing.assert_allclose(np.abs(np.linalg.eigvals(w)), 1.0, atol=1e-4)
    np.testing.assert_allclose(
        _kernel(old, "obs->r"), _kernel(plain, "obs->r") * math.sqrt(5 / 69), rtol=1e-6
    )


def _ring_node(init_fan_in: str) -> PopulationGraph:
    """``h`` (16) reads ``obs`` (5) and ``o`` (3) at delay 0 and ``a`` (16, delay 1)
    and ``b`` (16, delay 2) on the ring."""
    g = PopulationGraph(nnx.Rngs(3), init_fan_in=init_fan_in)
    g.add_input("obs", size=5, input_from="obs")
    g.add_input("o", size=3, input_from="o")
    for name in ("a", "b", "h"):
        g.add_population(name, size=16, activation=nnx.tanh)
    g.add_output("y", size=1)
    for src in ("obs", "o"):
        g.connect(src, "h")
    g.connect("a", "h", delay=1)
    g.connect("b", "h", delay=2)
    g.connect("obs", "a")
    g.connect("obs", "b")
    g.connect("h", "a", delay=1)
    g.connect("h", "b", delay=1)
    g.connect("h", "y")
    g.finalize()
    return g


def test_recurrent_init_splits_the_fan_in_by_delay() -> None:
    # h's drive: obs (5) and o (3) at delay 0, fan-in 8: scaled by sqrt(5/8), sqrt(3/8)
    # (the delayed sources do not count). Its recurrence: a@1 and b@2 together are one
    # orthogonal [32, 16] matrix, so the stacked kernels have orthonormal columns.
    g, plain = _ring_node("recurrent"), _ring_node("connection")
    for src, size in (("obs", 5), ("o", 3)):
        np.testing.assert_allclose(
            _kernel(g, f"{src}->h"), _kernel(plain, f"{src}->h") * math.sqrt(size / 8), rtol=1e-6
        )
    stacked = np.concatenate([_kernel(g, "a->h@1"), _kernel(g, "b->h@2")])
    np.testing.assert_allclose(stacked.T @ stacked, np.eye(16), atol=1e-5)


def test_graphs_without_delays_get_the_same_parameters_under_both_fan_in_rules() -> None:
    a, b = _fan_in_graph("recurrent"), _fan_in_graph("population")
    for name in ("a->h", "b->h", "h->y"):
        np.testing.assert_array_equal(_kernel(a, name), _kernel(b, name))


def test_a_signed_recurrence_keeps_its_sign_and_is_scaled_for_its_fan_in() -> None:
    # Dale's law: |kernel| can not stay orthogonal, so a signed delayed kernel is
    # scaled by sqrt(src.size / recurrent_fan_in) instead: e's recurrence is e@1 (4)
    # and i@1 (3), fan-in 7.
    from nnx_ppo.networks.graph import SignedDense

    def dale(init_fan_in: str) -> PopulationGraph:
        g = PopulationGraph(nnx.Rngs(0), init_fan_in=init_fan_in)
        g.add_input("x", size=3, input_from="x")
        g.add_population("e", size=4, activation=nnx.relu, sign="excitatory")
        g.add_population("i", size=3, activation=nnx.relu, sign="inhibitory")
        g.add_output("y", size=1)
        g.connect("x", "e")
        g.connect("e", "i")
        g.connect("e", "e", delay=1)
        g.connect("i", "e", delay=1)
        g.connect("e", "y")
        g.finalize()
        return g

    g, plain = dale("recurrent"), dale("connection")
    excitatory = np.asarray(g.transforms["e->e@1"].kernel[...])
    np.testing.assert_allclose(
        excitatory, np.asarray(plain.transforms["e->e@1"].kernel[...]) * math.sqrt(4 / 7), rtol=1e-6
    )
    # E/I balance: i's kernel, scaled for the fan-in, is then scaled per receiving unit
    # (column) so that its magnitudes sum to e's: uniform activity drives e by zero.
    inhibitory = np.abs(np.asarray(g.transforms["i->e@1"].kernel[...]))
    scaled = np.abs(np.asarray(plain.transforms["i->e@1"].kernel[...])) * math.sqrt(3 / 7)
    factor = np.abs(excitatory).sum(axis=0) / scaled.sum(axis=0)
    np.testing.assert_allclose(inhibitory, scaled * factor, rtol=1e-5)
    np.testing.assert_allclose(inhibitory.sum(axis=0), np.abs(excitatory).sum(axis=0), rtol=1e-5)
    assert isinstance(g.transforms["i->e@1"], SignedDense)
    assert bool(jnp.all(g.transforms["i->e@1"].weight <= 0))
    ones = jnp.ones((1, 4)), jnp.ones((1, 3))
    drive = (
        g.transforms["e->e@1"].weight.T @ ones[0].T + g.transforms["i->e@1"].weight.T @ ones[1].T
    )
    np.testing.assert_allclose(np.asarray(drive), 0.0, atol=1e-5)


def test_a_graph_with_a_simple_rnns_weights_is_that_simple_rnn() -> None:
    # The control of the learning suite's graph_rnn family: with SimpleRNN's weights
    # copied in (W_in -> obs->r, W_rec and b -> r->r@1, obs->r's bias zero), the graph's
    # read-out input equals SimpleRNN's h at every step, episode resets included.
    from nnx_ppo.networks.recurrent import SimpleRNN

    cell = SimpleRNN(5, 64, rngs=nnx.Rngs(4))
    g = _rnn_graph()
    g.transforms["obs->r"].linear.kernel[...] = cell.input_proj.kernel[...]
    g.transforms["obs->r"].linear.bias[...] = jnp.zeros(64)
    g.transforms["r->r@1"].linear.kernel[...] = cell.recurrent_proj.kernel[...]
    g.transforms["r->r@1"].linear.bias[...] = cell.recurrent_proj.bias[...]
    g.transforms["r->y"].linear.kernel[...] = jnp.eye(64, 2)
    xs = jax.random.normal(jax.random.PRNGKey(5), (6, 3, 5))
    done = np.zeros((6, 3), bool)
    done[2, 1] = True  # env 1's episode ends after step 2
    gs, cs = g.initialize_state(3), cell.initialize_state(3)
    for t in range(6):
        go, co = g(gs, {"obs": xs[t]}), cell(cs, xs[t])
        np.testing.assert_allclose(go.output["y"], co.output[:, :2], atol=1e-5)
        gs = _reset_where(done[t], g.reset_state(go.next_state), go.next_state)
        cs = _reset_where(done[t], cell.reset_state(co.next_state), co.next_state)


def _reset_where(done: np.ndarray, reset: object, carry: object) -> object:
    """The trainer's per-environment reset: ``reset`` where ``done`` (``[B]``)."""
    mask = jnp.asarray(done)
    return jax.tree.map(
        lambda r, n: jnp.where(mask.reshape((-1,) + (1,) * (n.ndim - 1)), r, n), reset, carry
    )


def test_a_feedforward_chain_is_the_mlp_drawn_from_the_same_rngs() -> None:
    # The control of the learning suite's graph_mlp family: every population of a chain
    # has one source, so the default initialisation leaves each Dense as drawn, and the
    # graph draws its Dense layers in the MLP's order: same Rngs, same parameters, same
    # outputs (bitwise up to the order of float32 additions of the bias).
    from nnx_ppo.networks.feedforward import MLP

    mlp = MLP(5, (32, 32), 2, rngs=nnx.Rngs(6))
    g = PopulationGraph(nnx.Rngs(6))
    g.add_input("obs", size=5, input_from="obs")
    g.add_population("h0", size=32, activation=nnx.swish)
    g.add_population("h1", size=32, activation=nnx.swish)
    g.add_output("y", size=2)
    g.connect("obs", "h0")
    g.connect("h0", "h1")
    g.connect("h1", "y")
    g.finalize()
    for layer, name in zip(mlp.layers, ("obs->h0", "h0->h1", "h1->y"), strict=True):
        np.testing.assert_array_equal(_kernel(g, name), np.asarray(layer.linear.kernel[...]))
    x = jax.random.normal(jax.random.PRNGKey(7), (16, 5))
    y = g(g.initialize_state(16), {"obs": x}).output["y"]
    np.testing.assert_allclose(y, mlp(mlp.initialize_state(16), x).output, atol=1e-6)
