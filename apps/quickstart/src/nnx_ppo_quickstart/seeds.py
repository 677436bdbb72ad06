"""``--seeds``: several seeds of one quickstart run, trained in one `train_many` program.

The seeds' runs share everything but their seed (their initial parameters and every
random draw of training), so they are one compiled program with a leading run axis
(`nnx_ppo.algorithms.train_many`), not one command per seed. The run folder holds the
sweep's ``config.json``, ``metrics.jsonl`` (one line per seed per log, with a ``"run"``
index) and ``checkpoints/`` (every seed's state; ``--resume`` continues all of them),
and per seed a folder ``seed_<s>/`` with that seed's ``metrics.jsonl``,
``learning_curve.png`` and ``summary.json``. The run's ``summary.json`` gives every
seed's final evaluation return and their median and interquartile mean (IQM) with 95 %
stratified-bootstrap intervals (`nnx_ppo.algorithms.analysis.statistics`, rliable's
definitions).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "CONFIDENCE",
    "aggregate",
    "interval_text",
    "parse_seeds",
    "seed_folder",
    "split_metrics",
]

CONFIDENCE = 0.95
"""The coverage of the summary's bootstrap intervals."""


def parse_seeds(text: str) -> list[int]:
    """The seeds of ``--seeds`` as the run records it (``"0,1,2"``; ``""``: none).

    Examples:
        >>> parse_seeds("0,1,2"), parse_seeds("")
        ([0, 1, 2], [])
    """
    return [int(part) for part in text.split(",")] if text else []


def seed_folder(out: Path, seed: int) -> Path:
    """Where seed ``seed``'s own outputs go: ``<out>/seed_<seed>``."""
    return out / f"seed_{seed}"


def split_metrics(path: Path, seeds: Sequence[int], out: Path) -> None:
    """Write each seed's lines of the sweep's ``metrics.jsonl`` (``path``) to its
    `seed_folder`, without the ``"run"`` field: a single run's file, as a run without
    ``--seeds`` writes it."""
    lines: dict[int, list[str]] = {run: [] for run in range(len(seeds))}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        run = record.pop("run", None)
        if run in lines:
            lines[run].append(json.dumps(record))
    for run, seed in enumerate(seeds):
        folder = seed_folder(out, seed)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "metrics.jsonl").write_text("".join(f"{line}\n" for line in lines[run]))


def aggregate(final_returns: Sequence[float]) -> dict[str, Any]:
    """The summary's statistics of the seeds' final returns: the median and the IQM,
    each with its 95 % stratified-bootstrap interval (``None`` where a seed has no
    finite return).

    Examples:
        >>> stats = aggregate([1.0, 2.0, 3.0, 4.0])
        >>> stats["median"]["value"], stats["iqm"]["value"]
        (2.5, 2.5)
        >>> stats["iqm"]["low"] <= 2.5 <= stats["iqm"]["high"]
        True
    """
    import numpy as np

    from nnx_ppo.algorithms.analysis.statistics import interval_estimates, iqm

    if not final_returns or not all(math.isfinite(r) for r in final_returns):
        return {"median": None, "iqm": None, "confidence": CONFIDENCE}
    scores = {"final": np.asarray(final_returns, dtype=np.float64)[:, None]}  # [runs, 1 task]

    def median(x: Any) -> float:
        return float(np.median(x))

    stats: dict[str, Any] = {}
    for name, statistic in (("median", median), ("iqm", iqm)):
        estimate = interval_estimates(scores, statistic, confidence=CONFIDENCE)["final"]
        stats[name] = {"value": estimate.value, "low": estimate.low, "high": estimate.high}
    stats["confidence"] = CONFIDENCE
    return stats


def interval_text(entry: dict[str, float] | None) -> str:
    """``value [low, high]`` of an `aggregate` entry, for the printed summary.

    Examples:
        >>> interval_text({"value": 998.7, "low": 950.12, "high": 1000.0})
        '998.7 [950.1, 1000.0]'
        >>> interval_text(None)
        'n/a'
    """
    if entry is None:
        return "n/a"
    return f"{entry['value']:.1f} [{entry['low']:.1f}, {entry['high']:.1f}]"
