"""``nnx-ppo-cognitive``: train a network on a cognitive task over seeds, score its trials.

Trains one run per ``--seeds`` entry with PPO in **one** `train_many` program (compiled
once), plays ``--trials-per-condition`` trials of every condition of the task with each
trained network (`evaluate_trials_many`, the same trials for every seed) and writes to
``--output-dir`` (by default a new folder, `nnx_ppo_cognitive.outputs`; an existing
folder with files in it is refused unless ``--overwrite``): ``results.json`` (per seed:
rates, criterion, psychometric fit flagged when degenerate, reaction times of a
reaction-time task, the own criteria of the wager and timing tasks
(`nnx_ppo_cognitive.summary.task_scores`), per-condition table; the median over seeds
with a 95 % bootstrap interval; wall times; settings and provenance), ``results.md``
(the summary table), ``metrics.jsonl`` (the training log: one line per seed per
iteration, with its ``"run"`` index), ``learning_curves.csv`` / ``.png``
(`nnx_ppo_cognitive.curves`), ``psychometric.png`` and, for a reaction-time task,
``chronometric.png`` (`nnx_ppo_cognitive.plotting`), and ``checkpoints/``, every seed's
trained network (`nnx_ppo_cognitive.outputs.load_trained` loads one back).

``--task`` is a task of the suite (`nnx_ppo_cognitive.tasks.TASKS`) or a user's own
`nnx_ppo.envs.cognitive.CognitiveTask` subclass as ``module:Class``.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

from nnx_ppo_apps_common.cli import (
    HelpFormatter,
    arguments_record,
    fail,
    non_negative_int,
    positive_int,
)
from nnx_ppo_apps_common.results import write_json
from nnx_ppo_apps_common.runs import add_run_arguments, provenance, use_compilation_cache

from nnx_ppo_cognitive.networks import NETWORKS
from nnx_ppo_cognitive.tasks import CUSTOM_STEPS, TASKS, resolve_task

__all__ = ["PROG", "build_parser", "main", "make_network_factory", "parse_args", "train_config"]

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


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{value} must be a finite number >= 0")
    return value


def _fraction(text: str) -> float:
    value = _positive_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"{value} must be in (0, 1]")
    return value


def _action_pair(text: str) -> tuple[int, int]:
    """An argparse ``type``: ``"1,2"`` -> ``(1, 2)``, two different actions ``>= 0``."""
    parts = [part.strip() for part in text.split(",")]
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"{text!r} is not two actions; give e.g. 1,2")
    first, second = (non_negative_int(part) for part in parts)
    if first == second:
        raise argparse.ArgumentTypeError(f"{text!r} names one action twice; give e.g. 1,2")
    return first, second


def _task(text: str) -> str:
    """An argparse ``type``: a task name or ``module:Class``, checked by importing it."""
    try:
        resolve_task(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def _steps_help() -> str:
    by_steps: dict[int, list[str]] = {}
    for name, spec in TASKS.items():
        by_steps.setdefault(spec.steps, []).append(name)
    parts = [f"{', '.join(names)}: {steps:,}" for steps, names in by_steps.items()]
    return (
        f"env steps per seed (default: the task's; {'; '.join(parts)}; a module:Class "
        f"task: {CUSTOM_STEPS:,})"
    )


def build_parser() -> argparse.ArgumentParser:
    """The app's parser: every option with its help text and default."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Train a GRU or a Dale's-law E/I network on a cognitive task with PPO "
        "(all seeds in one program), then score trials per condition, fit psychometric "
        "curves and save every seed's network.",
        formatter_class=HelpFormatter,
    )
    tasks = "; ".join(f"{name}: {spec.title}" for name, spec in TASKS.items())
    # argparse formats help with %: a literal one (as in "80 %") must be doubled.
    parser.add_argument(
        "--task",
        type=_task,
        default="pdm",
        help=(
            f"{tasks}; or module:Class, your own CognitiveTask subclass, importable from "
            "the current folder (see the how-to 'Write your own cognitive task')"
        ).replace("%", "%%"),
    )
    networks = "; ".join(f"{name}: {title}" for name, title in NETWORKS.items())
    parser.add_argument(
        "--network", choices=NETWORKS, default="gru", help=networks.replace("%", "%%")
    )
    parser.add_argument(
        "--seeds",
        type=_seed_list,
        default=[0, 1, 2, 3, 4],
        help="comma-separated distinct seeds, one run each",
    )
    parser.add_argument("--steps", type=positive_int, default=None, help=_steps_help())
    parser.add_argument(
        "--dt",
        type=_positive_float,
        default=20.0,
        help="ms per step (the tasks' noise is scaled so that the evidence does not depend on it)",
    )
    parser.add_argument(
        "--trials-per-condition",
        type=positive_int,
        default=100,
        help="evaluation trials of each condition, per seed",
    )
    parser.add_argument(
        "--hidden",
        type=positive_int,
        default=100,
        help="units of the network (the GRU's, or E + I of the E/I graph)",
    )
    parser.add_argument(
        "--tau",
        type=_positive_float,
        default=100.0,
        help="time constant of the E/I and low-rank units, ms (--network ei or lowrank; at "
        "least --dt)",
    )
    parser.add_argument(
        "--sigma-rec",
        type=_non_negative_float,
        default=0.0,
        help="recurrent noise of the E/I and low-rank units (pyrl's var_rec = sigma^2, "
        "scaled by sqrt(2 dt / tau); Song, Yang & Wang 2016 use 0.15; 0: none)",
    )
    parser.add_argument(
        "--rank",
        type=positive_int,
        default=2,
        help="rank of the low-rank RNN's connectivity m n^T / N (--network lowrank)",
    )
    group = parser.add_argument_group("training (PPO)")
    group.add_argument(
        "--n-envs",
        type=positive_int,
        default=128,
        help="parallel environments (one trial each at a time), per seed",
    )
    group.add_argument(
        "--rollout-length",
        type=positive_int,
        default=64,
        help="steps per environment per iteration, the recurrent network's replay window",
    )
    group.add_argument(
        "--n-minibatches",
        type=positive_int,
        default=4,
        help="minibatches per epoch; --n-envs must be a multiple of it",
    )
    group.add_argument("--n-epochs", type=positive_int, default=4, help="passes over each rollout")
    group.add_argument("--lr", type=_positive_float, default=1e-3, help="Adam learning rate")
    group.add_argument(
        "--discount",
        type=_fraction,
        default=0.99,
        help="below 1 a later abort costs less, which teaches fixation: with 1.0 a "
        "seed can settle on breaking fixation at once",
    )
    group.add_argument(
        "--gae-lambda",
        type=_fraction,
        default=0.98,
        help="GAE's lambda, the bias-variance trade-off of the advantages",
    )
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
    parser.add_argument(
        "--choices",
        type=_action_pair,
        default=None,
        help="the action pair a,b of the psychometric curve: P(b) among trials choosing a "
        "or b, 0 meaning withheld to the end (default: 1,2, or 0,1 for a task with one "
        "choice, P(go) on gonogo)",
    )
    out = parser.add_argument_group("outputs")
    out.add_argument(
        "--output-dir",
        type=Path,
        default=None,
        help="the run's folder, new or empty (default: a new "
        "outputs/cognitive/<task>-<network>-<date>-<time>)",
    )
    out.add_argument(
        "--overwrite",
        action="store_true",
        help="reuse a non-empty --output-dir: replace the outputs of the previous run in "
        "it (results, figures, log, checkpoints); other files are kept",
    )
    out.add_argument(
        "--log-every",
        type=positive_int,
        default=10,
        help="iterations between the task's plain progress lines on stdout (trial reward, "
        "correct) when the output is not a terminal, besides the trainer's on stderr (the "
        "compilation and its duration, then step, rate, elapsed and ETA every 20 s); a "
        "terminal gets a progress bar",
    )
    out.add_argument(
        "--no-progress", action="store_true", help="no progress bar and no progress lines"
    )
    add_run_arguments(parser)
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line (``--help`` lists every option with its default); a
    missing ``--output-dir`` becomes a new timestamped folder
    (`nnx_ppo_cognitive.outputs.default_output_dir`)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.steps is None:
        args.steps = resolve_task(args.task).steps
    if args.n_envs % args.n_minibatches:
        parser.error(
            f"--n-envs {args.n_envs} is not a multiple of --n-minibatches "
            f"{args.n_minibatches}: each minibatch holds whole environments"
        )
    if args.network in ("ei", "lowrank") and args.dt > args.tau:
        parser.error(
            f"--dt {args.dt:g} is above --tau {args.tau:g}: the {args.network} units' leak "
            "dt / tau must be at most 1; lower --dt or raise --tau"
        )
    if args.network == "gru" and args.sigma_rec > 0:
        parser.error(
            f"--sigma-rec {args.sigma_rec:g} needs leaky units: use --network ei or "
            "--network lowrank, or --sigma-rec 0 with the GRU"
        )
    if args.network == "lowrank" and args.rank > args.hidden:
        parser.error(f"--rank {args.rank} is above --hidden {args.hidden}; use --rank <= --hidden")
    if args.output_dir is None:
        from nnx_ppo_cognitive.outputs import default_output_dir

        args.output_dir = default_output_dir(args.task, args.network)
    return args


