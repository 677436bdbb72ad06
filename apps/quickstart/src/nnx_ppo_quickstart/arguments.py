"""The quickstart's command line: its parser, the options a ``--config`` file, a
``--resume`` and a ``--preset`` supply, and the text of the options a run was given.

`parse_args` is what ``nnx-ppo-quickstart`` parses its arguments with; `options_text`
is the ``Options:`` line it prints; `with_learning_rate_schedule` applies
``--lr-schedule``.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
from pathlib import Path
from typing import Any

from nnx_ppo_apps_common.cli import (
    HelpFormatter,
    arguments_record,
    positive_int,
    seed_list,
)
from nnx_ppo_apps_common.options import given_options, option_defaults, options_argv
from nnx_ppo_apps_common.runs import add_run_arguments
from nnx_ppo_apps_common.training import TrainingDefaults, add_training_arguments

from nnx_ppo_quickstart.presets import QUICKSTART, preset_options, resolve_preset
from nnx_ppo_quickstart.run_options import config_argv, resume_argv
from nnx_ppo_quickstart.shards import SHARD_HELP, SHARDS_HELP, shard_text

__all__ = [
    "LOGGERS",
    "LR_SCHEDULES",
    "PRESET_LR_SCHEDULE",
    "PROG",
    "RESETS",
    "default_reset",
    "options_text",
    "parse_args",
    "with_learning_rate_schedule",
]

PROG = "nnx-ppo-quickstart"

LOGGERS = ("jsonl", "tensorboard", "wandb")
"""The choices of ``--logger``: ``metrics.jsonl`` is always written (the summary, the
learning curve and ``--resume`` read it); the others are added sinks."""

LR_SCHEDULES = ("linear", "constant")
"""The choices of ``--lr-schedule`` (`with_learning_rate_schedule`)."""

PRESET_LR_SCHEDULE = {
    "mlp": "constant",
    "lstm": "linear",
    "gru": "linear",
    "lru": "linear",
    "graph": "linear",
}
"""``--lr-schedule`` when not given, per ``--network`` preset. The LSTM decays its rate
(and the GRU, the same network with another cell, as it does):
at a constant rate it drifts through collapses of its return after learning
``CartpoleBalance`` (see `with_learning_rate_schedule`). The graph preset
(`make_graph_actor_critic`) decays it too: so it solved ``CartpoleBalance`` on every
seed of the learning suite, and with the velocities hidden ended at twice the MLP's
return, where at a constant rate it fell back late in training. The MLP's documented
curves are measured at a constant rate."""

RESETS = ("fresh", "cached")
"""The choices of ``--reset`` (``PPOConfig.reset_mode``; ``"refresh"`` is not offered)."""


def _seeds_text(text: str) -> str:
    """``--seeds``'s argparse ``type``: distinct seeds, kept as the canonical text
    ``"0,1,2"`` (so a run's ``config.json`` records one value, which ``--config`` and
    ``--resume`` read back as given); ``""`` (the default: one run) stays ``""``."""
    if not text:
        return ""
    return ",".join(str(seed) for seed in seed_list(text))


def _parser() -> argparse.ArgumentParser:
    """The quickstart's parser (``--help`` lists every option with its default)."""
    from nnx_ppo_quickstart.networks import PRESETS

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Train a stateful PPO policy on a brax or MuJoCo Playground env.",
        formatter_class=HelpFormatter,
        epilog="Options may also come from a file (--config run.toml, or a run's "
        "config.json); the command line overrides the file. --resume --output-dir DIR "
        "alone continues the run in DIR with the options it recorded.",
    )
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="take options from a TOML (*.toml) or JSON file whose keys are the option "
        "names (learning_rate or learning-rate), or from a run's config.json (a new run "
        "with the same options); options on the command line override the file's "
        "(default: none)",
    )
    parser.add_argument(
        "--env", default="inverted_pendulum", help="env name from the brax or Playground registry"
    )
    parser.add_argument(
        "--brax-backend", default="generalized", help="physics backend for brax envs"
    )
    parser.add_argument(
        "--preset",
        default="auto",
        metavar="NAME|auto",
        help="training settings to start from: a DeepMind Control Suite task's tuned "
        "brax-PPO settings from MuJoCo Playground (e.g. CheetahRun), or 'quickstart' (the "
        "defaults shown here); 'auto' takes the one named like --env, else 'quickstart'. "
        "With --network lstm, gru, lru or graph a Playground preset trains 4 epochs per "
        "rollout, not its 16 (tuned for the MLP). Options given explicitly override the "
        "preset's",
    )
    parser.add_argument(
        "--network",
        default="mlp",
        choices=PRESETS,
        help="network preset: 'mlp' (brax's sizes), 'lstm', 'gru' or 'lru' (a 128-unit cell "
        "per port, MLP heads; 'lru' is a linear recurrence, the stateful cell closest to "
        "frame stacking so far), 'graph' (a population graph with delayed self-loops)",
    )
    parser.add_argument(
        "--reward-scaling", type=float, default=10.0, help="training rewards are multiplied by it"
    )
    add_training_arguments(
        parser,
        TrainingDefaults(steps=150_000, n_envs=256, discount=0.995, eval_every=10_000),
    )
    parser.add_argument(
        "--entropy-cost",
        type=float,
        default=1e-2,
        help="weight of the policy's entropy bonus (the action sampler's entropy weight)",
    )
    parser.add_argument(
        "--clip-range", type=float, default=0.2, help="PPO's ratio clipping epsilon"
    )
    parser.add_argument(
        "--action-repeat",
        type=positive_int,
        default=1,
        help="times each action is applied (an env step of the budget is one policy step)",
    )
    parser.add_argument(
        "--lr-schedule",
        default=None,  # the preset's, set by parse_args
        choices=LR_SCHEDULES,
        help="the learning rate over the run: 'linear' decays --learning-rate to 0 at "
        "--steps, so that a policy that has learnt the task settles instead of drifting "
        "with the noise of its advantages; 'constant' keeps it (default: the preset's, "
        + ", ".join(f"{k} for {n}" for n, k in PRESET_LR_SCHEDULE.items())
        + ")",
    )
    parser.add_argument(
        "--checkpoint-every",
        type=positive_int,
        default=50_000,
        help="environment steps between checkpoints (and one at the end)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the network's initial parameters and of training (environment "
        "resets, minibatch shuffles, evaluations)",
    )
    parser.add_argument(
        "--seeds",
        type=_seeds_text,
        default="",
        metavar="S[,S...]",
        help="train several seeds in one program (train_many), e.g. --seeds 0,1,2,3,4, "
        "instead of the one --seed: every seed's metrics, learning curve and summary in "
        "<output-dir>/seed_<s>/, and in <output-dir>/summary.json the seeds' final "
        "returns with their median and IQM and 95%% bootstrap intervals (default: one run, "
        "--seed)",
    )
    parser.add_argument("--shard", type=shard_text, default=None, metavar="I/N|slurm",
                        help=SHARD_HELP)  # fmt: skip
    parser.add_argument("--shards", type=positive_int, default=None, metavar="N",
                        help=SHARDS_HELP)  # fmt: skip
    parser.add_argument(
        "--merge",
        type=Path,
        default=None,
        metavar="DIR",
        help="no training: merge the finished shards in DIR (a --shard run's --output-dir) "
        "into every seed's folder and DIR/summary.json, as the last shard to finish does; "
        "takes no other option (default: train)",
    )
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=None,
        help="where results go (default: a new folder outputs/quickstart/<env>-<network>-<time>)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --output-dir from its latest checkpoint, with the options "
        "its config.json records; options given again must agree with them, except "
        "--steps (may be raised to train on), --checkpoint-every, --no-progress and "
        "--no-compile-cache",
    )
    parser.add_argument(
        "--no-stagger",
        action="store_true",
        help="start every training episode at step 0 (default: staggered starts in the first "
        "half of the episode, drawn anew for every episode, which the recurrent networks "
        "need on fixed-length tasks; see wrap_for_training)",
    )
    parser.add_argument(
        "--reset",
        default=None,  # set by parse_args (default_reset)
        choices=RESETS,
        help="how a finished training episode restarts: 'fresh' draws a new initial state "
        "(with staggered starts a batched reset at almost every step, costly where a reset "
        "is: Playground's CheetahRun settles its physics for 200 steps); 'cached' restarts "
        "each environment from its first reset state with a new staggered start "
        "(brax's and Playground's way; what the env draws at reset, e.g. an --action-lag "
        "range, is then drawn once per environment) (default: cached with a Playground "
        "preset or --no-stagger, else fresh)",
    )
    parser.add_argument(
        "--action-lag",
        default="0",
        metavar="K|LOW:HIGH",
        help="steps between an action and its effect, or a range to draw it from per "
        "environment and episode (nnx_ppo.wrappers.Latency); training and evaluation",
    )
    parser.add_argument(
        "--obs-lag",
        default="0",
        metavar="K|LOW:HIGH",
        help="steps between a measurement and the policy seeing it, as --action-lag",
    )
    parser.add_argument(
        "--lag-hold-prob",
        type=float,
        default=1.0,
        help="probability that a step keeps its lags (1: one draw per episode, 0: a new "
        "draw every step)",
    )
    parser.add_argument(
        "--obs-history",
        type=positive_int,
        default=1,
        metavar="K",
        help="the policy and critic see the last K observations, oldest first, as one "
        "vector (nnx_ppo.wrappers.ObservationHistory; zeros before an episode's first); "
        "1: the current one only",
    )
    parser.add_argument(
        "--critic-obs",
        default="",
        metavar="KEY[,KEY]",
        help="a privileged critic, for envs with dict observations: the critic also reads "
        "these keys, which the actor does not; --network mlp, lstm or gru (default: none, "
        "actor and critic read the same observation)",
    )
    parser.add_argument(
        "--logger",
        nargs="+",
        default=["jsonl"],
        choices=LOGGERS,
        help="where metrics go, one or several: metrics.jsonl is always written; "
        "'tensorboard' adds event files in <output-dir>/tensorboard (extra "
        "nnx-ppo-train[logging]), 'wandb' a Weights & Biases run (extra nnx-ppo-train[wandb])",
    )
    parser.add_argument(
        "--video",
        action="store_true",
        help="record a deterministic evaluation episode as MP4 into <output-dir>/videos at "
        "every evaluation (envs that render: brax and Playground, with MuJoCo's OpenGL)",
    )
    parser.add_argument(
        "--randomization",
        default="none",
        metavar="none|playground|MODULE:FUNCTION",
        help="domain randomization while training: 'playground' uses the randomizer "
        "Playground's registry provides for --env; MODULE:FUNCTION one's own, "
        "function(model, rng[n_envs, 2]) -> (batched_model, in_axes) as brax and "
        "Playground write them, imported from the current folder or the installed "
        "packages and checked against --env's model before compiling",
    )
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="hide the progress bar (on a terminal) and the progress lines (elsewhere: a "
        "batch job's log, nohup, a pipe)",
    )
    add_run_arguments(parser)
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line, with the options of a ``--config`` file and, with
    ``--resume``, those the run recorded (see `nnx_ppo_quickstart.run_options`).

    ``--preset`` is resolved (``auto`` becomes the name of the preset it picks) and its
    values are the defaults of the options it sets (`nnx_ppo_quickstart.presets`).

    Raises:
        ValueError: For an unknown ``--preset``, a ``--config`` file that cannot be used,
            or a ``--resume`` that cannot continue its run (no run there, or options
            that differ from the run's); checked before anything is built or
            written. ``main`` prints it as a one-line error.
        SystemExit: For a usage error or ``--help``, as argparse does.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = _parser()
    given = given_options(parser, argv)
    file_words = config_argv(given["config"], parser) if "config" in given else []
    explicit = {**given_options(parser, file_words), **given}
    origins = {
        name: "the command line" if name in given else f"--config {given['config']}"
        for name in explicit
    }
    if "merge" in given:
        others = sorted(f"--{name.replace('_', '-')}" for name in explicit if name != "merge")
        if others:
            raise ValueError(
                f"--merge {given['merge']} takes no other option (it reads the shards' "
                f"own): drop {', '.join(others)}"
            )
        return parser.parse_args(argv)
    if explicit.get("resume") and "shard" in explicit:
        raise ValueError(
            f"--resume with --shard {explicit['shard']}: a shard resumes by itself; run the "
            "same command again without --resume"
        )
    run_words: list[str] = []
    if explicit.get("resume"):
        if explicit.get("output_dir") is None:
            raise ValueError("--resume needs the --output-dir of the run to continue")
        run_words = resume_argv(explicit["output_dir"], explicit, origins, parser)
    if "seed" in given and "seeds" in given:
        raise ValueError(
            f"--seed {given['seed']} and --seeds {given['seeds']}: give one; --seeds trains "
            "each of its seeds, --seed one run"
        )
    words = [*run_words, *file_words, *argv]
    args = parser.parse_args(words)
    if explicit.get("resume") and not any(w.startswith("--preset") for w in run_words):
        args.preset = QUICKSTART  # a run from before presets: trained on these defaults
    # A run recorded before --reset restarted as the quickstart's default did then.
    before_reset = explicit.get("resume") and not any(w.startswith("--reset") for w in run_words)
    if args.video and "mujoco" not in sys.modules:
        # MuJoCo fixes its OpenGL backend when imported, which the presets do next.
        from nnx_ppo.algorithms.observe.video import choose_mujoco_gl

        choose_mujoco_gl()
    # The preset's values become the defaults; every option given explicitly wins.
    args.preset = resolve_preset(args.preset, args.env)
    parser.set_defaults(**preset_options(args.preset, args.network), preset=args.preset)
    args = parser.parse_args(words)
    if args.lr_schedule is None:
        args.lr_schedule = PRESET_LR_SCHEDULE[args.network]
    if args.reset is None:
        args.reset = default_reset(args.no_stagger, QUICKSTART if before_reset else args.preset)
    return args


def with_learning_rate_schedule(config: Any, schedule: str) -> Any:
    """``config`` with its learning rate following ``schedule`` (``--lr-schedule``).

    ``"linear"``: an optax schedule from the config's rate down to 0 at the run's last
    optimizer update (``n_iterations * updates_per_iteration`` updates); ``"constant"``:
    ``config`` unchanged.

    Why the LSTM preset decays its rate (`PRESET_LR_SCHEDULE`): once a policy has
    learnt the task, its advantages are mostly noise (the raw advantage std falls about
    tenfold), but PPO normalises them to unit scale, so at a constant rate every
    iteration still moves the policy about as far as while it was learning (the same
    ``actor/approx_kl``). The LSTM on ``CartpoleBalance`` drifts through collapses of
    its return this way, and the final policy is wherever the drift is at the last
    update; a rate that decays to 0 makes it settle.

    Examples:
        >>> from nnx_ppo.algorithms import PPOConfig, TrainConfig
        >>> base = TrainConfig(ppo=PPOConfig(n_envs=8, n_minibatches=2, rollout_length=10,
        ...                                  n_epochs=2, total_steps=800, learning_rate=1e-3))
        >>> rate = with_learning_rate_schedule(base, "linear").ppo.learning_rate
        >>> [round(float(rate(n)), 6) for n in (0, 20, 40)]  # 10 iterations x 2 x 2 updates
        [0.001, 0.0005, 0.0]
        >>> with_learning_rate_schedule(base, "constant") is base
        True
    """
    if schedule not in LR_SCHEDULES:
        raise ValueError(
            f"--lr-schedule {schedule!r} is not a schedule; valid choices: "
            f"{', '.join(LR_SCHEDULES)}"
        )
    if schedule == "constant":
        return config
    from nnx_ppo.algorithms import linear_decay

    decay = linear_decay(config)
    return dataclasses.replace(config, ppo=dataclasses.replace(config.ppo, learning_rate=decay))


def default_reset(no_stagger: bool, preset: str) -> str:
    """``--reset``'s default: ``"cached"`` (brax's) with a Playground preset, which
    follows Playground's own training set-up (its resets can be costly, and ``"fresh"``
    would pay one at almost every step of staggered episodes), or without staggered
    starts; else ``"fresh"``, a new initial state per episode.

    Examples:
        >>> default_reset(False, "quickstart"), default_reset(False, "CheetahRun")
        ('fresh', 'cached')
        >>> default_reset(True, "quickstart")
        'cached'
    """
    return "cached" if no_stagger or preset != QUICKSTART else "fresh"


def options_text(args: argparse.Namespace) -> str:
    """The options of ``args`` that are not at the quickstart's defaults (a preset's
    values among them), as command-line words
    (``--output-dir``, ``--resume`` and ``--config`` left out), or ``"the defaults"``.

    Examples:
        >>> options_text(parse_args(["--learning-rate", "3e-4"]))
        '--learning-rate=0.0003'
        >>> words = options_text(parse_args(["--env", "CartpoleBalance", "--n-envs", "256"]))
        >>> words.split()[:4]
        ['--env=CartpoleBalance', '--rollout-length=30', '--n-minibatches=2', '--n-epochs=16']
        >>> words.split()[4:]
        ['--clip-range=0.3', '--reset=cached']
        >>> options_text(parse_args(["--network", "lstm", "--lr-schedule", "linear"]))
        '--network=lstm'
    """
    parser = _parser()
    defaults = {
        **option_defaults(parser),
        "lr_schedule": PRESET_LR_SCHEDULE[args.network],
        "reset": default_reset(args.no_stagger, QUICKSTART),  # a preset's is shown
        "preset": resolve_preset("auto", args.env),
    }
    changed = {
        name: value
        for name, value in arguments_record(args).items()
        if name not in ("output_dir", "resume", "config") and value != defaults.get(name)
    }
    words = options_argv(changed, parser, source="options")
    return " ".join(shlex.quote(word) for word in words) or "the defaults"
