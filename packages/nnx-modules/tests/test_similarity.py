"""nnx_ppo.networks.analysis.similarity: CCA and Procrustes on a network's activity and
its rotated copy, and on data built to have hand-derived answers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.networks.analysis import CarryMap, cca, procrustes
from nnx_ppo.networks.factories import make_lstm_actor_critic


def _orthonormal(samples: int, columns: int, seed: int) -> np.ndarray:
    """``[S, columns]`` zero-mean columns, orthogonal, each of unit sample variance."""
    x = np.random.default_rng(seed).normal(size=(samples, columns))
    q = np.linalg.qr(x - x.mean(axis=0))[0]
    return q * np.sqrt(samples - 1)


def test_a_network_and_its_rotated_copy() -> None:
    # An LSTM's states over 8 trials of 20 steps ([160, 8], float32), and the same
    # states in rotated coordinates (a random orthogonal R, in float32 as a recording
    # would be): the same signals, so every canonical correlation is 1, and Procrustes
    # finds R with nothing left over.
    net = make_lstm_actor_critic(3, 1, lstm_size=4, rngs=nnx.Rngs(0))
    F = CarryMap(net, 3, obs=jnp.zeros(3))
    states = F.rollout(jax.random.normal(jax.random.key(0), (20, 8, 3)))
    x = np.asarray(states).reshape(-1, F.size)
    rotation = np.linalg.qr(np.random.default_rng(1).normal(size=(8, 8)))[0]
    y = (x @ rotation).astype(np.float32)
    fit = cca(x, y)
    assert fit.correlations.shape == (8,) and fit.x_rank == fit.y_rank == 8
    np.testing.assert_allclose(fit.correlations, 1.0, atol=1e-5)
    found = procrustes(x, y)
    np.testing.assert_allclose(found.rotation, rotation, atol=1e-4)
    assert found.distance < 1e-5 and found.angle < 1e-2
    np.testing.assert_allclose(found.transform(x), y, atol=1e-4)
    # [T, B, N] inputs are samples over the leading axes; rows NaN on either side (a
    # condition average's missing steps) are left out.
    y_nan = y.reshape(20, 8, 8).copy()
    y_nan[3, 2] = np.nan
    np.testing.assert_allclose(cca(states, y_nan).correlations, 1.0, atol=1e-5)


def test_canonical_correlations_by_hand() -> None:
    # s1, s2, n: orthogonal zero-mean columns of unit variance. x = [3 s1, s2] and
    # y = [3 s1, rho s2 + sqrt(1 - rho^2) n]: the read-outs s1 match exactly and s2
    # correlates with y's second column by rho, so the correlations are (1, rho).
    s1, s2, n = _orthonormal(50, 3, seed=0).T
    rho = 0.6
    x = np.stack([3 * s1, s2], axis=1) + 1.0
    y = np.stack([3 * s1, rho * s2 + np.sqrt(1 - rho**2) * n], axis=1) - 2.0
    fit = cca(x, y)
    np.testing.assert_allclose(fit.correlations, [1.0, rho], atol=1e-12)
    u, v = fit.transform(x, y)  # the variates: unit variance, correlated by rho_i
    np.testing.assert_allclose(u.std(axis=0, ddof=1), [1.0, 1.0], atol=1e-12)
    np.testing.assert_allclose(np.mean(u * v, axis=0) * 50 / 49, [1.0, rho], atol=1e-12)
    # SVCCA keeping one component per side: the 3 s1 direction (90% of the variance).
    assert cca(x, y, n_components=1).correlations.tolist() == pytest.approx([1.0])
    assert cca(x, y, n_components=0.9).x_rank == 1 and cca(x, y, n_components=0.91).x_rank == 2
    # Regularisation r: each side's singular values are sqrt(49) (3, 1) and the ridge
    # is r times their mean square, 5 * 49 r; each direction is shrunk by
    # s^2 / (s^2 + ridge), so the correlations become (9 / (9 + 5r), rho / (1 + 5r)).
    r = 0.2
    np.testing.assert_allclose(cca(x, y, regularization=r).correlations, [0.9, rho / 2])
    # A rank-deficient side (a copied column) keeps its rank: one correlation per
    # independent direction, not a spurious one.
    fit = cca(np.concatenate([x, x[:, :1]], axis=1), y)
    assert fit.x_rank == 2 and fit.correlations.shape == (2,)


def test_procrustes_with_and_without_reflections() -> None:
    # x = [2 e, f] with orthogonal zero-mean unit columns, so after scaling x_hat has
    # column norms^2 4/5 and 1/5 along its own axes. y = x diag(1, -1) is a mirror
    # image: found exactly with reflections. A rotation can only match the long axis
    # (flip the short one's singular value): <x_hat R, y_hat> = 4/5 - 1/5 = 3/5, so
    # distance^2 = 2 - 2 * 3/5, distance = 2 / sqrt(5), angle = arccos(3/5).
    e, f = _orthonormal(40, 2, seed=1).T
    x = np.stack([2 * e, f], axis=1)
    y = x @ np.diag([1.0, -1.0])
    mirror = procrustes(x, y)
    np.testing.assert_allclose(mirror.rotation, np.diag([1.0, -1.0]), atol=1e-12)
    assert mirror.distance == pytest.approx(0.0, abs=1e-12)
    rotated = procrustes(x, y, reflection=False)
    assert np.linalg.det(rotated.rotation) == pytest.approx(1.0)
    assert rotated.distance == pytest.approx(2 / np.sqrt(5))
    assert rotated.angle == pytest.approx(np.arccos(3 / 5))
    # Without centring and scaling, a translated copy is a distance away.
    plain = procrustes(x, x + 1.0, center=False, scale=False)
    assert plain.x_norm == 1.0 and plain.distance > 1.0


@pytest.mark.parametrize(
    ("fn", "x", "y", "options", "match"),
    [
        (cca, np.zeros((10, 3)), np.zeros((9, 3)), {}, r"\(10, 3\) and y has shape \(9, 3\)"),
        (cca, np.zeros(10), np.zeros((10, 1)), {}, r"got shapes \(10,\) and \(10, 1\)"),
        (cca, np.ones((10, 2)), np.eye(10)[:, :2], {}, "x is constant"),
        (cca, np.eye(10)[:, :2], np.eye(10)[:, :2], {"n_components": 0}, "must be >= 1"),
        (cca, np.eye(10)[:, :2], np.eye(10)[:, :2], {"n_components": 1.5}, r"in \(0, 1\]"),
        (cca, np.eye(10)[:, :2], np.eye(10)[:, :2], {"regularization": -1}, "regularization"),
        (procrustes, np.zeros((10, 3)), np.zeros((10, 4)), {}, r"\(10, 3\) .* \(10, 4\)"),
        (procrustes, np.ones((10, 2)), np.eye(10)[:, :2], {}, "x has zero norm"),
        (procrustes, np.eye(3), np.eye(3), {"scale": 1}, "scale=1 must be True or False"),
    ],
)
def test_bad_arguments(fn, x, y, options: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        fn(x, y, **options)