def train_config(args: argparse.Namespace) -> Any:
    """The `TrainConfig` a run of ``args`` (`parse_args`) trains with: the PPO settings
    of the options, fresh resets, no evaluation during training."""
    from nnx_ppo.algorithms import EvalConfig, LogLevel, PPOConfig, TrainConfig

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
        # env/correct, env/abort and env/trial_end: the learning curves' trial rates.
        log_level=LogLevel.DEFAULT | LogLevel.ENV_METRICS,
    )
    # No evaluation during training: the trials are scored after it.
    return TrainConfig(ppo=ppo, eval=EvalConfig(enabled=False))


def make_network_factory(args: argparse.Namespace, env: Any) -> Any:
    """``make_network(rngs)`` of the ``--network`` and its sizes for ``env``: what the
    run trains, and what `nnx_ppo_cognitive.outputs.load_trained` rebuilds."""
    from nnx_ppo_cognitive.networks import (
        make_ei_actor_critic,
        make_gru_actor_critic,
        make_low_rank_actor_critic,
    )

    obs, actions = env.observation_size, env.action_size
    # Runs saved before --sigma-rec and --rank existed had neither: noise-free.
    sigma_rec = getattr(args, "sigma_rec", 0.0)
    if args.network == "gru":
        return lambda rngs: make_gru_actor_critic(
            obs, actions, rngs=rngs, hidden=args.hidden, entropy_weight=args.entropy_weight
        )
    if args.network == "lowrank":
        return lambda rngs: make_low_rank_actor_critic(
            obs, actions, rngs=rngs, hidden=args.hidden, rank=args.rank, tau_ms=args.tau,
            dt_ms=args.dt, sigma_rec=sigma_rec, entropy_weight=args.entropy_weight,
        )  # fmt: skip
    return lambda rngs: make_ei_actor_critic(
        obs, actions, rngs=rngs, n_units=args.hidden, tau_ms=args.tau, dt_ms=args.dt,
        entropy_weight=args.entropy_weight, sigma_rec=sigma_rec,
    )  # fmt: skip


