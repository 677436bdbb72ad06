"""From a child's raw measurements to the reported numbers, and their summaries.

Definitions (the same for every implementation):

- ``steady_sps``: env steps per second over the *clean* chunks. A chunk is the time
  between two consecutive progress reports; it is clean unless JAX compiled something
  during it (more than 5% of the chunk's time). The first chunk (from the start of the
  training call to the first report) is never counted. brax 0.14.2 and nnx-ppo 0.3.0
  both compile their training step a second time on the second call, so this matters.
  No evaluation runs during training (each implementation evaluates once, afterwards).
- ``compile_s``: JAX's own compile events during the training call (tracing, lowering
  to MLIR and XLA compilation of every program, recompilations included), summed.
- ``recompile_s``: the part of ``compile_s`` after the first progress report.
- ``overhead_s``: ``train_s`` minus the time the budget takes at ``steady_sps``:
  compilation, warm-up, initialisation and host work outside the steady chunks.
- ``train_s``: the whole training call for the fixed budget; ``eval_s``: the final
  evaluation (including its compilation); ``e2e_s = train_s + eval_s``.
- ``peak_rss_mb``: the child's ``ru_maxrss``.
- ``final_eval_reward``: the final evaluation's mean return; ``None`` with
  ``eval_nonfinite`` set if it was NaN or infinite (training diverged).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "HIGHER_IS_BETTER",
    "METRICS",
    "derive",
    "json_safe",
    "ratio_summary",
    "spread",
]

METRICS = (
    "steady_sps",
    "compile_s",
    "recompile_s",
    "overhead_s",
    "train_s",
    "eval_s",
    "e2e_s",
    "peak_rss_mb",
    "final_eval_reward",
)
"""Derived metrics, in table order."""

HIGHER_IS_BETTER = {"steady_sps", "final_eval_reward"}
"""Metrics where a larger value is better (all others: smaller is better)."""


CLEAN_COMPILE_FRACTION = 0.05
"""A chunk with more compile time than this fraction of its duration is not clean."""


def derive(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The reported numbers of one run (``None`` where not measurable).

    Args:
        raw: A child's result JSON (``status == "ok"``).

    Returns:
        ``{metric: value}`` for every name in :data:`METRICS`, plus ``clean_chunks``
        and ``eval_nonfinite``.

    Example:
        >>> raw = {"progress": [[10.0, 1000], [14.0, 3000], [15.0, 5000], [16.0, 7000]],
        ...        "train_compile_events": [[9.0, 6.0], [13.0, 2.5]],
        ...        "timings": {"train_s": 16.5, "eval_s": 2.0},
        ...        "compile": {"train": {"trace_s": 1.0, "lower_s": 0.5, "backend_s": 7.0}},
        ...        "peak_rss_mb": 900.0, "final_eval_reward": 850.0}
        >>> d = derive(raw)  # the chunk (10, 14] recompiled: only (14, 16] is clean
        >>> d["steady_sps"], d["clean_chunks"], d["recompile_s"], d["overhead_s"]
        (2000.0, 2, 2.5, 13.0)
    """
    progress = [(float(t), int(s)) for t, s in raw.get("progress", [])]
    events = [(float(t), float(d)) for t, d in raw.get("train_compile_events", [])]
    clean_steps, clean_time, clean_chunks = 0, 0.0, 0
    for (t0, s0), (t1, s1) in itertools.pairwise(progress):
        compiled = sum(d for t, d in events if t0 < t <= t1)
        if t1 > t0 and s1 > s0 and compiled <= CLEAN_COMPILE_FRACTION * (t1 - t0):
            clean_steps += s1 - s0
            clean_time += t1 - t0
            clean_chunks += 1
    steady = clean_steps / clean_time if clean_chunks else None
    train_compile = raw.get("compile", {}).get("train", {})
    compile_s = sum(float(train_compile.get(k, 0.0)) for k in ("trace_s", "lower_s", "backend_s"))
    first_report = progress[0][0] if progress else None
    recompile = sum(d for t, d in events if t > first_report) if first_report is not None else None
    timings = raw.get("timings", {})
    train_s, eval_s = timings.get("train_s"), timings.get("eval_s")
    e2e = None if train_s is None else train_s + (eval_s or 0.0)
    overhead = None
    if steady and train_s is not None and progress:
        overhead = train_s - progress[-1][1] / steady
    reward = raw.get("final_eval_reward")
    nonfinite = reward is not None and not math.isfinite(float(reward))
    return {
        "steady_sps": steady,
        "compile_s": compile_s if train_compile else None,
        "recompile_s": recompile,
        "overhead_s": overhead,
        "train_s": train_s,
        "eval_s": eval_s,
        "e2e_s": e2e,
        "peak_rss_mb": raw.get("peak_rss_mb"),
        "final_eval_reward": None if nonfinite else reward,
        "clean_chunks": clean_chunks,
        "eval_nonfinite": nonfinite,
    }


def json_safe(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by its string (``"nan"``,
    ``"inf"``, ``"-inf"``), so that it serialises as strict JSON.

    Example:
        >>> json_safe({"a": [1.0, float("nan")], "b": float("-inf")})
        {'a': [1.0, 'nan'], 'b': '-inf'}
    """
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def spread(values: Iterable[float | None]) -> dict[str, float] | None:
    """``{"min", "median", "max", "mean", "n"}`` of the non-``None`` values, or ``None``.

    Example:
        >>> spread([3.0, None, 1.0, 2.0])
        {'min': 1.0, 'median': 2.0, 'max': 3.0, 'mean': 2.0, 'n': 3}
    """
    present = [float(v) for v in values if v is not None]
    if not present:
        return None
    return {
        "min": min(present),
        "median": statistics.median(present),
        "max": max(present),
        "mean": statistics.fmean(present),
        "n": len(present),
    }


def ratio_summary(
    numerators: Sequence[float | None], denominators: Sequence[float | None]
) -> dict[str, float] | None:
    """Spread of the repeat-wise ratios ``numerators[r] / denominators[r]``.

    Runs are paired by repeat (they ran back to back under the same machine load);
    pairs with a missing value are skipped.

    Example:
        >>> ratio_summary([2.0, 3.0, None], [1.0, 2.0, 1.0])["median"]
        1.75
    """
    ratios = [a / b for a, b in zip(numerators, denominators, strict=False) if a is not None and b]
    return spread(ratios)
