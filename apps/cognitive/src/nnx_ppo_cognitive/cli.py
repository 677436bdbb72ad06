"""``nnx-ppo-cognitive``: train a network on a cognitive task over seeds, score its trials.

Trains one run per ``--seeds`` entry with PPO in **one** `train_many` program (compiled
once), plays ``--trials-per-condition`` trials of every condition of the task with each
trained network (`evaluate_trials_many`, the same trials for every seed) and writes to
``--output-dir``: ``results.json`` (per seed: rates, criterion, psychometric fit and
per-condition table; the median over seeds with a 95 % bootstrap interval; wall times;
settings and provenance), ``results.md`` (the summary table), ``metrics.jsonl`` (the
training log: one line per seed per iteration, with its ``"run"`` index, the rollout's
mean episode reward and ``throughput/sps``) and ``psychometric.png``
(`nnx_ppo_cognitive.plotting`, where matplotlib is installed).
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path
from typing import Any

from nnx_ppo_apps_common.cli import arguments_record, fail, non_negative_int, positive_int
from nnx_ppo_apps_common.results import write_json
from nnx_ppo_apps_common.runs import add_run_arguments, provenance, use_compilation_cache

from nnx_ppo_cognitive.networks import NETWORKS
from nnx_ppo_cognitive.tasks import TASKS

__all__ = ["PROG", "main", "parse_args"]

PROG = "nnx-ppo-cognitive"
EVAL_KEY = 2017
"""The seed of the evaluation trials' key: every seed and every run plays the same trials."""


def _seed_list(text: str) -> list[int]:
    """An argparse ``type``: ``"0,1,2"`` -> ``[0, 1, 2]``, distinct seeds ``>= 0``."""
    seeds = [non_negative_int(part.strip()) for part in text.split(",") if part.strip()]
    if not seeds:
        raise argparse.ArgumentTypeError(f"{text!r} names no seed; give e.g. 0,1,2,3,4")
    if len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"{text!r} repeats a seed; give distinct seeds")
    return seeds


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{value} must be positive")
    return value


def _fraction(text: str) -> float:
    value = _positive_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"{value} must be in (0, 1]")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line (``--help`` lists every option with its default)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Train a GRU or a Dale's-law E/I network on a cognitive task with PPO "
        "(all seeds in one program), then score trials per condition and fit "
        "psychometric curves.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    tasks = ", ".join(f"{name}: {spec.title}" for name, spec in TASKS.items())
    # argparse formats help with %: a literal one (as in "80 %") must be doubled.
    parser.add_argument("--task", choices=TASKS, default="pdm", help=tasks.replace("%", "%%"))
    networks = ", ".join(f"{name}: {title}" for name, title in NETWORKS.items())
    parser.add_argument(
        "--network", choices=NETWORKS, default="gru", help=networks.replace("%", "%%")
    )
    parser.add_argument("--seeds", type=_seed_list, default=[0, 1, 2, 3, 4],
                        help="comma-separated seeds, one run each")  # fmt: skip
    parser.add_argument("--steps", type=positive_int, default=None,
                        help="env steps per seed (default: the task's, see README)")  # fmt: skip
    parser.add_argument("--dt", type=_positive_float, default=20.0, help="ms per step")
    parser.add_argument("--trials-per-condition", type=positive_int, default=100,
                        help="evaluation trials of each condition, per seed")  # fmt: skip
    parser.add_argument("--hidden", type=positive_int, default=100, help="units per network")
    parser.add_argument("--tau", type=_positive_float, default=100.0,
                        help="time constant of the E/I units, ms (--network ei)")  # fmt: skip
    group = parser.add_argument_group("training (PPO)")
    group.add_argument("--n-envs", type=positive_int, default=128)
    group.add_argument("--rollout-length", type=positive_int, default=64)
    group.add_argument("--n-minibatches", type=positive_int, default=4)
    group.add_argument("--n-epochs", type=positive_int, default=4)
    group.add_argument("--lr", type=_positive_float, default=1e-3, help="learning rate")
    group.add_argument(
        "--discount",
        type=_fraction,
        default=0.99,
        help="below 1 a later abort costs less, which teaches fixation: with 1.0 a "
        "seed can settle on breaking fixation at once",
    )
    group.add_argument("--gae-lambda", type=_fraction, default=0.98)
    group.add_argument(
        "--entropy-weight",
        type=float,
        default=0.05,
        help="the samplers' entropy bonus: at 0.01 the E/I graph's policy collapsed onto "
        "fixating through every trial",
    )
    group.add_argument(
        "--max-grad-norm",
        type=_positive_float,
        default=1.0,
        help="clip the gradient's global norm: unclipped, the E/I graph's ReLU rates "
        "diverged (NaN) at lr 3e-4",
    )
    parser.add_argument("--output-dir", type=Path, default=Path("outputs/cognitive"))
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_run_arguments(parser)
    args = parser.parse_args(argv)
    if args.steps is None:
        args.steps = TASKS[args.task].steps
    if args.n_envs % args.n_minibatches:
        parser.error(
            f"--n-envs {args.n_envs} is not a multiple of --n-minibatches "
            f"{args.n_minibatches}: each minibatch holds whole environments"
        )
    if args.network == "ei" and args.dt > args.tau:
        parser.error(
            f"--dt {args.dt:g} is above --tau {args.tau:g}: the E/I units' leak dt / tau "
            "must be at most 1; lower --dt or raise --tau"
        )
    return args


