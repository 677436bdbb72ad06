"""`LowRankRNN`: its connectivity (rank ``R`` plus ``g chi``), its step against numpy,
and its errors.

The cell contract (carry properties, replay == step, export, recording, fixed points)
is checked with the other cells in test_properties.py, test_recurrent_noise.py,
test_recurrent_cell.py and test_analysis.py.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.networks.low_rank import LowRankRNN, RandomConnectivity


def test_connectivity_is_rank_r_plus_the_fixed_random_part() -> None:
    N, R, g = 12, 2, 0.8
    cell = LowRankRNN(3, N, rank=R, tau=4.0, g=g, rngs=nnx.Rngs(0))
    proj = cell.recurrent_proj
    m, n = np.asarray(proj.m[...], np.float64), np.asarray(proj.n[...], np.float64)
    chi = np.asarray(proj.chi[...], np.float64)
    J = np.asarray(proj.connectivity, np.float64)
    np.testing.assert_allclose(J, m @ n.T / N + g * chi, rtol=1e-5, atol=1e-6)
    # The structured part has exactly R non-zero singular values.
    s = np.linalg.svd(J - g * chi, compute_uv=False)
    assert s[R - 1] > 1e-2 and s[R:].max() < 1e-5 * s[0]
    # chi is fixed (not a Param: no gradient), entries ~ N(0, 1 / N).
    assert isinstance(proj.chi, RandomConnectivity)
    assert {"m", "n", "bias"} == set(nnx.state(proj, nnx.Param))
    assert 0.5 < chi.std() * np.sqrt(N) < 1.5
    # Without the random part there is no chi at all.
    assert LowRankRNN(3, N, rank=R, tau=4.0, rngs=nnx.Rngs(0)).recurrent_proj.chi is None


def test_step_matches_numpy() -> None:
    # h' = (1 - a) h + a tanh(x U + h J^T + b), J = m n^T / N + g chi, a = dt / tau.
    N, dt, tau, g = 5, 0.5, 2.0, 0.6
    rand = lambda key, shape, dtype=jnp.float32: jax.random.normal(key, shape, dtype)
    cell = LowRankRNN(3, N, rank=1, tau=tau, dt=dt, g=g, rngs=nnx.Rngs(1), bias_init=rand)
    h = np.asarray(jax.random.normal(jax.random.key(2), (2, N)), np.float64)
    x = np.asarray(jax.random.normal(jax.random.key(3), (2, 3)), np.float64)
    proj = cell.recurrent_proj
    p = lambda v: np.asarray(v[...], np.float64)
    J = p(proj.m) @ p(proj.n).T / N + g * p(proj.chi)
    a = dt / tau
    want = (1 - a) * h + a * np.tanh(x @ p(cell.input_proj.kernel) + h @ J.T + p(proj.bias))
    got = cell({"h": jnp.asarray(h, jnp.float32)}, jnp.asarray(x, jnp.float32)).output
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_recurrent_kernel_init_sets_m_and_n() -> None:
    ones = nnx.initializers.ones_init()
    cell = LowRankRNN(3, 4, rank=1, tau=2.0, rngs=nnx.Rngs(0), recurrent_kernel_init=ones)
    np.testing.assert_array_equal(cell.recurrent_proj.connectivity, np.full((4, 4), 0.25))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"rank": 0}, ValueError, "rank must be"),
        ({"rank": 5}, ValueError, "rank=5 is above hidden_features=4"),
        ({"rank": 1.5}, TypeError, "rank"),
        ({"g": -1.0}, ValueError, "g must be finite and >= 0"),
        ({"g": "big"}, TypeError, "g must be a number"),
        ({"tau": 0.5}, ValueError, "dt / tau must be <= 1"),
    ],
)
def test_errors_name_the_argument(kwargs: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        LowRankRNN(3, 4, rngs=nnx.Rngs(0), **{"rank": 1, "tau": 2.0, **kwargs})
