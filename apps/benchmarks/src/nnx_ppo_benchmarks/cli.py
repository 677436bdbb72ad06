"""``nnx-ppo-bench``: run the side-by-side benchmark and write JSON, markdown and a chart.

Example (the table of ``docs/project/benchmarks.md``)::

    uv run nnx-ppo-bench --output-dir apps/benchmarks/results/bench/cartpole

Quick check of our implementation only, in the current environment::

    uv run nnx-ppo-bench --implementations ours --networks mlp_small \\
        --environments current --steps 20480 --chunks 2 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from nnx_ppo_apps_common.cli import HelpFormatter, fail, positive_int

from nnx_ppo_benchmarks.common import comma_names
from nnx_ppo_benchmarks.report import write_results
from nnx_ppo_benchmarks.runner import BenchOptions, run_benchmark
from nnx_ppo_benchmarks.settings import (
    IMPLEMENTATIONS,
    NETWORKS,
    SPEED_NETWORKS,
    EvalSettings,
    PPOSettings,
)
from nnx_ppo_benchmarks.venvs import DEFAULT_JAX

__all__ = ["build_parser", "main"]

PROG = "nnx-ppo-bench"


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser (``--help`` lists every option with its default)."""
    defaults, ppo, ev = BenchOptions(), PPOSettings(), EvalSettings()
    p = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Benchmark our train_ppo against brax PPO 0.14.2 and nnx-ppo 0.3.0 on a MuJoCo "
            "Playground environment with identical hyperparameters, each implementation in "
            "its own process and virtual environment on the same JAX version."
        ),
        formatter_class=HelpFormatter,
    )
    p.add_argument(
        "--implementations",
        type=comma_names(list(IMPLEMENTATIONS)),
        default=defaults.implementations,
        help=f"comma-separated subset of {', '.join(IMPLEMENTATIONS)}",
    )
    p.add_argument(
        "--networks",
        type=comma_names(list(NETWORKS)),
        default=SPEED_NETWORKS,
        help=f"comma-separated subset of {', '.join(NETWORKS)}",
    )
    p.add_argument(
        "--repeats",
        type=positive_int,
        default=defaults.repeats,
        help="cycles over the implementations per network; repeat r trains with seed + r",
    )
    p.add_argument(
        "--steps",
        type=positive_int,
        default=defaults.total_steps,
        help="training budget in env steps (rounded up to whole chunks of iterations)",
    )
    p.add_argument(
        "--chunks",
        type=int,
        default=defaults.n_chunks,
        help="progress reports per run (>= 2: the steady-state rate leaves out the first, "
        "which includes compilation)",
    )
    p.add_argument(
        "--seed", type=int, default=defaults.seed, help="seed of repeat 0 (every implementation)"
    )
    p.add_argument(
        "--env",
        default=defaults.env_name,
        help="MuJoCo Playground environment, or brax/<name> (backend generalized)",
    )
    p.add_argument(
        "--n-envs", type=positive_int, default=ppo.n_envs, help="parallel training environments"
    )
    p.add_argument(
        "--rollout-length",
        type=positive_int,
        default=ppo.rollout_length,
        help="environment steps per environment between updates",
    )
    p.add_argument(
        "--n-minibatches",
        type=positive_int,
        default=ppo.n_minibatches,
        help="minibatches each rollout is split into per epoch",
    )
    p.add_argument(
        "--n-epochs", type=positive_int, default=ppo.n_epochs, help="passes over each rollout"
    )
    p.add_argument(
        "--eval-envs",
        type=positive_int,
        default=ev.n_envs,
        help="episodes of the final deterministic evaluation",
    )
    p.add_argument(
        "--eval-length",
        type=positive_int,
        default=ev.episode_length,
        help="steps per evaluation episode",
    )
    p.add_argument(
        "--environments",
        choices=("isolated", "current"),
        default=defaults.environments,
        help="one uv venv per implementation (same JAX), or this interpreter for all",
    )
    p.add_argument("--jax", default=DEFAULT_JAX, help="JAX version of the isolated venvs")
    p.add_argument(
        "--iterations-per-call",
        type=positive_int,
        default=None,
        help="ours only: PPOConfig.iterations_per_call (default: the trainer's)",
    )
    p.add_argument("--timeout", type=float, default=defaults.timeout_s, help="seconds per run")
    p.add_argument(
        "--output-dir",
        type=Path,
        default=defaults.output_dir,
        help="folder for results.json, results.md, results.png, per-run JSON and logs",
    )
    p.add_argument(
        "--note",
        default=None,
        help="a remark printed above the table, e.g. 'preliminary: shared machine' (default: none)",
    )
    p.add_argument(
        "--report-only",
        action="store_true",
        help="re-render results.md and results.png from OUTPUT_DIR/results.json",
    )
    p.add_argument(
        "--suite",
        choices=("control", "gpu"),
        default=None,
        help="must be the first argument: run the continuous-control suite (nnx-ppo-suite) "
        "or the GPU benchmark instead, with the remaining arguments (--suite gpu --help) "
        "(default: neither, this benchmark)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns 0 if every run succeeded, 1 if one failed, 2 on bad input.

    ``--suite control`` / ``--suite gpu`` (first) hands the remaining arguments to the
    control suite (`nnx_ppo_benchmarks.suite.cli`) or the GPU benchmark
    (`nnx_ppo_benchmarks.suite.gpu`).
    """
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["--suite"] or (args_list and args_list[0].startswith("--suite=")):
        head = args_list.pop(0)
        name = head.split("=", 1)[1] if "=" in head else (args_list.pop(0) if args_list else "")
        if name == "gpu":
            from nnx_ppo_benchmarks.suite import gpu

            return gpu.main(args_list)
        if name == "control":
            from nnx_ppo_benchmarks.suite import cli as suite_cli

            return suite_cli.main(args_list)
        return fail(PROG, f"--suite {name!r}: choose 'control' or 'gpu'")
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.suite is not None:
        return fail(PROG, f"--suite {args.suite} must be the first argument")
    if args.report_only:
        path = args.output_dir / "results.json"
        if not path.is_file():
            return fail(PROG, f"{path} does not exist")
        results = json.loads(path.read_text())
        if args.note is not None:
            results["meta"]["note"] = args.note
        paths = write_results(results, args.output_dir)
        print(f"wrote {', '.join(str(p) for p in paths.values())}")
        return 0
    try:
        options = BenchOptions(
            implementations=args.implementations,
            networks=args.networks,
            repeats=args.repeats,
            total_steps=args.steps,
            n_chunks=args.chunks,
            seed=args.seed,
            env_name=args.env,
            ppo=PPOSettings(
                n_envs=args.n_envs,
                rollout_length=args.rollout_length,
                n_minibatches=args.n_minibatches,
                n_epochs=args.n_epochs,
            ),
            eval=EvalSettings(n_envs=args.eval_envs, episode_length=args.eval_length),
            environments=args.environments,
            jax_version=args.jax,
            iterations_per_call=args.iterations_per_call,
            timeout_s=args.timeout,
            output_dir=args.output_dir,
        )
    except ValueError as e:
        return fail(PROG, str(e))
    command = [PROG, *(sys.argv[1:] if argv is None else argv)]
    results = run_benchmark(options, command=command)
    results["meta"]["note"] = args.note
    paths = write_results(results, options.output_dir)
    print(Path(paths["markdown"]).read_text())
    print(f"wrote {', '.join(str(p) for p in paths.values())}")
    failed = [r for r in results["runs"] if r.get("status") != "ok"]
    for r in failed:
        print(
            f"FAILED {r['network']} {r['implementation']} seed {r['seed']}: {r.get('error')} "
            f"(log: {r.get('log')})",
            file=sys.stderr,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
