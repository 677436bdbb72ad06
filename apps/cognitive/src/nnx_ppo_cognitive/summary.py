"""Per-seed trial scores and their summary over seeds: what ``results.json`` and
``results.md`` hold.

`seed_record` turns one seed's `TrialResults` into JSON: its rates, whether the
criterion is met, the psychometric fit (``None`` where the task has no psychometric
variable or the trials allow no fit, with the reason; ``degenerate`` and ``problems``
where its numbers do not describe a curve, `PsychometricFit.problems`), the reaction
times of a reaction-time task (`reaction_times`), the scores of a task with a criterion
of its own (`task_scores`: the post-decision wager's, interval timing's) and the
per-condition table.
`summarize` gives each metric's median over seeds with a 95 % percentile bootstrap
interval (`nnx_ppo.algorithms.analysis.curves.bootstrap_interval`), over the seeds where the
metric is a number (degenerate fits left out). `results_table` is the markdown of that
summary; a degenerate fit's values are marked ``*``.

Examples:
    >>> records = [{"decision_rate": 1.0, "abort_rate": 0.0, "accuracy": 0.8,
    ...             "criteria_met": True, "psychometric": None},
    ...            {"decision_rate": 0.5, "abort_rate": 0.5, "accuracy": None,
    ...             "criteria_met": False, "psychometric": None}]
    >>> summary = summarize(records)
    >>> summary["decision_rate"]  # median of 1.0 and 0.5; resampled medians span both
    {'median': 0.75, 'low': 0.5, 'high': 1.0, 'n': 2}
    >>> summary["accuracy"]["n"], summary["criteria_met"]
    (1, {'seeds': 1, 'of': 2})
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "FIT_FIELDS",
    "RATE_FIELDS",
    "reaction_times",
    "results_table",
    "seed_record",
    "summarize",
    "task_score_lines",
    "task_scores",
]

RATE_FIELDS = ("decision_rate", "abort_rate", "accuracy")
"""The `TrialResults` rates kept per seed and summarized."""

FIT_FIELDS = ("bias", "slope", "lapse")
"""The psychometric fit's parameters kept per seed and summarized."""


