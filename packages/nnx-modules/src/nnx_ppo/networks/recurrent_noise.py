"""Recurrent noise of leaky rate units, drawn from per-environment keys in the carry.

A leaky unit ``tau dh/dt = -h + f(...)`` with private noise of level ``sigma_rec``
(pyrl's ``var_rec = sigma_rec ** 2``),

    tau dh/dt = -h + f(...) + sqrt(2 tau) * sigma_rec * xi(t),

``xi`` Gaussian white noise (Song, Yang & Wang 2016, PLoS Comput Biol 12: e1004792,
Eq. 1; the same scaling in their 2017 eLife paper's pyrl), stepped by ``dt`` with the
Euler-Maruyama scheme, gets at every step the increment

    sqrt(2 * a) * sigma_rec * N(0, 1),      a = dt / tau,

one independent draw per unit, step and environment (`noise_std`). Its variance
``2 a sigma_rec**2`` makes ``sigma_rec`` the standard deviation at which a unit's
noise-driven fluctuation settles without recurrence (an Ornstein-Uhlenbeck process; the
discrete step's stationary variance is ``sigma_rec**2 / (1 - a / 2)``), whatever ``dt``.

The draws must replay: loss replay starts from the carry stored at the start of the
rollout and must reproduce the rollout's noise exactly. So the randomness lives in the
carry as one PRNG key per environment (raw key data ``[B, *key_shape]``, uint32 for the
default threefry keys), split at every step (`split_keys`), derived at
`initialize_state` from a base key drawn once at construction (a `RecurrentNoiseKey`,
`initial_keys`), and re-derived at a reset by folding a constant into each
environment's current key (`reset_keys`, a deterministic function of the carry, so
every episode gets a fresh stream and replay resets alike).

Used by the leaky cells (`nnx_ppo.networks.recurrent.CTRNN`,
`nnx_ppo.networks.low_rank.LowRankRNN`, through `RecurrentCell`) and by the leaky
populations of a population graph (``nnx_ppo.networks.graph``).

Examples:
    >>> import jax.numpy as jnp
    >>> from nnx_ppo.networks.recurrent_noise import noise_std
    >>> round(float(noise_std(0.1, 0.5)), 6)  # sqrt(2 * 0.5) * 0.1
    0.1
    >>> [round(float(s), 6) for s in noise_std(0.1, jnp.array([0.02, 0.08]))]  # per unit
    [0.02, 0.04]
"""

from __future__ import annotations

import numbers
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

__all__ = [
    "RecurrentNoiseKey",
    "check_sigma_rec",
    "draw_base_key",
    "initial_keys",
    "noise_std",
    "reset_keys",
    "split_keys",
]

_RESET_TAG = 0x5EED  # folded into a key on reset: a stream disjoint from the step splits


class RecurrentNoiseKey(nnx.Variable):
    """Raw PRNG key data from which a noisy module derives its initial per-environment
    keys.

    Drawn once at construction (only when the module has noise) and never changed or
    trained (not an `nnx.Param`).
    """


def check_sigma_rec(owner: str, sigma: Any) -> float:
    """Validate a recurrent-noise level: a finite number ``>= 0``.

    Args:
        owner: The caller, for the error message (``"CTRNN"``).
        sigma: The value given as ``sigma_rec``.

    Returns:
        ``sigma`` as a float.

    Raises:
        TypeError: If ``sigma`` is not a real number.
        ValueError: If it is negative or not finite.
    """
    if isinstance(sigma, (bool, np.bool_)) or not isinstance(sigma, numbers.Real):
        raise TypeError(
            f"{owner}: sigma_rec must be a number >= 0 (the standard deviation of the "
            f"recurrent noise), got {type(sigma).__name__} {sigma!r}; e.g. sigma_rec=0.15, "
            "or 0.0 for none."
        )
    if not np.isfinite(sigma) or sigma < 0:
        raise ValueError(
            f"{owner}: sigma_rec must be finite and >= 0, got sigma_rec={sigma!r}; e.g. "
            "sigma_rec=0.15 (Song, Yang & Wang 2016), or 0.0 for no noise."
        )
    return float(sigma)


def noise_std(sigma_rec: float, alpha: Any) -> jax.Array:
    """The standard deviation ``sqrt(2 * alpha) * sigma_rec`` of one Euler step's noise
    in a leaky unit with ``alpha = dt / tau`` (a float, or ``[H]`` per unit)."""
    return sigma_rec * jnp.sqrt(2.0 * jnp.asarray(alpha))


def draw_base_key(rngs: nnx.Rngs) -> RecurrentNoiseKey:
    """A `RecurrentNoiseKey` from the ``noise`` stream of ``rngs`` (its ``default``
    stream if it has no ``noise`` one, else ``params``)."""
    try:
        key = rngs.noise()
    except AttributeError:
        key = rngs.params()
    return RecurrentNoiseKey(jax.random.key_data(key))


def initial_keys(base: RecurrentNoiseKey, batch_size: int) -> jax.Array:
    """``batch_size`` per-environment keys derived from ``base``, ``[B, *key_shape]``."""
    keys = jax.random.split(jax.random.wrap_key_data(base[...]), batch_size)
    return jax.random.key_data(keys)


def reset_keys(keys: jax.Array) -> jax.Array:
    """Each environment's key with a constant folded in: a fresh stream for the next
    episode, the same shape and dtype (``[B, *key_shape]``)."""
    return jax.vmap(
        lambda k: jax.random.key_data(jax.random.fold_in(jax.random.wrap_key_data(k), _RESET_TAG))
    )(keys)


def split_keys(
    keys: jax.Array, shape: tuple[int, ...], dtype: Any = jnp.float32
) -> tuple[jax.Array, jax.Array]:
    """One step of the noise: ``(next_keys, xi)``.

    Args:
        keys: The carried keys, ``[B, *key_shape]`` raw key data.
        shape: Each environment's draw shape (``(H,)``).
        dtype: The draws' dtype.

    Returns:
        The keys to carry, same shape and dtype as ``keys``, and ``xi``, standard normal
        draws ``[B, *shape]``.
    """

    def one(k: jax.Array) -> tuple[jax.Array, jax.Array]:
        carried, draw = jax.random.split(jax.random.wrap_key_data(k))
        return jax.random.key_data(carried), jax.random.normal(draw, shape, dtype)

    return jax.vmap(one)(keys)
