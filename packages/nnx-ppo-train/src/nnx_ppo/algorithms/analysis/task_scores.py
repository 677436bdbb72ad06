"""Scores of tasks whose published criterion is more than a decision rate and an
accuracy: `wager_criterion` (post-decision wager) and `timing_scores` (interval timing),
each read from a `TrialResults` (what `evaluate_trials` returns, or one built by hand).

Examples:
    Twelve wager trials by hand: at 0 % coherence the sure option is taken twice of
    three times, at 51.2 % never; the waived trials are all right, at 51.2 % the trials
    without the sure option one in three:

    >>> from nnx_ppo.algorithms.analysis.trial_results import TrialResults
    >>> outcome = [2, 2, 1, 1, 1, 1, 1, 2, 1, 2, 1, 2]
    >>> choice = [3, 3, 1, 1, 1, 1, 1, 2, 1, 2, 1, 2]
    >>> results = TrialResults(
    ...     outcome=outcome, choice=choice, answer=[1] * 12, decision_time=[1] * 12,
    ...     reaction_time=[1] * 12, condition_index=[0] * 12, opt_out_action=3,
    ...     condition={"wager": [1] * 6 + [0] * 6, "coherence": [0, 0, 0, 51.2, 51.2, 51.2] * 2})
    >>> check = wager_criterion(results)
    >>> check.scores["p_sure"].tolist(), check.sure_decreases, round(check.accuracy_gain, 3)
    ([0.6666666666666666, 0.0], True, 0.667)
    >>> check.met, check.training_met  # the decisions are 7 of 10 right: below 80 %
    (True, False)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from nnx_ppo.algorithms.analysis.trial_results import TrialResults
from nnx_ppo.envs.cognitive import Outcome

__all__ = ["TimingScores", "WagerCheck", "timing_scores", "wager_criterion", "wager_scores"]


def _ratio(k: Any, n: Any) -> float:
    return float(k) / float(n) if n else math.nan


def _check_results(fn: str, results: Any, needed: tuple[str, ...]) -> TrialResults:
    if not isinstance(results, TrialResults):
        raise TypeError(
            f"{fn}: results must be a TrialResults (what evaluate_trials returns), got "
            f"{type(results).__name__}."
        )
    missing = [name for name in needed if name not in results.condition]
    if missing:
        raise ValueError(
            f"{fn}: the trials have no condition value {missing[0]!r} (they have "
            f"{sorted(results.condition)}); pass the name that holds it, e.g. "
            f"{missing[0]}=..., or score trials of the task this function is for."
        )
    return results


def _slope(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares ``(slope, intercept)`` of ``y`` on ``x`` (``nan`` with fewer than
    two distinct ``x``)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if np.unique(x).size < 2:
        return math.nan, math.nan
    dx = x - x.mean()
    slope = float(np.sum(dx * (y - y.mean())) / np.sum(dx * dx))
    return slope, float(y.mean() - slope * x.mean())


# --------------------------------------------------------------------------- wager


def wager_scores(
    results: TrialResults, *, coherence: str = "coherence", wager: str = "wager"
) -> dict[str, np.ndarray]:
    """The post-decision wager's table, one row per unsigned coherence (sorted).

    Args:
        results: Trials of `PostDecisionWager` (``results.opt_out_action`` is its sure
            option).
        coherence: The condition value of the unsigned coherence.
        wager: The condition value that is 1 on trials offering the sure option.

    Returns:
        Columns ``[M]``: ``coherence``; ``n_offered`` (wager trials answered: a
        decision or the sure option), ``p_sure`` (of them the sure option) and its
        binomial ``sem``; ``n_waived`` (wager trials decided left or right) and
        ``accuracy_waived``; ``n_without`` (decisions on trials without the sure option)
        and ``accuracy_without``. A rate with nothing to count is ``nan``.

    Raises:
        TypeError: If ``results`` is not a `TrialResults`.
        ValueError: If a condition value is missing, or the results name no opt-out
            action.
    """
    fn = "wager_scores"
    results = _check_results(fn, results, (coherence, wager))
    if results.opt_out_action is None:
        raise ValueError(
            f"{fn}: results.opt_out_action is None: these trials have no sure option. "
            "Evaluate a PostDecisionWager (evaluate_trials passes its opt_out_action), or "
            "build the TrialResults with opt_out_action=3."
        )
    offered = results.condition[wager] > 0
    sure, decided = results.opted_out, results.decided
    correct = results.outcome == Outcome.CORRECT
    values = np.abs(results.condition[coherence])
    levels = np.unique(values)
    table: dict[str, list[float]] = {k: [] for k in (
        "n_offered", "p_sure", "sem", "n_waived", "accuracy_waived", "n_without",
        "accuracy_without")}  # fmt: skip
    for level in levels:
        at = values == level
        answered = at & offered & (sure | decided)
        p = _ratio(np.sum(answered & sure), np.sum(answered))
        waived, without = at & offered & decided, at & ~offered & decided
        table["n_offered"].append(int(answered.sum()))
        table["p_sure"].append(p)
        table["sem"].append(math.sqrt(p * (1 - p) / answered.sum()) if answered.any() else math.nan)
        table["n_waived"].append(int(waived.sum()))
        table["accuracy_waived"].append(_ratio(np.sum(waived & correct), waived.sum()))
        table["n_without"].append(int(without.sum()))
        table["accuracy_without"].append(_ratio(np.sum(without & correct), without.sum()))
    counts = ("n_offered", "n_waived", "n_without")
    return {
        "coherence": levels,
        **{k: np.asarray(v, np.int64 if k in counts else np.float64) for k, v in table.items()},
    }


@dataclasses.dataclass(frozen=True)
class WagerCheck:
    """`wager_criterion`'s verdict and the numbers behind it.

    Attributes:
        scores: `wager_scores`' table.
        p_sure: Sure choices over answered wager trials (all coherences).
        sure_slope: The least-squares slope of ``p_sure`` on the coherence (per
            percent), over the coherences with answered wager trials.
        sure_decreases: The sure option is chosen more often at low coherence:
            ``sure_slope < 0`` and ``p_sure`` at the lowest coherence above that at the
            highest.
        accuracy_gain: The mean over coherences above 0 of ``accuracy_waived -
            accuracy_without`` (coherences where both are measured, each weighted
            equally so that the mix of coherences does not enter; at 0 % no policy beats
            chance, so it is left out).
        waived_more_accurate: ``accuracy_gain > 0``.
        met: The published behaviour, both of the above.
        training_met: pyrl's training criterion: `TrialResults.criteria` (answers on
            99 % of trials, 80 % of the left/right decisions correct) and ``p_sure``
            strictly inside the task's ``sure_window`` (40-60 %).
    """

    scores: dict[str, np.ndarray]
    p_sure: float
    sure_slope: float
    sure_decreases: bool
    accuracy_gain: float
    waived_more_accurate: bool
    met: bool
    training_met: bool


def wager_criterion(
    results: TrialResults,
    *,
    coherence: str = "coherence",
    wager: str = "wager",
    sure_window: tuple[float, float] = (0.4, 0.6),
) -> WagerCheck:
    """The post-decision wager's published criteria on evaluated trials (Kiani &
    Shadlen 2009; Song, Yang & Wang 2017): the sure option is chosen more often at low
    coherence, and the accuracy on wager trials where it was waived is higher than on
    trials without it (`WagerCheck.met`); and pyrl's training criterion
    (`WagerCheck.training_met`).

    Score enough trials for the comparisons to mean something: with ``n`` decisions per
    group and coherence the accuracies have standard errors near ``sqrt(p (1 - p) /
    n)`` (e.g. 100 trials per condition: about 0.05 at 75 % correct).

    Args:
        results: Trials of `PostDecisionWager`.
        coherence: The condition value of the unsigned coherence.
        wager: The condition value that is 1 on trials offering the sure option.
        sure_window: pyrl's bounds on `WagerCheck.p_sure` (exclusive).

    Returns:
        A `WagerCheck`.

    Raises:
        TypeError: If ``results`` is not a `TrialResults`.
        ValueError: As for `wager_scores`, or if ``sure_window`` is not two fractions
            ``low < high``.
    """
    low, high = sure_window
    if not 0 <= low < high <= 1:
        raise ValueError(
            f"wager_criterion: sure_window={sure_window!r} must be (low, high) with "
            "0 <= low < high <= 1, e.g. (0.4, 0.6)."
        )
    scores = wager_scores(results, coherence=coherence, wager=wager)
    measured = scores["n_offered"] > 0
    x, p = scores["coherence"][measured], scores["p_sure"][measured]
    slope, _ = _slope(x, p)
    decreases = bool(x.size >= 2 and slope < 0 and p[0] > p[-1])
    both = (scores["n_waived"] > 0) & (scores["n_without"] > 0) & (scores["coherence"] > 0)
    gain = (
        float(np.mean(scores["accuracy_waived"][both] - scores["accuracy_without"][both]))
        if both.any()
        else math.nan
    )
    n_offered = int(scores["n_offered"].sum())
    p_sure = _ratio(np.sum(results.opted_out & (results.condition[wager] > 0)), n_offered)
    more_accurate = bool(gain > 0)
    return WagerCheck(
        scores=scores,
        p_sure=p_sure,
        sure_slope=slope,
        sure_decreases=decreases,
        accuracy_gain=gain,
        waived_more_accurate=more_accurate,
        met=decreases and more_accurate,
        training_met=bool(results.criteria() and low < p_sure < high),
    )


# --------------------------------------------------------------------------- timing


@dataclasses.dataclass(frozen=True)
class TimingScores:
    """`timing_scores`' result: produced against sample intervals.

    Attributes:
        interval: ``[M]`` the sample intervals ``t_s`` (ms, sorted).
        n: ``[M]`` trials answered (``go`` after set) per interval.
        mean: ``[M]`` the mean produced interval ``t_p`` (ms; ``nan`` without one).
        std: ``[M]`` its standard deviation (ms; ``ddof=1``, ``nan`` with fewer than
            two).
        target: ``[M]`` the target ``gain * t_s`` (ms).
        slope: The least-squares slope of ``t_p`` on ``t_s`` over the answered trials:
            the gain for perfect timing, lower where ``t_p`` regresses to the prior's
            mean.
        intercept: Its intercept (ms).
        relative_error: The mean of ``|t_p - target| / target`` over answered trials.
        answered: Answered trials over all trials.
    """

    interval: np.ndarray
    n: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    target: np.ndarray
    slope: float
    intercept: float
    relative_error: float
    answered: float


def timing_scores(
    results: TrialResults, *, interval: str = "interval", target: str = "target"
) -> TimingScores:
    """Produced intervals (ms from set's onset to ``go``, ``results.reaction_time``)
    against the sample intervals of `ReadySetGo` trials, and the regression slope
    (Jazayeri & Shadlen 2010).

    Args:
        results: Trials of `ReadySetGo`.
        interval: The condition value of the sample interval.
        target: The condition value of the target interval.

    Returns:
        A `TimingScores`.

    Raises:
        TypeError: If ``results`` is not a `TrialResults`.
        ValueError: If a condition value is missing.

    Examples:
        >>> from nnx_ppo.algorithms.analysis.trial_results import TrialResults
        >>> results = TrialResults(
        ...     outcome=[1, 1, 1, 1], choice=[1] * 4, answer=[1] * 4,
        ...     decision_time=[1] * 4, reaction_time=[900, 1000, 1100, 1200],
        ...     condition_index=[0, 0, 1, 1],
        ...     condition={"interval": [800, 800, 1200, 1200], "target": [800, 800, 1200, 1200]})
        >>> scores = timing_scores(results)
        >>> scores.mean.tolist(), scores.slope, round(scores.intercept, 6)
        ([950.0, 1150.0], 0.5, 550.0)
    """
    results = _check_results("timing_scores", results, (interval, target))
    answered = results.decided & (results.reaction_time >= 0)
    t_s, t_t = results.condition[interval], results.condition[target]
    t_p = results.reaction_time.astype(np.float64)
    levels = np.unique(t_s)
    n, mean, std, goal = [], [], [], []
    for level in levels:
        produced = t_p[answered & (t_s == level)]
        n.append(produced.size)
        mean.append(produced.mean() if produced.size else math.nan)
        std.append(produced.std(ddof=1) if produced.size > 1 else math.nan)
        goal.append(float(t_t[t_s == level][0]))
    slope, intercept = _slope(t_s[answered], t_p[answered])
    error = np.abs(t_p[answered] - t_t[answered]) / t_t[answered]
    return TimingScores(
        interval=levels.astype(np.float64),
        n=np.asarray(n, np.int64),
        mean=np.asarray(mean, np.float64),
        std=np.asarray(std, np.float64),
        target=np.asarray(goal, np.float64),
        slope=slope,
        intercept=intercept,
        relative_error=float(error.mean()) if error.size else math.nan,
        answered=_ratio(answered.sum(), results.n_trials),
    )
