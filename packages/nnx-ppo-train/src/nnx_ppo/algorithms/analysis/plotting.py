"""Plot training and behaviour: learning curves, psychometric and chronometric curves.

`plot_learning_curves` draws the median over runs with its 95% bootstrap band (the
statistics are `nnx_ppo.algorithms.analysis.curves`'). `plot_psychometric` and
`plot_chronometric` draw a cognitive task's choices and reaction times per condition
value from `evaluate_trials`' `TrialResults` (the fits are
`nnx_ppo.algorithms.analysis.psychometrics`'); given one result per run (e.g.
`evaluate_trials_many`'s list) they draw every run faintly and the runs pooled on top.

Needs matplotlib (``pip install 'nnx-ppo-train[logging]'``), imported only when a plot
is drawn.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nnx_ppo.algorithms.analysis.curves import median_band
from nnx_ppo.algorithms.analysis.psychometrics import PsychometricFit, PsychometricKind
from nnx_ppo.algorithms.analysis.trial_results import TrialResults

__all__ = ["plot_chronometric", "plot_learning_curves", "plot_psychometric"]

_RUN_ALPHA = 0.3  # the opacity of each run's points and curve under the pooled ones


def _pyplot(fn: str = "plot_learning_curves") -> Any:
    try:
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(f"{fn} needs matplotlib: pip install 'nnx-ppo-train[logging]'.") from e
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


# --------------------------------------------------------------------------- trials


def _runs(fn: str, results: Any) -> list[TrialResults]:
    """``results`` as a non-empty list of `TrialResults` of one task."""
    if isinstance(results, TrialResults):
        return [results]
    if isinstance(results, str | bytes) or not isinstance(results, Sequence):
        raise TypeError(
            f"{fn}: results must be a TrialResults or a list of them (one per run), got "
            f"{type(results).__name__}."
        )
    runs = list(results)
    if not runs:
        raise ValueError(f"{fn}: results is an empty list; pass at least one TrialResults.")
    for i, run in enumerate(runs):
        if not isinstance(run, TrialResults):
            raise TypeError(
                f"{fn}: results[{i}] is a {type(run).__name__}, not a TrialResults (what "
                "evaluate_trials returns)."
            )
        if sorted(run.condition) != sorted(runs[0].condition):
            raise ValueError(
                f"{fn}: results[{i}] has condition values {sorted(run.condition)}, but "
                f"results[0] has {sorted(runs[0].condition)}; pass results of one task."
            )
    return runs


def _pooled(runs: list[TrialResults]) -> TrialResults:
    """Every run's trials as one `TrialResults` (the per-trial fields concatenated)."""
    if len(runs) == 1:
        return runs[0]
    first = runs[0]
    fields = ("outcome", "choice", "answer", "decision_time", "reaction_time", "condition_index")
    joined = {name: np.concatenate([getattr(r, name) for r in runs]) for name in fields}
    return TrialResults(
        **joined,  # type: ignore[arg-type]
        criterion=first.criterion,
        condition={k: np.concatenate([r.condition[k] for r in runs]) for k in first.condition},
        psychometric_variable=first.psychometric_variable,
        epoch_names=first.epoch_names,
        action_names=first.action_names,
        condition_units=first.condition_units,
    )


def _binomial_errors(fit: PsychometricFit) -> np.ndarray:
    """``[M]`` the standard error ``sqrt(p (1 - p) / n)`` of each observed fraction."""
    return np.sqrt(fit.p * (1.0 - fit.p) / fit.n)


def _choice_label(results: TrialResults, choices: tuple[int, int] | None) -> str:
    first, second = results.default_choices if choices is None else choices
    names = results.action_names

    def name(action: int) -> str:
        if action == 0 and len(names) == 2:
            return "withhold"
        return names[action] if action < len(names) else f"action {action}"

    return f"P({name(second)}) of {name(first)} or {name(second)}"


def _finish(ax: Any, path: str | os.PathLike[str] | None, title: str | None) -> Any:
    if title is not None:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    if path is not None:
        ax.figure.tight_layout()
        ax.figure.savefig(os.fspath(path), dpi=120)
    return ax


