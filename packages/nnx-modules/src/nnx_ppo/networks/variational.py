"""Variational bottlenecks: `VariationalBottleneck`, `AR1VariationalBottleneck`.

A bottleneck maps its input to a diagonal Gaussian posterior ``N(mu, sigma)`` over a
latent ``z`` (one `Dense` to ``[mu, log sigma]``),
outputs a reparameterized sample ``z = mu + sigma * eps`` and adds
``kl_weight * KL(q || prior)`` per sample to the regularization loss. In
`eval` mode the output is ``mu`` (no noise).

**Replay.** The noise ``eps`` is drawn from a per-environment PRNG key that lives in the
carry (``state["key"]``, raw key data ``[B, *key_shape]``, uint32 for the default
threefry keys) and is split every step. Loss replay starts from the stored carry and
resets it exactly where the rollout did, so it draws the same ``eps`` and needs no
``rollout_extras``.

**Keys.** `initialize_state` derives the ``B`` keys deterministically from a base
key drawn once at construction from ``rngs`` (its ``noise`` stream, falling back to
``default`` / ``params``) and stored as a `LatentNoiseKey`.
`reset_state` does *not* restore those initial keys: it folds a constant into
each environment's current key, a deterministic function of the carry (so replay
repeats it) that gives every episode fresh, independent noise rather than replaying the
first episode's noise sequence. The other carry entries do return to their initial
values.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from nnx_ppo.networks.feedforward import Dense, _check_positive_int
from nnx_ppo.networks.types import StatefulModule, StatefulModuleOutput

__all__ = ["AR1VariationalBottleneck", "LatentNoiseKey", "VariationalBottleneck"]

_RESET_TAG = 0x7E5E7  # folded into a key on reset: a stream disjoint from the step splits


class LatentNoiseKey(nnx.Variable):
    """Raw PRNG key data from which a bottleneck derives its initial per-env keys.

    Set once at construction and never changed or trained (not an `nnx.Param`).
    """


def _draw_base_key(rngs: nnx.Rngs) -> jax.Array:
    try:
        key = rngs.noise()
    except AttributeError:  # an Rngs without a "noise" or "default" stream
        key = rngs.params()
    return jax.random.key_data(key)


def _check_nonnegative(owner: str, name: str, value: Any, example: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{owner}: {name} must be a non-negative float, got {value!r} of type "
            f"{type(value).__name__}; e.g. {example}."
        )
    if not (float(value) >= 0 and math.isfinite(value)):
        raise ValueError(
            f"{owner}: {name} must be a non-negative finite float, got {value!r}; e.g. {example}."
        )
    return float(value)


def _gaussian_kl(
    mean: jax.Array, log_std: jax.Array, prior_mean: jax.Array, prior_std: jax.Array
) -> jax.Array:
    """``KL(N(mean, exp(log_std)) || N(prior_mean, prior_std))`` summed over the last axis."""
    var_ratio = jnp.exp(2.0 * log_std) / jnp.square(prior_std)
    mahalanobis = jnp.square((mean - prior_mean) / prior_std)
    return 0.5 * jnp.sum(var_ratio + mahalanobis - 1.0 - jnp.log(var_ratio), axis=-1)


class _VariationalBase(StatefulModule):
    """Encoder, per-env keys, sampling and the KL; subclasses define the prior."""

    _carry_keys: tuple[str, ...] = ("key",)

    def __init__(
        self, in_features: int, latent_features: int, rngs: nnx.Rngs | None, kl_weight: float
    ) -> None:
        owner = type(self).__name__
        example = f"{owner}(64, 8, rngs=rngs)"
        if isinstance(latent_features, nnx.Rngs | nnx.RngStream):
            raise TypeError(
                f"{owner}: the second argument is an nnx.Rngs, as in nnx-ppo 0.3.0's "
                f"{owner}(latent_size, rng), which reads a precomputed [B, 2 * latent] "
                f"(mean, pre-std) input. This {owner} owns its encoder instead: pass the "
                f"input width and the latent width, e.g. {owner}(in_features, "
                "latent_size, rngs=rngs), and drop the layer that produced mean and "
                "pre-std (see 'Coming from nnx-ppo' in the docs)."
            )
        if not isinstance(rngs, nnx.Rngs):
            raise TypeError(
                f"{owner}: rngs must be an nnx.Rngs, got {type(rngs).__name__}; e.g. {example}."
            )
        self.in_features = _check_positive_int(owner, "in_features", in_features, example)
        self.latent_features = _check_positive_int(
            owner, "latent_features", latent_features, example
        )
        self.kl_weight = _check_nonnegative(owner, "kl_weight", kl_weight, "kl_weight=1e-3")
        self.encoder = Dense(self.in_features, 2 * self.latent_features, rngs=rngs)
        self.noise_key = LatentNoiseKey(_draw_base_key(rngs))
        self.deterministic = False

    # Hooks -----------------------------------------------------------------------------

    def _initial_prior_state(self, batch_size: int) -> dict[str, jax.Array]:
        """Carry entries (besides ``"key"``) at an episode start."""
        del batch_size
        return {}

    def _prior(self, state: dict[str, jax.Array]) -> tuple[jax.Array, jax.Array]:
        """Prior mean and std for this step, each broadcastable to ``[B, latent]``."""
        raise NotImplementedError

    def _next_prior_state(self, state: dict[str, jax.Array], z: jax.Array) -> dict[str, jax.Array]:
        """Carry entries (besides ``"key"``) after emitting latent ``z`` ``[B, latent]``."""
        del state, z
        return {}

    # Contract --------------------------------------------------------------------------

    def initialize_state(self, batch_size: int) -> dict[str, jax.Array]:
        """The carry at an episode start.

        Args:
            batch_size: Number of environments ``B``.

        Returns:
            ``{"key": [B, *key_shape]}`` (raw key data, derived deterministically from
            the stored `LatentNoiseKey`) plus the prior's entries.
        """
        base = jax.random.wrap_key_data(self.noise_key[...])
        keys = jax.random.key_data(jax.random.split(base, batch_size))
        return {"key": keys, **self._initial_prior_state(batch_size)}

    def reset_state(self, prev_state: dict[str, jax.Array]) -> dict[str, jax.Array]:
        """Initial prior entries, and fresh keys derived from ``prev_state["key"]``.

        Args:
            prev_state: The batched carry.

        Returns:
            A carry with the same structure, shapes and dtypes.
        """
        keys = prev_state["key"]
        fresh = jax.vmap(
            lambda k: jax.random.key_data(
                jax.random.fold_in(jax.random.wrap_key_data(k), _RESET_TAG)
            )
        )(keys)
        return {"key": fresh, **self._initial_prior_state(keys.shape[0])}

    def __call__(
        self, state: dict[str, jax.Array], x: jax.Array, rollout_extras: Any = None
    ) -> StatefulModuleOutput:
        """Sample the latent for one step.

        Args:
            state: The carry (see `initialize_state`).
            x: Input, shape ``[B, in_features]``.
            rollout_extras: Ignored: the noise is reproduced from the carried key.

        Returns:
            A `StatefulModuleOutput` with ``output`` the latent ``z``
            ``[B, latent_features]`` (the posterior mean in eval mode),
            ``regularization_loss`` ``kl_weight * KL`` ``[B]`` and metrics
            ``{"kl": mean KL, "posterior_std": mean sigma}``.
        """
        del rollout_extras
        owner = type(self).__name__
        if not isinstance(state, dict) or set(state) != set(self._carry_keys):
            got = sorted(state) if isinstance(state, dict) else type(state).__name__
            raise ValueError(
                f"{owner}: state must be a dict with keys {sorted(self._carry_keys)}, got "
                f"{got}; pass the carry from initialize_state() or a previous next_state."
            )
        if x.shape[-1:] != (self.in_features,):
            raise ValueError(
                f"{owner}: the input's last axis must have size in_features="
                f"{self.in_features}, got an input of shape {tuple(x.shape)}."
            )
        mean, log_std = jnp.split(self.encoder.forward(x), 2, axis=-1)

        def split(key_data: jax.Array) -> tuple[jax.Array, jax.Array]:
            next_key, noise_key = jax.random.split(jax.random.wrap_key_data(key_data))
            eps = jax.random.normal(noise_key, (self.latent_features,), mean.dtype)
            return jax.random.key_data(next_key), eps

        next_keys, eps = jax.vmap(split)(state["key"])
        z = mean if self.deterministic else mean + jnp.exp(log_std) * eps

        prior_mean, prior_std = self._prior(state)
        kl = _gaussian_kl(mean, log_std, prior_mean, prior_std)
        return StatefulModuleOutput(
            next_state={"key": next_keys, **self._next_prior_state(state, z)},
            output=z,
            regularization_loss=self.kl_weight * kl,
            metrics={"kl": jnp.mean(kl), "posterior_std": jnp.mean(jnp.exp(log_std))},
            rollout_extras=(),
        )


class VariationalBottleneck(_VariationalBase):
    """A Gaussian bottleneck with a standard normal prior.

    ``[mu, log sigma] = Dense(x)``, ``z = mu + sigma * eps`` with ``eps ~ N(0, I)`` from
    the carried per-env key, and the per-sample penalty
    ``kl_weight * KL(N(mu, sigma) || N(0, I))``
    ``= kl_weight * 0.5 * sum(mu**2 + sigma**2 - 1 - 2 log sigma)``.

    Args:
        in_features: Size of the input's last axis, a positive int.
        latent_features: Size ``L`` of the latent, a positive int.
        rngs: Random streams: ``params`` for the encoder, ``noise`` (or ``default``) for
            the base key of the per-env noise keys.
        kl_weight: Non-negative weight of the KL penalty.

    Raises:
        TypeError: If a size or ``kl_weight`` has the wrong type.
        ValueError: If a size is not positive or ``kl_weight`` is negative.

    Input ``[B, in_features]``; output ``z`` ``[B, L]``; carry ``{"key": [B, 2]}``
    (uint32 key data); ``rollout_extras`` ``()``. In eval mode ``z = mu``.

    Examples:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> vb = VariationalBottleneck(4, 2, rngs=nnx.Rngs(0))
        >>> state = vb.initialize_state(3)
        >>> out = vb(state, jnp.ones((3, 4)))
        >>> out.output.shape, out.regularization_loss.shape, state["key"].shape
        ((3, 2), (3,), (3, 2))
    """

    def __init__(
        self,
        in_features: int,
        latent_features: int,
        rngs: nnx.Rngs | None = None,
        *,
        kl_weight: float = 1e-3,
    ) -> None:
        super().__init__(in_features, latent_features, rngs=rngs, kl_weight=kl_weight)

    def _prior(self, state: dict[str, jax.Array]) -> tuple[jax.Array, jax.Array]:
        del state
        return jnp.zeros(()), jnp.ones(())


class AR1VariationalBottleneck(_VariationalBase):
    """A Gaussian bottleneck whose prior is a stationary AR(1) process over time.

    The prior is ``z_t ~ N(phi * z_{t-1}, 1 - phi**2)`` (per latent dimension), whose
    stationary distribution is ``N(0, 1)``; at an episode's first step it is ``N(0, 1)``
    itself. The penalty ``kl_weight * KL(N(mu_t, sigma_t) || prior)`` therefore
    charges a latent for deviating from the AR(1) prediction ``phi * z_{t-1}``, which
    favours slowly varying latents for ``phi`` near 1. ``phi = 0`` is
    `VariationalBottleneck`.

    Args:
        in_features: Size of the input's last axis, a positive int.
        latent_features: Size ``L`` of the latent, a positive int.
        rngs: Random streams: ``params`` for the encoder, ``noise`` (or ``default``) for
            the base key of the per-env noise keys.
        phi: AR(1) coefficient, ``-1 < phi < 1``.
        kl_weight: Non-negative weight of the KL penalty.

    Raises:
        TypeError: If a size, ``phi`` or ``kl_weight`` has the wrong type.
        ValueError: If a size is not positive, ``phi`` is outside ``(-1, 1)`` or
            ``kl_weight`` is negative.

    Input ``[B, in_features]``; output ``z`` ``[B, L]``; carry ``{"key": [B, 2],
    "z": [B, L], "started": [B]}`` (the previous latent, and whether there is one);
    ``rollout_extras`` ``()``. In eval mode ``z = mu`` (also as the carried latent).
    """

    _carry_keys = ("key", "started", "z")

    def __init__(
        self,
        in_features: int,
        latent_features: int,
        rngs: nnx.Rngs | None = None,
        *,
        phi: float = 0.9,
        kl_weight: float = 1e-3,
    ) -> None:
        if isinstance(phi, bool) or not isinstance(phi, numbers.Real):
            raise TypeError(
                f"AR1VariationalBottleneck: phi must be a float in (-1, 1), got {phi!r} of "
                f"type {type(phi).__name__}; e.g. phi=0.9."
            )
        if not -1.0 < phi < 1.0:
            raise ValueError(
                f"AR1VariationalBottleneck: phi must lie strictly between -1 and 1, got "
                f"{phi!r}; |phi| >= 1 has no stationary distribution (the prior std "
                "sqrt(1 - phi**2) would vanish). Use e.g. phi=0.9."
            )
        self.phi: float = float(phi)
        super().__init__(in_features, latent_features, rngs=rngs, kl_weight=kl_weight)

    def _initial_prior_state(self, batch_size: int) -> dict[str, jax.Array]:
        return {
            "z": jnp.zeros((batch_size, self.latent_features), jnp.float32),
            "started": jnp.zeros((batch_size,), bool),
        }

    def _prior(self, state: dict[str, jax.Array]) -> tuple[jax.Array, jax.Array]:
        started = state["started"][:, None]
        prior_mean = jnp.where(started, self.phi * state["z"], 0.0)
        prior_std = jnp.where(started, math.sqrt(1.0 - self.phi**2), 1.0)
        return prior_mean, prior_std

    def _next_prior_state(self, state: dict[str, jax.Array], z: jax.Array) -> dict[str, jax.Array]:
        return {
            "z": z.astype(state["z"].dtype),
            "started": jnp.ones_like(state["started"]),
        }
