"""`Latency`: actuation and sensing delays whose lag is drawn per environment.

A real controller acts on stale measurements and its commands reach the motors late.
A policy trained without that lag can fail on the robot (MuJoCo Playground issue #253);
training under a *randomized* lag, with a recurrent policy that can infer it, is the
usual remedy. `Latency` is that lag, on the environment side: the plant is slow, not
the network, so the exported policy is the trained network alone and meets the robot's
real latency in its place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from nnx_ppo.wrappers.base import Wrapper

__all__ = ["Latency"]

_INFO = "latency"
_STREAM = 0x6C6174  # fold_in data of the lag key: independent of the environment's draws


def _lag_range(name: str, lag: Any) -> tuple[int, int]:
    bounds = (lag, lag) if isinstance(lag, int) and not isinstance(lag, bool) else lag
    ok = (
        isinstance(bounds, tuple)
        and len(bounds) == 2
        and all(isinstance(b, int) and not isinstance(b, bool) for b in bounds)
        and 0 <= bounds[0] <= bounds[1]
    )
    if not ok:
        raise ValueError(
            f"Latency: {name}={lag!r} must be an int k >= 0 (always k steps) or a tuple "
            f"(low, high) of ints with 0 <= low <= high (a lag drawn uniformly in "
            f"[low, high]), e.g. {name}=(0, 3)."
        )
    return bounds


def _push(history: Any, new: Any) -> Any:
    """``new`` becomes entry 0 of every ``[L + 1, ...]`` history leaf, the oldest drops."""
    return jax.tree.map(lambda h, x: jnp.concatenate([x[None], h[:-1]]), history, new)


def _read(history: Any, lag: jax.Array) -> Any:
    """Entry ``lag`` of every history leaf (the value pushed ``lag`` steps ago)."""
    return jax.tree.map(lambda h: h[lag], history)


class Latency(Wrapper):
    """Delays the actions and/or the observations of an environment by a random lag.

    With an action lag ``k`` the environment applies, at each step, the action the
    policy chose ``k`` steps earlier (a zero action before the episode has ``k``
    actions); with an observation lag ``k`` the policy sees the observation from ``k``
    steps earlier (the episode's first observation before it has ``k`` of them). Each
    lag is drawn uniformly from its integer range at every reset, independently per
    environment (the trainer vmaps the wrapped environment, so every training
    environment draws its own), and at every step it is kept with probability
    ``hold_prob`` and redrawn otherwise, as in mjlab's ``DelayBuffer``: ``1.0`` (the
    default) keeps the episode's lag, ``0.0`` draws a new one every step (jitter).

    Everything lives in ``state.info["latency"]``: the recent actions and observations
    (``[max_lag + 1, ...]`` each), the current lags (``"action_lag"``, ``"obs_lag"``,
    int32) and, when ``hold_prob < 1``, the key of the redraws (raw ``uint32[2]``). It is
    environment state like any other, so checkpoints keep it and a resumed run continues
    bitwise, sweeps (`train_many`) and domain randomization compose with it, and the
    deterministic evaluation sees the lag when the evaluation environment is wrapped too.

    Wrap the environment before `wrap_for_training` (lags count the steps of the
    environment ``Latency`` wraps; an outer ``action_repeat`` repeats inside them). The
    wrapped environment's ``step`` receives the true state (its own observation); the
    lagged observation is only what the policy sees.

    Args:
        env: An unbatched environment: ours, brax's, MuJoCo Playground's or a
            `nnx_ppo.envs.GymnaxEnv` (discrete actions are delayed as integers).
        action_lag: Steps between the policy's action and its effect: an int ``k``, or
            ``(low, high)`` to draw it in ``[low, high]`` (both inclusive).
        obs_lag: Steps between a measurement and the policy seeing it, as ``action_lag``.
        hold_prob: Probability that a step keeps the previous step's lags, in
            ``[0, 1]``.

    Raises:
        ValueError: If a lag range is not ints with ``0 <= low <= high``, both lags are
            always 0, or ``hold_prob`` is outside ``[0, 1]``.

    Examples:
        A constant one-step action lag on `PointMass`: the first step applies the
        zero action, the second the first step's action.

        >>> import jax, jax.numpy as jnp
        >>> from nnx_ppo.envs import PointMass
        >>> env = Latency(PointMass(), action_lag=1)
        >>> s = env.reset(jax.random.key(0))
        >>> s1 = env.step(s, jnp.ones(2))
        >>> bool((s1.obs == s.obs).all())  # the zero action moved nothing
        True
        >>> s2 = env.step(s1, jnp.zeros(2))  # applies the ones
        >>> bool((s2.obs != s1.obs).all())
        True
        >>> env.action_lag, env.obs_lag, int(s2.info["latency"]["action_lag"])
        ((1, 1), (0, 0), 1)
    """

    def __init__(
        self,
        env: Any,
        *,
        action_lag: int | tuple[int, int] = 0,
        obs_lag: int | tuple[int, int] = 0,
        hold_prob: float = 1.0,
    ) -> None:
        super().__init__(env)
        self.action_lag = _lag_range("action_lag", action_lag)
        self.obs_lag = _lag_range("obs_lag", obs_lag)
        if self.action_lag[1] == 0 and self.obs_lag[1] == 0:
            raise ValueError(
                f"Latency: action_lag={action_lag!r} and obs_lag={obs_lag!r} are both always "
                "0, so nothing would be delayed; give one of them a positive lag, or use the "
                "environment without Latency."
            )
        if isinstance(hold_prob, bool) or not isinstance(hold_prob, int | float):
            raise ValueError(f"Latency: hold_prob={hold_prob!r} must be a float in [0, 1].")
        if not 0.0 <= float(hold_prob) <= 1.0:
            raise ValueError(
                f"Latency: hold_prob={hold_prob!r} must be in [0, 1]: the probability that "
                "a step keeps its lag (1.0: one lag per episode, 0.0: a new lag each step)."
            )
        self.hold_prob = float(hold_prob)

    # ------------------------------------------------------------------ lags

    def _draw(self, key: jax.Array) -> dict[str, jax.Array]:
        k_action, k_obs = jax.random.split(key)
        return {
            "action_lag": jax.random.randint(k_action, (), *self._bounds(self.action_lag)),
            "obs_lag": jax.random.randint(k_obs, (), *self._bounds(self.obs_lag)),
        }

    @staticmethod
    def _bounds(lag: tuple[int, int]) -> tuple[int, int]:
        return lag[0], lag[1] + 1  # randint's maximum is exclusive

    def _zero_action(self) -> Any:
        size = self.env.action_size
        if getattr(self.unwrapped, "discrete", False):
            return jnp.zeros((), jnp.int32)
        if isinstance(size, Mapping):
            return {k: jnp.zeros((int(n),), jnp.float32) for k, n in size.items()}
        return jnp.zeros((int(size),), jnp.float32)

    # ------------------------------------------------------------------ env API

    def reset(self, rng: jax.Array) -> Any:
        """Resets the wrapped environment and draws this episode's lags.

        The observation history is filled with the first observation, the action
        history with zero actions.
        """
        state = self.env.reset(rng)
        latency = self._draw(jax.random.fold_in(rng, _STREAM))
        if self.hold_prob < 1.0:
            key = jax.random.fold_in(jax.random.fold_in(rng, _STREAM), 1)
            latency["key"] = jax.random.key_data(key) if _is_typed(key) else key  # raw
        latency["obs"] = jax.tree.map(
            lambda x: jnp.broadcast_to(x, (self.obs_lag[1] + 1, *jnp.shape(x))), state.obs
        )
        latency["action"] = jax.tree.map(
            lambda x: jnp.broadcast_to(x, (self.action_lag[1] + 1, *x.shape)), self._zero_action()
        )
        return state.replace(info={**state.info, _INFO: latency})

    def step(self, state: Any, action: Any) -> Any:
        """Applies the lagged action, steps, and shows the lagged observation."""
        info, latency = self._pop_info(state, _INFO)
        latency = dict(latency)
        if self.hold_prob < 1.0:
            key, draw_key, hold_key = jax.random.split(latency["key"], 3)  # raw keys
            keep = jax.random.uniform(hold_key, (2,)) < self.hold_prob
            drawn = self._draw(draw_key)
            latency["action_lag"] = jnp.where(keep[0], latency["action_lag"], drawn["action_lag"])
            latency["obs_lag"] = jnp.where(keep[1], latency["obs_lag"], drawn["obs_lag"])
            latency["key"] = key
        # The wrapped environment steps on its own (newest) observation and info.
        inner = state.replace(obs=_read(latency["obs"], jnp.zeros((), jnp.int32)), info=info)
        action = jax.tree.map(
            lambda h, a: jnp.asarray(a).astype(h.dtype).reshape(h.shape[1:]),
            latency["action"],
            action,
        )
        latency["action"] = _push(latency["action"], action)
        state = self.env.step(inner, _read(latency["action"], latency["action_lag"]))
        latency["obs"] = _push(latency["obs"], state.obs)
        obs = _read(latency["obs"], latency["obs_lag"])
        return state.replace(obs=obs, info={**state.info, _INFO: latency})


def _is_typed(key: jax.Array) -> bool:
    return jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
