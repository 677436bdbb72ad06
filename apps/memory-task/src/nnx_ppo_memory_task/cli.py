"""``nnx-ppo-memory-task``: train memoryless and stateful networks on a memory task.

Trains each network of `NETWORKS` with PPO on
``EpisodeWrapper(MemoryTask(delay), episode_length)`` and writes to ``--output-dir``:
``results.json`` (every evaluation; rewritten after each run, so an interrupted
comparison keeps the runs that finished), ``results.md`` (the table of final returns)
and ``learning_curves.png`` (all networks on one figure).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from nnx_ppo_apps_common.cli import arguments_record, fail, non_negative_int, positive_int
from nnx_ppo_apps_common.compiles import CompileLog
from nnx_ppo_apps_common.results import write_json
from nnx_ppo_apps_common.runs import add_run_arguments, provenance, use_compilation_cache
from nnx_ppo_apps_common.training import TrainingDefaults, add_training_arguments, train_config

__all__ = ["main", "parse_args"]

PROG = "nnx-ppo-memory-task"

TRAINING = TrainingDefaults(
    steps=50_000,
    n_envs=64,
    n_minibatches=4,
    learning_rate=3e-3,
    discount=0.5,
    discount_help="rewards follow their action immediately: a short horizon",
    episode_length=20,
    eval_every=5_000,
    eval_envs=64,
)
"""The app's PPO settings (the command line's defaults)."""


def analysis_train_config(total_steps: int, rollout_length: int, seed: int) -> Any:
    """The `TrainConfig` the analysis scripts (``activations``, ``fixed_points``) train
    with: the app's `TRAINING` settings, no evaluation during training."""
    from nnx_ppo.algorithms import EvalConfig, PPOConfig, TrainConfig

    return TrainConfig(
        ppo=PPOConfig(
            n_envs=TRAINING.n_envs,
            rollout_length=rollout_length,
            n_minibatches=TRAINING.n_minibatches,
            learning_rate=TRAINING.learning_rate,
            discounting_factor=TRAINING.discount,
            total_steps=total_steps,
        ),
        eval=EvalConfig(enabled=False),
        seed=seed,
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line (``--help`` lists every option with its default)."""
    from nnx_ppo_memory_task.networks import NETWORKS

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Train an MLP, an LSTM, a delay line and a population graph on "
        "MemoryTask (reproduce the cue of `delay` steps ago) and plot their learning "
        "curves on one figure.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--networks",
        nargs="+",
        default=list(NETWORKS),
        choices=NETWORKS,
        metavar="NAME",
        help=f"networks to train, any of: {', '.join(NETWORKS)}",
    )
    parser.add_argument(
        "--seeds",
        nargs="+",
        type=non_negative_int,
        default=[0],
        help="one run per network and seed",
    )
    parser.add_argument(
        "--delay",
        type=positive_int,
        default=2,
        help="steps between a cue and the action that reproduces it",
    )
    parser.add_argument("--cue-size", type=positive_int, default=1)
    parser.add_argument(
        "--hidden", type=positive_int, default=32, help="hidden width of every network"
    )
    add_training_arguments(parser, TRAINING)
    parser.add_argument("--output-dir", type=Path, default=Path("outputs/memory-task"))
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="hide the progress bars (and the progress lines printed off a terminal)",
    )
    add_run_arguments(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    args = parse_args(argv)
    # Heavy imports after argument parsing, so `--help` is instant.
    from nnx_ppo.algorithms import train_ppo
    from nnx_ppo.envs import MemoryTask
    from nnx_ppo.wrappers import EpisodeWrapper
    from nnx_ppo_memory_task.networks import make_network
    from nnx_ppo_memory_task.plotting import plot_learning_curves, results_table

    try:
        if args.delay >= args.episode_length:
            raise ValueError(
                f"--delay {args.delay} must be smaller than --episode-length "
                f"{args.episode_length}, or no cue is ever scored"
            )
        configs = {seed: train_config(args, seed=seed) for seed in args.seeds}
        env = EpisodeWrapper(MemoryTask(args.delay, args.cue_size), args.episode_length)
    except (ValueError, TypeError) as error:
        return fail(PROG, str(error))
    cache = use_compilation_cache(not args.no_compile_cache)
    compiles = CompileLog().start()

    out: Path = args.output_dir
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "settings": arguments_record(args),
        "provenance": provenance(),
        "optimum": float(args.episode_length - args.delay),
        "runs": {},
    }
    for name in args.networks:
        run: dict[str, Any] = {
            "seeds": [],  # those finished: results.json is rewritten after every run
            "steps": [],
            "returns": [],
            "wall_time_s": [],
        }
        for seed in args.seeds:
            print(f"Training {name} (seed {seed}) for {args.steps:,} steps")
            network = make_network(
                name, cue_size=args.cue_size, delay=args.delay, hidden=args.hidden, seed=seed
            )
            start = time.perf_counter()
            # None: a bar on a terminal, plain progress lines in a batch job's log.
            progress = False if args.no_progress else None
            result = train_ppo(env, network, configs[seed], progress=progress)
            run["seeds"].append(seed)
            run["wall_time_s"].append(round(time.perf_counter() - start, 1))
            run["steps"] = [step for step, _ in result.eval_history]
            run["returns"].append(
                [round(m["eval/episode_reward/mean"], 3) for _, m in result.eval_history]
            )
            print(
                f"  final eval return {run['returns'][-1][-1]:.2f} (optimum {results['optimum']:g})"
            )
            # After every run, so an interrupted or failing comparison keeps the runs
            # that finished.
            results["runs"][name] = run
            write_json(out / "results.json", results)
    print(compiles.stop().note(cache))
    table = results_table(results)
    (out / "results.md").write_text(table + "\n")
    plot_learning_curves(results, out / "learning_curves.png")
    print(table)
    print(f"Results in {out}/ (results.json, learning_curves.png, results.md)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
