"""RewardScalingWrapper: multiplies array or dict rewards by constants."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from nnx_ppo.wrappers.base import Wrapper

__all__ = ["RewardScalingWrapper"]


def _check_scale(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise TypeError(
            f"RewardScalingWrapper: {name}={value!r} must be a finite float (e.g. 10.0); "
            "use a dict of floats to scale dict rewards per key."
        )
    return float(value)


def _times(reward: Any, scale: float) -> jax.Array:
    # brax envs may return a Python float reward (inverted_pendulum: 1.0).
    reward = jnp.asarray(reward)
    return reward * jnp.asarray(scale, reward.dtype)


class RewardScalingWrapper(Wrapper):
    """Multiplies the reward by ``scale`` (per key for dict rewards).

    - ``scale`` a float: every reward leaf is multiplied by it (an array reward, or
      each entry of a dict reward).
    - ``scale`` a dict: the reward must be a dict with exactly the same keys; each entry
      is multiplied by its own scale. Checked when ``step`` is traced.

    Only ``state.reward`` changes; ``metrics`` keep the unscaled values. The scaled
    reward is what the trainer optimises (brax PPO's ``reward_scaling`` does the same
    inside the trainer).

    Args:
        env: The unbatched environment to wrap.
        scale: A finite float, or a dict of finite floats keyed like the reward.

    Raises:
        TypeError: If ``scale`` (or one of its values) is not a finite number.

    Examples:
        >>> import jax
        >>> from nnx_ppo.envs import PointMass
        >>> env = RewardScalingWrapper(PointMass(), 10.0)
        >>> s = env.step(env.reset(jax.random.key(0)), jax.numpy.zeros(2))
        >>> bool(jax.numpy.isclose(s.reward, -10.0 * s.metrics["distance"]))
        True
    """

    def __init__(self, env: Any, scale: float | Mapping[str, float]) -> None:
        super().__init__(env)
        self.scale: float | dict[str, float]
        if isinstance(scale, Mapping):
            if not scale:
                raise ValueError(
                    "RewardScalingWrapper: scale={} is empty; give one float per reward "
                    "key, or a single float for all of them."
                )
            self.scale = {str(k): _check_scale(f"scale[{k!r}]", v) for k, v in scale.items()}
        else:
            self.scale = _check_scale("scale", scale)

    def reset(self, rng: jax.Array) -> Any:
        """Resets the wrapped environment and scales its (usually zero) reward."""
        state = self.env.reset(rng)
        return state.replace(reward=self._scale(state.reward))

    def step(self, state: Any, action: Any) -> Any:
        """Steps the wrapped environment and scales the reward."""
        state = self.env.step(state, action)
        return state.replace(reward=self._scale(state.reward))

    def _scale(self, reward: Any) -> Any:
        if not isinstance(self.scale, dict):
            scale = self.scale
            return jax.tree.map(lambda r: _times(r, scale), reward)
        scales = self.scale
        if not isinstance(reward, Mapping) or sorted(reward) != sorted(scales):
            got = sorted(reward) if isinstance(reward, Mapping) else "an array reward"
            raise ValueError(
                f"RewardScalingWrapper: scale has keys {sorted(scales)} but the "
                f"environment returns {got}. Give one scale per reward key, or a single "
                "float to scale every reward."
            )
        return {k: jax.tree.map(lambda x, k=k: _times(x, scales[k]), r) for k, r in reward.items()}
