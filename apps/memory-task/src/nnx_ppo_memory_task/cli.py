"""``nnx-ppo-memory-task``: train memoryless and stateful networks on a memory task.

Trains each network of `NETWORKS` with PPO on
``EpisodeWrapper(MemoryTask(delay), episode_length)`` and writes to ``--output-dir``:
``results.json`` (every evaluation), ``learning_curves.png`` (all networks on one
figure) and ``results.md`` (the table of final returns).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["main", "parse_args"]


def _positive_int(text: str) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value} must be positive")
    return value


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must be >= 0")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line (``--help`` lists every option with its default)."""
    from nnx_ppo_memory_task.networks import NETWORKS

    parser = argparse.ArgumentParser(
        prog="nnx-ppo-memory-task",
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
        "--seeds", nargs="+", type=_seed, default=[0], help="one run per network and seed"
    )
    parser.add_argument(
        "--delay",
        type=_positive_int,
        default=2,
        help="steps between a cue and the action that reproduces it",
    )
    parser.add_argument("--cue-size", type=_positive_int, default=1)
    parser.add_argument("--episode-length", type=_positive_int, default=20)
    parser.add_argument(
        "--hidden", type=_positive_int, default=32, help="hidden width of every network"
    )
    parser.add_argument(
        "--steps", type=_positive_int, default=50_000, help="environment steps per run"
    )
    parser.add_argument("--n-envs", type=_positive_int, default=64)
    parser.add_argument("--rollout-length", type=_positive_int, default=20)
    parser.add_argument("--n-minibatches", type=_positive_int, default=4)
    parser.add_argument("--n-epochs", type=_positive_int, default=4)
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument(
        "--discount",
        type=float,
        default=0.5,
        help="rewards follow their action immediately: a short horizon",
    )
    parser.add_argument(
        "--eval-every",
        type=_positive_int,
        default=5_000,
        help="environment steps between evaluations",
    )
    parser.add_argument("--eval-envs", type=_positive_int, default=64)
    parser.add_argument("--output-dir", type=Path, default=Path("outputs/memory-task"))
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    return parser.parse_args(argv)


def _fail(message: str) -> int:
    print(f"nnx-ppo-memory-task: error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    args = parse_args(argv)
    # Heavy imports after argument parsing, so `--help` is instant.
    from nnx_ppo.algorithms.config import EvalConfig, PPOConfig, TrainConfig
    from nnx_ppo.algorithms.ppo import train_ppo
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
        env = EpisodeWrapper(MemoryTask(args.delay, args.cue_size), args.episode_length)
        ppo = PPOConfig(
            n_envs=args.n_envs,
            rollout_length=args.rollout_length,
            total_steps=args.steps,
            n_epochs=args.n_epochs,
            n_minibatches=args.n_minibatches,
            learning_rate=args.learning_rate,
            discounting_factor=args.discount,
        )
        evaluation = EvalConfig(
            every_steps=args.eval_every,
            n_envs=args.eval_envs,
            max_episode_length=args.episode_length,
        )
        configs = {seed: TrainConfig(ppo=ppo, eval=evaluation, seed=seed) for seed in args.seeds}
    except (ValueError, TypeError) as error:
        return _fail(str(error))

    out: Path = args.output_dir
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "optimum": float(args.episode_length - args.delay),
        "runs": {},
    }
    for name in args.networks:
        run: dict[str, Any] = {
            "seeds": list(args.seeds),
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
            result = train_ppo(env, network, configs[seed], progress=not args.no_progress)
            run["wall_time_s"].append(round(time.perf_counter() - start, 1))
            run["steps"] = [step for step, _ in result.eval_history]
            run["returns"].append(
                [round(m["eval/episode_reward/mean"], 3) for _, m in result.eval_history]
            )
            print(
                f"  final eval return {run['returns'][-1][-1]:.2f} (optimum {results['optimum']:g})"
            )
        results["runs"][name] = run

    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    plot_learning_curves(results, out / "learning_curves.png")
    table = results_table(results)
    (out / "results.md").write_text(table + "\n")
    print(table)
    print(f"Results in {out}/ (results.json, learning_curves.png, results.md)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