def _number(value: Any) -> float | None:
    """A finite float, or ``None`` (``nan``, infinite or missing)."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def reaction_times(trials: Any) -> dict[str, Any]:
    """The reaction times of a seed's correct decisions (ms from the first response
    epoch's start, the stimulus onset of a reaction-time task): their number, median,
    mean and quartiles, and per ``|psychometric variable|`` (`TrialResults.chronometric`)
    the count, mean and standard error; ``None`` where there is no such trial.

    Examples:
        >>> from nnx_ppo.algorithms.analysis import TrialResults
        >>> trials = TrialResults(
        ...     outcome=[1, 1, 2, 1], choice=[2, 1, 1, 2], answer=[2, 1, 2, 2],
        ...     decision_time=[0] * 4, reaction_time=[100, 300, 50, 200],
        ...     condition_index=[0, 1, 0, 0], condition={"c": [5, -5, 5, 10]},
        ...     psychometric_variable="c")
        >>> rt = reaction_times(trials)
        >>> rt["n"], rt["median_ms"], rt["by_value"]["value"], rt["by_value"]["mean_ms"]
        (3, 200.0, [5.0, 10.0], [200.0, 200.0])
    """
    timed = (trials.outcome == 1) & trials.decided & (trials.reaction_time >= 0)
    rt = trials.reaction_time[timed].astype(np.float64)
    record: dict[str, Any] = {
        "n": int(rt.size),
        "median_ms": float(np.median(rt)) if rt.size else None,
        "mean_ms": float(rt.mean()) if rt.size else None,
        "quartiles_ms": [float(q) for q in np.percentile(rt, [25, 75])] if rt.size else None,
        "by_value": None,
    }
    if trials.psychometric_variable:
        curve = trials.chronometric()
        record["by_value"] = {
            "variable": f"|{trials.psychometric_variable}|",
            "value": curve["value"].tolist(),
            "n": curve["n"].tolist(),
            "mean_ms": [_number(v) for v in curve["mean"]],
            "sem_ms": [_number(v) for v in curve["sem"]],
        }
    return record


def task_scores(task: Any, trials: Any) -> dict[str, Any]:
    """The scores of a task whose published criterion is more than rates: ``{"wager":
    ..., "criteria_met": ...}`` for `PostDecisionWager` (`wager_criterion`: the sure
    choices per coherence, the accuracies with the sure option waived and without it,
    whether the published behaviour and pyrl's training criterion are met; the seed's
    ``criteria_met`` then requires both), ``{"timing": ...}`` for
    `ReadySetGo` (`timing_scores`: produced against sample intervals, the regression
    slope), else ``{}``; JSON-ready, for a seed's record.

    Examples:
        >>> from nnx_ppo.envs.cognitive import PerceptualDecisionMaking
        >>> task_scores(PerceptualDecisionMaking(dt=100), None)
        {}
    """
    from nnx_ppo.algorithms.analysis import timing_scores, wager_criterion
    from nnx_ppo.envs.cognitive import PostDecisionWager, ReadySetGo

    if isinstance(task, PostDecisionWager):
        check = wager_criterion(trials, sure_window=task.sure_window)
        return {"wager": {
            "met": check.met, "training_met": check.training_met,
            "p_sure": _number(check.p_sure), "sure_slope_per_percent": _number(check.sure_slope),
            "accuracy_gain": _number(check.accuracy_gain),
            "by_coherence": {k: [_number(x) for x in v.tolist()] for k, v in check.scores.items()},
        }, "criteria_met": check.training_met and check.met}  # fmt: skip
    if isinstance(task, ReadySetGo):
        scores = timing_scores(trials)
        return {"timing": {
            "slope": _number(scores.slope), "intercept_ms": _number(scores.intercept),
            "gain": task.gain, "relative_error": _number(scores.relative_error),
            "answered": _number(scores.answered),
            "by_interval": {
                "interval_ms": scores.interval.tolist(), "target_ms": scores.target.tolist(),
                "n": scores.n.tolist(), "mean_ms": [_number(x) for x in scores.mean.tolist()],
                "std_ms": [_number(x) for x in scores.std.tolist()],
            },
        }}  # fmt: skip
    return {}


def task_score_lines(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """The printed lines of each seed's `task_scores` (none for other tasks)."""
    lines = []
    for r in records:
        if "wager" in r:
            w = r["wager"]
            lines.append(
                f"  seed {r['seed']}: sure option on {_text(w['p_sure'])} of wager trials, "
                f"slope {_text(w['sure_slope_per_percent'])} per % coherence; waived "
                f"trials {_text(w['accuracy_gain'])} more accurate; published criterion "
                f"{'met' if w['met'] else 'not met'}, pyrl's training criterion "
                f"{'met' if w['training_met'] else 'not met'}"
            )
        if "timing" in r:
            t = r["timing"]
            lines.append(
                f"  seed {r['seed']}: produced on sample interval, slope {_text(t['slope'])} "
                f"(gain {t['gain']:g}), mean relative error {_text(t['relative_error'])}, "
                f"answered {_text(t['answered'])}"
            )
    return lines


