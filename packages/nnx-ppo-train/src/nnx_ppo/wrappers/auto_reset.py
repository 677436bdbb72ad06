"""AutoResetWrapper and `reset_done`: restart environments whose episode ended.

Auto-reset is the trainer's job (``train_ppo`` resets finished environments itself);
this module gives it, and anyone writing their own loop, one tested helper.

What a reset step returns. When ``step`` ends an episode (``done = 1``), the returned
state is the *reset* state, except for the fields that describe the transition just
taken, which come from the step:

- from the step: ``reward``, ``done``, ``metrics`` and the ``info`` keys listed in
  ``preserve_info_keys`` (by default ``"truncation"``);
- from the reset: ``obs``, the dynamics state (``pipeline_state`` in brax and ours,
  ``data`` in Playground; in fact every other dataclass field) and every other ``info``
  key, so ``info["steps"]`` restarts at 0 and an environment's own bookkeeping in
  ``info`` (e.g. Playground's ``info["rng"]``) is reset too.

This differs from brax's ``AutoResetWrapper``, which keeps the whole ``info`` of the
finished episode and zeroes ``info["steps"]`` on the *next* step.

Cost. Under ``jax.vmap`` both branches of the per-environment choice are computed, then
selected elementwise:

- cached reset (default, brax's approach): the first reset state is stored in ``info``
  (one extra copy of the state per environment) and every step does one elementwise
  select over the state. Every episode of an environment then restarts from the same
  state (same ``obs``, same dynamics state and same ``info``, hence the same
  ``info["rng"]`` in Playground); diversity comes from the different environments.
- fresh reset (``full_reset=True``, Playground's option of the same name): every step
  also calls ``env.reset`` on a fresh key for every environment, finished or not, so a
  step costs one step plus one reset plus the select. For our tiny environments this is
  negligible; for MJX environments a reset (a forward pass and the random draws) can
  cost about as much as a physics step.

The measured cost of both resets is on the documentation's Benchmarks page ("Measured
costs of trainer options").

A caller holding the *batched* state (outside ``jax.vmap``) can skip the work on steps
where no environment finished: ``lax.cond(jnp.any(next.done > 0), lambda:
reset_done(next, reset_states), lambda: next)``. `reset_done` accepts batched
states for this reason. (Inside ``vmap`` a ``cond`` becomes a select and saves nothing.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from nnx_ppo.wrappers.base import Wrapper

__all__ = ["AutoResetWrapper", "reset_done"]

_TRANSITION_FIELDS = ("reward", "done", "metrics", "info")
_KEY = "auto_reset_key"
_FIRST = "auto_reset_first_state"


def _select(done: jax.Array, reset: Any, stepped: Any, where: str) -> Any:
    def pick(r: jax.Array, s: jax.Array) -> jax.Array:
        mask = done.reshape(done.shape + (1,) * (jnp.ndim(s) - done.ndim))
        return jnp.where(mask, r, s)

    try:
        return jax.tree.map(pick, reset, stepped)
    except ValueError as e:
        raise ValueError(
            f"reset_done: {where} has a different tree structure in the reset state and "
            "the stepped state; reset and step must return the same structure."
        ) from e


def reset_done(
    stepped: Any, reset_state: Any, *, preserve_info_keys: Iterable[str] = ("truncation",)
) -> Any:
    """Replaces finished environments' states by ``reset_state`` (see the module doc).

    Works on one environment (``done`` of shape ``[]``) and on a batch (``done`` of shape
    ``[B]``, every leaf ``[B, ...]``), and on brax, Playground and our ``State`` classes.

    Args:
        stepped: The state returned by ``step``; its ``done`` selects the environments
            to reset.
        reset_state: A state of the same class and structure (e.g. the stored first
            state, or ``reset`` on a fresh key), batched like ``stepped``.
        preserve_info_keys: ``info`` keys taken from ``stepped`` even where done (keys
            absent from ``stepped.info`` are ignored).

    Returns:
        A state of the same class: ``reward``, ``done``, ``metrics`` and the preserved
        ``info`` keys from ``stepped``; every other field and ``info`` key from
        ``reset_state`` where ``done``, from ``stepped`` elsewhere.

    Raises:
        ValueError: If an ``info`` key other than the preserved ones is in one state but
            not the other, or a field's tree structure differs.

    Examples:
        >>> import jax, jax.numpy as jnp
        >>> from nnx_ppo.envs import PointMass
        >>> env = PointMass()
        >>> first = env.reset(jax.random.key(0))
        >>> stepped = env.step(first, jnp.ones(2)).replace(done=jnp.float32(1.0))
        >>> out = reset_done(stepped, first)
        >>> bool((out.obs == first.obs).all()), float(out.reward) == float(stepped.reward)
        (True, True)
    """
    preserve = set(preserve_info_keys)
    done = jnp.asarray(stepped.done) > 0
    updates = {}
    for field in dataclasses.fields(stepped):
        if field.name not in _TRANSITION_FIELDS:
            updates[field.name] = _select(
                done, getattr(reset_state, field.name), getattr(stepped, field.name), field.name
            )
    stepped_keys = set(stepped.info) - preserve
    reset_keys = set(reset_state.info) - preserve
    if stepped_keys != reset_keys:
        raise ValueError(
            "reset_done: info keys differ between the stepped state "
            f"(only there: {sorted(stepped_keys - reset_keys)}) and the reset state (only "
            f"there: {sorted(reset_keys - stepped_keys)}). Make reset and step write the "
            "same info keys, or list transition-only keys in preserve_info_keys."
        )
    info = {}
    for key, value in stepped.info.items():
        if key in preserve:
            info[key] = value
        else:
            info[key] = _select(done, reset_state.info[key], value, f"info[{key!r}]")
    return stepped.replace(info=info, **updates)


class AutoResetWrapper(Wrapper):
    """Resets an environment inside ``step`` when its episode ends (brax style).

    Use it outermost, around `EpisodeWrapper`. See the module
    documentation for what a reset step returns and what each mode costs. ``train_ppo``
    does not need it (it resets finished environments itself); it is for hand-written
    loops and for evaluation.

    Adds to ``info``: ``"auto_reset_first_state"`` (cached mode: the state ``reset``
    returned) or ``"auto_reset_key"`` (fresh mode: the key of the next reset).

    Args:
        env: The unbatched environment to wrap.
        full_reset: ``False`` (default): reset to the cached first state. ``True``:
            call ``env.reset`` on a fresh key, so every episode starts from a new random
            state.
        preserve_info_keys: ``info`` keys that describe the transition and survive a
            reset (default: ``("truncation",)``).

    Examples:
        >>> import jax, jax.numpy as jnp
        >>> from nnx_ppo.envs import PointMass
        >>> from nnx_ppo.wrappers import EpisodeWrapper
        >>> env = AutoResetWrapper(EpisodeWrapper(PointMass(), episode_length=1))
        >>> s0 = env.reset(jax.random.key(0))
        >>> s1 = env.step(s0, jnp.ones(2))
        >>> float(s1.done), float(s1.info["truncation"]), int(s1.info["steps"])
        (1.0, 1.0, 0)
        >>> bool((s1.obs == s0.obs).all())
        True
    """

    def __init__(
        self,
        env: Any,
        full_reset: bool = False,
        preserve_info_keys: Sequence[str] = ("truncation",),
    ) -> None:
        super().__init__(env)
        if not isinstance(full_reset, bool):
            raise TypeError(
                f"AutoResetWrapper: full_reset={full_reset!r} must be a bool (False: reset "
                "to the cached first state; True: reset with fresh randomness)."
            )
        if isinstance(preserve_info_keys, str) or not all(
            isinstance(k, str) for k in preserve_info_keys
        ):
            raise TypeError(
                f"AutoResetWrapper: preserve_info_keys={preserve_info_keys!r} must be a "
                "sequence of info keys (str), e.g. ('truncation',)."
            )
        self.full_reset = full_reset
        self.preserve_info_keys = (*preserve_info_keys, _KEY, _FIRST)

    def reset(self, rng: jax.Array) -> Any:
        """Resets the wrapped environment and stores the first state or the next key.

        In cached mode the state equals ``env.reset(rng)`` plus the stored first state;
        in fresh mode ``rng`` is split first.
        """
        if not self.full_reset:
            state = self.env.reset(rng)
            return state.replace(info={**state.info, _FIRST: state})
        rng, next_key = jax.random.split(rng)
        state = self.env.reset(rng)
        return state.replace(info={**state.info, _KEY: next_key})

    def step(self, state: Any, action: Any) -> Any:
        """Steps the wrapped environment, then resets it if the step ended the episode."""
        stepped = self.env.step(state.replace(done=jnp.zeros_like(state.done)), action)
        if not self.full_reset:
            return reset_done(
                stepped, stepped.info[_FIRST], preserve_info_keys=self.preserve_info_keys
            )
        next_key, reset_key = jax.random.split(stepped.info[_KEY])
        out = reset_done(
            stepped, self.env.reset(reset_key), preserve_info_keys=self.preserve_info_keys
        )
        return out.replace(info={**out.info, _KEY: next_key})
