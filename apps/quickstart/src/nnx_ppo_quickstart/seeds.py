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
    "done_text",
    "eval_history",
    "interval_text",
    "parse_seeds",
    "run_summary",
    "seed_folder",
    "split_metrics",
    "sweep_summary",
    "write_seed_outputs",
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


def eval_history(jsonl_path: Path, run: int | None = None) -> list[tuple[int, dict[str, float]]]:
    """``[(step, metrics)]`` of every evaluation recorded in a run's ``metrics.jsonl``
    (all attempts of a resumed run: the trainer rewinds the file on resume); with
    ``run``, those of the lines of that run of a ``--seeds`` run's file."""
    history = []
    for line in jsonl_path.read_text().splitlines():
        record = json.loads(line)
        if run is not None and record.pop("run", None) != run:
            continue
        if record.get("eval/episode_reward/mean") is not None:
            metrics = {k: v for k, v in record.items() if k != "step" and v is not None}
            history.append((int(record["step"]), metrics))
    return history


def run_summary(
    env: str,
    network: str,
    history: list[tuple[int, dict[str, float]]],
    measured: dict[str, Any],
    *,
    finished: bool = True,
) -> dict[str, Any]:
    """A run's ``summary.json``: its env and network, ``measured`` (its steps and
    throughput), then the final return and the steps of ``history``, the whole run's
    evaluations (`eval_history` of its ``metrics.jsonl``)."""
    from nnx_ppo_apps_common.results import final_return

    return {
        "env": env,
        "network": network,
        **measured,
        "final_eval_reward": final_return(history),
        "eval_steps": [step for step, _ in history],
        "finished": finished,
    }


def write_seed_outputs(
    out: Path,
    jsonl_path: Path,
    seeds: Sequence[int],
    *,
    env: str,
    network: str,
    measured: dict[str, Any],
    finished: bool,
) -> list[float]:
    """Each seed's folder (`seed_folder`): its ``metrics.jsonl`` (its lines of the
    program's ``jsonl_path``, whose ``"run"`` ``i`` is ``seeds[i]``), ``summary.json``
    (`run_summary`, with ``measured``, the program's throughput) and
    ``learning_curve.png``.

    Returns:
        The seeds' final evaluation returns, in the order of ``seeds``.
    """
    from nnx_ppo_apps_common.plotting import plot_learning_curve
    from nnx_ppo_apps_common.results import write_json

    split_metrics(jsonl_path, seeds, out)
    finals = []
    for seed in seeds:
        folder = seed_folder(out, seed)
        history = eval_history(folder / "metrics.jsonl")
        summary = {"seed": seed, **run_summary(env, network, history, measured, finished=finished)}
        write_json(folder / "summary.json", summary)
        finals.append(summary["final_eval_reward"])
        if history:
            title = f"{network} on {env}, seed {seed}"
            plot_learning_curve(history, folder / "learning_curve.png", title)
    return finals


def sweep_summary(
    env: str,
    network: str,
    seeds: Sequence[int],
    steps_per_seed: int,
    measured: dict[str, Any],
    finals: Sequence[float],
    *,
    finished: bool,
) -> dict[str, Any]:
    """The run's ``summary.json`` of a ``--seeds`` run: every seed's final return,
    their median and IQM with their intervals (`aggregate`), and ``measured`` (the
    throughput of every seed's steps)."""
    return {
        "env": env,
        "network": network,
        "seeds": list(seeds),
        "steps_per_seed": int(steps_per_seed),
        **measured,
        "final_eval_reward": dict(zip(map(str, seeds), finals, strict=True)),
        **aggregate(finals),
        "finished": finished,
    }


def done_text(summary: dict[str, Any], out: Path, *, wall: str = "") -> str:
    """The line printed when a ``--seeds`` run (or the merge of its shards) is done;
    ``wall`` follows the wall time (e.g. ``" (the longest shard)"``).

    Examples:
        >>> summary = {"seeds": [0, 1], "steps_per_seed": 1000, "wall_time_s": 4.0,
        ...            "steps_per_second": 500.0, "median": None, "iqm": None}
        >>> print(done_text(summary, Path("run")))  # doctest: +NORMALIZE_WHITESPACE
        Done: 2 seeds x 1,000 steps in 4 s (500 steps/s, all seeds, including compilation
        and eval); final eval return median n/a, IQM n/a (95% bootstrap intervals over the
        seeds). Results in run/ (each seed in seed_<s>/)
    """
    timing = ""
    if summary["wall_time_s"] is not None and summary["steps_per_second"] is not None:
        timing = (
            f" in {summary['wall_time_s']:.0f} s{wall} ({summary['steps_per_second']:,.0f} "
            "steps/s, all seeds, including compilation and eval)"
        )
    return (
        f"Done: {len(summary['seeds'])} seeds x {summary['steps_per_seed']:,} steps"
        f"{timing}; final eval return median {interval_text(summary['median'])}, IQM "
        f"{interval_text(summary['iqm'])} ({CONFIDENCE:.0%} bootstrap intervals over the "
        f"seeds). Results in {out}/ (each seed in seed_<s>/)"
    )
