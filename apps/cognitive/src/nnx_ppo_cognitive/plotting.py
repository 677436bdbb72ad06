"""The figures of a run: ``psychometric.png`` and, for reaction-time tasks,
``chronometric.png``.

`plot_psychometric` draws, per seed, the fraction of trials choosing action 2 among
those choosing 1 or 2 (or another pair, ``choices``) at each value of the task's
psychometric variable, with binomial
error bars (``+- sqrt(p (1 - p) / n)``), and the fitted curve (`TrialResults.psychometric`);
a degenerate fit (`PsychometricFit.problems`, e.g. its bias outside the stimulus range)
is drawn dashed and marked in the legend. A task with a single choice (go/no-go) gets
P(go) per condition instead, with the same error bars, and a task without a
psychometric variable (delayed match-to-sample) each seed's accuracy per condition.
Axes carry the condition's unit (the task's ``condition_units``).
`plot_chronometric` draws the mean reaction time of correct trials per ``|variable|``
(`nnx_ppo.algorithms.analysis.plotting.plot_chronometric`). Needs matplotlib, imported
when a figure is drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["plot_chronometric", "plot_psychometric"]

_TABLE_COLUMNS = ("condition_index", "n", "k", "p", "sem", "decision_rate", "accuracy",
                  "p_choose_2", "reaction_time")  # fmt: skip


def _condition_label(table: dict[str, np.ndarray], row: int) -> str:
    names = [k for k in table if k not in _TABLE_COLUMNS]
    return ", ".join(f"{k}={table[k][row]:g}" for k in names)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _curves(
    ax: Any, seeds: Sequence[int], trials: Sequence[Any], choices: tuple[int, int] | None
) -> None:
    """Each seed's points with binomial error bars and its fitted curve (dashed and
    marked where degenerate; points only where no fit exists)."""
    for i, (seed, result) in enumerate(zip(seeds, trials, strict=True)):
        color = f"C{i % 10}"
        rate = result.choice_rate(choices=choices)
        x = rate[result.psychometric_variable]
        ax.errorbar(x, rate["p"], yerr=np.nan_to_num(rate["sem"]), fmt="o", color=color,
                    alpha=0.6, markersize=4, capsize=2)  # fmt: skip
        try:
            fit = result.psychometric(choices=choices)
        except ValueError:  # no decided trial, or decisions at one value only
            ax.plot([], [], "o", color=color, label=f"seed {seed} (no fit)")
            continue
        grid = np.linspace(float(fit.x.min()), float(fit.x.max()), 200)
        label = f"seed {seed}" + (" (degenerate fit)" if fit.degenerate else "")
        ax.plot(grid, fit(grid), "--" if fit.degenerate else "-", color=color, label=label)


def _choice_bars(ax: Any, seeds: Sequence[int], trials: Sequence[Any], column: str) -> None:
    """Per condition, each seed's ``column`` (``"p"`` of `choice_rate`: P(go), with its
    binomial error bar; or ``"accuracy"``)."""
    tables = [r.choice_rate() if column == "p" else r.by_condition() for r in trials]
    rows = len(tables[0]["condition_index"])
    width = 0.8 / len(tables)
    for i, (seed, table) in enumerate(zip(seeds, tables, strict=True)):
        x = np.arange(rows) + (i - (len(tables) - 1) / 2) * width
        errors = np.nan_to_num(table["sem"]) if column == "p" else None
        ax.bar(x, table[column], width, yerr=errors, capsize=2, color=f"C{i % 10}",
               label=f"seed {seed}")  # fmt: skip
    ax.set_xticks(np.arange(rows), [_condition_label(tables[0], r) for r in range(rows)],
                  rotation=30, ha="right", fontsize=7)  # fmt: skip
    ax.set_ylim(0, 1.05)


def plot_psychometric(
    seeds: Sequence[int],
    trials: Sequence[Any],
    path: Path,
    *,
    title: str,
    choices: tuple[int, int] | None = None,
) -> None:
    """Write the run's choice figure (see the module docstring) to the PNG ``path``.

    Args:
        seeds: The runs' seeds, ``[K]``.
        trials: Their `TrialResults`, ``[K]``, of one task.
        path: Where the PNG goes.
        title: The figure's title.
        choices: The action pair ``(a, b)`` of the curve, P(b) among trials choosing
            ``a`` or ``b`` (``0``: withholding); default `TrialResults.default_choices`.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    try:
        first = trials[0]
        variable = first.psychometric_variable
        names = first.action_names
        if variable:
            _curves(ax, seeds, trials, choices)
            ax.set_xlabel(first.label(variable))
            a, b = first.default_choices if choices is None else choices
            ax.set_ylabel(f"P({names[b]}) of {'withhold' if a == 0 else names[a]} or "
                          f"{names[b]} (+- s.e.)")  # fmt: skip
            ax.set_ylim(-0.03, 1.03)
        elif len(names) == 2:  # one choice: P(choose it) against withholding
            _choice_bars(ax, seeds, trials, "p")
            ax.set_ylabel(f"P({names[1]}) of trials not aborted (+- s.e.)")
        else:
            _choice_bars(ax, seeds, trials, "accuracy")
            ax.set_ylabel("accuracy (fraction correct)")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)


def plot_chronometric(
    seeds: Sequence[int], trials: Sequence[Any], path: Path, *, title: str
) -> bool:
    """Write the reaction times of correct trials per ``|variable|`` (each seed faint,
    the seeds pooled with their standard error) to ``path``; ``False`` (nothing
    written) where no trial was a correct decision."""
    from nnx_ppo.algorithms.analysis.plotting import plot_chronometric as draw

    if not any(np.any(r.chronometric()["n"] > 0) for r in trials):
        return False
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    try:
        draw(list(trials), ax=ax, title=f"{title}\nseeds {', '.join(map(str, seeds))}")
        ax.title.set_fontsize(9)
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)
    return True
