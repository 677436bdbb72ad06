"""Aggregate performance over runs and tasks, in rliable's definitions.

Agarwal et al. (2021), "Deep Reinforcement Learning at the Edge of the Statistical
Precipice", recommend reporting a few runs per task with statistics that are robust to
outlier runs and honest about their uncertainty; their library, rliable, defines them.
These are NumPy implementations of the same definitions (rliable itself pulls in
``arch``, ``scipy`` and ``seaborn``):

- **Scores** are arrays ``[runs, tasks]`` per algorithm (or setting), each entry one
  run's final score on one task, usually normalised per task (`normalize`:
  ``(score - low) / (high - low)``, e.g. random and reference returns) so tasks weigh
  alike. A ``{name: [runs, tasks]}`` dict is rliable's ``score_dict``; `save_scores`
  writes it as ``.npz`` and ``dict(np.load(path))`` reads it back.
- **Interquartile mean** (`iqm`): the mean of the middle 50% of all ``runs * tasks``
  scores pooled: sort them, drop ``floor(n / 4)`` from each end, average the rest
  (``scipy.stats.trim_mean(scores, 0.25, axis=None)``). Less sensitive to outliers
  than the mean, less noisy than the median.
- **Stratified bootstrap** (`stratified_bootstrap`): a confidence interval of any such
  statistic by resampling the runs *within each task* with replacement (the tasks are
  fixed, the runs are the random part), recomputing the statistic and taking the
  percentile interval of the resamples.
- **Probability of improvement** (`probability_of_improvement`): ``P(X > Y)``, for each
  task the probability that a random run of ``X`` scores higher than a random run of
  ``Y`` (the Mann-Whitney U statistic over all ``n_x * n_y`` pairs, ties counting
  one half), averaged over tasks.

Examples:
    >>> import numpy as np
    >>> scores = np.array([[0.1, 0.9], [0.4, 0.6], [0.2, 0.8], [3.0, 0.5]])  # [4 runs, 2 tasks]
    >>> round(iqm(scores), 4)  # sorted: .1 .2 .4 .5 .6 .8 .9 3; drop 2 each end
    0.575
    >>> probability_of_improvement([[2.0], [3.0]], [[1.0], [2.0]])  # 1, 1, .5, 1 over 4 pairs
    0.875
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

__all__ = [
    "Estimate",
    "check_bootstrap",
    "interval_estimates",
    "iqm",
    "load_scores",
    "normalize",
    "percentile_interval",
    "probability_of_improvement",
    "resample_runs",
    "save_scores",
    "stratified_bootstrap",
]


def _scores(scores: Any, name: str = "scores", *, finite: bool = True) -> np.ndarray:
    """``scores`` as float64 ``[runs, tasks]`` (a ``[runs]`` array is one task)."""
    array = np.asarray(scores, dtype=np.float64)
    if array.ndim == 1:
        array = array[:, None]
    if array.ndim != 2 or array.shape[0] < 1 or array.shape[1] < 1:
        raise ValueError(
            f"{name} has shape {array.shape}: it must be [runs] or [runs, tasks] with at "
            "least one run and one task."
        )
    if finite and not np.all(np.isfinite(array)):
        raise ValueError(
            f"{name} holds NaN or infinite values (e.g. a run that never finished an "
            "episode); drop or fill them first."
        )
    return array


def check_bootstrap(confidence: float, n_resamples: int, default: int) -> None:
    """The bootstrap's settings, or a ValueError naming the bad one (``default``: the
    caller's number of resamples, shown as the example)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence={confidence} must be in (0, 1), e.g. 0.95.")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples < 1:
        raise ValueError(f"n_resamples={n_resamples!r} must be an int >= 1, e.g. {default}.")


def resample_runs(rng: np.random.Generator, shape: tuple[int, ...], n_resamples: int) -> Any:
    """The bootstrap's draws: ``[n_resamples, *shape]`` indices of runs, each uniform over
    the ``shape[0]`` runs and drawn with replacement, for every entry of ``shape``
    independently (the runs of each task, for `stratified_bootstrap`)."""
    return rng.integers(0, shape[0], size=(n_resamples, *shape))


