"""The PPO options the training apps share, and the `TrainConfig` built from them.

Every training app (``nnx-ppo-quickstart``, ``nnx-ppo-memory-task``,
``nnx-ppo-modular-controller``) takes the same options for the PPO budget and
hyperparameters and for the periodic evaluation, each with its own defaults:

    >>> import argparse
    >>> parser = argparse.ArgumentParser(prog="demo")
    >>> add_training_arguments(parser, TrainingDefaults(steps=50_000, n_envs=64))
    >>> args = parser.parse_args(["--n-envs", "128"])
    >>> args.n_envs, args.steps, args.n_minibatches
    (128, 50000, 8)
    >>> train_config(args, seed=3).ppo.n_envs
    128
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nnx_ppo_apps_common.cli import positive_int

if TYPE_CHECKING:
    from nnx_ppo.algorithms import TrainConfig

__all__ = ["TrainingDefaults", "add_training_arguments", "train_config"]


@dataclasses.dataclass(frozen=True)
class TrainingDefaults:
    """An app's defaults for the shared options (``--help`` shows them).

    Attributes:
        steps: ``--steps``, environment steps to train.
        n_envs: ``--n-envs``, parallel environments.
        rollout_length: ``--rollout-length``, steps per environment per iteration.
        n_minibatches: ``--n-minibatches``.
        n_epochs: ``--n-epochs``.
        learning_rate: ``--learning-rate``.
        discount: ``--discount`` (``PPOConfig.discounting_factor``).
        discount_help: The help text of ``--discount`` (why this default), if not the
            generic one.
        episode_length: ``--episode-length``, also the evaluation's episode limit.
        eval_every: ``--eval-every``, environment steps between evaluations.
        eval_envs: ``--eval-envs``, environments per evaluation.
    """

    steps: int
    n_envs: int
    rollout_length: int = 20
    n_minibatches: int = 8
    n_epochs: int = 4
    learning_rate: float = 1e-3
    discount: float = 0.97
    discount_help: str | None = None
    episode_length: int = 1000
    eval_every: int = 10_000
    eval_envs: int = 16


_OPTIONS: tuple[tuple[str, Callable[[str], Any], str, str], ...] = (
    # (flag, type, the config field it fills, help); the flag's dest is its
    # `TrainingDefaults` field.
    ("--steps", positive_int, "ppo.total_steps", "environment steps to train"),
    ("--n-envs", positive_int, "ppo.n_envs", "parallel environments"),
    ("--rollout-length", positive_int, "ppo.rollout_length",
     "steps per environment per iteration (a recurrent policy's replay window)"),
    ("--n-minibatches", positive_int, "ppo.n_minibatches",
     "minibatches per epoch; --n-envs must be a multiple of it"),
    ("--n-epochs", positive_int, "ppo.n_epochs", "passes over each rollout"),
    ("--learning-rate", float, "ppo.learning_rate", "Adam step size"),
    ("--discount", float, "ppo.discounting_factor",
     "discount factor gamma; horizon about 1 / (1 - gamma)"),
    ("--episode-length", positive_int, "eval.max_episode_length",
     "steps before an episode is cut (training and evaluation)"),
    ("--eval-every", positive_int, "eval.every_steps", "environment steps between evaluations"),
    ("--eval-envs", positive_int, "eval.n_envs", "environments per evaluation"),
)  # fmt: skip
"""The shared options, in ``--help`` order: each declared once, with the field it fills."""


def _dest(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_")


def add_training_arguments(parser: argparse.ArgumentParser, defaults: TrainingDefaults) -> None:
    """Add the shared PPO and evaluation options to ``parser``, as a group of ``--help``.

    Args:
        parser: The app's parser.
        defaults: The app's defaults.
    """
    group = parser.add_argument_group("training (PPO) and evaluation")
    for flag, kind, _, text in _OPTIONS:
        if flag == "--discount" and defaults.discount_help:
            text = defaults.discount_help
        group.add_argument(flag, type=kind, default=getattr(defaults, _dest(flag)), help=text)


def train_config(args: argparse.Namespace, *, seed: int, **ppo_fields: Any) -> TrainConfig:
    """The `TrainConfig` of the options `add_training_arguments` added.

    Args:
        args: The parsed command line.
        seed: ``TrainConfig.seed``.
        **ppo_fields: Further `PPOConfig` fields of the app (e.g. ``log_level``).

    Raises:
        ValueError: From the configs' validation, naming the field and the fix (e.g.
            ``n_envs`` not a multiple of ``n_minibatches``); apps report it with
            `nnx_ppo_apps_common.cli.fail`.
    """
    from nnx_ppo.algorithms import EvalConfig, PPOConfig, TrainConfig

    fields: dict[str, dict[str, Any]] = {"ppo": {}, "eval": {}}
    for flag, _, target, _ in _OPTIONS:
        config, field = target.split(".")
        fields[config][field] = getattr(args, _dest(flag))
    return TrainConfig(
        ppo=PPOConfig(**fields["ppo"], **ppo_fields),
        eval=EvalConfig(**fields["eval"]),
        seed=seed,
    )
