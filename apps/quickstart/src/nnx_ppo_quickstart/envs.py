"""Environment lookup in the brax and MuJoCo Playground registries."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

from nnx_ppo.wrappers import RewardScalingWrapper, wrap_for_training

__all__ = ["EnvPair", "available_envs", "make_envs"]


@dataclasses.dataclass(frozen=True)
class EnvPair:
    """The training env (reward-scaled) and the evaluation env (raw rewards)."""

    train: Any
    eval: Any
    source: str
    observation_size: Any
    action_size: Any


def _brax_names() -> list[str]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from brax import envs
    except ImportError:
        return []
    return sorted(envs._envs)


def _playground_names() -> list[str]:
    try:
        from mujoco_playground import registry
    except ImportError:
        return []
    return sorted(registry.ALL_ENVS)


def available_envs() -> dict[str, list[str]]:
    """Registered environment names per source (``brax``, ``playground``)."""
    return {"brax": _brax_names(), "playground": _playground_names()}


def make_envs(
    name: str,
    *,
    episode_length: int,
    reward_scaling: float,
    brax_backend: str,
    stagger: bool = True,
) -> EnvPair:
    """Load ``name`` from brax (first) or Playground and wrap it for training
    (`wrap_for_training`: staggered starts unless ``stagger=False``); the evaluation
    environment plays whole episodes.

    Raises:
        ValueError: If no registry knows ``name``; the message lists the valid names.
    """
    names = available_envs()
    if name in names["brax"]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from brax import envs

            base = envs.get_environment(name, backend=brax_backend)
        source = f"brax ({brax_backend})"
    elif name in names["playground"]:
        from mujoco_playground import registry

        # The default "warp" implementation is ~25x slower on CPU; "jax" runs anywhere.
        base = registry.load(name, config_overrides={"impl": "jax"})
        source = "MuJoCo Playground (impl jax)"
    else:
        valid = ", ".join(names["brax"] + names["playground"]) or "(install brax or playground)"
        raise ValueError(f"unknown --env {name!r}; valid choices: {valid}")
    episodes = wrap_for_training(base, episode_length=episode_length, stagger=stagger)
    train = RewardScalingWrapper(episodes, reward_scaling)
    evaluation = wrap_for_training(base, episode_length=episode_length, stagger=False)
    return EnvPair(train, evaluation, source, base.observation_size, base.action_size)
