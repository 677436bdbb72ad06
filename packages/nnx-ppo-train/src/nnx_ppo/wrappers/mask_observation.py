"""`MaskObservation`: keep some entries of a vector observation (a memory test)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from nnx_ppo.wrappers.base import Wrapper

__all__ = ["MaskObservation"]

_FULL_OBS = "unmasked_obs"


class MaskObservation(Wrapper):
    """Shows the policy only the observation entries ``keep``.

    Removing the velocities of a classic-control task (CartPole's cart and pole
    velocities, Pendulum's angular velocity) is the standard check that a policy
    remembers: a memoryless policy can no longer tell which way the system moves.

    ``state.obs`` becomes ``obs[keep]`` after every ``reset`` and ``step``. The full
    observation stays in ``state.info["unmasked_obs"]`` and is put back before the
    wrapped environment's ``step``, so an environment that reads ``state.obs`` in its
    step is unaffected. The trainer gives the network ``state.obs`` only.

    Args:
        env: An unbatched environment with vector observations
            (``observation_size`` an ``int``): ours, brax's, Playground's or a
            `nnx_ppo.envs.GymnaxEnv`.
        keep: Indices into the observation vector, distinct, in
            ``[0, observation_size)``; the masked observation lists them in this order.

    Raises:
        ValueError: If ``keep`` is empty, repeats an index or is out of range, or the
            observation is not a vector.

    Examples:
        Show only the y coordinate of `PointMass`'s ``[x, y]`` position (for
        velocity-free CartPole, ``[x, x_dot, theta, theta_dot]``, it is ``keep=[0, 2]``):

        >>> import jax
        >>> from nnx_ppo.envs import PointMass
        >>> env = MaskObservation(PointMass(), keep=[1])
        >>> env.observation_size, env.env.observation_size
        (1, 2)
        >>> s = env.reset(jax.random.key(0))
        >>> bool(s.obs[0] == s.info["unmasked_obs"][1])
        True
        >>> env.step(s, jax.numpy.zeros(2)).obs.shape
        (1,)
    """

    def __init__(self, env: Any, keep: Sequence[int]) -> None:
        super().__init__(env)
        size = env.observation_size
        if isinstance(size, Mapping):
            raise ValueError(
                f"MaskObservation: the observation is a dict ({dict(size)}); keep= indexes "
                "a vector observation. Select dict keys in the network instead."
            )
        keep = list(keep)
        bad = [k for k in keep if isinstance(k, bool) or not isinstance(k, int)]
        bad += [k for k in keep if isinstance(k, int) and not 0 <= k < int(size)]
        if not keep or bad or len(set(keep)) != len(keep):
            raise ValueError(
                f"MaskObservation: keep={keep!r} must be distinct int indices in "
                f"[0, {size}) (observation_size={size}), at least one; offending: {bad}."
            )
        self.keep = tuple(keep)

    @property
    def observation_size(self) -> int:
        """``len(keep)``."""
        return len(self.keep)

    def _mask(self, state: Any) -> Any:
        info = {**state.info, _FULL_OBS: state.obs}
        return state.replace(obs=state.obs[jnp.asarray(self.keep)], info=info)

    def reset(self, rng: jax.Array) -> Any:
        """Resets the wrapped environment and masks the observation."""
        return self._mask(self.env.reset(rng))

    def step(self, state: Any, action: Any) -> Any:
        """Steps the wrapped environment on the full state and masks the observation."""
        info, full_obs = self._pop_info(state, _FULL_OBS)
        full = state.replace(obs=full_obs, info=info)
        return self._mask(self.env.step(full, action))
