"""Training as it goes and after: plain progress lines, and the learning curves.

`ProgressLines` is the ``log_fn`` of a run whose output is not a terminal (a log file, a
cluster job): one line per ``--log-every`` iterations, with the median over seeds of
the trial reward and the fraction of ended trials that were correct. `learning_curves`
reads the run's ``metrics.jsonl`` into per-seed curves, `write_learning_curves` writes
them as ``learning_curves.csv`` and ``learning_curves.png``.

Examples:
    >>> import io
    >>> out = io.StringIO()
    >>> lines = ProgressLines(every=2, total_steps=400, steps_per_iteration=100, n_runs=2,
    ...                       out=out, clock=lambda: 10.0)
    >>> for step in (100, 200, 300, 400):
    ...     for run in (0, 1):
    ...         lines({"rollout/episode_reward": 0.5 + run / 10, "env/correct": 0.02,
    ...                "env/trial_end": 0.04, "throughput/sps": 1234.0}, step, run)
    >>> print(out.getvalue(), end="")
    step 200 of 400 (50%), iteration 2: trial reward 0.55 [0.5, 0.6], correct 0.5 of
    ended trials, 1,234 steps/s per seed, 0 s
    step 400 of 400 (100%), iteration 4: trial reward 0.55 [0.5, 0.6], correct 0.5 of
    ended trials, 1,234 steps/s per seed, 0 s
"""

from __future__ import annotations

import csv
import json
import math
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

__all__ = ["CURVES", "ProgressLines", "learning_curves", "write_learning_curves"]

CURVES = {
    "trial_reward": "mean reward per trial",
    "correct": "correct, fraction of ended trials",
    "abort": "fixation broken, fraction of ended trials",
}
"""The learning curves (``learning_curves.csv``'s columns after ``step`` and ``seed``)
and their axis labels."""


def _curve_values(metrics: Mapping[str, Any]) -> dict[str, float]:
    """One log record's curve values (``nan`` where a trial rate has no ended trial)."""
    ended = float(metrics.get("env/trial_end", math.nan))

    def per_trial(name: str) -> float:
        value = float(metrics.get(f"env/{name}", math.nan))
        return value / ended if ended > 0 else math.nan

    return {
        "trial_reward": float(metrics.get("rollout/episode_reward", math.nan)),
        "correct": per_trial("correct"),
        "abort": per_trial("abort"),
    }


