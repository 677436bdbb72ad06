"""`pca`: principal components of recorded activity.

Recorded activity (``[T, B, N]`` from a rollout, or any ``[..., N]``) is pooled over
its leading axes; the components are the directions of largest variance, computed in
float64 with numpy's SVD.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

__all__ = ["PCA", "pca"]


@dataclasses.dataclass(frozen=True)
class PCA:
    """A fitted principal-component basis.

    Attributes:
        mean: ``[N]`` the mean state.
        components: ``[K, N]`` orthonormal directions, largest variance first.
        explained_variance: ``[K]`` the variance along each component.
        explained_variance_ratio: ``[K]`` its share of the total variance.
    """

    mean: np.ndarray
    components: np.ndarray
    explained_variance: np.ndarray
    explained_variance_ratio: np.ndarray

    def transform(self, x: Any) -> np.ndarray:
        """``[..., N]`` -> ``[..., K]``: the coordinates along the components."""
        x = np.asarray(x, np.float64)
        if x.shape[-1] != self.mean.shape[0]:
            raise ValueError(
                f"PCA.transform: x has {x.shape[-1]} units (last axis), the fit had "
                f"{self.mean.shape[0]}."
            )
        return (x - self.mean) @ self.components.T

    def inverse_transform(self, z: Any) -> np.ndarray:
        """``[..., K]`` -> ``[..., N]``: states from their coordinates."""
        return np.asarray(z, np.float64) @ self.components + self.mean


def pca(activity: Any, n_components: int | None = None) -> PCA:
    """Fit principal components to ``activity``.

    Args:
        activity: ``[..., N]``: samples of ``N`` units (e.g. ``[T, B, N]`` states of
            `CarryMap.rollout`, or a recorded layer's ``[T, B, units]``). NaN rows
            (steps after an episode ended, as plots mark them) are left out.
        n_components: Components to keep (default: all, at most ``min(samples, N)``).

    Returns:
        The fitted `PCA`.

    Raises:
        ValueError: If ``activity`` has fewer than 2 usable samples or
            ``n_components`` is out of range.

    Examples:
        Points on a line in 3-D have one component:

        >>> import numpy as np
        >>> t = np.linspace(-1, 1, 50)[:, None]
        >>> fit = pca(t * np.array([[1.0, 2.0, 2.0]]) + 5.0, n_components=2)
        >>> np.round(fit.explained_variance_ratio, 6).tolist()
        [1.0, 0.0]
        >>> np.round(np.abs(fit.components[0]), 4).tolist()
        [0.3333, 0.6667, 0.6667]
    """
    x = np.asarray(activity, np.float64)
    if x.ndim < 1:
        raise ValueError("pca: activity must be [..., N], got a scalar.")
    x = x.reshape(-1, x.shape[-1])
    x = x[np.isfinite(x).all(axis=1)]
    if x.shape[0] < 2:
        raise ValueError(f"pca: activity has {x.shape[0]} usable samples; at least 2 needed.")
    limit = min(x.shape)
    if n_components is None:
        n_components = limit
    if isinstance(n_components, bool) or not isinstance(n_components, int):
        raise ValueError(f"pca: n_components={n_components!r} must be an int.")
    if not 1 <= n_components <= limit:
        raise ValueError(
            f"pca: n_components={n_components} must be in [1, {limit}] (min of "
            f"{x.shape[0]} samples and {x.shape[1]} units)."
        )
    mean = x.mean(axis=0)
    _, singular, vt = np.linalg.svd(x - mean, full_matrices=False)
    variance = singular**2 / (x.shape[0] - 1)
    total = variance.sum()
    ratio = variance / total if total > 0 else np.zeros_like(variance)
    k = n_components
    return PCA(mean, vt[:k], variance[:k], ratio[:k])
