"""``nnx-ppo-published``: our recurrent PPO against published memory-task numbers.

Examples::

    # every benchmark with its families, 5 seeds each (the results page's command;
    # the vector tasks' cells are in published/default, the pixel T-Maze's below)
    uv run nnx-ppo-published --output-dir apps/benchmarks/results/published/default

    # memory from pixels: the pixel T-Maze, conv+LSTM and conv+MLP, 5 seeds each
    uv run nnx-ppo-published --benchmarks pixel_tmaze \
        --output-dir apps/benchmarks/results/published/pixel-tmaze

    # one cell, quickly
    uv run nnx-ppo-published --benchmarks cartpole_novel --families lstm --seeds 0 \\
        --steps 2560 --output-dir /tmp/published

Each (benchmark, family) cell trains all its seeds as one `train_many` program in this
interpreter and writes ``cells/<benchmark>__<family>.json``; a cell already finished
with the same seeds and budget is kept (``--rerun`` trains it again), so an interrupted
run continues where it stopped. ``report.md`` and ``curves.png`` cover every cell in
the output directory. The benchmarks, their published figures and the translation of
the published hyperparameters are in :mod:`nnx_ppo_benchmarks.published.tasks`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nnx_ppo_benchmarks.common import comma_names, git_state, load_average, parse_seeds
from nnx_ppo_benchmarks.published.report import write_report
from nnx_ppo_benchmarks.published.tasks import BENCHMARKS, CONV_FAMILIES, FAMILIES

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    p = argparse.ArgumentParser(
        prog="nnx-ppo-published",
        description="Memory benchmarks with published numbers (rl-baselines3-zoo's "
        "recurrent PPO on velocity-free classic control, POBAX's T-Maze, and the T-Maze "
        "as an image): our LSTM, GRU and MLP (conv+LSTM and conv+MLP on the image), "
        "several seeds in one train_many each, median and 95% bootstrap CI.",
    )
    p.add_argument("--benchmarks", type=comma_names(list(BENCHMARKS)), default=tuple(BENCHMARKS))
    p.add_argument(
        "--families",
        type=comma_names([*FAMILIES, *CONV_FAMILIES]),
        default=None,
        help="default: each benchmark's own (lstm, gru, mlp; conv_lstm, conv_mlp for an "
        "image); a family that is not a benchmark's is skipped there",
    )
    p.add_argument("--seeds", type=parse_seeds, default=(0, 1, 2, 3, 4))
    p.add_argument("--steps", type=int, default=None, help="budget override (all benchmarks)")
    p.add_argument(
        "--resample-every",
        type=int,
        default=None,
        help="A/B: hold the Gaussian samplers' noise this many steps instead of the "
        "translation's (1: white noise; continuous-action benchmarks only)",
    )
    p.add_argument("--rerun", action="store_true", help="train finished cells again")
    p.add_argument("--output-dir", type=Path, default=Path("outputs/published"))
    p.add_argument("--report-only", action="store_true", help="re-render from the cells")
    return p


def _cell_path(out: Path, bench: str, family: str) -> Path:
    return out / "cells" / f"{bench}__{family}.json"


def _finished(path: Path, seeds: Sequence[int], budget: int, resample_every: int) -> bool:
    if not path.exists():
        return False
    cell = json.loads(path.read_text())
    return (cell["seeds"], cell["budget"], cell.get("resample_every", 1)) == (
        list(seeds),
        budget,
        resample_every,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the requested cells, then write the report. Returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.steps is not None and args.steps < 1:
        raise SystemExit(f"--steps={args.steps}: give a positive number of env steps")
    if args.resample_every is not None and args.resample_every < 1:
        raise SystemExit(
            f"--resample-every={args.resample_every}: give a number of steps >= 1 "
            "(1 draws new noise every step)"
        )
    out: Path = args.output_dir
    (out / "cells").mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        from nnx_ppo_benchmarks.published.run import run_cell

        for name in args.benchmarks:
            bench = BENCHMARKS[name]
            if args.resample_every is not None and not bench.discrete:
                bench = dataclasses.replace(bench, resample_every=args.resample_every)
            budget = bench.total_steps if args.steps is None else args.steps
            for family in args.families or bench.families:
                if family not in bench.families:
                    print(f"{name} / {family}: not one of {name}'s families, skipped")
                    continue
                path = _cell_path(out, name, family)
                if not args.rerun and _finished(path, args.seeds, budget, bench.resample_every):
                    print(f"{name} / {family}: finished earlier, kept ({path})")
                    continue
                print(f"{name} / {family}: seeds {list(args.seeds)}, {budget} steps ...")
                meta: dict[str, Any] = {"load_before": load_average(), "git": git_state()}
                start = time.perf_counter()
                runs = run_cell(bench, family, args.seeds, total_steps=budget)
                cell = {
                    "benchmark": name,
                    "family": family,
                    "seeds": list(args.seeds),
                    "budget": budget,
                    "resample_every": bench.resample_every,
                    "runs": runs,
                    **meta,
                    "load_after": load_average(),
                    "wall_s": time.perf_counter() - start,
                }
                path.write_text(json.dumps(cell, indent=1) + "\n")
                finals = ", ".join(f"{r['final']:.2f}" for r in runs)
                print(f"  finals {finals} ({cell['wall_s']:.0f} s)")
    report = write_report(out)
    print(f"report: {report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
