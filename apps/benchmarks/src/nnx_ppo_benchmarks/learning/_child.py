"""The command line shared by the suite's child processes."""

from __future__ import annotations

import argparse
import json
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nnx_ppo_benchmarks.children._common import package_versions

__all__ = ["main", "run_cell"]

SeedFn = Callable[[dict[str, Any], int], dict[str, Any]]
"""``seed_fn(cell, seed) -> record``: trains and evaluates one seed."""
SweepFn = Callable[[dict[str, Any], Sequence[int]], list[dict[str, Any]]]
"""``sweep_fn(cell, seeds) -> [record per seed]``: trains the seeds together."""

_VERSIONS = ("jax", "flax", "nnx-modules", "nnx-graph", "nnx-ppo-train", "nnx-ppo", "gymnax")


def run_cell(
    cell: dict[str, Any],
    out: Path,
    seed_fn: SeedFn,
    sweep_fn: SweepFn | None = None,
) -> int:
    """Run every seed of ``cell`` and write the cell's JSON to ``out``.

    With ``sweep_fn`` all seeds train together in one call (one program) and the JSON
    is written once they are done; otherwise ``seed_fn(cell, seed)`` runs them one
    after another and the JSON is written after each seed, so that a crash keeps the
    finished seeds. Either way a failure is recorded with the seeds it stopped.

    Returns:
        The exit status: 0, or 1 if a seed failed (its traceback is in the JSON).
    """
    seeds = list(cell["seeds"])
    together = sweep_fn is not None
    record: dict[str, Any] = {**cell, "status": "ok", "runs": []}
    record["seed_mode"] = "sweep" if together else "one_at_a_time"
    groups = [seeds] if together else [[seed] for seed in seeds]
    for group in groups:
        try:
            runs = [seed_fn(cell, group[0])] if sweep_fn is None else sweep_fn(cell, group)
            if [r["seed"] for r in runs] != group:
                got = [r["seed"] for r in runs]
                raise RuntimeError(f"the child returned records for seeds {got}, not {group}")
            record["runs"].extend(runs)
            for run in runs:
                print(f"seed {run['seed']}: final return {run['final']:.1f}", flush=True)
        except Exception as e:
            which = f"seed {group[0]}" if len(group) == 1 else f"seeds {group} (one sweep)"
            record.update(status="failed", error=f"{which}: {type(e).__name__}: {e}")
            record["traceback"] = traceback.format_exc()
            traceback.print_exc()
        record["versions"] = package_versions(*_VERSIONS)
        out.write_text(json.dumps(record, indent=1))
        if record["status"] != "ok":
            return 1
    return 0


def main(seed_fn: SeedFn, sweep_fn: SweepFn | None = None) -> int:
    """``--cell JSON --out PATH [--one-at-a-time]``: run the cell (see `run_cell`); the
    seeds train together with ``sweep_fn`` where the child has one, unless
    ``--one-at-a-time``."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--cell", required=True, help="the cell as JSON (see cli.py)")
    parser.add_argument("--out", required=True, help="where to write the cell's JSON")
    parser.add_argument(
        "--one-at-a-time", action="store_true", help="train the seeds one after another"
    )
    args = parser.parse_args()
    together = None if args.one_at_a_time else sweep_fn
    return run_cell(json.loads(args.cell), Path(args.out), seed_fn, together)
