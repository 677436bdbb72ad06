"""nnx_ppo.networks.analysis.flow: the flow field of linear maps, derived by hand, and
the linearisation (eigenvectors) at their fixed points."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from nnx_ppo.networks.analysis import PCA, find_fixed_points, flow_field

# F(h) = A h + b, A = diag(0.5, 0.8, 0.9), b = (1, 0, 0): F(h) - h = (1 - 0.5 h1,
# -0.2 h2, -0.1 h3). Fixed point h* = (2, 0, 0).
A = jnp.diag(jnp.array([0.5, 0.8, 0.9]))
B = jnp.array([1.0, 0.0, 0.0])


def _basis(components: np.ndarray, mean: np.ndarray) -> PCA:
    return PCA(mean, components, np.array([4.0, 1.0, 0.25]), np.array([16, 4, 1]) / 21)


def test_the_flow_of_a_linear_map_on_a_plane() -> None:
    # The basis is the unit axes around the mean m = (0, 0, 1); the plane spans PC 1
    # and PC 2 at PC 3 coordinate 2, so the grid point (x, y) is the state (x, y, 3):
    # in-plane velocity (1 - x / 2, -y / 5), full speed sqrt(that^2 + 0.3^2).
    basis = _basis(np.eye(3), np.array([0.0, 0.0, 1.0]))
    field = flow_field(
        lambda h: A @ h + B, basis, bounds=((-2, 2), (0, 1)), resolution=(3, 2),
        coordinates=[7.0, 7.0, 2.0],  # the plane's own coordinates (7) are ignored
    )  # fmt: skip
    np.testing.assert_allclose(field.x, [-2, 0, 2])
    np.testing.assert_allclose(field.y, [0, 1])
    assert field.velocity.shape == (2, 3, 2) and field.states.shape == (2, 3, 3)
    np.testing.assert_allclose(field.states[1, 2], [2.0, 1.0, 3.0])
    x, y = np.meshgrid([-2.0, 0.0, 2.0], [0.0, 1.0])
    np.testing.assert_allclose(field.velocity[..., 0], 1 - x / 2, atol=1e-6)
    np.testing.assert_allclose(field.velocity[..., 1], -y / 5, atol=1e-6)
    np.testing.assert_allclose(
        field.speed, np.sqrt((1 - x / 2) ** 2 + (y / 5) ** 2 + 0.09), atol=1e-6
    )
    np.testing.assert_allclose(field.coordinates, [0.0, 0.0, 2.0])
    # A rotated basis, the plane of PCs 3 and 1 (in that order), a fixed input: the
    # map h' = A h + u, with u = b given as the input.
    rotation = np.linalg.qr(np.random.default_rng(0).normal(size=(3, 3)))[0].T
    basis = _basis(rotation, np.array([0.5, -1.0, 0.2]))
    field = flow_field(lambda h, u: A @ h + u, basis, components=(2, 0), obs=B, resolution=4)
    z = np.zeros((4, 4, 3))
    z[..., 2], z[..., 0] = field.x[None, :], field.y[:, None]
    h = z @ rotation + basis.mean
    expected = (h @ (np.asarray(A) - np.eye(3)).T + np.asarray(B)) @ rotation[[2, 0]].T
    np.testing.assert_allclose(field.velocity, expected, atol=1e-5)
    # Default bounds: three standard deviations, sqrt(0.25) and sqrt(4).
    np.testing.assert_allclose([field.x[-1], field.y[0]], [1.5, -6.0])
    np.testing.assert_allclose(field.project(h), np.stack(np.meshgrid(field.x, field.y), -1))


def test_the_linearisation_at_a_saddle() -> None:
    # F(h) = J (h - h*) + h* with J = [[0.5, 1], [0, 2]]: eigenvalue 2 along (1, 1.5)
    # ((J - 2I) v = 0: -1.5 v1 + v2 = 0) and 0.5 along (1, 0); h* = (1, -1).
    jac, point = jnp.array([[0.5, 1.0], [0.0, 2.0]]), jnp.array([1.0, -1.0])
    found = find_fixed_points(lambda h: jac @ (h - point) + point, jnp.zeros((3, 2)), steps=0)
    assert len(found) == 1 and found.unstable_dimensions.tolist() == [1]
    np.testing.assert_allclose(found.points[0], point, atol=1e-5)
    np.testing.assert_allclose(found.eigenvalues[0].real, [2.0, 0.5], atol=1e-6)
    vectors = found.eigenvectors[0].real
    np.testing.assert_allclose(np.abs(vectors[:, 0]), [1, 1.5] / np.hypot(1, 1.5), atol=1e-6)
    np.testing.assert_allclose(np.abs(vectors[:, 1]), [1.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(
        found.jacobians[0] @ found.eigenvectors[0], found.eigenvectors[0] * found.eigenvalues[0],
        atol=1e-6,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"components": (0, 0)}, r"components=\(0, 0\) must be two different"),
        ({"components": (0, 3)}, r"in \[0, 2\] \(the basis has 3\)"),
        ({"resolution": 1}, "resolution=1 must be an int >= 2"),
        ({"bounds": ((1, -1), (0, 1))}, "bounds=.* min < max"),
        ({"coordinates": [0.0, 1.0]}, r"coordinates must be \[K\] = \[3\]"),
    ],
)
def test_bad_arguments(options: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        flow_field(lambda h: h, _basis(np.eye(3), np.zeros(3)), **options)
