"""The `Wrapper` base class: forwards everything it does not change."""

from __future__ import annotations

from typing import Any

import jax

from nnx_ppo.envs.base import ActionSize, Env, ObservationSize

__all__ = ["Wrapper"]


class Wrapper(Env):
    """Wraps an environment and forwards what a subclass does not override.

    ``reset``, ``step``, ``observation_size`` and ``action_size`` call the wrapped
    environment; any other attribute (``render``, ``dt``, ``mj_model``, ``sys``, ...) is
    looked up on the wrapped environment through ``__getattr__``. Works on our
    environments and on brax and MuJoCo Playground environments, and on their wrappers.
    States pass through as the wrapped environment's own ``State`` class.

    Args:
        env: The environment to wrap: any object with ``reset(rng)``,
            ``step(state, action)``, ``observation_size`` and ``action_size``.

    Examples:
        >>> from nnx_ppo.envs import PointMass
        >>> env = Wrapper(PointMass(step_size=0.2))
        >>> env.step_size, env.action_size, type(env.unwrapped).__name__
        (0.2, 2, 'PointMass')
    """

    def __init__(self, env: Any) -> None:
        missing = [n for n in ("reset", "step") if not callable(getattr(env, n, None))]
        if missing:
            raise TypeError(
                f"{type(self).__name__}: env={env!r} has no callable {missing}; wrap an "
                "environment with reset(rng) and step(state, action) (ours, brax's or "
                "MuJoCo Playground's)."
            )
        self.env = env

    def reset(self, rng: jax.Array) -> Any:
        """Calls the wrapped environment's ``reset``."""
        return self.env.reset(rng)

    def step(self, state: Any, action: Any) -> Any:
        """Calls the wrapped environment's ``step``."""
        return self.env.step(state, action)

    @property
    def observation_size(self) -> ObservationSize:
        """The wrapped environment's ``observation_size``."""
        return self.env.observation_size  # type: ignore[no-any-return]

    @property
    def action_size(self) -> ActionSize:
        """The wrapped environment's ``action_size``."""
        return self.env.action_size  # type: ignore[no-any-return]

    def _pop_info(self, state: Any, key: str) -> tuple[dict[str, Any], Any]:
        """``(state.info without key, state.info[key])``: the entry this wrapper's
        ``reset`` put there, checked before its ``step`` uses it.

        Raises:
            ValueError: If ``state.info`` has no ``key`` (a state of the wrapped
                environment, not of this wrapper).
        """
        owner = type(self).__name__
        if key not in state.info:
            raise ValueError(
                f"{owner}.step: state.info has no {key!r} key, so this state was not "
                f"produced by {owner}.reset. Call reset on the wrapper, not on the "
                "environment it wraps."
            )
        info = dict(state.info)
        return info, info.pop(key)

    @property
    def unwrapped(self) -> Any:
        """The innermost environment."""
        return getattr(self.env, "unwrapped", self.env)

    def __getattr__(self, name: str) -> Any:
        # Only called when normal lookup fails. Never forward dunders (copy/pickle probe
        # them before __init__ ran) or "env" itself (absent means __init__ did not run):
        # both would recurse forever.
        if name == "env" or (name.startswith("__") and name.endswith("__")):
            raise AttributeError(name)
        return getattr(self.env, name)
