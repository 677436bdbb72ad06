"""``nnx-ppo-learning``: the learning-quality suite (one command).

Examples::

    # the whole suite (tasks x families x implementations, 5 seeds each)
    uv run nnx-ppo-learning --output-dir outputs/learning

    # one cell, quickly, in this interpreter (ours only)
    uv run nnx-ppo-learning --tasks memory_d2 --families lstm --implementations ours \\
        --seeds 0 --steps 20480 --environments current --output-dir /tmp/lq

Each (task, family, implementation) cell runs all its seeds in one child process in
that implementation's virtual environment (:mod:`nnx_ppo_benchmarks.venvs`, the same
JAX everywhere) and writes ``cells/<task>__<family>__<implementation>.json``. Ours
trains a cell's seeds together, as one ``train_many`` program (the runs vmapped: one
compilation, a fraction of the sequential wall time); ``--one-at-a-time`` trains them
one after another with ``train_ppo`` instead, the reference path, which run ``i`` of
the sweep equals to float32 rounding. nnx-ppo 0.3.0 always trains one seed after
another. Seeds that an earlier run of the same cell (same budget) already finished are
kept and only the others are run (``--rerun`` runs them all again; ours trains the
remaining seeds as one sweep), so an interrupted suite continues where it stopped, and
the report covers every cell in the output directory, so a suite can also be run in
parts. JAX's persistent compilation cache is on (compile time is not measured here).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nnx_ppo_apps_common.cli import HelpFormatter

from nnx_ppo_benchmarks.common import comma_names, git_state, load_average, parse_seeds
from nnx_ppo_benchmarks.learning.families import FAMILIES
from nnx_ppo_benchmarks.learning.report import write_report
from nnx_ppo_benchmarks.learning.tasks import LR_SCHEDULES, TASKS, lr_schedule, staggered
from nnx_ppo_benchmarks.settings import PPOSettings, chunk_plan
from nnx_ppo_benchmarks.venvs import (
    DEFAULT_JAX,
    cache_root,
    child_env_vars,
    current_environment,
    ensure_environments,
)

__all__ = ["Cell", "build_parser", "main", "plan_cells", "run_cell"]

IMPLEMENTATIONS = ("ours", "nnx-ppo-0.3.0")
_CHILD = {
    "ours": "nnx_ppo_benchmarks.learning.child_ours",
    "nnx-ppo-0.3.0": "nnx_ppo_benchmarks.learning.child_nnx_ppo_030",
}
_SRC_DIR = Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class Cell:
    """One (task, family, implementation) with its seeds and budget."""

    task: str
    family: str
    implementation: str
    seeds: tuple[int, ...]
    total_steps: int
    eval_envs: int = 32
    final_eval_envs: int = 128
    stagger: bool = True
    """Train every implementation on episodes as nnx-ppo 0.3.0 trains: a fresh reset
    state per episode (ours: ``reset_mode="fresh"``) that starts at a random step in
    ``[0, episode_length / 2)`` (ours: ``EpisodeWrapper(stagger=...)``); off: every
    episode starts at step 0 (ours then caches its reset states, its default)."""
    lr_schedule: str = "constant"
    """ours: the shared learning rate throughout (``"constant"``), or decayed linearly
    to 0 at the run's last update (``"linear"``,
    `nnx_ppo.algorithms.core.schedules.linear_decay`)."""

    @property
    def name(self) -> str:
        """``<task>__<family>__<implementation>``."""
        return f"{self.task}__{self.family}__{self.implementation}"

    def to_json(self) -> str:
        """The child's ``--cell`` argument (with the shared hyperparameters)."""
        data = dataclasses.asdict(self)
        data["ppo"] = dataclasses.asdict(PPOSettings())
        return json.dumps(data)


def runs(task: str, family: str, implementation: str) -> bool:
    """Whether ``implementation`` can run ``family`` on ``task``."""
    if implementation not in FAMILIES[family].implementations:
        return False
    ours_only = TASKS[task].discrete or TASKS[task].action_lag is not None
    return not (ours_only and implementation != "ours")


