"""Plot learning curves over runs: the median with its 95% bootstrap band.

Needs matplotlib (``pip install 'nnx-ppo-train[logging]'``), imported only when a plot
is drawn. The statistics are `nnx_ppo.algorithms.curves`'.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from nnx_ppo.algorithms.curves import median_band

__all__ = ["plot_learning_curves"]


def _pyplot() -> Any:
    try:
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "plot_learning_curves needs matplotlib: pip install 'nnx-ppo-train[logging]'."
        ) from e
    return plt


def plot_learning_curves(
    groups: Mapping[str, tuple[Any, Any]],
    *,
    ax: Any = None,
    path: str | os.PathLike[str] | None = None,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
    xlabel: str = "env steps",
    ylabel: str = "evaluation return",
    title: str | None = None,
) -> Any:
    """Draw one curve per group of runs: the median over runs and a shaded band, the
    percentile bootstrap interval of the median (`median_band`).

    Args:
        groups: ``{label: (steps [S], values [K, S])}`` (see `curves_of`).
        ax: A matplotlib ``Axes`` to draw on; ``None`` makes a new figure.
        path: Also save the figure there (PNG, SVG, PDF... by its suffix).
        confidence: The band's coverage.
        n_resamples: Bootstrap resamples.
        seed: The resampling seed.
        xlabel: The x axis label.
        ylabel: The y axis label.
        title: The title (``None``: none).

    Returns:
        The ``Axes``.

    Raises:
        ImportError: If matplotlib is not installed.
        ValueError: If ``groups`` is empty (or a group's values are invalid, see
            `median_band`).
    """
    if not groups:
        raise ValueError("plot_learning_curves: groups is empty; pass {label: (steps, values)}.")
    plt = _pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 4.0))
    for label, (steps, values) in groups.items():
        median, low, high = median_band(
            values, confidence=confidence, n_resamples=n_resamples, seed=seed
        )
        runs = len(values)
        (line,) = ax.plot(steps, median, label=f"{label} (median of {runs})")
        ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.25, linewidth=0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title is not None:
        ax.set_title(title)
    ax.legend(title=f"shaded: {confidence * 100:g}% bootstrap CI")
    ax.grid(alpha=0.3)
    if path is not None:
        ax.figure.tight_layout()
        ax.figure.savefig(os.fspath(path), dpi=120)
    return ax