def _reaction_time_lines(records: list[dict[str, Any]]) -> str:
    """The printed reaction-time summary: each seed's median and quartiles."""
    lines = ["Reaction times of correct trials (ms from the stimulus onset):"]
    for r in records:
        rt = r["reaction_time"]
        if rt["n"] == 0:
            lines.append(f"  seed {r['seed']}: no correct decision")
            continue
        low, high = rt["quartiles_ms"]
        lines.append(f"  seed {r['seed']}: median {rt['median_ms']:.0f} [quartiles "
                     f"{low:.0f}, {high:.0f}] over {rt['n']} trials")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    args = parse_args(argv)
    # Heavy imports after argument parsing, so `--help` is instant.
    import jax

    from nnx_ppo.algorithms import Checkpointer, evaluate_trials_many, train_many
    from nnx_ppo.algorithms.config import config_to_json
    from nnx_ppo.wrappers import EpisodeWrapper
    from nnx_ppo_cognitive.curves import ProgressLines, write_learning_curves
    from nnx_ppo_cognitive.outputs import CHECKPOINTS, prepare_output_dir
    from nnx_ppo_cognitive.summary import (
        results_table,
        seed_record,
        summarize,
        task_score_lines,
        task_scores,
    )

    spec = resolve_task(args.task)
    try:
        task = spec.make(dt=args.dt)
        config = train_config(args)
        make_network = make_network_factory(args, task)
    except (ValueError, TypeError) as error:
        return fail(PROG, f"--task {args.task} --dt {args.dt:g}: {error}")
    if args.choices is not None and max(args.choices) >= task.action_size:
        actions = ", ".join(f"{i} {name}" for i, name in enumerate(task.actions))
        return fail(
            PROG,
            f"--choices {args.choices[0]},{args.choices[1]}: --task {args.task} has the "
            f"actions {actions}; give two of them (0 meaning withheld to the end)",
        )
    out: Path = args.output_dir
    try:
        prepare_output_dir(out, overwrite=args.overwrite)
    except ValueError as error:
        return fail(PROG, str(error))
    use_compilation_cache(not args.no_compile_cache)

    # Every trial ends by itself within max_trial_steps; the time limit is a backstop.
    env = EpisodeWrapper(task, episode_length=task.max_trial_steps)
    print(f"Training {args.network} on {args.task} (dt {args.dt:g} ms), seeds {args.seeds}, "
          f"{args.steps:,} steps each, into {out}/", flush=True)  # fmt: skip
    log = out / "metrics.jsonl"
    terminal = sys.stdout.isatty()
    # The library's progress: a bar on a terminal; elsewhere plain lines on stderr (the
    # compilation with its duration, then step, rate, elapsed and ETA every 20 s).
    options: dict[str, Any] = {"progress": False if args.no_progress else None}
    if not terminal and not args.no_progress:
        options["log_fn"] = ProgressLines(
            every=args.log_every,
            total_steps=args.steps,
            steps_per_iteration=args.n_envs * args.rollout_length,
            n_runs=len(args.seeds),
        )
    start = time.perf_counter()
    # One checkpoint of the whole sweep at the end: every seed's trained network (run i
    # of it), without the environments' states (nothing to resume from them).
    with Checkpointer(out / CHECKPOINTS, config=config, env_state=False, resume=False) as saver:
        sweep = train_many(
            env, make_network, config, seeds=args.seeds, jsonl_path=log, checkpoint=saver,
            **options,
        )  # fmt: skip
    train_s = time.perf_counter() - start
    start = time.perf_counter()
    trials = evaluate_trials_many(
        task, sweep, trials_per_condition=args.trials_per_condition, key=jax.random.key(EVAL_KEY)
    )
    eval_s = time.perf_counter() - start

    decision, correct = task.criterion  # the task's published training criterion
    reaction = bool(task.reaction_time)
    records = [
        seed_record(
            seed,
            result,
            decision=decision,
            correct=correct,
            reaction_time=reaction,
            choices=args.choices,
        )
        for seed, result in zip(args.seeds, trials, strict=True)
    ]
    for record, result in zip(records, trials, strict=True):
        record.update(task_scores(task, result))  # the wager's and timing's own criteria
    results: dict[str, Any] = {
        "task": {
            "name": args.task,
            "class": type(task).__name__,
            "dt_ms": args.dt,
            "n_conditions": task.n_conditions,
            "max_trial_steps": task.max_trial_steps,
            "psychometric_variable": task.psychometric_variable or None,
            "choices": list(args.choices or trials[0].default_choices),
            "reaction_time": reaction,
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
    plots = importlib.util.find_spec("matplotlib") is not None  # a dependency, optional here
    title = f"{args.network} on {args.task}: {spec.title}, dt {args.dt:g} ms"
    written = ["results.json", "results.md", "metrics.jsonl"]
    written += write_learning_curves(log, args.seeds, out, title=title, plot=plots)
    if plots:
        from nnx_ppo_cognitive.plotting import plot_chronometric, plot_psychometric

        plot_psychometric(
            args.seeds, trials, out / "psychometric.png", title=title, choices=args.choices
        )
        written.append("psychometric.png")
        chronometric = out / "chronometric.png"
        if (
            reaction
            and task.psychometric_variable
            and plot_chronometric(args.seeds, trials, chronometric, title=title)
        ):
            written.append("chronometric.png")
    written.append(f"{CHECKPOINTS}/")
    print(table)
    if reaction:
        print(_reaction_time_lines(records))
    if extra := task_score_lines(records):
        print("\n".join([f"The {args.task} task's own criteria:", *extra]))
    print(f"Trained in {train_s:.0f} s, evaluated in {eval_s:.0f} s. "
          f"Results in {out}/ ({', '.join(written)})")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