def plan_cells(
    tasks: Sequence[str],
    families: Sequence[str],
    implementations: Sequence[str],
    seeds: Sequence[int],
    steps: int | None = None,
    stagger: bool = True,
    lr_schedule: str = "constant",
) -> list[Cell]:
    """The cells to run, task by task, implementations interleaved per family.

    Example:
        >>> [c.name for c in plan_cells(["memory_chain"], ["lstm", "gru"],
        ...                             ["ours", "nnx-ppo-0.3.0"], [0])]
        ['memory_chain__lstm__ours', 'memory_chain__gru__ours']
    """
    per_iteration = PPOSettings().steps_per_iteration
    cells = []
    for task in tasks:
        t = TASKS[task]
        _, total = chunk_plan(steps or t.total_steps, t.n_evals, per_iteration)
        for family in families:
            for impl in implementations:
                schedulable = lr_schedule == "constant" or impl == "ours"
                if runs(task, family, impl) and schedulable:
                    cell = Cell(task, family, impl, tuple(seeds), total, stagger=stagger)
                    cells.append(dataclasses.replace(cell, lr_schedule=lr_schedule))
    return cells


def _finished_runs(cell: Cell, path: Path) -> list[dict[str, Any]]:
    """The runs already in ``path`` that this cell can keep: those of an earlier run of
    the same cell (budget, episode starts, learning-rate schedule and seed order) whose
    seeds are a prefix of ``cell.seeds``."""
    if not path.exists():
        return []
    record = json.loads(path.read_text())
    runs = record.get("runs", [])
    seeds = [r["seed"] for r in runs]
    same = (
        record.get("total_steps") == cell.total_steps
        and staggered(record) == cell.stagger
        and lr_schedule(record) == cell.lr_schedule
    )
    if not same or seeds != list(cell.seeds[: len(seeds)]):
        return []
    return list(runs)


def run_cell(
    cell: Cell,
    python: Path,
    output_dir: Path,
    rerun: bool = False,
    one_at_a_time: bool = False,
) -> dict[str, Any]:
    """Run one cell in a child process, keeping the seeds an earlier (interrupted) run
    of the same cell finished unless ``rerun``; never raises for a failed child.

    The child trains the remaining seeds together (ours: one ``train_many`` program)
    unless ``one_at_a_time``."""
    path = output_dir / "cells" / f"{cell.name}.json"
    log = output_dir / "logs" / f"{cell.name}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    kept = [] if rerun else _finished_runs(cell, path)
    if len(kept) == len(cell.seeds):
        return json.loads(path.read_text())
    todo = dataclasses.replace(cell, seeds=cell.seeds[len(kept) :])
    part = path.with_suffix(".part.json")
    part.unlink(missing_ok=True)
    env = child_env_vars(_SRC_DIR)
    env.pop("JAX_ENABLE_COMPILATION_CACHE")
    env["JAX_COMPILATION_CACHE_DIR"] = str(cache_root() / "jax-cache")
    env["JAX_PLATFORMS"] = "cpu"
    command = [str(python), "-m", _CHILD[cell.implementation], "--cell", todo.to_json()]
    command += ["--out", str(part), *(["--one-at-a-time"] if one_at_a_time else [])]
    start = time.perf_counter()
    with log.open("a" if kept else "w") as stream:
        code = subprocess.run(command, stdout=stream, stderr=subprocess.STDOUT, env=env).returncode
    if part.exists():
        record = json.loads(part.read_text())
        part.unlink()
    else:
        record = {"status": "failed", "runs": []}
        record["error"] = f"exit status {code}, no result (see {log})"
    record = {**record, **json.loads(cell.to_json()), "runs": [*kept, *record["runs"]]}
    record["process_wall_s"] = time.perf_counter() - start
    path.write_text(json.dumps(record, indent=1))
    return record


def _order(record: dict[str, Any]) -> tuple[int, int, int]:
    return (
        list(TASKS).index(record["task"]),
        list(FAMILIES).index(record["family"]),
        IMPLEMENTATIONS.index(record["implementation"]),
    )


