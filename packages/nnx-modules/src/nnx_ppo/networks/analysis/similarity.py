"""Similarity of two activity matrices: canonical correlations and Procrustes.

Comparing networks (two seeds, a supervised and a reward-trained one) or a network with
recorded neurons asks whether two sets of units carry the same signals, up to a change
of coordinates. Both functions take ``[samples, features]`` matrices whose rows match
(the same trials and steps, e.g. the condition-averaged trajectories of
`condition_average`, flattened over conditions and steps):

- `cca`: canonical correlations (Hotelling 1936), the correlations of the best-matched
  pairs of linear read-outs; invariant to any invertible linear map of either side.
  With ``n_components`` each side is first reduced to its leading principal
  components, SVCCA (Raghu et al. 2017), which keeps the low-variance noise directions
  from matching by chance.
- `procrustes`: the orthogonal map that best superimposes one on the other, and the
  distance left after it (Williams et al. 2021's shape distance with centring and
  scaling); invariant to rotations only, so it also compares the geometry.

Computed in float64 with numpy's SVD (no explicit covariance inverses).
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any, NoReturn

import numpy as np

__all__ = ["CCA", "Procrustes", "cca", "procrustes"]


def _pair(name: str, x: Any, y: Any, *, same_features: bool) -> tuple[np.ndarray, np.ndarray]:
    """Both as float64 ``[S, N]`` (leading axes flattened), rows finite in both kept."""
    a, b = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError(
            f"{name}: x and y must be [samples, features] (or [..., features]), got shapes "
            f"{a.shape} and {b.shape}."
        )
    if a.shape[:-1] != b.shape[:-1]:
        raise ValueError(
            f"{name}: x has shape {a.shape} and y has shape {b.shape}; their leading "
            f"(sample) axes {a.shape[:-1]} and {b.shape[:-1]} must match, row for row "
            "(the same trials and steps)."
        )
    if same_features and a.shape[-1] != b.shape[-1]:
        raise ValueError(
            f"{name}: x has shape {a.shape} and y has shape {b.shape}; Procrustes needs "
            "as many features on both sides: reduce both to a common number of principal "
            "components first (pca(x, n).transform(x)), or use cca."
        )
    a, b = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
    finite = np.isfinite(a).all(axis=1) & np.isfinite(b).all(axis=1)
    a, b = a[finite], b[finite]
    if a.shape[0] < 2:
        raise ValueError(
            f"{name}: {a.shape[0]} samples are finite in both x and y; at least 2 needed."
        )
    return a, b


# --------------------------------------------------------------------------- CCA


@dataclasses.dataclass(frozen=True)
class CCA:
    """Canonical correlations of two activity matrices (numpy arrays).

    Attributes:
        correlations: ``[K]`` the canonical correlations, decreasing, in ``[0, 1]``;
            ``K`` is the smaller of the two (reduced) ranks.
        x_weights: ``[Nx, K]`` the read-outs of ``x``: the canonical variates are
            ``(x - x_mean) @ x_weights`` (unit variance without regularisation).
        y_weights: ``[Ny, K]`` the same for ``y``.
        x_mean: ``[Nx]`` the mean of ``x``.
        y_mean: ``[Ny]`` the mean of ``y``.
        x_rank: The dimensions of ``x`` kept (after the SVCCA reduction).
        y_rank: The same for ``y``.
    """

    correlations: np.ndarray
    x_weights: np.ndarray
    y_weights: np.ndarray
    x_mean: np.ndarray
    y_mean: np.ndarray
    x_rank: int
    y_rank: int

    @property
    def mean(self) -> float:
        """The mean canonical correlation (SVCCA's similarity score)."""
        return float(self.correlations.mean())

    def transform(self, x: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
        """``[..., Nx]``, ``[..., Ny]`` -> their canonical variates ``[..., K]`` each."""
        a, b = np.asarray(x, np.float64), np.asarray(y, np.float64)
        return (a - self.x_mean) @ self.x_weights, (b - self.y_mean) @ self.y_weights


def _kept(singular: np.ndarray, keep: Any, tolerance: float, side: str) -> int:
    """How many leading singular values to keep: above the rank tolerance, then cut to
    ``keep`` components (an int) or a share of the variance (a float in (0, 1])."""
    rank = int((singular > tolerance * singular[0]).sum()) if singular[0] > 0 else 0
    if rank == 0:
        raise ValueError(f"cca: {side} is constant (no variance left after centring).")
    if keep is None:
        return rank
    if isinstance(keep, bool) or not isinstance(keep, numbers.Real):
        raise ValueError(f"cca: n_components for {side} is {keep!r}; an int or a float.")
    if isinstance(keep, numbers.Integral):
        keep = int(keep)
        if keep < 1:
            raise ValueError(f"cca: n_components for {side} is {keep}; it must be >= 1.")
        return min(keep, rank)
    keep = float(keep)
    if not 0.0 < keep <= 1.0:
        raise ValueError(
            f"cca: n_components for {side} is {keep}; a float is a share of the variance "
            "in (0, 1] (e.g. 0.99)."
        )
    share = np.cumsum(singular[:rank] ** 2) / np.sum(singular[:rank] ** 2)
    return min(int(np.searchsorted(share, keep - 1e-12)) + 1, rank)


def cca(
    x: Any,
    y: Any,
    *,
    n_components: int | float | tuple[int | float | None, int | float | None] | None = None,
    regularization: float = 0.0,
    rank_tolerance: float = 1e-6,
) -> CCA:
    """Canonical correlations of ``x`` and ``y`` (SVCCA with ``n_components``).

    Both are centred; directions whose singular value is below ``rank_tolerance`` of
    the largest are dropped (float32 activity has about 7 significant digits, and a
    rank-deficient side, e.g. saturated or silent units, would otherwise match noise).
    The correlations are the singular values of ``U_x^T U_y``, the product of the two
    sides' orthonormal bases (Björck & Golub 1973), so no covariance is inverted.

    Where the two sides' kept dimensions together exceed the samples less one, that
    many canonical correlations are 1 by construction (``Nx + Ny - (S - 1)`` of
    them), and the others are inflated: reduce first (``n_components``), or use more
    samples (trials, steps, conditions).

    Args:
        x: ``[S, Nx]`` (or ``[..., Nx]``): samples of one set of units.
        y: ``[S, Ny]`` (or ``[..., Ny]`` with the same leading axes): the same samples
            of the other set (e.g. another network, or recorded neurons). Rows that are
            not finite in either (NaN in a condition average) are left out.
        n_components: Reduce each side to its leading principal components first
            (SVCCA): an int (how many), a float in ``(0, 1]`` (the fewest explaining
            that share of the variance; 0.99 in Raghu et al.), or a pair ``(for_x,
            for_y)``.
        regularization: Ridge ``r >= 0`` added to each side's covariance, relative to
            its mean variance: ``C + r (trace C / rank) I``. It shrinks the
            correlations of low-variance directions; 0 is plain CCA.
        rank_tolerance: Relative singular-value threshold for the rank.

    Returns:
        A `CCA`.

    Raises:
        ValueError: If the shapes do not match (the message names both), a side is
            constant, or an option is out of range.

    Examples:
        ``y`` is an invertible linear map of ``x`` plus an offset: every correlation
        is 1. A column of pure noise matches nothing:

        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(size=(200, 3))
        >>> y = x @ np.array([[1.0, 2.0, 0.0], [0.0, 1.0, 0.0], [0.0, 1.0, 3.0]]) + 5.0
        >>> np.round(cca(x, y).correlations, 6).tolist()
        [1.0, 1.0, 1.0]
        >>> noise = np.random.default_rng(1).normal(size=(200, 1))
        >>> fit = cca(x, np.concatenate([y[:, :1], noise], axis=1))
        >>> [round(float(c), 1) for c in fit.correlations]
        [1.0, 0.1]
    """
    a, b = _pair("cca", x, y, same_features=False)
    keeps = n_components if isinstance(n_components, tuple) else (n_components,) * 2
    if len(keeps) != 2:
        raise ValueError(f"cca: n_components={n_components!r}: one value or a pair.")
    if isinstance(regularization, bool) or not isinstance(regularization, numbers.Real):
        raise ValueError(f"cca: regularization={regularization!r} must be a number >= 0.")
    if not regularization >= 0:
        raise ValueError(f"cca: regularization={regularization!r} must be a number >= 0.")
    if not 0 < rank_tolerance < 1:
        raise ValueError(f"cca: rank_tolerance={rank_tolerance!r} must be in (0, 1).")
    samples = a.shape[0]
    sides = []
    for data, keep, side in ((a, keeps[0], "x"), (b, keeps[1], "y")):
        mean = data.mean(axis=0)
        u, s, vt = np.linalg.svd(data - mean, full_matrices=False)
        r = _kept(s, keep, rank_tolerance, side)
        u, s, v = u[:, :r], s[:r], vt[:r].T
        # The whitening (C + lambda I)^(-1/2) in the data's singular basis: with
        # C = V diag(s^2 / (S - 1)) V^T, x (C + lambda I)^(-1/2) = U diag(d) V^T sqrt(S-1),
        # d = s / sqrt(s^2 + (S - 1) lambda); d = 1 without regularisation.
        ridge = regularization * np.mean(s**2)
        d = s / np.sqrt(s**2 + ridge)
        sides.append((mean, u, s, v, d))
    (mx, ux, sx, vx, dx), (my, uy, sy, vy, dy) = sides
    a_rot, rho, b_rot_t = np.linalg.svd((ux * dx).T @ (uy * dy), full_matrices=False)
    k = min(len(sx), len(sy))
    scale = np.sqrt(samples - 1)
    x_weights = vx @ ((dx / sx)[:, None] * a_rot[:, :k]) * scale
    y_weights = vy @ ((dy / sy)[:, None] * b_rot_t.T[:, :k]) * scale
    correlations = np.clip(rho[:k], 0.0, 1.0)
    return CCA(correlations, x_weights, y_weights, mx, my, len(sx), len(sy))


# --------------------------------------------------------------------------- Procrustes


@dataclasses.dataclass(frozen=True)
class Procrustes:
    """The orthogonal superposition of ``x`` on ``y`` (numpy arrays).

    With ``x_hat = (x - x_mean) / x_norm`` and ``y_hat = (y - y_mean) / y_norm`` (the
    centred and scaled data), ``rotation`` minimises ``|x_hat @ R - y_hat|_F``.

    Attributes:
        rotation: ``[N, N]`` orthogonal (a proper rotation, determinant +1, when
            reflections were not allowed).
        distance: ``|x_hat @ rotation - y_hat|_F``, what is left after the rotation
            (with scaling, in ``[0, 2]``).
        angle: ``arccos(<x_hat R, y_hat> / (|x_hat| |y_hat|))`` in radians, the
            Procrustes shape angle (a metric between networks; 0 for the same
            shape).
        x_mean: ``[N]`` subtracted from ``x`` (zeros without centring).
        y_mean: ``[N]`` subtracted from ``y``.
        x_norm: ``x``'s Frobenius norm after centring (1 without scaling).
        y_norm: ``y``'s.
    """

    rotation: np.ndarray
    distance: float
    angle: float
    x_mean: np.ndarray
    y_mean: np.ndarray
    x_norm: float
    y_norm: float

    def transform(self, x: Any) -> np.ndarray:
        """``[..., N]`` of ``x``'s units -> ``y``'s space: centred, scaled, rotated, then
        ``y``'s scale and mean restored."""
        aligned = (np.asarray(x, np.float64) - self.x_mean) / self.x_norm @ self.rotation
        return aligned * self.y_norm + self.y_mean


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        _refuse(f"{name}={value!r} must be True or False.")
    return value


def _refuse(message: str) -> NoReturn:
    raise ValueError(f"procrustes: {message}")


def procrustes(
    x: Any, y: Any, *, center: bool = True, scale: bool = True, reflection: bool = True
) -> Procrustes:
    """The orthogonal map that best superimposes ``x`` on ``y``, and what is left.

    Solves ``min_R |x_hat R - y_hat|_F`` over orthogonal ``R`` (Schönemann 1966): with
    ``x_hat^T y_hat = U S V^T``, ``R = U V^T``.

    Args:
        x: ``[S, N]`` (or ``[..., N]``): samples of ``N`` units.
        y: ``[S, N]`` (or ``[..., N]``), the same samples of as many units (reduce a
            larger side with `pca` first). Rows not finite in either are left out.
        center: Subtract each side's mean first (translations do not count).
        scale: Divide each side by its Frobenius norm after centring (overall size
            does not count; the distance is then in ``[0, 2]``).
        reflection: Allow any orthogonal ``R``; with False, only rotations
            (determinant +1).

    Returns:
        A `Procrustes`.

    Raises:
        ValueError: If the shapes do not match (the message names both), or a side
            has zero norm with ``scale``.

    Examples:
        A quarter turn of a triangle, shifted and doubled, is found and undone:

        >>> import numpy as np
        >>> x = np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 1.0]])
        >>> quarter = np.array([[0.0, 1.0], [-1.0, 0.0]])  # (a, b) -> (-b, a)
        >>> fit = procrustes(x, 2.0 * x @ quarter + 3.0)
        >>> np.round(fit.rotation, 6).tolist(), round(fit.distance, 6)
        ([[0.0, 1.0], [-1.0, 0.0]], 0.0)
        >>> np.round(fit.transform(x[1]), 6).tolist()  # (2, 0) -> 2 (0, 2) + 3
        [3.0, 7.0]
    """
    a, b = _pair("procrustes", x, y, same_features=True)
    center, scale, reflection = (
        _flag("center", center),
        _flag("scale", scale),
        _flag("reflection", reflection),
    )
    zeros = np.zeros(a.shape[1])
    x_mean, y_mean = (a.mean(axis=0), b.mean(axis=0)) if center else (zeros, zeros)
    a, b = a - x_mean, b - y_mean
    x_norm, y_norm = (float(np.linalg.norm(a)), float(np.linalg.norm(b))) if scale else (1.0, 1.0)
    if x_norm == 0 or y_norm == 0:
        side = "x" if x_norm == 0 else "y"
        _refuse(f"{side} has zero norm after centring, so it cannot be scaled; pass scale=False.")
    a, b = a / x_norm, b / y_norm
    u, s, vt = np.linalg.svd(a.T @ b)
    if not reflection and np.linalg.det(u @ vt) < 0:
        u[:, -1] = -u[:, -1]  # the smallest singular value's direction flips
        s = s.copy()
        s[-1] = -s[-1]
    rotation = u @ vt
    distance = float(np.linalg.norm(a @ rotation - b))
    cosine = float(s.sum()) / max(float(np.linalg.norm(a) * np.linalg.norm(b)), 1e-300)
    angle = float(np.arccos(np.clip(cosine, -1.0, 1.0)))
    return Procrustes(rotation, distance, angle, x_mean, y_mean, x_norm, y_norm)
