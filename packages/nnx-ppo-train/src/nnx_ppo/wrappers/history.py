"""`ObservationHistory`: the last ``k`` observations stacked, the memoryless baseline.

A feed-forward policy that sees a short window of past observations can infer
velocities and other hidden state from differences, which is what recurrence is often
used for. `ObservationHistory` gives any network that window, so a recurrent network
can be compared against the memoryless baseline it has to beat.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import jax
import jax.numpy as jnp

from nnx_ppo.wrappers.base import Wrapper

__all__ = ["ObservationHistory"]

Padding = Literal["zeros", "first"]


def _shape(size: Any) -> tuple[int, ...]:
    return (int(size),) if isinstance(size, int) else tuple(int(d) for d in size)


class ObservationHistory(Wrapper):
    """Stacks the last ``length`` observations of each episode, oldest first.

    An observation of shape ``s`` becomes ``[length, *s]``: ``obs[-1]`` is the newest
    observation, ``obs[-2]`` the one before, ..., ``obs[0]`` the oldest (a new leading
    axis; ``flatten=True`` gives the vector ``[length * prod(s)]`` instead, in the same
    oldest-first order, for networks that take vector observations only). Before
    ``length`` steps of an episode have happened the older slots are **zeros**
    (``padding="zeros"``, MuJoCo Playground's choice for its observation histories) or
    copies of the episode's first observation (``padding="first"``, Gymnasium's
    ``FrameStackObservation`` default). Every ``reset`` starts a new history, so no
    observation of one episode appears in the next.

    For a dict observation every entry is stacked, or only those named in ``keys``
    (the others pass through unchanged): e.g. stack ``"state"`` and leave a critic's
    ``"privileged_state"`` alone.

    The history lives in ``state.obs`` itself, so the wrapper adds nothing to
    ``state.info`` and keeps everything the wrapped environment puts there
    (``"truncation"``, ``"steps"``, ...); ``reset`` and ``step`` are pure, and jit and
    vmap like the wrapped environment's. Before the wrapped ``step`` the state's
    observation is put back to the newest one, so an environment that reads
    ``state.obs`` in its step is unaffected.

    **Order with other wrappers.** Wrap *outside* `wrap_for_training`, i.e.
    ``ObservationHistory(wrap_for_training(env, ...), length=k)``: the history then
    holds one observation per policy step even with ``action_repeat > 1`` (inside, it
    would hold the repeated sub-steps). ``train_ppo`` resets finished environments by
    calling ``reset``, which starts a fresh history either way. With an auto-reset
    wrapper (`AutoResetWrapper`, brax's or Playground's), put `ObservationHistory`
    *inside* it: the auto-reset then swaps in a reset state that carries a fresh
    history, whereas outside it the history would run on across the episode boundary.

    Args:
        env: An unbatched environment: ours, brax's, Playground's, or a wrapper.
        length: How many observations to stack, an int >= 1 (1 adds the axis only).
        keys: For a dict observation, the top-level keys to stack (a key or a sequence
            of keys); ``None`` (default) stacks every entry. Must be ``None`` for an
            array observation.
        padding: ``"zeros"`` (default) or ``"first"``: what fills the slots older than
            the episode's first observation.
        flatten: Stack into one vector ``[length * prod(s)]`` per entry instead of
            ``[length, *s]``.

    Raises:
        ValueError: If ``length`` is not an int >= 1, ``padding`` is unknown, ``keys``
            names a key the observation does not have (the message lists the keys it
            has), or ``keys`` is given for an array observation.

    Examples:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from nnx_ppo.envs import PointMass
        >>> env = ObservationHistory(PointMass(), length=3)
        >>> env.observation_size
        (3, 2)
        >>> s = env.reset(jax.random.key(0))
        >>> s.obs.shape, bool((s.obs[:2] == 0).all())  # zeros before the first step
        ((3, 2), True)
        >>> s2 = env.step(s, jnp.zeros(2))
        >>> bool((s2.obs[1] == s.obs[2]).all())  # the previous newest moved back
        True
        >>> ObservationHistory(PointMass(), length=3, flatten=True).observation_size
        6
    """

    def __init__(
        self,
        env: Any,
        length: int,
        keys: str | Sequence[str] | None = None,
        *,
        padding: Padding = "zeros",
        flatten: bool = False,
    ) -> None:
        super().__init__(env)
        name = "ObservationHistory"
        if isinstance(length, bool) or not isinstance(length, int) or length < 1:
            raise ValueError(
                f"{name}: length={length!r} must be an int >= 1 (the number of "
                "observations stacked), e.g. length=4."
            )
        if padding not in ("zeros", "first"):
            raise ValueError(
                f"{name}: padding={padding!r} must be 'zeros' (Playground's choice) or "
                "'first' (repeat the episode's first observation)."
            )
        if not isinstance(flatten, bool):
            raise ValueError(f"{name}: flatten={flatten!r} must be True or False.")
        self.length = length
        self.padding: Padding = padding
        self.flatten = flatten
        size = env.observation_size
        if isinstance(size, Mapping):
            available = sorted(size)
            if keys is None:
                chosen = tuple(available)
            else:
                chosen = (keys,) if isinstance(keys, str) else tuple(keys)
                missing = [k for k in chosen if k not in size]
                if not chosen or missing or len(set(chosen)) != len(chosen):
                    raise ValueError(
                        f"{name}: keys={keys!r} must name distinct keys of the observation, "
                        f"at least one; not in the observation: {missing}; the observation "
                        f"has the keys {available}."
                    )
            self.keys: tuple[str, ...] | None = chosen
            self._shapes: dict[str, tuple[int, ...]] = {k: _shape(size[k]) for k in chosen}
        else:
            if keys is not None:
                raise ValueError(
                    f"{name}: keys={keys!r} selects entries of a dict observation, but "
                    f"this environment's observation is an array (observation_size="
                    f"{size!r}); leave keys=None."
                )
            self.keys = None
            self._shapes = {"": _shape(size)}

    def _stacked_size(self, shape: tuple[int, ...]) -> int | tuple[int, ...]:
        if self.flatten:
            return self.length * math.prod(shape)
        return (self.length, *shape)

    @property
    def observation_size(self) -> Any:
        """The wrapped size with each stacked entry ``(length, *s)`` (a shape tuple, which
        the factories in `nnx_ppo.networks.factories` accept), or ``length * prod(s)``
        with ``flatten=True``; the other dict entries unchanged."""
        size = self.env.observation_size
        if self.keys is None:
            return self._stacked_size(self._shapes[""])
        return {
            k: self._stacked_size(self._shapes[k]) if k in self._shapes else v
            for k, v in size.items()
        }

    # -- one entry ------------------------------------------------------------------------

    def _start(self, obs: jax.Array, shape: tuple[int, ...]) -> jax.Array:
        if self.padding == "first":
            history = jnp.broadcast_to(obs[None], (self.length, *shape))
        else:
            history = jnp.zeros((self.length, *shape), obs.dtype).at[-1].set(obs)
        return history.reshape(-1) if self.flatten else history

    def _push(self, history: jax.Array, obs: jax.Array, shape: tuple[int, ...]) -> jax.Array:
        history = history.reshape(self.length, *shape)
        history = jnp.concatenate([history[1:], obs[None].astype(history.dtype)], axis=0)
        return history.reshape(-1) if self.flatten else history

    def _newest(self, history: jax.Array, shape: tuple[int, ...]) -> jax.Array:
        return history.reshape(self.length, *shape)[-1]

    # -- the whole observation ------------------------------------------------------------

    def _map(self, fn: Any, *trees: Any) -> Any:
        if self.keys is None:
            return fn(*trees, self._shapes[""])
        out = dict(trees[-1])
        for k in self.keys:
            out[k] = fn(*(t[k] for t in trees), self._shapes[k])
        return out

    def reset(self, rng: jax.Array) -> Any:
        """Resets the wrapped environment and starts a new history."""
        state = self.env.reset(rng)
        return state.replace(obs=self._map(self._start, state.obs))

    def step(self, state: Any, action: Any) -> Any:
        """Steps the wrapped environment on its newest observation and pushes the new
        observation into the history (the oldest one drops out)."""
        inner = state.replace(obs=self._map(self._newest, state.obs))
        stepped = self.env.step(inner, action)
        return stepped.replace(obs=self._map(self._push, state.obs, stepped.obs))