def percentile_interval(resampled: Any, confidence: float) -> tuple[Any, Any]:
    """``(low, high)``: the ``(1 - confidence) / 2`` and ``(1 + confidence) / 2``
    quantiles of the resampled statistics along their first axis."""
    low, high = np.quantile(resampled, [(1.0 - confidence) / 2.0, (1.0 + confidence) / 2.0], axis=0)
    return low, high


def normalize(scores: Any, low: Any, high: Any) -> np.ndarray:
    """Per-task normalised scores ``(scores - low) / (high - low)``: 0 at ``low`` (e.g.
    a random policy's return) and 1 at ``high`` (e.g. a reference return).

    Args:
        scores: ``[runs, tasks]`` (or ``[runs]``, one task).
        low: ``[tasks]`` (or a scalar), the score mapped to 0.
        high: ``[tasks]`` (or a scalar), the score mapped to 1; must differ from ``low``.

    Returns:
        ``[runs, tasks]`` float64.

    Examples:
        >>> normalize([[5.0, 30.0]], low=[0.0, 10.0], high=[10.0, 50.0])
        array([[0.5, 0.5]])
    """
    array = _scores(scores)
    lo = np.broadcast_to(np.asarray(low, dtype=np.float64), array.shape[1:])
    hi = np.broadcast_to(np.asarray(high, dtype=np.float64), array.shape[1:])
    if np.any(hi == lo) or not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        raise ValueError(
            f"low={np.asarray(low).tolist()} and high={np.asarray(high).tolist()} must be "
            "finite and differ for every task (high - low is the unit of the score)."
        )
    return (array - lo) / (hi - lo)


def iqm(scores: Any) -> float:
    """The interquartile mean of all ``runs * tasks`` scores pooled: sorted, the lowest
    and highest ``floor(n / 4)`` dropped, the rest averaged (rliable's
    ``aggregate_iqm``).

    Args:
        scores: ``[runs, tasks]`` or ``[runs]``.

    Examples:
        >>> iqm([1.0, 2.0, 3.0, 100.0])  # drop 1 and 100: mean(2, 3)
        2.5
        >>> iqm([1.0, 2.0, 3.0])  # floor(3 / 4) = 0: the plain mean
        2.0
    """
    values = np.sort(_scores(scores).ravel())
    cut = values.size // 4
    return float(np.mean(values[cut : values.size - cut]))


def probability_of_improvement(x: Any, y: Any) -> float:
    """``P(X > Y)``: per task, the fraction of run pairs ``(i, j)`` with ``x[i] >
    y[j]`` (a tie counts one half: the Mann-Whitney U statistic over ``n_x * n_y``),
    averaged over the tasks (rliable's ``probability_of_improvement``).

    Args:
        x: ``[runs_x, tasks]`` (or ``[runs_x]``), algorithm ``X``'s scores.
        y: ``[runs_y, tasks]`` (or ``[runs_y]``), algorithm ``Y``'s, on the same tasks.

    Returns:
        A probability in ``[0, 1]``; ``0.5`` means neither is better.

    Raises:
        ValueError: If the two have different numbers of tasks (or invalid scores).
    """
    a, b = _scores(x, "x"), _scores(y, "y")
    if a.shape[1] != b.shape[1]:
        raise ValueError(
            f"x has {a.shape[1]} tasks and y {b.shape[1]} (shapes {a.shape}, {b.shape}): "
            "compare two algorithms on the same tasks, [runs, tasks] each."
        )
    pairs = a[:, None, :] - b[None, :, :]  # [runs_x, runs_y, tasks]
    wins = np.mean((pairs > 0) + 0.5 * (pairs == 0), axis=(0, 1))  # [tasks]
    return float(np.mean(wins))


