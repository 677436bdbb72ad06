"""Helpers the environments of `nnx_ppo.envs` share (package-internal): the action
check of every ``step``, the constructor's number and flag checks and the kinematic
update of a point on the plane."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from nnx_ppo.envs.base import ActionSize

__all__ = ["check_action", "check_bool", "check_float", "move"]


def check_action(action: Any, action_size: ActionSize, env_name: str) -> Any:
    """Validates an action's structure and shapes at trace time and clips it to [-1, 1].

    Args:
        action: An array ``[A]`` or a dict of arrays ``{key: [A_key]}``.
        action_size: What the environment expects (``int`` or dict of ``int``).
        env_name: Used in the error message.

    Returns:
        The action (same structure) as float32, clipped to ``[-1, 1]``.

    Raises:
        ValueError: If the structure or a shape does not match ``action_size``.
    """
    if isinstance(action_size, Mapping):
        keys = sorted(action_size)
        if not isinstance(action, Mapping) or sorted(action) != keys:
            got = sorted(action) if isinstance(action, Mapping) else type(action).__name__
            raise ValueError(
                f"{env_name}.step: action must be a dict with keys {keys}, got {got}. "
                f"Build the policy's action tree from env.action_size={dict(action_size)}."
            )
        return {k: check_action(action[k], action_size[k], f"{env_name}[{k!r}]") for k in keys}
    if isinstance(action, Mapping) or jnp.shape(action) != (action_size,):
        shape = type(action).__name__ if isinstance(action, Mapping) else jnp.shape(action)
        raise ValueError(
            f"{env_name}.step: action must be an unbatched array of shape ({action_size},), "
            f"got {shape}. The env is unbatched; vmap step over environments and make the "
            f"policy output env.action_size={action_size} values."
        )
    return jnp.clip(jnp.asarray(action, jnp.float32), -1.0, 1.0)


def check_float(owner: str, name: str, value: Any, *, allow_zero: bool, meaning: str) -> float:
    """Returns ``float(value)`` if it is a finite real ``> 0`` (``>= 0`` with ``allow_zero``).

    Raises:
        ValueError: Naming ``owner``, ``name`` and ``value`` otherwise.
    """
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{owner}: {name}={value!r} must be a finite number {bound} ({meaning}).")
    return float(value)


def check_bool(owner: str, name: str, value: Any) -> bool:
    """Returns ``value`` if it is ``True`` or ``False``.

    Raises:
        ValueError: Naming ``owner``, ``name`` and ``value`` otherwise.
    """
    if not isinstance(value, bool):
        raise ValueError(f"{owner}: {name}={value!r} must be True or False.")
    return value


def move(pos: jax.Array, action: jax.Array, step_size: float, arena_size: float) -> jax.Array:
    """Kinematic point update ``clip(pos + step_size * action, -arena, arena)``, ``[2]``."""
    return jnp.clip(pos + step_size * action, -arena_size, arena_size)
