"""``nnx-ppo-suite`` (also ``nnx-ppo-bench --suite control``): the continuous-control suite.

Example (3 seeds of CartpoleBalance, ours vs brax PPO 0.14.2, MLP)::

    uv run nnx-ppo-suite --tasks CartpoleBalance --networks mlp_small --seeds 0,1,2 \\
        --steps 307200 --output-dir apps/benchmarks/results/suite/cpu

Partial observability (the cart and pole velocities removed; the MLP with and without
the last 4 observations stacked, the quickstart's LSTM and graph, ours and brax)::

    uv run nnx-ppo-suite --tasks CartpoleBalance/masked,CartpoleBalance/masked-history4 \\
        --networks mlp_default,lstm_quickstart,graph_quickstart --seeds 0,1,2,3,4

The stateful families with staggered training episodes, as the quickstart trains them
(ours only: brax PPO starts every episode at step 0)::

    uv run nnx-ppo-suite --tasks CartpoleBalance/masked --implementations ours \\
        --networks lstm_quickstart,graph_quickstart --seeds 0,1,2,3,4 --stagger

``nnx-ppo-bench --suite gpu`` is the GPU benchmark (:mod:`.gpu`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from nnx_ppo_apps_common.cli import HelpFormatter, fail, positive_int

from nnx_ppo_benchmarks.common import comma_names, parse_seeds
from nnx_ppo_benchmarks.settings import NETWORKS, EvalSettings
from nnx_ppo_benchmarks.suite.report import write_report
from nnx_ppo_benchmarks.suite.run import (
    SUITE_IMPLEMENTATIONS,
    SuiteOptions,
    collect,
    plan_suite,
    refusals,
    run_plan,
)
from nnx_ppo_benchmarks.suite.tasks import CONTROL_TASKS
from nnx_ppo_benchmarks.venvs import COMPILE_CACHE_VAR, DEFAULT_JAX

__all__ = ["build_parser", "main"]

PROG = "nnx-ppo-suite"


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    d = SuiteOptions()
    p = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Continuous-control suite: our train_ppo and brax PPO 0.14.2 on MuJoCo Playground "
            "dm_control and brax tasks with Playground's per-task brax-PPO settings, the same "
            "network and budget, one child process per run."
        ),
        formatter_class=HelpFormatter,
    )
    p.add_argument(
        "--tasks",
        type=comma_names(list(CONTROL_TASKS)),
        default=d.tasks,
        help="comma-separated tasks; TASK/masked removes the velocities from the "
        "observation, TASK/masked-history4 also stacks the last 4 observations, for "
        "CartpoleBalance, PendulumSwingup, CheetahRun and WalkerWalk (default: every "
        "task, full observation)",
    )
    p.add_argument(
        "--networks",
        type=comma_names(list(NETWORKS)),
        default=d.networks,
        help="network families; brax runs the MLPs only (the others are listed in the "
        "report as not run for brax, with the reason)",
    )
    p.add_argument(
        "--implementations",
        type=comma_names(list(SUITE_IMPLEMENTATIONS)),
        default=d.implementations,
    )
    p.add_argument("--seeds", type=parse_seeds, default=d.seeds, help="comma-separated seeds")
    p.add_argument("--steps", type=positive_int, default=d.total_steps, help="env steps per run")
    p.add_argument("--chunks", type=int, default=d.n_chunks, help="progress reports per run")
    p.add_argument("--n-envs", type=positive_int, default=d.n_envs)
    p.add_argument("--n-minibatches", type=positive_int, default=d.n_minibatches)
    p.add_argument("--eval-envs", type=positive_int, default=d.eval.n_envs)
    p.add_argument("--eval-length", type=positive_int, default=d.eval.episode_length)
    p.add_argument("--environments", choices=("isolated", "current"), default=d.environments)
    p.add_argument("--jax", default=DEFAULT_JAX, help="JAX version of the isolated venvs")
    p.add_argument("--timeout", type=float, default=d.timeout_s, help="seconds per run")
    p.add_argument("--output-dir", type=Path, default=d.output_dir)
    p.add_argument("--note", default=None, help="a remark printed above the table")
    p.add_argument(
        "--stagger",
        action="store_true",
        help="start each training episode at a random step of its first half, as the "
        "quickstart does (brax PPO starts every one at step 0, so ours only); "
        "evaluation still plays whole episodes",
    )
    p.add_argument(
        "--compile-cache",
        type=Path,
        default=None,
        help="share JAX's persistent compilation cache in this folder between the runs "
        "(for learning comparisons on an accelerator, where compiling dominates); a "
        "run's compile_s is then a cache load when an earlier run compiled the same "
        "program (default: off, every run compiles)",
    )
    p.add_argument(
        "--report-only",
        action="store_true",
        help="write the report from the runs already in OUTPUT_DIR (runs not there are "
        "listed as not run); trains nothing",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; 0 if every run succeeded, 1 if one failed, 2 on bad input."""
    args = build_parser().parse_args(argv)
    try:
        options = SuiteOptions(
            tasks=args.tasks,
            networks=args.networks,
            implementations=args.implementations,
            seeds=args.seeds,
            total_steps=args.steps,
            n_chunks=args.chunks,
            n_envs=args.n_envs,
            n_minibatches=args.n_minibatches,
            eval=EvalSettings(n_envs=args.eval_envs, episode_length=args.eval_length),
            environments=args.environments,
            jax_version=args.jax,
            timeout_s=args.timeout,
            output_dir=args.output_dir,
            stagger=args.stagger,
        )
        specs = plan_suite(options)
    except ValueError as e:
        return fail(PROG, str(e))
    refused = refusals(options)
    for cell in refused:
        print(
            f"{PROG}: {cell['env_name']} {cell['network']} not run for "
            f"{cell['implementation']}: {cell['error']}",
            file=sys.stderr,
        )
    command = [PROG, *(sys.argv[1:] if argv is None else argv)]
    if args.compile_cache is not None:
        os.environ[COMPILE_CACHE_VAR] = str(args.compile_cache.resolve())
    if args.report_only:
        results = collect(specs, options.output_dir, command=command)
    else:
        results = run_plan(
            specs,
            output_dir=options.output_dir,
            environments=options.environments,
            jax_version=options.jax_version,
            timeout_s=options.timeout_s,
            command=command,
        )
    results["runs"] += refused
    results["meta"]["settings"] = {
        s.env_name: {"ppo": vars(s.ppo), "total_steps": s.total_steps} for s in specs
    }
    preamble = [f"Command: `{' '.join(command)}`."]
    if args.note:
        preamble.append(args.note)
    if args.compile_cache is not None:
        preamble.append(
            "The runs shared a compilation cache (`--compile-cache`): compile times after "
            "the first run of a program are cache loads."
        )
    paths = write_report(
        results, options.output_dir, title="Continuous-control suite", preamble=preamble
    )
    print(paths["markdown"].read_text())
    failed = [r for r in results["runs"] if r.get("status") not in ("ok", "unsupported")]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
