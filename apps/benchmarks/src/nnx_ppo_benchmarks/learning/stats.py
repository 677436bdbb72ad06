"""Statistics over seeds: medians with 95% percentile-bootstrap intervals.

A learning curve is a list of ``(env steps, mean evaluation return)`` points; its area
is the trapezoidal integral divided by the steps covered, i.e. the average return over
training (in return units, comparable with the final return).

Examples:
    >>> area_under_curve([(0, 0.0), (10, 10.0), (20, 10.0)])
    7.5
    >>> lo, mid, hi = median_ci([1.0, 2.0, 3.0, 4.0, 100.0])
    >>> mid
    3.0
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nnx_ppo.algorithms import curves as over_runs

__all__ = ["area_under_curve", "band", "median_ci"]

N_BOOTSTRAP = 10_000
"""Bootstrap resamples per interval."""


def area_under_curve(curve: Sequence[Sequence[float]]) -> float:
    """Average return over training: trapezoidal area / steps covered
    (`nnx_ppo.algorithms.curves.area_under_curve` of one curve).

    Args:
        curve: ``[(step, return), ...]`` in increasing steps, at least two points.

    Raises:
        ValueError: With fewer than two points or no steps covered.
    """
    points = np.asarray(curve, dtype=float)
    if points.ndim != 2 or len(points) < 2 or points[-1, 0] <= points[0, 0]:
        raise ValueError(f"a learning curve needs >= 2 points over > 0 steps, got {curve!r}")
    return float(over_runs.area_under_curve(points[:, 0], points[None, :, 1])[0])


def median_ci(values: Sequence[float], seed: int = 0) -> tuple[float, float, float]:
    """``(low, median, high)``: the median and its 95% percentile-bootstrap interval
    (`nnx_ppo.algorithms.curves.bootstrap_interval`).

    Args:
        values: One number per seed (at least one).
        seed: Seed of the resampling (fixed, so reports are reproducible).
    """
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        raise ValueError("median_ci needs at least one value")
    low, high = over_runs.bootstrap_interval(data, n_resamples=N_BOOTSTRAP, seed=seed)
    return float(low), float(np.median(data)), float(high)


def band(curves: Sequence[Sequence[Sequence[float]]], seed: int = 0) -> dict[str, list[float]]:
    """Pointwise median and 95% bootstrap band of several curves on the same steps
    (`nnx_ppo.algorithms.curves.median_band`).

    Args:
        curves: One curve per seed, all with the same steps.

    Returns:
        ``{"steps": [...], "median": [...], "low": [...], "high": [...]}``.

    Raises:
        ValueError: If the curves are evaluated at different steps.
    """
    arrays = [np.asarray(c, dtype=float) for c in curves]
    steps = arrays[0][:, 0]
    if any(a.shape != arrays[0].shape or np.any(a[:, 0] != steps) for a in arrays):
        raise ValueError("band: every curve must be evaluated at the same steps")
    values = np.stack([a[:, 1] for a in arrays])  # [seeds, points]
    median, low, high = over_runs.median_band(values, n_resamples=N_BOOTSTRAP, seed=seed)
    return {
        "steps": steps.tolist(),
        "median": median.tolist(),
        "low": low.tolist(),
        "high": high.tolist(),
    }
