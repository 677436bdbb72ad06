"""EpisodeWrapper: bounds episodes and records truncation in ``info``."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from nnx_ppo.wrappers.base import Wrapper

__all__ = ["EpisodeWrapper"]


def _check_positive_int(owner: str, name: str, value: Any, meaning: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{owner}: {name}={value!r} must be an int >= 1 ({meaning}).")
    return value


class EpisodeWrapper(Wrapper):
    """Ends episodes after ``episode_length`` environment steps; optional action repeat.

    Writes two keys into ``state.info`` (the same keys as brax's and Playground's
    ``EpisodeWrapper``, so the trainer reads truncation the same way for all of them):

    - ``info["steps"]``: int32 ``[]``, environment steps since the last reset
      (``action_repeat`` per `step`).
    - ``info["truncation"]``: float32 ``[]``, 1.0 on the step where ``steps`` reaches
      ``episode_length`` **and** the environment did not terminate on that same step,
      else 0.0. On that step ``done`` is set to 1.0 as well. A termination (the
      environment's own ``done``) keeps ``truncation = 0``, so ``done - truncation`` is
      the termination flag.

    With ``action_repeat = r`` each `step` applies the action ``r`` times and
    returns the summed reward (a dict reward is summed per key). If the environment
    terminates during the repeats, the state is frozen at the terminating step and
    later repeats add no reward (brax keeps stepping a terminated environment; we do
    not). This costs one select over the state per repeat, and only when ``r > 1``.

    The wrapper never resets: that is the trainer's job (or
    `AutoResetWrapper`'s, which must wrap this one, not be
    wrapped by it, so that ``info["steps"]`` restarts at 0).

    Args:
        env: The unbatched environment to wrap (ours, brax's or Playground's).
        episode_length: Environment steps per episode, an int >= 1. The episode is
            truncated on the step at which ``info["steps"] >= episode_length``, i.e.
            after ``ceil(episode_length / action_repeat)`` calls to `step`.
        action_repeat: Times each action is applied, an int >= 1.
        stagger: Staggers the episodes of parallel environments, an int in
            ``[0, episode_length]``. With ``stagger > 0``, `reset` starts
            ``info["steps"]`` at a uniform random integer in ``[0, stagger)`` instead
            of 0, so the episode lasts ``episode_length - info["steps"]`` steps and
            environments that start together do not all truncate on the same step.
            Without it, an environment that never terminates early (e.g.
            CartpoleBalance) keeps every parallel environment at the same phase of its
            episode, and each PPO batch comes from one phase only. nnx-ppo's episode
            wrapper always does this with ``episode_length // 2``. The draw uses a key
            split from the reset key; with the default 0 the wrapped environment gets
            the reset key unchanged. Use it on the training environment only: an
            evaluation should play whole episodes. Every training episode gets a new
            start with each of the trainer's ``PPOConfig.reset_mode``: ``"fresh"``
            draws it in `reset`; ``"cached"`` and ``"refresh"`` restart from the cached
            reset state and redraw only its start (`redraw_starts`, one integer draw
            per environment, so staggering adds no reset to an environment whose
            ``reset`` is expensive, e.g. Playground's ``CheetahRun``, which settles
            its physics for 200 steps). A curriculum that acts on an episode's
            first step cannot test ``info["steps"] == 0`` then: mark the first step
            with an ``info`` flag that the environment's ``reset`` sets and ``step``
            clears.

    Examples:
        >>> import jax
        >>> from nnx_ppo.envs import PointMass
        >>> env = EpisodeWrapper(PointMass(), episode_length=2)
        >>> s = env.reset(jax.random.key(0))
        >>> s = env.step(s, jax.numpy.zeros(2))
        >>> int(s.info["steps"]), float(s.done), float(s.info["truncation"])
        (1, 0.0, 0.0)
        >>> s = env.step(s, jax.numpy.zeros(2))
        >>> int(s.info["steps"]), float(s.done), float(s.info["truncation"])
        (2, 1.0, 1.0)

        Staggered starts: each reset begins somewhere in the first half of the episode.

        >>> env = EpisodeWrapper(PointMass(), episode_length=100, stagger=50)
        >>> starts = jax.vmap(env.reset)(jax.random.split(jax.random.key(0), 4))
        >>> bool((starts.info["steps"] >= 0).all() & (starts.info["steps"] < 50).all())
        True
    """

    def __init__(
        self, env: Any, episode_length: int, action_repeat: int = 1, stagger: int = 0
    ) -> None:
        super().__init__(env)
        self.episode_length = _check_positive_int(
            "EpisodeWrapper", "episode_length", episode_length, "environment steps per episode"
        )
        self.action_repeat = _check_positive_int(
            "EpisodeWrapper", "action_repeat", action_repeat, "times each action is applied"
        )
        if (
            isinstance(stagger, bool)
            or not isinstance(stagger, int)
            or not 0 <= stagger <= episode_length
        ):
            raise ValueError(
                f"EpisodeWrapper: stagger={stagger!r} must be an int in [0, episode_length="
                f"{episode_length}] (the exclusive upper bound of a random starting step; "
                "e.g. episode_length // 2, or 0 to start every episode at step 0)."
            )
        self.stagger = stagger

    def reset(self, rng: jax.Array) -> Any:
        """Resets the wrapped environment and sets ``truncation`` to 0 and ``steps`` to 0
        (or, with ``stagger``, to a random start in ``[0, stagger)``)."""
        if self.stagger:
            rng, start_key = jax.random.split(rng)
            steps = jax.random.randint(start_key, (), 0, self.stagger, jnp.int32)
        else:
            steps = jnp.zeros((), jnp.int32)
        state = self.env.reset(rng)
        info = dict(state.info)
        info["steps"] = steps
        info["truncation"] = jnp.zeros_like(state.done)
        return state.replace(info=info)

    def redraw_starts(self, state: Any, done: jax.Array, key: jax.Array) -> Any:
        """``state`` with a new staggered start where ``done``: ``info["steps"]`` drawn
        in ``[0, stagger)`` from ``key``, as `reset` draws it; the rest unchanged.

        The trainer calls it after restarting finished environments from a cached reset
        state (``PPOConfig.reset_mode`` ``"cached"`` or ``"refresh"``), which would
        otherwise repeat each environment's first start. Without ``stagger`` it returns
        ``state`` itself.

        Args:
            state: A state of this wrapper, one environment or a batch (``[B]``).
            done: bool, ``done``'s shape: the environments that restart.
            key: The key of the draws.

        Examples:
            >>> import jax, jax.numpy as jnp
            >>> from nnx_ppo.envs import PointMass
            >>> env = EpisodeWrapper(PointMass(), episode_length=100, stagger=50)
            >>> s = jax.vmap(env.reset)(jax.random.split(jax.random.key(0), 4))
            >>> done = jnp.array([True, False, True, False])
            >>> new = env.redraw_starts(s, done, jax.random.key(1))
            >>> bool((new.info["steps"] == s.info["steps"])[~done].all())
            True
        """
        if not self.stagger:
            return state
        starts = jax.random.randint(key, jnp.shape(done), 0, self.stagger, jnp.int32)
        info = dict(state.info)
        info["steps"] = jnp.where(done, starts, info["steps"])
        return state.replace(info=info)

    def step(self, state: Any, action: Any) -> Any:
        """Steps ``action_repeat`` times, counts steps and truncates at the length."""
        if "steps" not in state.info:
            raise ValueError(
                "EpisodeWrapper.step: state.info has no 'steps' key, so this state was "
                "not produced by EpisodeWrapper.reset. Call reset on the wrapper, not on "
                "the environment it wraps."
            )
        if self.action_repeat == 1:
            nstate = self.env.step(state, action)
        else:
            nstate = self._repeat(state, action)
        steps = state.info["steps"] + self.action_repeat
        at_limit = steps >= self.episode_length
        done = nstate.done
        info = dict(nstate.info)
        info["steps"] = steps
        info["truncation"] = jnp.where(at_limit, 1 - done, jnp.zeros_like(done))
        return nstate.replace(done=jnp.where(at_limit, jnp.ones_like(done), done), info=info)

    def _repeat(self, state: Any, action: Any) -> Any:
        """Applies ``action`` ``action_repeat`` times, freezing after a termination."""

        def body(carry: tuple[Any, Any, jax.Array], _: None) -> tuple[Any, None]:
            prev, total, ended = carry
            new = self.env.step(prev, action)
            new = jax.tree.map(lambda p, n: jnp.where(ended, p, n), prev, new)
            total = jax.tree.map(
                lambda t, r: t + jnp.where(ended, jnp.zeros_like(r), r), total, new.reward
            )
            ended = jnp.logical_or(ended, new.done > 0)
            return (new, total, ended), None

        first = self.env.step(state, action)
        carry = (first, first.reward, first.done > 0)
        (last, total, ended), _ = jax.lax.scan(body, carry, None, self.action_repeat - 1)
        return last.replace(reward=total, done=ended.astype(first.done.dtype))
