"""`GymnaxEnv`: any gymnax environment in this library's environment API.

gymnax (``pip install 'nnx-ppo-train[gymnax]'``, gymnax >= 1.0) environments are
``env.reset_env(key, params) -> (obs, env_state)`` and
``env.step_env(key, env_state, action, params) -> (obs, env_state, reward, terminated,
info)``, with the environment's parameters (``EnvParams``) passed to every call.
`GymnaxEnv` turns one into an environment like ours, brax's and Playground's
(`nnx_ppo.envs.base`): ``reset(rng) -> State``, ``step(state, action) -> State``,
``observation_size`` and ``action_size``, so `train_ppo` and `train_many` train it
without user code.

What the adapter does, step by step:

- **No auto-reset.** gymnax's ``step`` resets a finished environment inside the step;
  the adapter calls ``step_env`` instead, because the trainer resets finished
  environments itself (``PPOConfig.reset_mode``) and bootstraps a truncated episode
  from its true final observation, which an auto-reset would replace.
- **Termination and truncation kept apart** (the contract of
  `nnx_ppo.wrappers.training`). ``terminated`` is ``step_env``'s fourth value (in
  gymnax >= 1.0 it is the natural end only; the time limit is not folded in). The time
  limit is gymnax's own ``at_limit = env.is_truncated(new_env_state, params)``, by
  default ``new_env_state.time >= params.max_steps_in_episode``. Then ``done =
  terminated | at_limit`` and ``info["truncation"] = at_limit & ~terminated``: a step that
  terminates on the last allowed step is a termination, exactly as `EpisodeWrapper`
  decides. An environment whose state has no ``time`` or whose params have no
  ``max_steps_in_episode`` (and that does not override ``is_truncated``) has no time
  limit of its own; bound it with `nnx_ppo.wrappers.wrap_for_training`. To use
  `wrap_for_training`'s limit (and its staggered starts) instead of gymnax's, build the
  adapter with ``time_limit=False``: `EpisodeWrapper` decides truncation from its own
  count and ``done``, so a gymnax truncation under it would read as a termination.
- **Actions.** A ``Discrete(n)`` action space gives ``action_size = n`` and
  ``action_distribution = "categorical"``: the policy's integer action (``[]`` per
  environment, a `CategoricalSampler`'s) is passed on. A ``Box`` gives
  ``action_size = prod(shape)`` and ``action_distribution = "normal_tanh"``: the action
  ``[action_size]`` is clipped to ``[-1, 1]`` and mapped linearly onto
  ``[low, high]`` of ``env.action_space(params)`` (``rescale_actions=False`` passes
  the clipped action through). Give ``action_distribution`` to
  ``make_mlp_actor_critic``.
- **Observations** are cast to float32 and flattened to ``[observation_size]``
  (MinAtar's ``[10, 10, C]`` boolean images become vectors of 0/1).
- **Params** are stored on the adapter (``env.params``) and read when ``reset`` and
  ``step`` are traced. gymnax's step ``info`` (e.g. ``"discount"``) is dropped; the
  state's ``info`` holds ``"truncation"`` only.

gymnax is imported when an adapter is built, never when `nnx_ppo.envs` is imported.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from nnx_ppo.envs.base import Env, State

__all__ = ["GymnaxEnv", "GymnaxPipelineState"]

_INSTALL = "pip install 'nnx-ppo-train[gymnax]' (gymnax >= 1.0.1)"


@struct.dataclass
class GymnaxPipelineState:
    """What a `GymnaxEnv` state carries besides the observation (its ``pipeline_state``).

    Attributes:
        env_state: gymnax's ``EnvState`` (any pytree; ``time`` counts the steps).
        key: The PRNG key of the next ``step_env`` (gymnax environments may be
            stochastic); split on every step.
    """

    env_state: Any
    key: jax.Array


def _gymnax() -> Any:
    try:
        from gymnax.environments import environment, spaces
    except ImportError as error:
        raise ImportError(f"GymnaxEnv needs gymnax: {_INSTALL}. ({error})") from error
    if not hasattr(environment.Environment, "is_truncated"):
        raise ImportError(
            "GymnaxEnv needs gymnax >= 1.0, which separates the time limit "
            "(Environment.is_truncated) from termination; the installed gymnax folds the "
            f"time limit into done. {_INSTALL}."
        )
    return environment, spaces


class GymnaxEnv(Env):
    """A gymnax environment in the brax / Playground API (see the module docstring).

    Args:
        env: A gymnax ``Environment`` (from ``gymnax.make`` or a user's subclass of
            ``gymnax.environments.environment.Environment``).
        params: Its ``EnvParams``; ``None`` takes ``env.default_params``.
        rescale_actions: For a ``Box`` action space: map the policy's ``[-1, 1]``
            onto the space's ``[low, high]`` (the bounds must then be finite). With
            ``False`` the action is clipped to ``[-1, 1]`` and passed on as it is.
        time_limit: Truncate at gymnax's time limit (``env.is_truncated``). ``False``
            ignores it (gymnax's ``time`` still counts); bound the episode with
            `nnx_ppo.wrappers.wrap_for_training` then.

    Attributes:
        env: The gymnax environment.
        params: The environment parameters passed to every ``reset_env``/``step_env``.
        action_distribution: ``"categorical"`` (``Discrete`` actions) or
            ``"normal_tanh"`` (``Box``): the ``make_mlp_actor_critic`` option.
        discrete: Whether the actions are discrete.
        max_episode_steps: ``params.max_steps_in_episode`` where the time limit is
            gymnax's default one, else ``None`` (an overridden ``is_truncated``, no
            time limit, or ``time_limit=False``).

    Raises:
        ImportError: If gymnax (>= 1.0) is not installed.
        TypeError: If ``env`` is not a gymnax ``Environment`` or its action space is
            neither ``Discrete`` nor ``Box``.
        ValueError: If ``rescale_actions`` and a ``Box`` bound is not finite.

    Examples:
        >>> import jax, gymnax
        >>> env = GymnaxEnv(*gymnax.make("CartPole-v1"))
        >>> env.observation_size, env.action_size, env.action_distribution
        (4, 2, 'categorical')
        >>> s = env.step(env.reset(jax.random.key(0)), jax.numpy.int32(1))
        >>> s.obs.shape, float(s.done), float(s.info["truncation"])
        ((4,), 0.0, 0.0)
    """

    def __init__(
        self,
        env: Any,
        params: Any = None,
        *,
        rescale_actions: bool = True,
        time_limit: bool = True,
    ) -> None:
        environment, spaces = _gymnax()
        if not isinstance(env, environment.Environment):
            raise TypeError(
                f"GymnaxEnv: env={env!r} is not a gymnax Environment; pass "
                "GymnaxEnv(*gymnax.make(name)) or an instance of a subclass of "
                "gymnax.environments.environment.Environment."
            )
        self.env = env
        self.params = env.default_params if params is None else params
        self.rescale_actions = bool(rescale_actions)
        space = env.action_space(self.params)
        if isinstance(space, spaces.Discrete):
            self.discrete = True
            self._action_size = int(space.n)
        elif isinstance(space, spaces.Box):
            self.discrete = False
            self._action_size = math.prod(tuple(space.shape))
            bounds = np.concatenate([np.ravel(space.low), np.ravel(space.high)])
            if self.rescale_actions and not np.all(np.isfinite(bounds)):
                raise ValueError(
                    f"GymnaxEnv: {env.name}'s action space {space!r} has an unbounded side, "
                    "so [-1, 1] cannot be mapped onto it; pass rescale_actions=False (the "
                    "action is then clipped to [-1, 1] and passed on)."
                )
        else:
            raise TypeError(
                f"GymnaxEnv: {env.name}'s action space {space!r} is neither Discrete nor "
                "Box; only those map onto a sampler (CategoricalSampler, NormalTanhSampler)."
            )
        self.action_distribution: Literal["categorical", "normal_tanh"] = (
            "categorical" if self.discrete else "normal_tanh"
        )
        own_limit = type(env).is_truncated is not environment.Environment.is_truncated
        shapes = jax.eval_shape(lambda k: env.reset_env(k, self.params), jax.random.key(0))
        default_limit = hasattr(self.params, "max_steps_in_episode") and hasattr(shapes[1], "time")
        self._time_limit = bool(time_limit) and (own_limit or default_limit)
        self.max_episode_steps: int | None = (
            int(self.params.max_steps_in_episode) if self._time_limit and not own_limit else None
        )
        self._observation_size = math.prod(tuple(shapes[0].shape))

    @classmethod
    def make(
        cls, name: str, *, rescale_actions: bool = True, time_limit: bool = True, **params: Any
    ) -> GymnaxEnv:
        """``GymnaxEnv(*gymnax.make(name))`` with ``params`` replacing default values.

        Args:
            name: A ``gymnax.make`` name, e.g. ``"CartPole-v1"``.
            rescale_actions: As for `GymnaxEnv`.
            time_limit: As for `GymnaxEnv`.
            **params: Fields of the environment's ``EnvParams``, e.g.
                ``max_steps_in_episode=200``.

        Examples:
            >>> GymnaxEnv.make("Pendulum-v1", max_steps_in_episode=100).max_episode_steps
            100
        """
        _gymnax()
        import gymnax

        env, default = gymnax.make(name)
        fields = sorted(f.name for f in dataclasses.fields(default))
        unknown = sorted(set(params) - set(fields))
        if unknown:
            raise ValueError(
                f"GymnaxEnv.make: {unknown} are not fields of {name}'s EnvParams {fields}."
            )
        params_ = default.replace(**params)
        return cls(env, params_, rescale_actions=rescale_actions, time_limit=time_limit)

    @property
    def observation_size(self) -> int:
        """The length of the flattened observation."""
        return self._observation_size

    @property
    def action_size(self) -> int:
        """The number of choices (``Discrete``) or of action entries (``Box``)."""
        return self._action_size

    def reset(self, rng: jax.Array) -> State:
        """A new episode (``reset_env``); ``reward``, ``done`` and truncation 0."""
        key, reset_key = jax.random.split(rng)
        obs, env_state = self.env.reset_env(reset_key, self.params)
        zero = jnp.zeros((), jnp.float32)
        return State(
            obs=self._obs(obs),
            reward=zero,
            done=zero,
            metrics={},
            info={"truncation": zero},
            pipeline_state=GymnaxPipelineState(env_state, key),
        )

    def step(self, state: State, action: Any) -> State:
        """One ``step_env`` without auto-reset.

        Args:
            state: The current state.
            action: An integer ``[]`` (or ``[1]``) for ``Discrete`` actions, else an
                array ``[action_size]`` in ``[-1, 1]``.

        Returns:
            The next state; ``done`` is 1 at a termination or at the time limit, and
            ``info["truncation"]`` is 1 at the time limit only when the step did not
            also terminate.
        """
        key, step_key = jax.random.split(state.pipeline_state.key)
        obs, env_state, reward, terminated, _ = self.env.step_env(
            step_key, state.pipeline_state.env_state, self._action(action), self.params
        )
        terminated = jnp.asarray(terminated, bool).reshape(())
        if self._time_limit:
            at_limit = jnp.asarray(self.env.is_truncated(env_state, self.params), bool)
            truncated = at_limit.reshape(()) & ~terminated
        else:
            truncated = jnp.zeros((), bool)
        return state.replace(
            obs=self._obs(obs),
            reward=jnp.asarray(reward, jnp.float32).reshape(()),
            done=(terminated | truncated).astype(jnp.float32),
            info={**state.info, "truncation": truncated.astype(jnp.float32)},
            pipeline_state=GymnaxPipelineState(env_state, key),
        )

    def _obs(self, obs: Any) -> jax.Array:
        return jnp.asarray(obs, jnp.float32).reshape(-1)

    def _action(self, action: Any) -> jax.Array:
        """The policy's action as the gymnax action space expects it (at trace time)."""
        space = self.env.action_space(self.params)
        action = jnp.asarray(action)
        if self.discrete:
            if action.size != 1:
                raise ValueError(
                    f"GymnaxEnv.step: {self.env.name} has Discrete({self.action_size}) "
                    f"actions, one integer per environment; got shape {action.shape}. Use "
                    "make_mlp_actor_critic(..., action_distribution='categorical')."
                )
            return action.reshape(()).astype(space.dtype)
        if action.shape != (self.action_size,):
            raise ValueError(
                f"GymnaxEnv.step: {self.env.name}'s action must be an unbatched array of "
                f"shape ({self.action_size},), got {action.shape}."
            )
        action = jnp.clip(action.astype(jnp.float32), -1.0, 1.0)
        if self.rescale_actions:
            low = jnp.broadcast_to(jnp.asarray(space.low, jnp.float32), space.shape).reshape(-1)
            high = jnp.broadcast_to(jnp.asarray(space.high, jnp.float32), space.shape).reshape(-1)
            action = low + (action + 1.0) * 0.5 * (high - low)
        return action.reshape(space.shape).astype(space.dtype)
