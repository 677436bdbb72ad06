"""Per-body-part observations and actions for an env with flat vectors.

- `BodyPartObservationWrapper` splits the flat observation ``[N]`` into a dict
  ``{part: [n_part]}`` by index.
- `DictActionWrapper` takes a dict action ``{key: [n_key]}`` and concatenates it,
  in a fixed key order (the actuator order), into the flat action the env expects.

Both act on one unbatched environment (brax's, Playground's or ours) and forward
everything else, like every `Wrapper`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from nnx_ppo.wrappers import Wrapper

__all__ = ["FLAT_OBS_KEY", "BodyPartObservationWrapper", "DictActionWrapper"]

FLAT_OBS_KEY = "flat_obs"
"""``state.info`` key under which `BodyPartObservationWrapper` keeps the wrapped
environment's own flat observation (handed back to it in ``step``)."""


class BodyPartObservationWrapper(Wrapper):
    """Split a flat observation ``[N]`` into ``{part: obs[indices[part]]}``.

    Indices not listed under any part are dropped; an index may not appear twice. The
    flat observation is kept in ``state.info[FLAT_OBS_KEY]`` and handed back to the
    wrapped environment's ``step``, so the wrapped environment never sees the dict.

    Args:
        env: The unbatched environment, with an ``int`` ``observation_size``.
        indices: ``{part: indices}``; each part's entry of the new observation is
            ``obs[list(indices)]``, shape ``[len(indices)]``.

    Raises:
        TypeError: If the environment's observation is not a flat vector.
        ValueError: If a part has no indices, an index is out of range or not an int,
            or an index is used twice.

    Examples:
        >>> import jax
        >>> from nnx_ppo.envs import PointMass
        >>> env = BodyPartObservationWrapper(PointMass(), {"x": [0], "y": [1]})
        >>> env.observation_size
        {'x': (1,), 'y': (1,)}
        >>> obs = env.reset(jax.random.key(0)).obs
        >>> sorted(obs), obs["x"].shape
        (['x', 'y'], (1,))
    """

    def __init__(self, env: Any, indices: Mapping[str, Sequence[int]]) -> None:
        super().__init__(env)
        size = env.observation_size
        if isinstance(size, bool) or not isinstance(size, int):
            raise TypeError(
                f"BodyPartObservationWrapper: the environment's observation_size is "
                f"{size!r}; this wrapper splits a flat observation vector (an int size)."
            )
        owner: dict[int, str] = {}
        self._indices: dict[str, np.ndarray] = {}
        for part, idx in indices.items():
            idx = list(idx)
            if not idx:
                raise ValueError(
                    f"BodyPartObservationWrapper: part {part!r} has no indices; give it at "
                    "least one or leave it out."
                )
            for i in idx:
                if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
                    raise ValueError(
                        f"BodyPartObservationWrapper: part {part!r} has index {i!r}; indices "
                        "must be ints."
                    )
                if not 0 <= i < size:
                    raise ValueError(
                        f"BodyPartObservationWrapper: part {part!r} has index {i}, outside "
                        f"the observation of size {size} (valid: 0..{size - 1})."
                    )
                if i in owner:
                    raise ValueError(
                        f"BodyPartObservationWrapper: index {i} is listed under both "
                        f"{owner[i]!r} and {part!r}; give every entry to one part."
                    )
                owner[int(i)] = part
            self._indices[part] = np.asarray(idx, dtype=np.int32)

    @property
    def observation_size(self) -> dict[str, tuple[int, ...]]:  # type: ignore[override]
        """``{part: (n_part,)}``."""
        return {part: (len(idx),) for part, idx in self._indices.items()}

    def split(self, obs: jax.Array) -> dict[str, jax.Array]:
        """``{part: obs[..., indices[part]]}`` for a flat observation ``[..., N]``."""
        return {part: jnp.take(obs, idx, axis=-1) for part, idx in self._indices.items()}

    def _wrap(self, state: Any) -> Any:
        info = dict(state.info)
        info[FLAT_OBS_KEY] = state.obs
        return state.replace(obs=self.split(state.obs), info=info)

    def reset(self, rng: jax.Array) -> Any:
        """Resets the wrapped environment and splits its observation."""
        return self._wrap(self.env.reset(rng))

    def step(self, state: Any, action: Any) -> Any:
        """Steps the wrapped environment (on its own flat observation) and splits the
        new observation."""
        info = dict(state.info)
        flat = info.pop(FLAT_OBS_KEY)
        return self._wrap(self.env.step(state.replace(obs=flat, info=info), action))


class DictActionWrapper(Wrapper):
    """Accept a dict action and pass ``concatenate([action[k] for k in order])`` on.

    Args:
        env: The unbatched environment, with an ``int`` ``action_size``.
        sizes: ``{key: n_key}`` in the order of the flat action vector (for a robot:
            the actuator order); the sizes must add up to ``env.action_size``.

    Raises:
        TypeError: If the environment's action is not a flat vector.
        ValueError: If a size is not a positive int, or the sizes do not add up to the
            environment's ``action_size``; at trace time, if an action lacks a key or
            has the wrong shape.

    Examples:
        >>> import jax, jax.numpy as jnp
        >>> from nnx_ppo.envs import PointMass
        >>> env = DictActionWrapper(PointMass(), {"y": 1, "x": 1})
        >>> env.action_size
        {'y': 1, 'x': 1}
        >>> env.flatten({"x": jnp.array([0.5]), "y": jnp.array([-1.0])}).tolist()
        [-1.0, 0.5]
    """

    def __init__(self, env: Any, sizes: Mapping[str, int]) -> None:
        super().__init__(env)
        total = env.action_size
        if isinstance(total, bool) or not isinstance(total, int):
            raise TypeError(
                f"DictActionWrapper: the environment's action_size is {total!r}; this "
                "wrapper builds a flat action vector (an int size)."
            )
        for key, n in sizes.items():
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ValueError(
                    f"DictActionWrapper: size of {key!r} is {n!r}; sizes must be ints >= 1."
                )
        if sum(sizes.values()) != total:
            raise ValueError(
                f"DictActionWrapper: the sizes {dict(sizes)} add up to "
                f"{sum(sizes.values())}, but the environment's action_size is {total}; "
                "list every actuator exactly once."
            )
        self._sizes = dict(sizes)

    @property
    def action_size(self) -> dict[str, int]:  # type: ignore[override]
        """``{key: n_key}``, in the order of the flat action."""
        return dict(self._sizes)

    def flatten(self, action: Mapping[str, jax.Array]) -> jax.Array:
        """The flat action ``[..., sum(n_key)]`` of a dict action ``{key: [..., n_key]}``."""
        if not isinstance(action, Mapping) or set(action) != set(self._sizes):
            got = sorted(action) if isinstance(action, Mapping) else type(action).__name__
            raise ValueError(
                f"DictActionWrapper: the action must be a dict with keys "
                f"{sorted(self._sizes)}, got {got}."
            )
        parts = []
        for key, n in self._sizes.items():
            part = jnp.asarray(action[key])
            if part.shape[-1:] != (n,):
                raise ValueError(
                    f"DictActionWrapper: action[{key!r}] has shape {part.shape}; expected "
                    f"a last axis of size {n}."
                )
            parts.append(part)
        return jnp.concatenate(parts, axis=-1)

    def step(self, state: Any, action: Any) -> Any:
        """Flattens ``action`` and steps the wrapped environment."""
        return self.env.step(state, self.flatten(action))
