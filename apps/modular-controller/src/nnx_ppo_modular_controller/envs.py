"""brax ``ant`` with per-body-part observations and actions, ready for ``train_ppo``."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

from nnx_ppo.wrappers import EpisodeWrapper, RewardScalingWrapper
from nnx_ppo_modular_controller.body import ANT, BodyLayout
from nnx_ppo_modular_controller.wrappers import BodyPartObservationWrapper, DictActionWrapper

__all__ = ["BACKENDS", "EnvPair", "make_envs"]

BACKENDS = ("spring", "generalized", "positional", "mjx")
"""brax physics backends the ant runs on; ``spring`` steps fastest on CPU."""


@dataclasses.dataclass(frozen=True)
class EnvPair:
    """The training env (reward-scaled) and the evaluation env (raw rewards)."""

    train: Any
    eval: Any


def make_envs(
    *,
    backend: str = "spring",
    episode_length: int = 1000,
    reward_scaling: float = 10.0,
    layout: BodyLayout = ANT,
) -> EnvPair:
    """brax ``ant`` wrapped as ``{part: obs}`` in, ``{joint: torque}`` out.

    ``RewardScalingWrapper(EpisodeWrapper(DictActionWrapper(BodyPartObservationWrapper(
    ant))))`` for training; the evaluation env leaves out the reward scaling.

    Args:
        backend: One of `BACKENDS`.
        episode_length: Steps per episode (brax's ant: 1000).
        reward_scaling: Factor on the training rewards.
        layout: Which observation entries and actuators belong to which body part.

    Returns:
        The two environments.

    Raises:
        ValueError: On an unknown backend (the message lists the valid ones).
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown --backend {backend!r}; valid choices: {', '.join(BACKENDS)}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from brax import envs

        base = envs.get_environment("ant", backend=backend)
    env = DictActionWrapper(
        BodyPartObservationWrapper(base, layout.observation),
        dict.fromkeys(layout.actuators, 1),
    )
    evaluation = EpisodeWrapper(env, episode_length)
    train = RewardScalingWrapper(EpisodeWrapper(env, episode_length), reward_scaling)
    return EnvPair(train, evaluation)
