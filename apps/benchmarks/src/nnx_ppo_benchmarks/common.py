"""What the three tools (``nnx-ppo-bench``, ``nnx-ppo-learning``, ``nnx-ppo-published``)
share: their argument types, the machine and code state they record with a result, the
statistics over seeds their reports print and the report of a folder of cells
(`write_cell_report`: its markdown and its learning-curve figure, `plot_panels`).

A learning curve is a list of ``(env steps, mean evaluation return)`` points; its area
is the trapezoidal integral divided by the steps covered, i.e. the average return over
training (in return units, comparable with the final return). The statistics import
numpy and `nnx_ppo.algorithms.analysis.curves` when first called, so importing this module stays
as cheap as the benchmark's parent process was without them.

Examples:
    >>> parse_seeds("0,1,2")
    (0, 1, 2)
    >>> area_under_curve([(0, 0.0), (10, 10.0), (20, 10.0)])
    7.5
    >>> lo, mid, hi = median_ci([1.0, 2.0, 3.0, 4.0, 100.0])
    >>> mid
    3.0
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "Panel",
    "area_under_curve",
    "band",
    "comma_names",
    "git_state",
    "load_average",
    "median_ci",
    "parse_seeds",
    "plot_panels",
    "write_cell_report",
]

_PARENTS = Path(__file__).resolve().parents
_WORKSPACE = _PARENTS[min(4, len(_PARENTS) - 1)]
"""The workspace root (``apps/benchmarks/src/nnx_ppo_benchmarks/common.py`` lies four
folders below it; an installed wheel lies less deep, and has no git state to read)."""

N_BOOTSTRAP = 10_000
"""Bootstrap resamples per interval."""


# Argument types -------------------------------------------------------------------------


def comma_names(choices: Sequence[str]):
    """An argparse ``type`` reading a comma-separated list of names out of ``choices``."""

    def parse(text: str) -> tuple[str, ...]:
        names = tuple(n.strip() for n in text.split(",") if n.strip())
        unknown = [n for n in names if n not in choices]
        if unknown or not names:
            raise argparse.ArgumentTypeError(
                f"{text!r}: use a comma-separated list of {', '.join(choices)}"
            )
        return names

    return parse


def parse_seeds(text: str) -> tuple[int, ...]:
    """``"0,1,2"`` -> ``(0, 1, 2)``: one or more distinct integers (an argparse type)."""
    try:
        seeds = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: use comma-separated integers") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"{text!r}: give one or more distinct seeds")
    return seeds


# What a result records about the machine and the code ------------------------------------


def load_average() -> list[float] | None:
    """The 1/5/15-minute load averages (rounded), or ``None`` where there are none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def git_state() -> dict[str, Any] | None:
    """Commit of the workspace and whether packages/ has uncommitted changes."""
    try:
        commit = _git("rev-parse", "--short", "HEAD")
        dirty = _git("status", "--porcelain", "packages")
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "packages_modified": bool(dirty)}


def _git(*args: str) -> str:
    """The stripped output of ``git -C <workspace> *args``."""
    command = ["git", "-C", str(_WORKSPACE), *args]
    return subprocess.run(
        command, capture_output=True, text=True, check=True, timeout=10
    ).stdout.strip()


# Statistics over seeds: medians with 95% percentile-bootstrap intervals ------------------


def area_under_curve(curve: Sequence[Sequence[float]]) -> float:
    """Average return over training: trapezoidal area / steps covered
    (`nnx_ppo.algorithms.analysis.curves.area_under_curve` of one curve).

    Args:
        curve: ``[(step, return), ...]`` in increasing steps, at least two points.

    Raises:
        ValueError: With fewer than two points or no steps covered.
    """
    import numpy as np

    from nnx_ppo.algorithms.analysis import curves as over_runs

    points = np.asarray(curve, dtype=float)
    if points.ndim != 2 or len(points) < 2 or points[-1, 0] <= points[0, 0]:
        raise ValueError(f"a learning curve needs >= 2 points over > 0 steps, got {curve!r}")
    return float(over_runs.area_under_curve(points[:, 0], points[None, :, 1])[0])


def median_ci(values: Sequence[float], seed: int = 0) -> tuple[float, float, float]:
    """``(low, median, high)``: the median and its 95% percentile-bootstrap interval
    (`nnx_ppo.algorithms.analysis.curves.bootstrap_interval`).

    Args:
        values: One number per seed (at least one).
        seed: Seed of the resampling (fixed, so reports are reproducible).
    """
    import numpy as np

    from nnx_ppo.algorithms.analysis import curves as over_runs

    data = np.asarray(values, dtype=float)
    if data.size == 0:
        raise ValueError("median_ci needs at least one value")
    low, high = over_runs.bootstrap_interval(data, n_resamples=N_BOOTSTRAP, seed=seed)
    return float(low), float(np.median(data)), float(high)


def band(curves: Sequence[Sequence[Sequence[float]]], seed: int = 0) -> dict[str, list[float]]:
    """Pointwise median and 95% bootstrap band of several curves on the same steps
    (`nnx_ppo.algorithms.analysis.curves.median_band`).

    Args:
        curves: One curve per seed, all with the same steps.

    Returns:
        ``{"steps": [...], "median": [...], "low": [...], "high": [...]}``.

    Raises:
        ValueError: If the curves are evaluated at different steps.
    """
    import numpy as np

    from nnx_ppo.algorithms.analysis import curves as over_runs

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


# The learning-curve figure -----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Panel:
    """One panel of `plot_panels`.

    Attributes:
        title: The panel's title.
        curves: ``(label, [curve per seed])`` pairs, each drawn as its pointwise median
            with the 95% band (`band`).
        references: ``(value, line style, label)`` of the horizontal black lines (the
            published figures).
    """

    title: str
    curves: Sequence[tuple[str, Sequence[Sequence[Sequence[float]]]]]
    references: Sequence[tuple[float, str, str]] = ()


def plot_panels(panels: Sequence[Panel], path: Path, *, legend: str) -> None:
    """Write the panels side by side to the PNG ``path``: evaluation return against env
    steps, the legend of each panel at ``legend`` (a matplotlib ``loc``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, panel in zip(axes[0], panels, strict=True):
        for label, curves in panel.curves:
            b = band(curves)
            (line,) = ax.plot(b["steps"], b["median"], label=label)
            ax.fill_between(b["steps"], b["low"], b["high"], color=line.get_color(), alpha=0.2)
        for value, style, label in panel.references:
            ax.axhline(value, color="black", ls=style, lw=1, label=label)
        ax.set_title(panel.title, fontsize=9)
        ax.set_xlabel("env steps")
        ax.xaxis.set_major_locator(MaxNLocator(4))
        ax.legend(fontsize=7, loc=legend)
    axes[0][0].set_ylabel("evaluation return (median, 95% band)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_cell_report(
    out: Path, title: str, body: list[str], panels: Sequence[Panel], *, legend: str
) -> Path:
    """Write ``out/report.md``: the heading ``title``, then ``body`` (or, with no panel,
    a line saying that no cell has finished yet), and, if there is a panel,
    ``out/curves.png`` (`plot_panels`, legends at ``legend``). Returns the report's path."""
    lines = [f"# {title}", "", *(body if panels else ["No cell has finished yet."])]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    if panels:
        plot_panels(panels, out / "curves.png", legend=legend)
    return path