def _text(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


def seed_record(
    seed: int,
    trials: Any,
    *,
    decision: float,
    correct: float,
    reaction_time: bool = False,
    choices: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """One seed's scores as JSON-ready values.

    Args:
        seed: The run's seed.
        trials: Its `TrialResults`.
        decision: The criterion's decision rate (`TrialResults.criteria`).
        correct: The criterion's accuracy.
        reaction_time: Whether the task is a reaction-time task: then the record has
            ``"reaction_time"`` (`reaction_times`).
        choices: The action pair of the psychometric fit (`TrialResults.psychometric`);
            default the task's.

    Returns:
        ``{"seed", "decision_rate", "abort_rate", "accuracy", "criteria_met",
        "n_trials", "outcomes", "psychometric", "psychometric_error", "by_condition"}``
        and, for a reaction-time task, ``"reaction_time"``; ``psychometric`` is
        `PsychometricFit.to_dict` (with ``degenerate`` and ``problems``) or ``None``
        (then ``psychometric_error`` says why).
    """
    scores = trials.to_dict()
    record: dict[str, Any] = {"seed": int(seed)}
    record.update({name: _number(scores[name]) for name in RATE_FIELDS})
    record["criteria_met"] = trials.criteria(decision, correct)
    record["n_trials"] = scores["n_trials"]
    record["outcomes"] = scores["outcomes"]
    record["psychometric"], record["psychometric_error"] = None, None
    if not trials.psychometric_variable:
        record["psychometric_error"] = "the task has no psychometric variable"
    else:
        try:
            fit = trials.psychometric(choices=choices)
        except ValueError as error:  # e.g. no decided trial, or one value of x only
            record["psychometric_error"] = str(error)
        else:
            record["psychometric"] = fit.to_dict()
    if reaction_time:
        record["reaction_time"] = reaction_times(trials)
    record["by_condition"] = scores["by_condition"]
    return record


def _fit(record: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The seed's fit if it is one to report (not degenerate), else ``None``."""
    fit = record.get("psychometric")
    return None if not fit or fit.get("degenerate") else fit


def _interval(values: Sequence[float | None]) -> dict[str, Any]:
    from nnx_ppo.algorithms.analysis.curves import bootstrap_interval

    finite = [v for v in values if v is not None]
    if not finite:
        return {"median": None, "low": None, "high": None, "n": 0}
    low, high = bootstrap_interval(np.asarray(finite))
    return {
        "median": float(np.median(finite)),
        "low": float(low),
        "high": float(high),
        "n": len(finite),
    }


def summarize(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Median and 95 % bootstrap interval over seeds of every rate and fit parameter.

    Args:
        records: `seed_record`'s, one per seed.

    Returns:
        ``{metric: {"median", "low", "high", "n"}}`` for `RATE_FIELDS`,
        ``psychometric_<p>`` for `FIT_FIELDS` (over the seeds whose fit is not
        degenerate) and, for a reaction-time task, ``reaction_time_ms`` (of the seeds'
        median reaction times); ``n`` seeds where it is a number, all ``None`` where
        none is; and ``"criteria_met": {"seeds", "of"}``.
    """
    summary: dict[str, Any] = {name: _interval([r[name] for r in records]) for name in RATE_FIELDS}
    for name in FIT_FIELDS:
        fits = [_fit(r) for r in records]
        summary[f"psychometric_{name}"] = _interval([_number(f[name]) if f else None for f in fits])
    if any("reaction_time" in r for r in records):
        summary["reaction_time_ms"] = _interval(
            [(r.get("reaction_time") or {}).get("median_ms") for r in records]
        )
    summary["criteria_met"] = {
        "seeds": sum(bool(r["criteria_met"]) for r in records),
        "of": len(records),
    }
    return summary


def _cell(interval: Mapping[str, Any]) -> str:
    if interval["median"] is None:
        return "n/a"
    return f"{interval['median']:.3g} [{interval['low']:.3g}, {interval['high']:.3g}]"


def results_table(results: Mapping[str, Any]) -> str:
    """The markdown table of ``results.json``: one row per metric, median [95 % CI]
    over seeds and each seed's value.

    Examples:
        >>> records = [{"seed": s, "decision_rate": 1.0, "abort_rate": 0.0,
        ...             "accuracy": a, "criteria_met": a >= 0.8, "psychometric": None}
        ...            for s, a in ((0, 0.9), (1, 0.7))]
        >>> results = {"seeds": records, "summary": summarize(records)}
        >>> print(results_table(results).splitlines()[4])
        | accuracy | 0.8 [0.7, 0.9] | 0.9, 0.7 |
    """
    records, summary = results["seeds"], results["summary"]
    lines = [
        "| metric | median [95% CI] | per seed |",
        "|---|---|---|",
    ]
    for name in RATE_FIELDS:
        values = ", ".join("n/a" if r[name] is None else f"{r[name]:.3g}" for r in records)
        lines.append(f"| {name} | {_cell(summary[name])} | {values} |")
    fits = [r["psychometric"] for r in records]
    for name in FIT_FIELDS:
        values = ", ".join(
            "n/a" if f is None else f"{f[name]:.3g}" + ("*" if f.get("degenerate") else "")
            for f in fits
        )
        lines.append(
            f"| psychometric {name} | {_cell(summary[f'psychometric_{name}'])} | {values} |"
        )
    if "reaction_time_ms" in summary:
        values = ", ".join(
            "n/a" if (r.get("reaction_time") or {}).get("median_ms") is None
            else f"{r['reaction_time']['median_ms']:.3g}"
            for r in records
        )  # fmt: skip
        lines.append(
            f"| reaction time, median of correct trials (ms) | "
            f"{_cell(summary['reaction_time_ms'])} | {values} |"
        )
    met = summary["criteria_met"]
    flags = ", ".join("yes" if r["criteria_met"] else "no" for r in records)
    lines.append(f"| criteria met | {met['seeds']} of {met['of']} seeds | {flags} |")
    degenerate = [
        f"seed {r['seed']}: {'; '.join(f['problems'])}"
        for r, f in zip(records, fits, strict=True)
        if f and f.get("degenerate")
    ]
    if degenerate:
        lines.append("")
        lines.append("\\* degenerate fit, left out of the median: " + "; ".join(degenerate) + ".")
    return "\n".join(lines)
