"""The figure of a run: every seed's psychometric curve, ``psychometric.png``.

`plot_psychometric` draws, per seed, the fraction of decided trials choosing action 2
at each value of the task's psychometric variable (points) and the fitted curve (line,
`TrialResults.psychometric`). A task without a psychometric variable (go / no-go,
delayed match-to-sample) gets each seed's accuracy per condition instead. Needs
matplotlib, imported when a figure is drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["plot_psychometric"]


def _condition_label(table: dict[str, np.ndarray], row: int) -> str:
    names = [k for k in table if k not in ("condition_index", "n", "decision_rate", "accuracy",
                                           "p_choose_2", "reaction_time")]  # fmt: skip
    return ", ".join(f"{k}={table[k][row]:g}" for k in names)


def _curves(ax: Any, seeds: Sequence[int], trials: Sequence[Any]) -> None:
    """Draw each seed's points and fitted curve (points only where no fit exists)."""
    for i, (seed, result) in enumerate(zip(seeds, trials, strict=True)):
        color = f"C{i % 10}"
        try:
            fit = result.psychometric()
        except ValueError:  # no decided trial, or too few values: points only, if any
            table = result.by_condition(result.psychometric_variable)
            ax.plot(table[result.psychometric_variable], table["p_choose_2"], "o",
                    color=color, alpha=0.6, label=f"seed {seed} (no fit)")  # fmt: skip
            continue
        grid = np.linspace(float(fit.x.min()), float(fit.x.max()), 200)
        ax.plot(fit.x, fit.p, "o", color=color, alpha=0.6)
        ax.plot(grid, fit(grid), "-", color=color, label=f"seed {seed}")


def _accuracy_bars(ax: Any, seeds: Sequence[int], trials: Sequence[Any]) -> None:
    tables = [result.by_condition() for result in trials]
    rows = len(tables[0]["condition_index"])
    width = 0.8 / len(tables)
    for i, (seed, table) in enumerate(zip(seeds, tables, strict=True)):
        x = np.arange(rows) + (i - (len(tables) - 1) / 2) * width
        ax.bar(x, table["accuracy"], width, color=f"C{i % 10}", label=f"seed {seed}")
    ax.set_xticks(np.arange(rows), [_condition_label(tables[0], r) for r in range(rows)],
                  rotation=30, ha="right", fontsize=7)  # fmt: skip
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1.05)


def plot_psychometric(
    seeds: Sequence[int], trials: Sequence[Any], path: Path, *, title: str
) -> None:
    """Write the run's figure (see the module docstring) to the PNG ``path``.

    Args:
        seeds: The runs' seeds, ``[K]``.
        trials: Their `TrialResults`, ``[K]``, of one task.
        path: Where the PNG goes.
        title: The figure's title.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    try:
        variable = trials[0].psychometric_variable
        if variable:
            _curves(ax, seeds, trials)
            ax.set_xlabel(variable)
            ax.set_ylabel(f"P(choose {trials[0].action_names[2]})"
                          if len(trials[0].action_names) > 2 else "P(choose action 2)")  # fmt: skip
            ax.set_ylim(-0.03, 1.03)
        else:
            _accuracy_bars(ax, seeds, trials)
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)
