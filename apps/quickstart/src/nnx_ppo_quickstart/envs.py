"""Environment lookup in the brax and MuJoCo Playground registries."""

from __future__ import annotations

import dataclasses
import difflib
import warnings
from typing import Any

from nnx_ppo.wrappers import (
    Latency,
    ObservationHistory,
    RewardScalingWrapper,
    wrap_for_training,
)
from nnx_ppo_quickstart.assets import ensure_menagerie

__all__ = ["EnvPair", "available_envs", "make_envs", "parse_lag", "unknown_env_message"]


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


def unknown_env_message(name: str, names: dict[str, list[str]]) -> str:
    """The error for an ``--env`` no registry knows: the closest names first (a
    did-you-mean, by `difflib.get_close_matches`, ignoring case), then every valid one.

    Examples:
        >>> names = {"brax": ["ant", "inverted_pendulum"], "playground": ["CartpoleBalance"]}
        >>> print(unknown_env_message("cartpolebalance", names))  # doctest: +ELLIPSIS
        unknown --env 'cartpolebalance'; did you mean 'CartpoleBalance'? valid choices: ...
        >>> print(unknown_env_message("humanoid", names))
        unknown --env 'humanoid'; valid choices: ant, inverted_pendulum, CartpoleBalance
    """
    valid = names["brax"] + names["playground"]
    by_folded = {known.casefold(): known for known in valid}
    close = difflib.get_close_matches(name.casefold(), list(by_folded), n=3, cutoff=0.6)
    message = f"unknown --env {name!r}; "
    if close:
        message += f"did you mean {' or '.join(repr(by_folded[c]) for c in close)}? "
    return message + "valid choices: " + (", ".join(valid) or "(install brax or playground)")


def parse_lag(option: str, text: str) -> int | tuple[int, int]:
    """A lag option's value: ``"k"`` (always ``k`` steps) or ``"low:high"`` (drawn in
    ``[low, high]``), as `Latency` takes it.

    Raises:
        ValueError: If ``text`` is neither, or a lag is negative or ``low > high``,
            naming ``option``.
    """
    try:
        parts = [int(part) for part in text.split(":")]
    except ValueError:
        parts = []
    if len(parts) == 1 and parts[0] >= 0:
        return parts[0]
    if len(parts) == 2 and 0 <= parts[0] <= parts[1]:
        return parts[0], parts[1]
    raise ValueError(
        f"{option} {text!r} is not a lag: give steps as K >= 0 (always K) or LOW:HIGH with "
        f"0 <= LOW <= HIGH (drawn per environment and episode), e.g. {option} 0:3"
    )


def make_envs(
    name: str,
    *,
    episode_length: int,
    reward_scaling: float,
    brax_backend: str,
    stagger: bool = True,
    action_lag: str = "0",
    obs_lag: str = "0",
    lag_hold_prob: float = 1.0,
    action_repeat: int = 1,
    obs_history: int = 1,
) -> EnvPair:
    """Load ``name`` from brax (first) or Playground and wrap it for training
    (`wrap_for_training`: staggered starts unless ``stagger=False``); the evaluation
    environment plays whole episodes.

    ``action_lag`` and ``obs_lag`` (``"k"`` or ``"low:high"``, see `parse_lag`) put the
    environment behind `Latency` (with ``hold_prob=lag_hold_prob``), for training and
    evaluation alike: the run's environment is the slow plant.

    Raises:
        ValueError: If no registry knows ``name`` (the message lists the valid names),
            a lag option is invalid, or a Playground robot's assets (MuJoCo Menagerie)
            are missing and cannot be had (`ensure_menagerie`: the message says what
            to do).
    """
    lags = {"action_lag": parse_lag("--action-lag", action_lag)}
    lags["obs_lag"] = parse_lag("--obs-lag", obs_lag)
    names = available_envs()
    if name in names["brax"]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from brax import envs

            base = envs.get_environment(name, backend=brax_backend)
        source = f"brax ({brax_backend})"
    elif name in names["playground"]:
        from mujoco_playground import registry

        ensure_menagerie(name)  # a robot's assets, or a one-line error naming the fix

        # The default "warp" implementation is ~25x slower on CPU; "jax" runs anywhere.
        base = registry.load(name, config_overrides={"impl": "jax"})
        source = "MuJoCo Playground (impl jax)"
    else:
        raise ValueError(unknown_env_message(name, names))
    if lags != {"action_lag": 0, "obs_lag": 0}:
        try:
            base = Latency(base, **lags, hold_prob=lag_hold_prob)  # type: ignore[arg-type]
        except ValueError as error:  # name the command-line options
            raise ValueError(
                f"--action-lag {action_lag} --obs-lag {obs_lag} --lag-hold-prob "
                f"{lag_hold_prob}: {error}"
            ) from None
        source += f", action lag {action_lag}, observation lag {obs_lag} steps"
    episodes: Any = wrap_for_training(
        base, episode_length=episode_length, action_repeat=action_repeat, stagger=stagger
    )
    evaluation: Any = wrap_for_training(
        base, episode_length=episode_length, action_repeat=action_repeat, stagger=False
    )
    if obs_history > 1:
        episodes = ObservationHistory(episodes, obs_history, flatten=True)
        evaluation = ObservationHistory(evaluation, obs_history, flatten=True)
        source += f", the last {obs_history} observations"
    train = RewardScalingWrapper(episodes, reward_scaling)
    return EnvPair(train, evaluation, source, evaluation.observation_size, base.action_size)
