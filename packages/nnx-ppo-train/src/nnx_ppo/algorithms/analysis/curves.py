"""Learning curves over runs: medians, bootstrap confidence intervals, summary tables.

One seed proves little: the spread between seeds of the same method is often as large
as the difference between methods. These helpers summarise ``K`` runs (a sweep's,
`nnx_ppo.algorithms.sweeps.many`, or any runs evaluated at the same steps) the way the RL
evaluation literature recommends: the **median** over runs with a **95% percentile
bootstrap** confidence interval (resample the runs with replacement, recompute the
median, take the 2.5% and 97.5% quantiles), per evaluation step for a curve and for
two scalars per run in a table: the final return and the area under the curve.

Everything here is NumPy only; `nnx_ppo.algorithms.analysis.plotting` draws the curves with
matplotlib.

Examples:
    >>> import numpy as np
    >>> steps = np.array([0, 100, 200])
    >>> returns = np.array([[0.0, 5.0, 9.0], [0.0, 3.0, 7.0], [1.0, 6.0, 8.0]])  # [K, S]
    >>> summary = summarize(steps, returns)
    >>> summary.final.value, summary.auc.value
    (8.0, 4.75)
    >>> print(summary_table({"ppo": (steps, returns)}))  # doctest: +NORMALIZE_WHITESPACE
    | method | runs | final return: median [95% CI] | area under curve: median [95% CI] |
    |---|---|---|---|
    | ppo | 3 | 8 [7, 9] | 4.75 [3.25, 5.25] |
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from nnx_ppo.algorithms.analysis.statistics import (
    Estimate,
    check_bootstrap,
    percentile_interval,
    resample_runs,
)

__all__ = [
    "EVAL_REWARD",
    "Interval",
    "RunSummary",
    "area_under_curve",
    "bootstrap_interval",
    "curves_of",
    "median_band",
    "summarize",
    "summary_table",
]

EVAL_REWARD = "eval/episode_reward/mean"
"""The metric a learning curve shows by default: the deterministic evaluation return."""

Statistic = Callable[..., Any]
"""``statistic(values, axis=...)``, e.g. ``np.median`` or ``np.mean``."""


Interval = Estimate
"""The interval record of the summaries, `Estimate` (``median`` reads its ``value``).
Deprecated name, kept for one release."""


def _runs_axis(values: Any, name: str = "values") -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim < 1 or array.shape[0] < 1:
        raise ValueError(
            f"{name} has shape {array.shape}: it needs a leading run axis with at least "
            "one run ([K] or [K, S])."
        )
    if not np.all(np.isfinite(array)):
        raise ValueError(
            f"{name} holds NaN or infinite values (e.g. an evaluation with no finished "
            "episode); drop or fill them before summarising."
        )
    return array


def bootstrap_interval(
    values: Any,
    *,
    statistic: Statistic = np.median,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """The percentile bootstrap confidence interval of ``statistic`` over runs.

    Draws ``n_resamples`` resamples of the ``K`` runs with replacement, computes
    ``statistic`` of each along the run axis, and returns the ``(1 - confidence) / 2``
    and ``(1 + confidence) / 2`` quantiles of those. Deterministic for a given ``seed``.

    Args:
        values: ``[K]`` or ``[K, S]`` (runs first, e.g. returns per evaluation step).
        statistic: ``statistic(x, axis=1)`` of the resampled ``[R, K, ...]`` values.
        confidence: The interval's coverage, in ``(0, 1)``.
        n_resamples: Bootstrap resamples ``R`` (>= 1).
        seed: The resampling seed.

    Returns:
        ``(low, high)``, each of shape ``values.shape[1:]``.

    Raises:
        ValueError: If ``values`` has no run or non-finite entries, or ``confidence`` /
            ``n_resamples`` are out of range.

    Examples:
        >>> low, high = bootstrap_interval([1.0, 2.0, 3.0])
        >>> float(low), float(high)
        (1.0, 3.0)
    """
    check_bootstrap(confidence, n_resamples, 10_000)
    array = _runs_axis(values)
    picks = resample_runs(np.random.default_rng(seed), array.shape[:1], n_resamples)  # [R, K]
    return percentile_interval(statistic(array[picks], axis=1), confidence)  # of [R, ...]


def median_band(
    values: Any, *, confidence: float = 0.95, n_resamples: int = 10_000, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A learning curve over runs: ``(median, low, high)`` per step, each ``[S]``.

    Args:
        values: ``[K, S]``: the return of each run at each of ``S`` steps.
        confidence: The band's coverage (`bootstrap_interval`).
        n_resamples: Bootstrap resamples.
        seed: The resampling seed.

    Returns:
        The median over runs and the bootstrap band of the median, each ``[S]``.
    """
    array = _runs_axis(values)
    low, high = bootstrap_interval(array, confidence=confidence, n_resamples=n_resamples, seed=seed)
    return np.median(array, axis=0), low, high


