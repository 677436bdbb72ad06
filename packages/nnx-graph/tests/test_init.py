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
