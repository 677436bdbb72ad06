"""``nnx-ppo-quickstart``: train a PPO policy with one command.

Defaults train an MLP on brax ``inverted_pendulum`` (backend ``generalized``), which
reaches the maximum return of 1000 in well under the default step budget on 2 CPU
cores. Outputs (in ``--output-dir``, by default a new folder under
``outputs/quickstart/``): ``metrics.jsonl``, ``learning_curve.png``, ``config.json``,
``summary.json`` and ``checkpoints/``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

__all__ = ["eval_history", "main", "parse_args"]


def _positive_int(text: str) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value} must be positive")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line (``--help`` lists every option with its default)."""
    from nnx_ppo_quickstart.networks import PRESETS

    parser = argparse.ArgumentParser(
        prog="nnx-ppo-quickstart",
        description="Train a stateful PPO policy on a brax or MuJoCo Playground env.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--env", default="inverted_pendulum", help="env name from the brax or Playground registry"
    )
    parser.add_argument(
        "--brax-backend", default="generalized", help="physics backend for brax envs"
    )
    parser.add_argument("--network", default="mlp", choices=PRESETS, help="network preset")
    parser.add_argument(
        "--steps", type=_positive_int, default=150_000, help="environment steps to train"
    )
    parser.add_argument("--n-envs", type=_positive_int, default=256, help="parallel environments")
    parser.add_argument("--rollout-length", type=_positive_int, default=20)
    parser.add_argument("--n-minibatches", type=_positive_int, default=8)
    parser.add_argument("--n-epochs", type=_positive_int, default=4)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--discount", type=float, default=0.995)
    parser.add_argument("--reward-scaling", type=float, default=10.0)
    parser.add_argument("--episode-length", type=_positive_int, default=1000)
    parser.add_argument(
        "--eval-every",
        type=_positive_int,
        default=10_000,
        help="environment steps between evaluations",
    )
    parser.add_argument("--eval-envs", type=_positive_int, default=16)
    parser.add_argument(
        "--checkpoint-every",
        type=_positive_int,
        default=50_000,
        help="environment steps between checkpoints (and one at the end)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=None,
        help="where results go (default: a new folder outputs/quickstart/<env>-<network>-<time>)",
    )
    parser.add_argument(
        "--resume", action="store_true", help="continue from the latest checkpoint in --output-dir"
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return parser.parse_args(argv)


def eval_history(jsonl_path: Path) -> list[tuple[int, dict[str, float]]]:
    """``[(step, metrics)]`` of every evaluation recorded in a run's ``metrics.jsonl``
    (all attempts of a resumed run: the trainer rewinds the file on resume)."""
    history = []
    for line in jsonl_path.read_text().splitlines():
        record = json.loads(line)
        if record.get("eval/episode_reward/mean") is not None:
            metrics = {k: v for k, v in record.items() if k != "step" and v is not None}
            history.append((int(record["step"]), metrics))
    return history


def _fail(message: str) -> int:
    print(f"nnx-ppo-quickstart: error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    args = parse_args(argv)
    # Heavy imports after argument parsing, so `--help` is instant.
    from nnx_ppo.algorithms.checkpointing import Checkpointer
    from nnx_ppo.algorithms.config import EvalConfig, PPOConfig, TrainConfig
    from nnx_ppo.algorithms.ppo import train_ppo
    from nnx_ppo_quickstart.envs import make_envs
    from nnx_ppo_quickstart.networks import make_network
    from nnx_ppo_quickstart.plotting import plot_learning_curve

    try:
        envs = make_envs(
            args.env,
            episode_length=args.episode_length,
            reward_scaling=args.reward_scaling,
            brax_backend=args.brax_backend,
        )
        network = make_network(args.network, envs.observation_size, envs.action_size, args.seed)
        config = TrainConfig(
            ppo=PPOConfig(
                n_envs=args.n_envs,
                rollout_length=args.rollout_length,
                total_steps=args.steps,
                n_epochs=args.n_epochs,
                n_minibatches=args.n_minibatches,
                learning_rate=args.learning_rate,
                discounting_factor=args.discount,
            ),
            eval=EvalConfig(
                every_steps=args.eval_every,
                n_envs=args.eval_envs,
                max_episode_length=args.episode_length,
            ),
            seed=args.seed,
        )
    except (ValueError, TypeError) as error:
        return _fail(str(error))

    if args.output_dir is None:
        if args.resume:
            return _fail("--resume needs the --output-dir of the run to continue")
        stamp = time.strftime("%Y%m%d-%H%M%S")
        args.output_dir = Path("outputs/quickstart") / f"{args.env}-{args.network}-{stamp}"
    out = args.output_dir
    if not args.resume and (out / "checkpoints").exists():
        return _fail(
            f"--output-dir {out} already holds a run; pass --resume to continue it "
            "or choose another --output-dir"
        )
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(
        json.dumps(
            {
                "cli": {k: str(v) for k, v in vars(args).items()},
                "train_config": dataclasses.asdict(config),
            },
            indent=2,
            default=str,
        )
    )
    print(
        f"Training {args.network} on {args.env} [{envs.source}] for {args.steps:,} steps "
        f"with {args.n_envs} envs; outputs in {out}/"
    )
    start = time.perf_counter()
    # The with-block closes the checkpointer (waiting for its last save) even if
    # training fails.
    with Checkpointer(
        out / "checkpoints",
        config=config,
        save_every_steps=args.checkpoint_every,
        resume=args.resume,
    ) as checkpointer:
        result = train_ppo(
            envs.train,
            network,
            config,
            eval_env=envs.eval,
            progress=False if args.no_progress else None,  # None: shown on a terminal
            jsonl_path=out / "metrics.jsonl",
            checkpoint=checkpointer,
        )
    wall = time.perf_counter() - start

    # The whole run's evaluations, from the log: after --resume, result.eval_history
    # holds only those after the resume step.
    history = eval_history(out / "metrics.jsonl")
    final_reward = history[-1][1]["eval/episode_reward/mean"] if history else float("nan")
    if history:
        plot_learning_curve(history, out / "learning_curve.png", f"{args.network} on {args.env}")
    summary = {
        "env": args.env,
        "network": args.network,
        "steps": result.total_steps,
        "wall_time_s": round(wall, 1),
        "steps_per_second": round(result.total_steps / wall, 1),
        "final_eval_reward": final_reward,
        "eval_steps": [step for step, _ in history],
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(
        f"Done: {summary['steps']:,} steps in {summary['wall_time_s']:.0f} s "
        f"({summary['steps_per_second']:,.0f} steps/s, including compilation and eval); "
        f"final eval return {final_reward:.1f}. Results in {out}/"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
