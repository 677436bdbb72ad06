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


def add_training_arguments(parser: argparse.ArgumentParser, defaults: TrainingDefaults) -> None:
    """Add the shared PPO and evaluation options to ``parser``, as a group of ``--help``.

    Args:
        parser: The app's parser.
        defaults: The app's defaults.
    """
    group = parser.add_argument_group("training (PPO) and evaluation")
    group.add_argument(
        "--steps", type=positive_int, default=defaults.steps, help="environment steps to train"
    )
    group.add_argument(
        "--n-envs", type=positive_int, default=defaults.n_envs, help="parallel environments"
    )
    group.add_argument(
        "--rollout-length",
        type=positive_int,
        default=defaults.rollout_length,
        help="steps per environment per iteration (a recurrent policy's replay window)",
    )
    group.add_argument(
        "--n-minibatches",
        type=positive_int,
        default=defaults.n_minibatches,
        help="minibatches per epoch; --n-envs must be a multiple of it",
    )
    group.add_argument(
        "--n-epochs",
        type=positive_int,
        default=defaults.n_epochs,
        help="passes over each rollout",
    )
    group.add_argument(
        "--learning-rate", type=float, default=defaults.learning_rate, help="Adam step size"
    )
    group.add_argument(
        "--discount",
        type=float,
        default=defaults.discount,
        help=defaults.discount_help or "discount factor gamma; horizon about 1 / (1 - gamma)",
    )
    group.add_argument(
        "--episode-length",
        type=positive_int,
        default=defaults.episode_length,
        help="steps before an episode is cut (training and evaluation)",
    )
    group.add_argument(
        "--eval-every",
        type=positive_int,
        default=defaults.eval_every,
        help="environment steps between evaluations",
    )
    group.add_argument(
        "--eval-envs",
        type=positive_int,
        default=defaults.eval_envs,
        help="environments per evaluation",
    )


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

    return TrainConfig(
        ppo=PPOConfig(
            n_envs=args.n_envs,
            rollout_length=args.rollout_length,
            total_steps=args.steps,
            n_epochs=args.n_epochs,
            n_minibatches=args.n_minibatches,
            learning_rate=args.learning_rate,
            discounting_factor=args.discount,
            **ppo_fields,
        ),
        eval=EvalConfig(
            every_steps=args.eval_every,
            n_envs=args.eval_envs,
            max_episode_length=args.episode_length,
        ),
        seed=seed,
    )