def _train_config(args: argparse.Namespace) -> Any:
    from nnx_ppo.algorithms import EvalConfig, PPOConfig, TrainConfig

    ppo = PPOConfig(
        n_envs=args.n_envs,
        rollout_length=args.rollout_length,
        n_minibatches=args.n_minibatches,
        n_epochs=args.n_epochs,
        learning_rate=args.lr,
        discounting_factor=args.discount,
        gae_lambda=args.gae_lambda,
        max_grad_norm=args.max_grad_norm,
        total_steps=args.steps,
        reset_mode="fresh",  # a cognitive task draws a new trial at every reset
    )
    # No evaluation during training: the trials are scored after it.
    return TrainConfig(ppo=ppo, eval=EvalConfig(enabled=False))


def _make_network(args: argparse.Namespace, env: Any) -> Any:
    from nnx_ppo_cognitive.networks import make_ei_actor_critic, make_gru_actor_critic

    obs, actions = env.observation_size, env.action_size
    if args.network == "gru":
        return lambda rngs: make_gru_actor_critic(
            obs, actions, rngs=rngs, hidden=args.hidden, entropy_weight=args.entropy_weight
        )
    return lambda rngs: make_ei_actor_critic(
        obs, actions, rngs=rngs, n_units=args.hidden, tau_ms=args.tau, dt_ms=args.dt,
        entropy_weight=args.entropy_weight,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    args = parse_args(argv)
    # Heavy imports after argument parsing, so `--help` is instant.
    import jax

    from nnx_ppo.algorithms import evaluate_trials_many, train_many
    from nnx_ppo.algorithms.config import config_to_json
    from nnx_ppo.wrappers import EpisodeWrapper
    from nnx_ppo_cognitive.summary import results_table, seed_record, summarize

    spec = TASKS[args.task]
    try:
        task = spec.make(dt=args.dt)
        config = _train_config(args)
        make_network = _make_network(args, task)
    except (ValueError, TypeError) as error:
        return fail(PROG, f"--task {args.task} --dt {args.dt:g}: {error}")
    use_compilation_cache(not args.no_compile_cache)
    out: Path = args.output_dir
    out.mkdir(parents=True, exist_ok=True)

    # Every trial ends by itself within max_trial_steps; the time limit is a backstop.
    env = EpisodeWrapper(task, episode_length=task.max_trial_steps)
    print(f"Training {args.network} on {args.task} (dt {args.dt:g} ms), seeds {args.seeds}, "
          f"{args.steps:,} steps each")  # fmt: skip
    log = out / "metrics.jsonl"
    log.unlink(missing_ok=True)  # the log appends: a new run starts a new file
    start = time.perf_counter()
    sweep = train_many(
        env, make_network, config, seeds=args.seeds, progress=not args.no_progress,
        jsonl_path=log,
    )  # fmt: skip
    train_s = time.perf_counter() - start
    start = time.perf_counter()
    trials = evaluate_trials_many(
        task, sweep, trials_per_condition=args.trials_per_condition, key=jax.random.key(EVAL_KEY)
    )
    eval_s = time.perf_counter() - start

    decision, correct = task.criterion  # the task's published training criterion
    records = [
        seed_record(seed, result, decision=decision, correct=correct)
        for seed, result in zip(args.seeds, trials, strict=True)
    ]
    results: dict[str, Any] = {
        "task": {
            "name": args.task,
            "class": type(task).__name__,
            "dt_ms": args.dt,
            "n_conditions": task.n_conditions,
            "max_trial_steps": task.max_trial_steps,
            "psychometric_variable": task.psychometric_variable or None,
            "criteria": {"decision": decision, "correct": correct},
        },
        "summary": summarize(records),
        "seeds": records,
        "wall_time_s": {"train": round(train_s, 1), "evaluate": round(eval_s, 1)},
        "trained_steps_per_seed": sweep.total_steps,
        "settings": arguments_record(args),
        "train_config": config_to_json(config),
        "provenance": provenance(),
    }
    write_json(out / "results.json", results)
    table = results_table(results)
    (out / "results.md").write_text(table + "\n")
    written = ["results.json", "results.md", "metrics.jsonl"]
    if importlib.util.find_spec("matplotlib") is not None:  # a dependency, but optional here
        from nnx_ppo_cognitive.plotting import plot_psychometric

        title = f"{args.network} on {args.task}: {spec.title}, dt {args.dt:g} ms"
        plot_psychometric(args.seeds, trials, out / "psychometric.png", title=title)
        written.append("psychometric.png")
    print(table)
    print(f"Trained in {train_s:.0f} s, evaluated in {eval_s:.0f} s. "
          f"Results in {out}/ ({', '.join(written)})")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
