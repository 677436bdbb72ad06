"""The command line shared by the suite's child processes."""

from __future__ import annotations

import argparse
import json
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nnx_ppo_benchmarks.children._common import package_versions

__all__ = ["main", "run_cell"]

SeedFn = Callable[[dict[str, Any], int], dict[str, Any]]


def run_cell(cell: dict[str, Any], out: Path, seed_fn: SeedFn) -> int:
    """Run every seed of ``cell`` with ``seed_fn(cell, seed)`` and write the cell's JSON
    to ``out`` after each seed, so that a crash keeps the finished seeds.

    Returns:
        The exit status: 0, or 1 if a seed failed (its traceback is in the JSON).
    """
    record: dict[str, Any] = {**cell, "status": "ok", "runs": []}
    versions = ("jax", "flax", "nnx-modules", "nnx-graph", "nnx-ppo-train", "nnx-ppo", "gymnax")
    for seed in cell["seeds"]:
        try:
            record["runs"].append(seed_fn(cell, seed))
            print(f"seed {seed}: final return {record['runs'][-1]['final']:.1f}", flush=True)
        except Exception as e:
            record.update(status="failed", error=f"seed {seed}: {type(e).__name__}: {e}")
            record["traceback"] = traceback.format_exc()
            traceback.print_exc()
        record["versions"] = package_versions(*versions)
        out.write_text(json.dumps(record, indent=1))
        if record["status"] != "ok":
            return 1
    return 0


def main(seed_fn: SeedFn) -> int:
    """``--cell JSON --out PATH``: run the cell (see `run_cell`)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--cell", required=True, help="the cell as JSON (see cli.py)")
    parser.add_argument("--out", required=True, help="where to write the cell's JSON")
    args = parser.parse_args()
    return run_cell(json.loads(args.cell), Path(args.out), seed_fn)
