"""Merging a sharded sweep: the finished shard folders of one sweep back into one
table, learning curves and per-run scores.

`merge_shards` reads the folders `train_shard` wrote (`nnx_ppo.algorithms.sweeps.shards`) and
returns a `MergedSweep`: the sweep's runs in their order, each with its evaluation
history (from the shard's ``metrics.jsonl``) and final evaluation, as the one-program
`train_many` sweep would have returned them (`MergedSweep.eval_histories` reads like
`SweepResult.eval_histories`, so `curves_of` takes either). It refuses folders of
another sweep (`SweepMismatchError`, naming the folder and what differs), unfinished,
duplicate and missing shards. `MergedSweep.scores` exports the final scores in the
layout rliable reads, and `MergedSweep.summary` reports each setting's interquartile
mean with its bootstrap interval (`nnx_ppo.algorithms.analysis.statistics`).

From a shell: ``python -m nnx_ppo.algorithms.sweeps.merge runs/sweep/shard-* --output-dir
runs/sweep/merged`` prints the table and the summary and writes `MergedSweep.write`'s
files (exit status 2, with the reason, when the folders are refused).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nnx_ppo.algorithms.analysis.curves import EVAL_REWARD, curves_of
from nnx_ppo.algorithms.analysis.plotting import plot_learning_curves
from nnx_ppo.algorithms.analysis.statistics import iqm, save_scores, stratified_bootstrap
from nnx_ppo.algorithms.sweeps.shards import (
    METRICS_FILE,
    RESULT_FILE,
    SWEEP_FILE,
    Shard,
    SweepIdentity,
    SweepMismatchError,
    read_json,
)

__all__ = ["MergedSweep", "ShardRun", "merge_shards"]


@dataclasses.dataclass(frozen=True)
class ShardRun:
    """One run of a merged sweep.

    Attributes:
        run: Its index in the sweep.
        seed: Its seed.
        values: Its swept values, ``{field: value}``.
        shard: The shard that trained it.
        eval_history: ``[(step, eval_metrics), ...]``, every evaluation of the run (as
            `SweepResult.eval_histories`).
        metrics: The last value of every metric it logged (training and evaluation).
    """

    run: int
    seed: int
    values: Mapping[str, Any]
    shard: int
    eval_history: list[tuple[int, dict[str, float]]]
    metrics: dict[str, float]

    @property
    def final(self) -> dict[str, float]:
        """The last evaluation's metrics (empty if the run was never evaluated)."""
        return dict(self.eval_history[-1][1]) if self.eval_history else {}


def _number(value: Any) -> float:
    return math.nan if value is None else float(value)


def _read_log(path: Path, n_local: int) -> tuple[list[list[Any]], list[dict[str, float]]]:
    """Per local run: its evaluation history and the last value of every metric."""
    histories: list[list[Any]] = [[] for _ in range(n_local)]
    last: list[dict[str, float]] = [{} for _ in range(n_local)]
    if not path.exists():
        return histories, last
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        record = json.loads(line)
        run = record.pop("run", None)
        step = record.pop("step", None)
        if not isinstance(run, int) or not 0 <= run < n_local or not isinstance(step, int):
            raise ValueError(
                f"{path}: line {number} is not a record of this shard's runs "
                f"(run {run!r} of {n_local}, step {step!r})."
            )
        values = {name: _number(value) for name, value in record.items()}
        last[run].update(values)
        evaluation = {name: v for name, v in values.items() if name.startswith("eval/")}
        if evaluation:
            histories[run].append((step, evaluation))
    return histories, last


