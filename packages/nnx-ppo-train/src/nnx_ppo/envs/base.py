"""The environment API: `Env` and the `State` it returns.

The API is the one of brax and MuJoCo Playground, so the trainer, the wrappers and user
code treat our environments, ``brax.envs.get_environment(...)`` environments and
``mujoco_playground.registry.load(...)`` environments alike:

- An environment is a **single, unbatched** environment. ``reset(key) -> State`` and
  ``step(state, action) -> State`` are pure functions of their inputs; the trainer
  ``jax.vmap``s them over environments and ``jax.jit``s the result.
- A `State` is a pytree with ``obs``, ``reward``, ``done``, ``metrics`` and
  ``info``. ``done`` is a float32 scalar (1.0 = the episode ended at this step);
  ``info`` carries per-environment bookkeeping such as ``info["truncation"]``, which
  `EpisodeWrapper` writes, exactly as brax and Playground do.
- ``observation_size`` is an ``int`` for array observations and a dict of shape tuples
  for dict observations; ``action_size`` is an ``int`` for array actions and a dict of
  ``int`` for dict actions.

Our environments never truncate by themselves: wrap them in
`EpisodeWrapper` to bound the episode length.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any

import jax
from flax import struct

__all__ = ["ActionSize", "Env", "ObservationSize", "State"]

ObservationSize = int | Mapping[str, tuple[int, ...]]
"""``int`` for an array observation ``[obs_size]``, else a dict of per-key shapes."""

ActionSize = int | Mapping[str, int]
"""``int`` for an array action ``[action_size]``, else a dict of per-key sizes."""


@struct.dataclass
class State:
    """The state of one (unbatched) environment: a frozen pytree.

    The field names match ``brax.envs.base.State`` and
    ``mujoco_playground.State`` (brax's ``pipeline_state`` holds our environments'
    internal dynamics state), so brax's training wrappers also accept our environments.

    Attributes:
        obs: The observation, an array ``[obs_size]`` or a dict of arrays.
        reward: The reward of the step that produced this state, a float32 scalar
            ``[]`` or a dict of scalars (one per reward stream, e.g. per agent).
        done: Float32 scalar ``[]``, 1.0 when the episode ended at this step
            (terminated, or truncated by `EpisodeWrapper`).
        metrics: Dict of float32 scalars for logging.
        info: Dict of per-environment bookkeeping (``"truncation"``, ``"steps"``, ...).
        pipeline_state: The environment's internal dynamics state (any pytree), or
            ``None``. The trainer never reads it.
    """

    obs: Any
    reward: Any
    done: jax.Array
    metrics: dict[str, Any] = struct.field(default_factory=dict)
    info: dict[str, Any] = struct.field(default_factory=dict)
    pipeline_state: Any = None


class Env(abc.ABC):
    """Base class of the environments in `nnx_ppo.envs`.

    Subclasses implement `reset`, `step` and `action_size`;
    `observation_size` is derived from the shape of ``reset``'s observation
    (without running it) and may be overridden with a constant.
    """

    @abc.abstractmethod
    def reset(self, rng: jax.Array) -> State:
        """Starts a new episode.

        Args:
            rng: A PRNG key (``jax.random.key`` or ``jax.random.PRNGKey``); the whole
                episode is a deterministic function of it and the actions.

        Returns:
            The initial state with ``reward`` 0 and ``done`` 0.
        """

    @abc.abstractmethod
    def step(self, state: State, action: Any) -> State:
        """Advances the environment by one step.

        Args:
            state: The current state.
            action: An array ``[action_size]`` or a dict of arrays matching
                `action_size`. Values are clipped to ``[-1, 1]``.

        Returns:
            The next state, whose ``reward`` and ``done`` describe this step.
        """

    @property
    @abc.abstractmethod
    def action_size(self) -> ActionSize:
        """The size of the action vector (``int``), or a dict of per-key sizes."""

    @property
    def observation_size(self) -> ObservationSize:
        """The size of the observation vector (``int``), or a dict of per-key shapes."""
        obs = jax.eval_shape(self.reset, jax.random.PRNGKey(0)).obs
        if isinstance(obs, Mapping):
            return {k: tuple(v.shape) for k, v in obs.items()}
        return int(obs.shape[-1])

    @property
    def unwrapped(self) -> Env:
        """The innermost environment (this one; wrappers return what they wrap)."""
        return self