def _with_earlier_cells(records: list[dict[str, Any]], out: Path) -> list[dict[str, Any]]:
    """This run's cells plus the other cells already in ``out/cells`` (a suite run in
    parts reports as a whole), in task, family and implementation order."""
    names = {Cell(r["task"], r["family"], r["implementation"], (), 0).name for r in records}
    earlier = []
    for path in sorted((out / "cells").glob("*.json")):
        if path.stem not in names:
            record = json.loads(path.read_text())
            if record.get("task") in TASKS and record.get("family") in FAMILIES:
                earlier.append(record)
    return sorted([*records, *earlier], key=_order)


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser (``--help`` lists every option with its default)."""
    p = argparse.ArgumentParser(
        prog="nnx-ppo-learning",
        description="Learning-quality suite: network families on partially observable "
        "tasks, ours vs nnx-ppo 0.3.0, several seeds, median and 95% bootstrap CI.",
        formatter_class=HelpFormatter,
    )
    p.add_argument(
        "--tasks",
        type=comma_names(list(TASKS)),
        default=tuple(TASKS),
        help="comma-separated tasks to run",
    )
    p.add_argument(
        "--families",
        type=comma_names(list(FAMILIES)),
        default=tuple(FAMILIES),
        help="comma-separated network families to train on each task",
    )
    p.add_argument(
        "--implementations",
        type=comma_names(IMPLEMENTATIONS),
        default=IMPLEMENTATIONS,
        help="comma-separated PPO implementations to train each cell with",
    )
    p.add_argument(
        "--seeds",
        type=parse_seeds,
        default=(100, 101, 102, 103, 104),
        help="comma-separated distinct seeds, one run each per cell",
    )
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="training budget of every task in env steps (default: each task's own)",
    )
    p.add_argument(
        "--stagger",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="train on episodes that start at a random step in [0, episode_length / 2), "
        "from a fresh reset state each, for every implementation (nnx-ppo 0.3.0's "
        "treatment); --no-stagger: every episode starts at step 0",
    )
    p.add_argument(
        "--lr-schedule",
        choices=LR_SCHEDULES,
        default="constant",
        help="ours: the shared learning rate throughout, or decayed linearly to 0 at the "
        "last update (nnx-ppo 0.3.0 has no schedule: its cells are not run with linear)",
    )
    p.add_argument(
        "--environments",
        choices=("isolated", "current"),
        default="isolated",
        help="one uv venv per implementation (same JAX), or this interpreter for all",
    )
    p.add_argument("--jax", default=DEFAULT_JAX, help="JAX version of the isolated venvs")
    p.add_argument("--rerun", action="store_true", help="run finished cells again")
    p.add_argument(
        "--one-at-a-time",
        action="store_true",
        help="ours: train a cell's seeds one after another with train_ppo, not as one "
        "train_many program",
    )
    p.add_argument(
        "--output-dir",
        type=Path,
        default=Path("outputs/learning"),
        help="folder for cells/, results.json, results.md and the figures",
    )
    p.add_argument(
        "--report-only",
        action="store_true",
        help="re-render results.md and the figures from OUTPUT_DIR/results.json",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the suite; write ``results.json``, ``results.md`` and the PNGs."""
    args = build_parser().parse_args(argv)
    if args.steps is not None and args.steps < 1:
        raise SystemExit(f"nnx-ppo-learning: --steps={args.steps} must be >= 1")
    out: Path = args.output_dir
    out.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        print(write_report(json.loads((out / "results.json").read_text()), out))
        return 0
    cells = plan_cells(
        args.tasks,
        args.families,
        args.implementations,
        args.seeds,
        args.steps,
        args.stagger,
        args.lr_schedule,
    )
    if args.environments == "current":
        pythons = dict.fromkeys(IMPLEMENTATIONS, current_environment().python)
    else:
        needed = {c.implementation for c in cells}
        pythons = {k: e.python for k, e in ensure_environments(needed, args.jax).items()}
    meta: dict[str, Any] = {
        "command": " ".join(["nnx-ppo-learning", *(argv if argv is not None else sys.argv[1:])]),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "load_before": load_average(),
        "cpu_count": os.cpu_count(),
        "git": git_state(),
        "jax_version": args.jax if args.environments == "isolated" else "current",
        "seeds": list(args.seeds),
        "one_at_a_time": args.one_at_a_time,
        "stagger": args.stagger,
        "lr_schedule": args.lr_schedule,
        "ppo": dataclasses.asdict(PPOSettings()),
    }
    records = []
    for index, cell in enumerate(cells, 1):
        python = pythons[cell.implementation]
        record = run_cell(cell, python, out, args.rerun, args.one_at_a_time)
        finals = ", ".join(f"{r['final']:.0f}" for r in record.get("runs", []))
        status = record["status"] if record["status"] == "ok" else record.get("error")
        print(f"[{index}/{len(cells)}] {cell.name}: {status}; finals {finals}", flush=True)
        records.append(record)
    meta["load_after"] = load_average()
    meta["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    results = {"meta": meta, "cells": _with_earlier_cells(records, out)}
    (out / "results.json").write_text(json.dumps(results, indent=1))
    print(write_report(results, out))
    return 0 if all(r["status"] == "ok" for r in records) else 1


if __name__ == "__main__":
    raise SystemExit(main())