@dataclasses.dataclass(frozen=True)
class MergedSweep:
    """What `merge_shards` returns: the whole sweep's runs, in their order.

    Attributes:
        identity: The sweep's `SweepIdentity`.
        runs: One `ShardRun` per run of the sweep, ``runs[j].run == j``.
        folders: The shard folders, by shard index.
    """

    identity: SweepIdentity
    runs: tuple[ShardRun, ...]
    folders: tuple[Path, ...]

    @property
    def eval_histories(self) -> list[list[tuple[int, dict[str, float]]]]:
        """Per run, its evaluation history: what the one-program sweep's
        `SweepResult.eval_histories` holds, so `curves_of` reads either."""
        return [run.eval_history for run in self.runs]

    @property
    def fields(self) -> list[str]:
        """The swept fields, in the order the sweep names them."""
        return [name for name in self.identity.runs[0] if name != "seed"]

    def rows(self, metrics: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """One dict per run: ``run``, ``seed``, the swept values, ``shard`` and its
        final evaluation (``metrics``, default all of them)."""
        out = []
        for run in self.runs:
            final = run.final
            names = sorted(final) if metrics is None else list(metrics)
            row = {"run": run.run, "seed": run.seed, **run.values, "shard": run.shard}
            row.update({name: final.get(name, math.nan) for name in names})
            out.append(row)
        return out

    def groups(self) -> dict[str, list[int]]:
        """The runs of each setting (the same swept values, any seed): ``{label:
        [run indices]}``, labels like ``"learning_rate=0.001, clip_range=0.2"`` (or
        ``"all runs"`` for a seeds-only sweep), in order of first appearance."""
        groups: dict[str, list[int]] = {}
        for run in self.runs:
            label = ", ".join(
                f"{name}={value:g}" if isinstance(value, float) else f"{name}={value}"
                for name, value in run.values.items()
            )
            groups.setdefault(label or "all runs", []).append(run.run)
        return groups

    def scores(self, metric: str | None = None) -> dict[str, np.ndarray]:
        """Per-run final scores in rliable's layout: ``{setting: [runs, 1]}``, one
        column for the sweep's one task (`groups` labels the settings).

        Args:
            metric: The final evaluation metric (default: the evaluation return).
        """

        metric = EVAL_REWARD if metric is None else metric
        out = {}
        for label, members in self.groups().items():
            values = [self.runs[j].final.get(metric, math.nan) for j in members]
            out[label] = np.asarray(values, dtype=np.float64)[:, None]
        return out

    def table(self, metrics: Sequence[str] | None = None) -> str:
        """The runs as a Markdown table (`rows`), the final evaluation return by
        default."""

        rows = self.rows([EVAL_REWARD] if metrics is None else metrics)
        names = list(rows[0])
        lines = ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
        for row in rows:
            cells = [f"{v:.6g}" if isinstance(v, float) else str(v) for v in row.values()]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def summary(self, metric: str | None = None, *, n_resamples: int = 2000) -> str:
        """Per setting, the interquartile mean of the final scores with its 95%
        stratified-bootstrap interval (`nnx_ppo.algorithms.analysis.statistics`), as Markdown."""

        lines = ["| setting | runs | IQM [95% CI] |", "|---|---|---|"]
        for label, scores in self.scores(metric).items():
            if np.all(np.isfinite(scores)):
                low, high = stratified_bootstrap(iqm, scores, n_resamples=n_resamples)
                cell = f"{iqm(scores):.4g} [{low:.4g}, {high:.4g}]"
            else:
                cell = "n/a (a run without a finite evaluation)"
            lines.append(f"| {label} | {scores.shape[0]} | {cell} |")
        return "\n".join(lines)

    def write(self, directory: str | os.PathLike[str], *, plots: bool = True) -> list[Path]:
        """Write the merged results to ``directory``: ``runs.md`` (`table` and
        `summary`), ``runs.json`` (`rows` with every final metric, each run's evaluation
        history and the identity), ``scores.npz`` (`scores`: ``dict(np.load(path))`` is
        rliable's score dict) and, with ``plots`` and matplotlib installed (the
        ``logging`` extra), ``curves.png``: one learning curve per setting, the median
        over its runs with a bootstrap band (`plot_learning_curves`; settings with a
        non-finite evaluation are left out).

        Returns:
            The files written.
        """

        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        written = [out / "runs.md", out / "runs.json", out / "scores.npz"]
        written[0].write_text(self.table() + "\n\n" + self.summary() + "\n")
        data = {
            "identity": self.identity.to_json(),
            "runs": [
                {**row, "eval_history": [[s, m] for s, m in run.eval_history]}
                for row, run in zip(self.rows(), self.runs, strict=True)
            ],
        }
        written[1].write_text(json.dumps(_finite_or_none(data), indent=1) + "\n")
        save_scores(written[2], self.scores())
        if plots and self._plot(out / "curves.png"):
            written.append(out / "curves.png")
        return written

    def _plot(self, path: Path) -> bool:
        """Draw the learning curves to ``path``; ``False`` without matplotlib or a
        curve to draw."""
        if importlib.util.find_spec("matplotlib") is None:
            return False

        groups = {}
        for label, members in self.groups().items():
            try:
                steps, values = curves_of(self, runs=members)
            except ValueError:  # runs evaluated at different steps, or never
                continue
            if values.size and np.all(np.isfinite(values)):
                groups[label] = (steps, values)
        if not groups:
            return False
        ax = plot_learning_curves(groups, path=path, n_resamples=1000)
        import matplotlib.pyplot as plt

        plt.close(ax.figure)
        return True


def _finite_or_none(data: Any) -> Any:
    """``data`` with every non-finite float as ``None`` (strict JSON)."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: _finite_or_none(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [_finite_or_none(value) for value in data]
    return data


def merge_shards(folders: Iterable[str | os.PathLike[str]]) -> MergedSweep:
    """Read the finished shards of one sweep back as one `MergedSweep`.

    Args:
        folders: Every shard folder of the sweep (any order), e.g.
            ``sorted(Path("runs/sweep").glob("shard-*"))``.

    Raises:
        SweepMismatchError: If a folder's sweep identity (or shard count) differs from
            the first folder's, naming both folders and the part that differs.
        ValueError: If no folder is given, a folder is not a shard folder (no
            ``sweep.json``), a shard is not finished (no ``result.json``: resume it),
            two folders hold the same shard, or shards are missing (named).
    """
    paths = [Path(folder) for folder in folders]
    if not paths:
        raise ValueError("merge_shards: no folder given; pass every shard folder of the sweep.")
    first: tuple[Path, SweepIdentity, int] | None = None
    by_index: dict[int, Path] = {}
    records: dict[int, Any] = {}
    for path in paths:
        if not (path / SWEEP_FILE).exists():
            raise ValueError(
                f"merge_shards: {path} is not a shard folder (no {SWEEP_FILE}); pass the "
                "folders train_shard wrote."
            )
        data = read_json(path / SWEEP_FILE)
        identity = SweepIdentity.from_json(data["identity"])
        shard = Shard(**data["shard"])
        if first is None:
            first = (path, identity, shard.count)
        else:
            field = first[1].difference(identity)
            if field is None and shard.count != first[2]:
                field = "shard"
            if field is not None:
                detail = (
                    f"{shard.count} shards there, {first[2]} in {first[0]}"
                    if field == "shard"
                    else f"sweep {identity.digest} there, {first[1].digest} in {first[0]}"
                )
                raise SweepMismatchError(
                    f"merge_shards: {path} is a shard of another sweep: its {field} "
                    f"differs ({detail}). Merge the folders of one sweep only.",
                    folder=path,
                    field=field,
                )
        if shard.index in by_index:
            raise ValueError(
                f"merge_shards: {path} and {by_index[shard.index]} both hold shard "
                f"{shard}; pass each shard's folder once."
            )
        if not (path / RESULT_FILE).exists():
            raise ValueError(
                f"merge_shards: shard {shard} in {path} is not finished (no {RESULT_FILE}); "
                "run its command again to resume it."
            )
        by_index[shard.index] = path
        records[shard.index] = data["runs"]
    assert first is not None  # paths is not empty
    _, identity, count = first
    missing = [i for i in range(count) if i not in by_index]
    if missing:
        raise ValueError(
            f"merge_shards: shards {missing} of {count} are missing (given: "
            f"{sorted(by_index)}); pass every shard's folder."
        )
    runs: list[ShardRun | None] = [None] * len(identity.runs)
    for index, path in sorted(by_index.items()):
        mine = records[index]
        histories, last = _read_log(path / METRICS_FILE, len(mine))
        for local, j in enumerate(mine):
            spec = dict(identity.runs[j])
            seed = spec.pop("seed")
            runs[j] = ShardRun(j, seed, spec, index, histories[local], last[local])
    return MergedSweep(
        identity, tuple(r for r in runs if r is not None), tuple(by_index[i] for i in range(count))
    )


def _main(argv: Sequence[str] | None = None) -> int:
    """``python -m nnx_ppo.algorithms.sweeps.merge FOLDER... [--output-dir DIR]``: merge the
    shard folders, print the table and the per-setting IQM, and write the files of
    `MergedSweep.write`. Exit status 2 (and the reason) when the folders are refused."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(
        prog="python -m nnx_ppo.algorithms.sweeps.merge",
        description="Merge the shard folders of one sweep (train_shard) into one table.",
    )
    parser.add_argument("folders", nargs="+", type=Path, help="every shard folder of the sweep")
    parser.add_argument("--output-dir", type=Path, help="also write runs.md, runs.json, ...")
    parser.add_argument("--metric", help="the final evaluation metric to report")
    parser.add_argument("--no-plots", action="store_true", help="write no curves.png")
    args = parser.parse_args(argv)
    try:
        merged = merge_shards(args.folders)
    except ValueError as error:
        print(f"{parser.prog}: {error}", file=sys.stderr)
        return 2
    metrics = None if args.metric is None else [args.metric]
    print(merged.table(metrics), merged.summary(args.metric), sep="\n\n")
    if args.output_dir is not None:
        for path in merged.write(args.output_dir, plots=not args.no_plots):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