def area_under_curve(steps: Any, values: Any) -> np.ndarray:
    """The area under each run's curve divided by the steps it spans: the average
    return over training (trapezoidal rule), ``[K]``.

    Dividing by ``steps[-1] - steps[0]`` keeps the number in return units, so runs of
    different lengths compare. A single step's "curve" is its value.

    Args:
        steps: ``[S]`` increasing env steps.
        values: ``[K, S]``.

    Examples:
        >>> area_under_curve([0, 10, 20], [[0.0, 1.0, 1.0]])  # (0.5 * 10 + 1 * 10) / 20
        array([0.75])
    """
    x = np.asarray(steps, dtype=np.float64)
    y = _runs_axis(values)
    if y.ndim != 2 or x.ndim != 1 or y.shape[1] != x.shape[0]:
        raise ValueError(
            f"steps has shape {x.shape} and values {y.shape}: they must be [S] and [K, S]."
        )
    if x.shape[0] == 1:
        return y[:, 0]
    if np.any(np.diff(x) <= 0):
        raise ValueError(f"steps={x.tolist()} must be strictly increasing.")
    widths = np.diff(x)
    area = np.sum((y[:, 1:] + y[:, :-1]) / 2.0 * widths, axis=1)
    return area / (x[-1] - x[0])


@dataclasses.dataclass(frozen=True)
class RunSummary:
    """`summarize`'s result: the runs' final return and area under the curve.

    Attributes:
        runs: ``K``.
        final: The median final return over runs with its bootstrap interval.
        auc: The median `area_under_curve` with its bootstrap interval.
    """

    runs: int
    final: Estimate
    auc: Estimate


def summarize(
    steps: Any,
    values: Any,
    *,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> RunSummary:
    """The final return and the area under the curve of ``K`` runs, each as the median
    over runs with its percentile bootstrap interval.

    Args:
        steps: ``[S]`` evaluation steps.
        values: ``[K, S]`` returns.
        confidence: The intervals' coverage.
        n_resamples: Bootstrap resamples.
        seed: The resampling seed.
    """
    y = _runs_axis(values)
    if y.ndim != 2:
        raise ValueError(f"values has shape {y.shape}: it must be [K, S] (runs, steps).")

    def interval(x: np.ndarray) -> Estimate:
        low, high = bootstrap_interval(x, confidence=confidence, n_resamples=n_resamples, seed=seed)
        return Estimate(float(np.median(x)), float(low), float(high))

    return RunSummary(
        runs=y.shape[0], final=interval(y[:, -1]), auc=interval(area_under_curve(steps, y))
    )


def summary_table(
    groups: Mapping[str, tuple[Any, Any]],
    *,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> str:
    """A Markdown table with one row per group of runs (`summarize`).

    Args:
        groups: ``{name: (steps [S], values [K, S])}``, e.g. one per method or
            hyperparameter value (see `curves_of`).
        confidence: The intervals' coverage (shown in the header).
        n_resamples: Bootstrap resamples.
        seed: The resampling seed.

    Returns:
        The table (no trailing newline).
    """
    percent = f"{confidence * 100:g}%"
    lines = [
        f"| method | runs | final return: median [{percent} CI] | "
        f"area under curve: median [{percent} CI] |",
        "|---|---|---|---|",
    ]
    for name, (steps, values) in groups.items():
        s = summarize(steps, values, confidence=confidence, n_resamples=n_resamples, seed=seed)
        lines.append(f"| {name} | {s.runs} | {s.final} | {s.auc} |")
    return "\n".join(lines)


def curves_of(
    histories: Any,
    metric: str = EVAL_REWARD,
    *,
    runs: Sequence[int] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(steps [S], values [K, S])`` of one metric from runs' evaluation histories.

    Args:
        histories: A `SweepResult` (its ``eval_histories``), or a list of histories
            ``[[(step, metrics), ...], ...]`` (e.g. several `train_ppo` results'
            ``eval_history``).
        metric: The metric to read (default: the evaluation return).
        runs: Only these runs (e.g. those of one hyperparameter value); ``None``: all.

    Raises:
        ValueError: If the runs were not evaluated at the same steps, or a record lacks
            ``metric``.
    """
    histories = getattr(histories, "eval_histories", histories)
    chosen = list(histories) if runs is None else [histories[i] for i in runs]
    if not chosen:
        raise ValueError("curves_of: no run selected (runs is empty).")
    steps = [step for step, _ in chosen[0]]
    rows = []
    for i, history in enumerate(chosen):
        if [step for step, _ in history] != steps:
            raise ValueError(
                f"curves_of: run {i} was evaluated at steps {[s for s, _ in history]}, run 0 "
                f"at {steps}; curves over runs need the same evaluation steps."
            )
        try:
            rows.append([record[metric] for _, record in history])
        except KeyError:
            raise ValueError(
                f"curves_of: run {i}'s evaluations have no {metric!r}; metrics there: "
                f"{sorted(history[0][1]) if history else []}."
            ) from None
    return np.asarray(steps), np.asarray(rows, dtype=np.float64)
