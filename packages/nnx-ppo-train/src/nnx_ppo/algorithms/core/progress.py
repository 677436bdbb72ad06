"""Training progress, visible to the environment: the inputs of a curriculum.

Before every environment step the trainer writes how far training is into the batched
``state.info`` (brax's and MuJoCo Playground's dict of per-environment extras), under
these keys:

- ``info["training_step"]``: integer, the env steps trained before this step,
  ``(iteration * rollout_length + t) * n_envs`` at rollout step ``t``; exact, the same
  in every environment of the batch, on every device and after a resume;
- ``info["training_progress"]``: float32, that count over ``total_steps``, clipped to
  ``1.0``;
- ``info["is_training"]``: bool, ``True`` in training rollouts.

**Opt in by declaring the keys.** The trainer writes a key only if the environment's
``reset`` put it in ``info`` (e.g. ``info.update(progress_info())``), with the dtype
the environment chose (``int32`` by default, which holds up to ``2**31 - 1`` steps;
declare ``int64`` with ``jax_enable_x64`` for longer runs). Environments without the keys
are stepped exactly as before: their state's structure never changes, and nothing is
computed for them.

**Evaluation** (the trainer's periodic one and `evaluate`) writes
``training_progress = 1.0``, ``is_training = False`` and, in a training run,
``training_step`` = the steps the whole run trains for: evaluation measures the policy
on the final task. Videos are recorded the same way.

The environment reads the values in ``step``, not ``reset`` (``reset(key)`` sees only
its key; with ``reset_mode="cached"`` it runs once). A curriculum that changes the
start of an episode applies it on the episode's first step (e.g. where
``info["steps"] == 0``, or an ``info`` flag set by ``reset`` under
``EpisodeWrapper(stagger=...)``); see the how-to "Curriculum learning".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

__all__ = [
    "IS_TRAINING",
    "TRAINING_PROGRESS",
    "TRAINING_STEP",
    "check_step_range",
    "declared_keys",
    "progress_info",
    "training_progress",
    "write_progress",
]

TRAINING_STEP = "training_step"
"""``info`` key of the env steps trained so far (an integer)."""
TRAINING_PROGRESS = "training_progress"
"""``info`` key of the fraction of ``total_steps`` trained so far (float32, at most 1)."""
IS_TRAINING = "is_training"
"""``info`` key that is ``True`` in training rollouts and ``False`` in evaluation."""

_KEYS = (TRAINING_STEP, TRAINING_PROGRESS, IS_TRAINING)


def progress_info(step_dtype: Any = jnp.int32) -> dict[str, jax.Array]:
    """The three keys with their initial values, for an environment's ``reset`` to put
    in ``info`` (``info = {**info, **progress_info()}``).

    Args:
        step_dtype: The integer dtype of ``training_step`` (``jnp.int64`` needs
            ``jax_enable_x64``).

    Returns:
        ``{"training_step": 0, "training_progress": 0.0, "is_training": True}`` as
        scalar arrays.

    Examples:
        >>> sorted(progress_info())
        ['is_training', 'training_progress', 'training_step']
    """
    return {
        TRAINING_STEP: jnp.zeros((), step_dtype),
        TRAINING_PROGRESS: jnp.zeros((), jnp.float32),
        IS_TRAINING: jnp.ones((), bool),
    }


def declared_keys(env_state: Any) -> tuple[str, ...]:
    """The progress keys ``env_state.info`` has (none if it has no ``info`` dict)."""
    info = getattr(env_state, "info", None)
    if not isinstance(info, Mapping):
        return ()
    return tuple(key for key in _KEYS if key in info)


def training_progress(step: jax.Array, total_steps: int) -> jax.Array:
    """float32 ``[]``: ``step / total_steps`` clipped to ``[0, 1]`` (1 if
    ``total_steps`` is 0)."""
    if total_steps <= 0:
        return jnp.ones((), jnp.float32)
    fraction = jnp.asarray(step).astype(jnp.float32) / jnp.float32(total_steps)
    return jnp.clip(fraction, 0.0, 1.0)


def write_progress(
    env_state: Any,
    *,
    step: jax.Array | int | None,
    progress: jax.Array | float,
    training: bool,
) -> Any:
    """``env_state`` with the declared progress keys overwritten (a new state; the
    others untouched).

    Each value is cast to the dtype and broadcast to the shape (``[B]``) the key has in
    ``env_state.info``, so the state's structure, shapes and dtypes stay the same.

    Args:
        env_state: A batched environment state.
        step: The ``training_step`` value, or ``None`` to leave that key alone.
        progress: The ``training_progress`` value.
        training: The ``is_training`` value.

    Returns:
        The state, or ``env_state`` itself if it declares none of the keys.

    Raises:
        TypeError: If the environment declared ``training_step`` with a non-integer
            dtype.
    """
    keys = declared_keys(env_state)
    if not keys:
        return env_state
    values: dict[str, Any] = {TRAINING_PROGRESS: progress, IS_TRAINING: training}
    if step is not None:
        values[TRAINING_STEP] = step
    info = dict(env_state.info)
    for key in keys:
        if key not in values:
            continue
        leaf = jnp.asarray(info[key])
        if key == TRAINING_STEP and not jnp.issubdtype(leaf.dtype, jnp.integer):
            raise TypeError(
                f"the environment's info[{TRAINING_STEP!r}] has dtype {leaf.dtype}, but the "
                "step count is exact: declare it as an integer, e.g. "
                "jnp.zeros((), jnp.int32) (progress_info() does)."
            )
        info[key] = jnp.broadcast_to(jnp.asarray(values[key]).astype(leaf.dtype), leaf.shape)
    return env_state.replace(info=info)


def check_step_range(env_state: Any, last_step: int) -> None:
    """Raise ``ValueError`` if the declared ``training_step`` dtype cannot hold
    ``last_step`` (the last count the run writes)."""
    if TRAINING_STEP not in declared_keys(env_state):
        return
    leaf = env_state.info[TRAINING_STEP]
    dtype = leaf.dtype if hasattr(leaf, "dtype") else jnp.asarray(leaf).dtype
    if jnp.issubdtype(dtype, jnp.integer) and last_step > int(jnp.iinfo(dtype).max):
        raise ValueError(
            f"the run writes info[{TRAINING_STEP!r}] up to {last_step} steps, more than its "
            f"dtype {dtype} holds ({int(jnp.iinfo(dtype).max)}): declare it as int64 "
            "(progress_info(jnp.int64), with jax.config.update('jax_enable_x64', True)) or "
            "train for fewer steps."
        )
