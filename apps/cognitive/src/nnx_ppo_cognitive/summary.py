"""Per-seed trial scores and their summary over seeds: what ``results.json`` and
``results.md`` hold.

`seed_record` turns one seed's `TrialResults` into JSON: its rates, whether the
criterion is met, the psychometric fit (``None`` where the task has no psychometric
variable or the trials allow no fit, with the reason) and the per-condition table.
`summarize` gives each metric's median over seeds with a 95 % percentile bootstrap
interval (`nnx_ppo.algorithms.analysis.curves.bootstrap_interval`), over the seeds where the
metric is a number. `results_table` is the markdown of that summary.

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

__all__ = ["FIT_FIELDS", "RATE_FIELDS", "results_table", "seed_record", "summarize"]

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


def seed_record(seed: int, trials: Any, *, decision: float, correct: float) -> dict[str, Any]:
    """One seed's scores as JSON-ready values.

    Args:
        seed: The run's seed.
        trials: Its `TrialResults`.
        decision: The criterion's decision rate (`TrialResults.criteria`).
        correct: The criterion's accuracy.

    Returns:
        ``{"seed", "decision_rate", "abort_rate", "accuracy", "criteria_met",
        "n_trials", "outcomes", "psychometric", "psychometric_error", "by_condition"}``;
        ``psychometric`` is `PsychometricFit.to_dict` or ``None`` (then
        ``psychometric_error`` says why).
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
            fit = trials.psychometric()
        except ValueError as error:  # e.g. no decided trial, or one value of x only
            record["psychometric_error"] = str(error)
        else:
            if fit.converged:
                record["psychometric"] = fit.to_dict()
            else:  # e.g. every choice on one side: its numbers would mean nothing
                record["psychometric_error"] = (
                    f"the fit did not converge (choices of action 2 per value: "
                    f"{fit.p.round(3).tolist()})"
                )
    record["by_condition"] = scores["by_condition"]
    return record


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
        ``{metric: {"median", "low", "high", "n"}}`` for `RATE_FIELDS` and
        ``psychometric_<p>`` for `FIT_FIELDS` (``n`` seeds where it is a number; all
        ``None`` where none is), and ``"criteria_met": {"seeds", "of"}``.
    """
    summary: dict[str, Any] = {name: _interval([r[name] for r in records]) for name in RATE_FIELDS}
    for name in FIT_FIELDS:
        values = [_number(r["psychometric"][name]) if r["psychometric"] else None for r in records]
        summary[f"psychometric_{name}"] = _interval(values)
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
    for name in FIT_FIELDS:
        fits = [r["psychometric"] for r in records]
        values = ", ".join("n/a" if f is None else f"{f[name]:.3g}" for f in fits)
        lines.append(
            f"| psychometric {name} | {_cell(summary[f'psychometric_{name}'])} | {values} |"
        )
    met = summary["criteria_met"]
    flags = ", ".join("yes" if r["criteria_met"] else "no" for r in records)
    lines.append(f"| criteria met | {met['seeds']} of {met['of']} seeds | {flags} |")
    return "\n".join(lines)