def stratified_bootstrap(
    statistic: Callable[..., Any],
    *scores: Any,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """The percentile confidence interval of ``statistic(*scores)`` by the stratified
    bootstrap: every resample draws, for each task of each scores array independently,
    that task's runs with replacement (rliable's ``StratifiedBootstrap``, and
    ``StratifiedIndependentBootstrap`` for several arrays).

    Args:
        statistic: ``statistic(*resampled) -> float``, e.g. `iqm` or
            `probability_of_improvement`.
        *scores: One or more ``[runs, tasks]`` (or ``[runs]``) arrays.
        n_resamples: Bootstrap resamples (>= 1).
        confidence: The interval's coverage, in ``(0, 1)``.
        seed: The resampling seed (deterministic).

    Returns:
        ``(low, high)``: the ``(1 - confidence) / 2`` and ``(1 + confidence) / 2``
        quantiles of the resampled statistics.

    Examples:
        >>> # Task 0's runs score 0, 1, 2 and task 1's all 100: every resample's mean is
        >>> # (mean of three draws from {0, 1, 2} + 100) / 2, in [50, 51]; both ends
        >>> # (all three draws 0, or all 2) have probability 1/27 > 2.5%.
        >>> stratified_bootstrap(lambda s: float(np.mean(s)), [[0.0, 100.0], [1.0, 100.0],
        ...                                                     [2.0, 100.0]])
        (50.0, 51.0)
    """
    if not scores:
        raise TypeError("stratified_bootstrap needs at least one scores array after statistic.")
    if not callable(statistic):
        raise TypeError(f"statistic={statistic!r} must be a function of the scores, e.g. iqm.")
    check_bootstrap(confidence, n_resamples, 2000)
    arrays = [_scores(s, f"scores[{i}]") for i, s in enumerate(scores)]
    rng = np.random.default_rng(seed)
    # picks[r][i, j]: the run drawn as run i of task j in resample r.
    picks = [resample_runs(rng, a.shape, n_resamples) for a in arrays]
    columns = [np.arange(a.shape[1]) for a in arrays]
    stats = np.array(
        [
            float(statistic(*(a[p[r], c] for a, p, c in zip(arrays, picks, columns, strict=True))))
            for r in range(n_resamples)
        ]
    )
    low, high = percentile_interval(stats, confidence)
    return float(low), float(high)


@dataclasses.dataclass(frozen=True)
class Estimate:
    """A statistic of observed runs with its bootstrap confidence interval: what
    `interval_estimates` gives per algorithm, and `nnx_ppo.algorithms.analysis.curves`'
    summaries per group of runs (their median).

    Attributes:
        value: The statistic of the runs as observed.
        low: The interval's lower end.
        high: The interval's upper end.
    """

    value: float
    low: float
    high: float

    @property
    def median(self) -> float:
        """``value``, under the name curves' ``Interval`` record had (until 0.2)."""
        return self.value

    def __str__(self) -> str:
        return f"{self.value:.4g} [{self.low:.4g}, {self.high:.4g}]"


def interval_estimates(
    scores: Mapping[str, Any],
    statistic: Callable[..., Any] = iqm,
    *,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, Estimate]:
    """``statistic`` of each algorithm's scores with its `stratified_bootstrap`
    interval (rliable's ``get_interval_estimates``, percentile method).

    Args:
        scores: ``{name: [runs, tasks]}`` (rliable's score dict), or ``{name: (x,
            y)}`` (a tuple: several arrays) for a statistic of two arrays such as
            `probability_of_improvement` (rliable's ``{"X,Y": [x, y]}``).
        statistic: The statistic (default `iqm`).
        n_resamples: Bootstrap resamples.
        confidence: The intervals' coverage.
        seed: The resampling seed (the same for every entry).

    Examples:
        >>> estimates = interval_estimates({"a": [[1.0], [2.0], [3.0], [4.0]]})
        >>> estimates["a"].value  # the middle two of four
        2.5
    """
    out = {}
    for name, entry in scores.items():
        arrays = entry if isinstance(entry, tuple) else (entry,)
        low, high = stratified_bootstrap(
            statistic, *arrays, n_resamples=n_resamples, confidence=confidence, seed=seed
        )
        out[name] = Estimate(float(statistic(*arrays)), low, high)
    return out


def save_scores(path: str | os.PathLike[str], scores: Mapping[str, Any]) -> None:
    """Write a score dict ``{name: [runs, tasks]}`` to ``path`` (``.npz``);
    ``dict(np.load(path))`` (or `load_scores`) is rliable's ``score_dict`` again."""
    arrays = {name: _scores(v, name, finite=False) for name, v in scores.items()}
    np.savez(os.fspath(path), **arrays)  # type: ignore[arg-type]  # numpy stubs: allow_pickle


def load_scores(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """The score dict `save_scores` wrote: ``{name: [runs, tasks]}``."""
    with np.load(os.fspath(path)) as data:
        return {name: np.asarray(data[name]) for name in data.files}