def plot_psychometric(
    results: TrialResults | Sequence[TrialResults],
    variable: str | None = None,
    kind: PsychometricKind = "logistic",
    ax: Any = None,
    *,
    path: str | os.PathLike[str] | None = None,
    title: str | None = None,
    choices: tuple[int, int] | None = None,
) -> Any:
    """Draw the fraction of trials choosing the second action of ``choices`` among
    those choosing either (by default action 2 of 1 and 2; P(go) for go/no-go), per
    condition value, with binomial error bars, and the fitted psychometric curve
    (`TrialResults.psychometric`). A degenerate fit (`PsychometricFit.problems`) is
    drawn dashed, its label says why.

    The error bar of a point of ``n`` decided trials, a fraction ``p`` of them choosing
    action 2, is ``+- sqrt(p (1 - p) / n)``. Given a list (one result per run, e.g.
    `evaluate_trials_many`'s), each run's points and fit are drawn faintly and the fit
    of all runs' trials pooled on top.

    Args:
        results: A `TrialResults` (per-trial arrays ``[N]``), or a list of them of one
            task.
        variable: The condition value on the x axis (default the results'
            ``psychometric_variable``, e.g. ``"signed_coherence"``).
        kind: The fitted sigmoid, ``"logistic"`` or ``"probit"``.
        ax: A matplotlib ``Axes`` to draw on; ``None`` makes a new figure.
        path: Also save the figure there (PNG, SVG, PDF... by its suffix).
        title: The title (``None``: none).
        choices: The action pair ``(a, b)`` (``0``: withholding); default the
            results' `TrialResults.default_choices`.

    Returns:
        The ``Axes`` (``ax.figure`` is its figure). The pooled points are an errorbar
        container labelled ``"data (<n> decided trials)"``; the pooled curve's label
        gives its bias, threshold and lapse; each run's points and curve (a list only)
        are drawn with ``alpha < 1``.

    Raises:
        ImportError: If matplotlib is not installed.
        TypeError: If ``results`` is not a `TrialResults` or a list of them.
        ValueError: If ``results`` is empty, mixes tasks, or a fit fails
            (`TrialResults.psychometric`: an unknown ``variable`` or ``kind``, no
            decided trials, decisions at fewer than two values), before anything is
            drawn.
    """
    fn = "plot_psychometric"
    runs = _runs(fn, results)
    pooled = _pooled(runs)
    fit = pooled.psychometric(variable, kind, choices=choices)
    per_run = (
        [run.psychometric(variable, kind, choices=choices) for run in runs] if len(runs) > 1 else []
    )
    plt = _pyplot(fn)
    if ax is None:
        _, ax = plt.subplots(figsize=(5.0, 4.0))
    grid = np.linspace(fit.x[0], fit.x[-1], 201)
    for run_fit in per_run:
        ax.errorbar(
            run_fit.x,
            run_fit.p,
            yerr=_binomial_errors(run_fit),
            fmt="o",
            color="C0",
            alpha=_RUN_ALPHA,
            markersize=3,
        )
        ax.plot(grid, run_fit(grid), color="C0", alpha=_RUN_ALPHA, linewidth=1)
    pooled_label = f"pooled over {len(runs)} runs: " if per_run else ""
    ax.errorbar(
        fit.x,
        fit.p,
        yerr=_binomial_errors(fit),
        fmt="o",
        color="C1",
        label=f"data ({fit.n_trials} decided trials)",
    )
    flag = f" (degenerate: {'; '.join(fit.problems)})" if fit.degenerate else ""
    ax.plot(
        grid,
        fit(grid),
        color="C1",
        linestyle="--" if fit.degenerate else "-",
        label=(
            f"{pooled_label}{kind} fit: bias {fit.bias:.3g}, threshold {fit.threshold:.3g}, "
            f"lapse {fit.lapse:.2g}{flag}"
        ),
    )
    ax.axhline(0.5, color="0.6", linestyle=":", linewidth=1)
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel(pooled.label(fit.variable))
    ax.set_ylabel(_choice_label(pooled, choices))
    ax.legend(fontsize="small")
    return _finish(ax, path, title)


def plot_chronometric(
    results: TrialResults | Sequence[TrialResults],
    variable: str | None = None,
    ax: Any = None,
    *,
    path: str | os.PathLike[str] | None = None,
    title: str | None = None,
) -> Any:
    """Draw the mean reaction time of correct decisions per ``|variable|``, with its
    standard error (`TrialResults.chronometric`).

    Given a list (one result per run), each run's curve is drawn faintly and the curve
    of all runs' trials pooled on top. Values with no correct decision are left out; a
    value with one has no error bar.

    Args:
        results: A `TrialResults` (per-trial arrays ``[N]``), or a list of them of one
            task.
        variable: The condition value whose magnitude is on the x axis (default the
            results' ``psychometric_variable``).
        ax: A matplotlib ``Axes`` to draw on; ``None`` makes a new figure.
        path: Also save the figure there (PNG, SVG, PDF... by its suffix).
        title: The title (``None``: none).

    Returns:
        The ``Axes`` (``ax.figure`` is its figure). The pooled means ``[M]`` are an
        errorbar container (its label counts the correct trials); each run's means (a
        list only) a line with ``alpha < 1``.

    Raises:
        ImportError: If matplotlib is not installed.
        TypeError: If ``results`` is not a `TrialResults` or a list of them.
        ValueError: If ``results`` is empty or mixes tasks, ``variable`` is not a
            condition value, or no trial was a correct decision, before anything is
            drawn.
    """
    fn = "plot_chronometric"
    runs = _runs(fn, results)
    pooled = _pooled(runs)
    curve = pooled.chronometric(variable)
    if not np.any(curve["n"] > 0):
        raise ValueError(
            f"{fn}: none of the {pooled.n_trials} trials was a correct decision with a "
            f"reaction time (outcomes: {pooled.outcome_counts}); nothing to plot."
        )
    per_run = [run.chronometric(variable) for run in runs] if len(runs) > 1 else []
    name = pooled.psychometric_variable if variable is None else variable
    plt = _pyplot(fn)
    if ax is None:
        _, ax = plt.subplots(figsize=(5.0, 4.0))
    for run_curve in per_run:
        shown = run_curve["n"] > 0
        ax.plot(
            run_curve["value"][shown],
            run_curve["mean"][shown],
            "o-",
            color="C0",
            alpha=_RUN_ALPHA,
            markersize=3,
            linewidth=1,
        )
    shown = curve["n"] > 0
    sem = np.where(np.isnan(curve["sem"]), 0.0, curve["sem"])[shown]
    label = f"pooled over {len(runs)} runs" if per_run else "mean +- s.e.m."
    ax.errorbar(
        curve["value"][shown],
        curve["mean"][shown],
        yerr=sem,
        fmt="o-",
        color="C1",
        label=f"{label} ({int(curve['n'].sum())} correct trials)",
    )
    unit = pooled.condition_units.get(name)
    ax.set_xlabel(f"|{name}| ({unit})" if unit else f"|{name}|")
    ax.set_ylabel("reaction time of correct trials (ms)")
    ax.legend(fontsize="small")
    return _finish(ax, path, title)