class ProgressLines:
    """A sweep's ``log_fn(metrics, step, run)`` that prints one plain line per
    ``every`` iterations (and at the last step), once every run has logged that step.

    Args:
        every: Iterations between lines (``--log-every``).
        total_steps: The run's env steps per seed.
        steps_per_iteration: ``n_envs * rollout_length``.
        n_runs: The number of seeds.
        out: Where the lines go (default stdout, flushed after each line).
        clock: Seconds, for the elapsed time (default `time.perf_counter`).
    """

    def __init__(
        self,
        *,
        every: int,
        total_steps: int,
        steps_per_iteration: int,
        n_runs: int,
        out: TextIO | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.every, self.total = every, total_steps
        self.per_iteration, self.n_runs = steps_per_iteration, n_runs
        self.out, self.clock = out, clock
        self.start = clock()
        self.pending: dict[int, list[Mapping[str, Any]]] = {}
        self.printed = 0  # the last iteration printed

    def __call__(self, metrics: Mapping[str, Any], step: int, run: int) -> None:
        records = self.pending.setdefault(int(step), [])
        records.append(metrics)
        if len(records) < self.n_runs:
            return
        del self.pending[int(step)]
        iteration = int(step) // self.per_iteration
        if iteration // self.every <= self.printed // self.every and step < self.total:
            return
        self.printed = iteration
        values = [_curve_values(m) for m in records]
        reward = np.array([v["trial_reward"] for v in values])
        rates = [v["correct"] for v in values if not math.isnan(v["correct"])]
        correct = float(np.median(rates)) if rates else math.nan
        sps = np.median([float(m.get("throughput/sps", math.nan)) for m in records])
        finite = reward[np.isfinite(reward)]
        spread = f" [{finite.min():.3g}, {finite.max():.3g}]" if finite.size > 1 else ""
        line = (
            f"step {step:,} of {self.total:,} ({100 * step / self.total:.0f}%), iteration "
            f"{iteration}: trial reward {np.median(finite) if finite.size else math.nan:.3g}"
            f"{spread}, correct {correct:.3g} of ended trials, {sps:,.0f} steps/s per seed, "
            f"{self.clock() - self.start:.0f} s"
        )
        stream = self.out or sys.stdout
        print(line, file=stream, flush=True)


def learning_curves(jsonl: Path, seeds: Sequence[int]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """``(steps [S], {curve: values [K, S]})`` from a run's ``metrics.jsonl`` (one line
    per seed per iteration, ``"run"`` the seed's index); `CURVES` names the curves."""
    rows: dict[tuple[int, int], dict[str, float]] = {}
    for line in jsonl.read_text().splitlines():
        record = json.loads(line)
        if "run" in record and "step" in record:
            rows[(int(record["step"]), int(record["run"]))] = _curve_values(record)
    steps = np.array(sorted({step for step, _ in rows}), np.int64)
    curves = {
        name: np.array(
            [
                [rows.get((int(s), k), {}).get(name, math.nan) for s in steps]
                for k in range(len(seeds))
            ]
        )
        for name in CURVES
    }
    return steps, curves


def write_learning_curves(
    jsonl: Path, seeds: Sequence[int], out: Path, *, title: str, plot: bool = True
) -> list[str]:
    """Write ``learning_curves.csv`` (``step, seed`` and the `CURVES`, one row per seed
    per logged step) and, with ``plot``, ``learning_curves.png`` (each seed faint, the
    median over seeds with its 95 % bootstrap band) into ``out``; return their names."""
    steps, curves = learning_curves(jsonl, seeds)
    with open(out / "learning_curves.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["step", "seed", *CURVES])
        for k, seed in enumerate(seeds):
            for j, step in enumerate(steps):
                values = [curves[name][k, j] for name in CURVES]
                writer.writerow([int(step), seed, *("" if math.isnan(v) else f"{v:.6g}"
                                                    for v in values)])  # fmt: skip
    if not plot or steps.size == 0:
        return ["learning_curves.csv"]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import EngFormatter

    from nnx_ppo.algorithms.analysis.plotting import plot_learning_curves

    shown = ("trial_reward", "correct")
    fig, axes = plt.subplots(1, len(shown), figsize=(10, 3.8), dpi=120)
    try:
        for ax, name in zip(axes, shown, strict=True):
            values = curves[name]
            for k, seed in enumerate(seeds):
                ax.plot(steps, values[k], color=f"C{k % 9 + 1}", alpha=0.35, linewidth=1,
                        label=f"seed {seed}")  # fmt: skip
            with warnings.catch_warnings():  # a step where no seed ended a trial
                warnings.simplefilter("ignore", RuntimeWarning)
                filled = np.where(np.isnan(values), np.nanmean(values, axis=0), values)
            if np.all(np.isfinite(filled)):
                plot_learning_curves({"all seeds": (steps, filled)}, ax=ax, ylabel=CURVES[name])
            ax.set_xlabel("env steps per seed")
            ax.xaxis.set_major_formatter(EngFormatter(sep=""))  # 400k, 2M
            ax.set_ylabel(CURVES[name])
            ax.legend(fontsize=7)
        fig.suptitle(title, fontsize=9)
        fig.tight_layout()
        fig.savefig(out / "learning_curves.png")
    finally:
        plt.close(fig)
    return ["learning_curves.csv", "learning_curves.png"]
