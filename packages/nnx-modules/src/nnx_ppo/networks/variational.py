"""Variational bottlenecks: `VariationalBottleneck`, `AR1VariationalBottleneck`.

A bottleneck maps its input to a diagonal Gaussian posterior ``N(mu, sigma)`` over a
latent ``z``, outputs a reparameterized sample ``z = mu + sigma * eps`` and adds
``kl_weight * KL(q || prior)`` per sample to the regularization loss. In
`eval` mode the output is ``mu`` (no noise).

**Two call forms.** ``VariationalBottleneck(in_features, latent_features, rngs=rngs)``
owns its encoder (one `Dense` to ``[mu, log sigma]``). nnx-ppo 0.3.0's
``VariationalBottleneck(latent_size, rng, kl_weight=1.0, min_std=1e-6)`` (the second
argument an `nnx.Rngs` or `nnx.RngStream`, or ``latent_size=`` / ``rng=`` by keyword)
builds the encoder-less form: the input ``[B, 2 * latent_size]`` is the precomputed pair
``(mu, pre_std)`` and ``sigma = softplus(pre_std) + min_std``. Both forms share the
carry, the key handling and the replay guarantees below.

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

from nnx_ppo.networks._helpers import check_features
from nnx_ppo.networks.feedforward import Dense
from nnx_ppo.networks.types import StatefulModule, StatefulModuleOutput

__all__ = ["AR1VariationalBottleneck", "LatentNoiseKey", "VariationalBottleneck"]

_RESET_TAG = 0x7E5E7  # folded into a key on reset: a stream disjoint from the step splits


class LatentNoiseKey(nnx.Variable):
    """Raw PRNG key data from which a bottleneck derives its initial per-env keys.

    Set once at construction and never changed or trained (not an `nnx.Param`).
    """


def _draw_base_key(rngs: nnx.Rngs | nnx.RngStream) -> jax.Array:
    if isinstance(rngs, nnx.RngStream):
        return jax.random.key_data(rngs())
    try:
        key = rngs.noise()
    except AttributeError:  # an Rngs without a "noise" or "default" stream
        key = rngs.params()
    return jax.random.key_data(key)


def _is_rngs(value: Any) -> bool:
    return isinstance(value, nnx.Rngs | nnx.RngStream)


def _resolve_call(
    owner: str,
    in_features: Any,
    latent_features: Any,
    rngs: Any,
    extra: tuple[Any, ...],
    nnx_ppo_options: dict[str, Any],
    our_options: dict[str, Any],
    latent_size: Any,
    rng: Any,
) -> tuple[Any, Any, Any, dict[str, Any]]:
    """Bind either call form to ``(in_features, latent, rngs, options)``.

    ``in_features`` comes back ``None`` for nnx-ppo's encoder-less form. ``nnx_ppo_options``
    maps the names of that form's arguments after ``rng`` (``kl_weight`` first, then in
    its positional order) to ``(given value or None, nnx-ppo's default)``;
    ``our_options`` maps the keyword-only arguments of the encoder form alone (``phi``)
    the same way. The returned ``options`` holds every argument of the chosen form,
    defaults applied (``kl_weight=1e-3`` in the encoder form).
    """
    ours = f"{owner}(in_features, latent_features, rngs=rngs)"
    theirs = f"{owner}(latent_size, rng, {', '.join(nnx_ppo_options)})"
    defaults = {"kl_weight": 1e-3} | {k: v[1] for k, v in our_options.items()}
    if latent_size is None and rng is None and not _is_rngs(latent_features):
        if extra:
            raise TypeError(
                f"{owner}: got {len(extra)} positional argument(s) after rngs ({extra!r}); "
                f"the encoder form {ours} takes its options by keyword, and nnx-ppo's "
                f"encoder-less form is {theirs} (the second argument an nnx.Rngs)."
            )
        for name, (value, _) in nnx_ppo_options.items():
            if name != "kl_weight" and value is not None:
                raise TypeError(
                    f"{owner}: {name}={value!r} belongs to nnx-ppo's encoder-less form "
                    f"{theirs}, whose input is a precomputed (mean, pre-std) pair; the "
                    f"encoder form {ours} does not take it. Drop {name}, or build the "
                    f"encoder-less form with {owner}(latent_size, rngs)."
                )
        options = {"kl_weight": nnx_ppo_options["kl_weight"][0]}
        options |= {k: v[0] for k, v in our_options.items()}
        resolved = {k: defaults[k] if v is None else v for k, v in options.items()}
        return in_features, latent_features, rngs, resolved

    # nnx-ppo's form: (latent_size, rng, kl_weight, ...) positionally or by keyword.
    if latent_size is not None and in_features is not None:
        raise TypeError(
            f"{owner}: latent_size={latent_size!r} was given by keyword and "
            f"{in_features!r} positionally; pass the latent size once, e.g. {owner}(8, rngs)."
        )
    if rng is not None and latent_features is not None:
        raise TypeError(
            f"{owner}: rng was given by keyword and {latent_features!r} as the second "
            f"argument; pass the random streams once, e.g. {owner}(8, rngs)."
        )
    streams = rng if rng is not None else latent_features
    if not _is_rngs(streams):
        raise TypeError(
            f"{owner}: rng must be an nnx.Rngs or nnx.RngStream, got "
            f"{type(streams).__name__}; e.g. {owner}(8, nnx.Rngs(0))."
        )
    if _is_rngs(rngs):
        raise TypeError(
            f"{owner}: random streams were given both as rng and as rngs; nnx-ppo's form "
            f"{theirs} takes them once, as its second argument."
        )
    positional = ((rngs,) if rngs is not None else ()) + extra
    if len(positional) > len(nnx_ppo_options):
        raise TypeError(
            f"{owner}: nnx-ppo's form {theirs} takes at most {len(nnx_ppo_options) + 2} "
            f"positional arguments, got {len(positional) + 2}."
        )
    options = {k: v[0] for k, v in nnx_ppo_options.items()}
    for name, value in zip(nnx_ppo_options, positional, strict=False):
        if options[name] is not None:
            raise TypeError(
                f"{owner}: {name} was given both positionally ({value!r}) and by keyword "
                f"({options[name]!r}); pass it once."
            )
        options[name] = value
    for name, (value, _) in our_options.items():
        if value is not None:
            raise TypeError(
                f"{owner}: {name}={value!r} belongs to the encoder form {ours}; nnx-ppo's "
                f"encoder-less form {theirs} does not take it."
            )
    resolved = {k: nnx_ppo_options[k][1] if v is None else v for k, v in options.items()}
    latent = latent_size if latent_size is not None else in_features
    return None, latent, streams, resolved


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
        self,
        in_features: int | None,
        latent_features: int,
        rngs: nnx.Rngs | nnx.RngStream,
        kl_weight: float,
        min_std: float,
    ) -> None:
        """``in_features=None`` builds nnx-ppo's encoder-less form (``min_std`` used)."""
        owner = type(self).__name__
        self.encoder: Dense | None
        if in_features is None:
            example = f"{owner}(8, rngs)"
            if not _is_rngs(rngs):
                raise TypeError(
                    f"{owner}: rng must be an nnx.Rngs or nnx.RngStream, got "
                    f"{type(rngs).__name__}; e.g. {example}."
                )
            self.latent_features = check_features(owner, "latent_size", latent_features, example)
            self.in_features = 2 * self.latent_features
            self.min_std: float | None = _check_nonnegative(
                owner, "min_std", min_std, "min_std=1e-6"
            )
            self.encoder = None
        else:
            example = f"{owner}(64, 8, rngs=rngs)"
            if not isinstance(rngs, nnx.Rngs):
                raise TypeError(
                    f"{owner}: rngs must be an nnx.Rngs, got {type(rngs).__name__}; e.g. {example}."
                )
            self.in_features = check_features(owner, "in_features", in_features, example)
            self.latent_features = check_features(
                owner, "latent_features", latent_features, example
            )
            self.min_std = None
            self.encoder = Dense(self.in_features, 2 * self.latent_features, rngs=rngs)
        self.kl_weight = _check_nonnegative(owner, "kl_weight", kl_weight, "kl_weight=1e-3")
        self.noise_key = LatentNoiseKey(_draw_base_key(rngs))
        self.deterministic = False

    @property
    def latent_size(self) -> int:
        """nnx-ppo 0.3.0's name for ``latent_features``: the width of the latent."""
        return self.latent_features

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

    def _penalty(
        self, state: dict[str, jax.Array], z: jax.Array
    ) -> tuple[jax.Array, dict[str, jax.Array]] | None:
        """An extra per-sample penalty ``[B]`` on latent ``z`` and its metrics, or None."""
        del state, z
        return None

    def _posterior(self, x: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Posterior ``(mean, std, log std)``, each ``[B, latent]``, from input ``x``."""
        if self.encoder is None:  # nnx-ppo's form: x is (mean, pre-std)
            mean, pre_std = jnp.split(x, 2, axis=-1)
            std = jax.nn.softplus(pre_std) + jnp.asarray(self.min_std, pre_std.dtype)
            return mean, std, jnp.log(std)
        mean, log_std = jnp.split(self.encoder.forward(x), 2, axis=-1)
        return mean, jnp.exp(log_std), log_std

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
            x: Input, shape ``[B, in_features]`` (nnx-ppo's form: ``[B, 2 * L]``, the
                mean then the pre-std).
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
            if self.encoder is None:
                raise ValueError(
                    f"{owner}: the input's last axis must have size 2 * latent_size = "
                    f"{self.in_features} (mean and pre-std), got an input of shape "
                    f"{tuple(x.shape)}; put a layer with {self.in_features} outputs before it."
                )
            raise ValueError(
                f"{owner}: the input's last axis must have size in_features="
                f"{self.in_features}, got an input of shape {tuple(x.shape)}."
            )
        mean, std, log_std = self._posterior(x)

        def split(key_data: jax.Array) -> tuple[jax.Array, jax.Array]:
            next_key, noise_key = jax.random.split(jax.random.wrap_key_data(key_data))
            eps = jax.random.normal(noise_key, (self.latent_features,), mean.dtype)
            return jax.random.key_data(next_key), eps

        next_keys, eps = jax.vmap(split)(state["key"])
        z = mean if self.deterministic else mean + std * eps

        prior_mean, prior_std = self._prior(state)
        kl = _gaussian_kl(mean, log_std, prior_mean, prior_std)
        loss = self.kl_weight * kl
        metrics = {"kl": jnp.mean(kl), "posterior_std": jnp.mean(std)}
        penalty = self._penalty(state, z)
        if penalty is not None:
            loss = loss + penalty[0]
            metrics |= penalty[1]
        return StatefulModuleOutput(
            next_state={"key": next_keys, **self._next_prior_state(state, z)},
            output=z,
            regularization_loss=loss,
            metrics=metrics,
            rollout_extras=(),
        )


class VariationalBottleneck(_VariationalBase):
    """A Gaussian bottleneck with a standard normal prior.

    ``z = mu + sigma * eps`` with ``eps ~ N(0, I)`` from the carried per-env key, and the
    per-sample penalty ``kl_weight * KL(N(mu, sigma) || N(0, I))``
    ``= kl_weight * 0.5 * sum(mu**2 + sigma**2 - 1 - 2 log sigma)``.

    Two call forms:

    - ``VariationalBottleneck(in_features, latent_features, rngs=rngs, kl_weight=1e-3)``
      owns its encoder: ``[mu, log sigma] = Dense(x)``, input ``[B, in_features]``.
    - nnx-ppo 0.3.0's ``VariationalBottleneck(latent_size, rng, kl_weight=1.0,
      min_std=1e-6)`` (the second argument an `nnx.Rngs` or `nnx.RngStream`; also
      ``latent_size=`` / ``rng=`` by keyword) has no parameters: the input
      ``[B, 2 * latent_size]`` is ``(mu, pre_std)`` and
      ``sigma = softplus(pre_std) + min_std``.

    Args:
        in_features: Size of the input's last axis, a positive int (nnx-ppo's form:
            the latent size).
        latent_features: Size ``L`` of the latent, a positive int (nnx-ppo's form: the
            random streams).
        rngs: Random streams: ``params`` for the encoder, ``noise`` (or ``default``) for
            the base key of the per-env noise keys (nnx-ppo's form: ``kl_weight``).
        *nnx_ppo_args: nnx-ppo's form only: ``min_std`` positionally.
        kl_weight: Non-negative weight of the KL penalty (default ``1e-3``; ``1.0`` in
            nnx-ppo's form).
        min_std: nnx-ppo's form only: non-negative floor added to the softplus
            (default ``1e-6``).
        latent_size: nnx-ppo's keyword for the latent size.
        rng: nnx-ppo's keyword for the random streams (an `nnx.Rngs` or `nnx.RngStream`,
            from which one base key is drawn at construction).

    Raises:
        TypeError: If a size, ``rngs``, ``kl_weight`` or ``min_std`` has the wrong type,
            or an argument of one form is given to the other.
        ValueError: If a size is not positive or a weight is negative.

    Output ``z`` ``[B, L]``; carry ``{"key": [B, 2]}`` (uint32 key data);
    ``rollout_extras`` ``()``; metrics ``{"kl", "posterior_std"}`` (batch means). In eval
    mode ``z = mu``.

    Examples:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> vb = VariationalBottleneck(4, 2, rngs=nnx.Rngs(0))
        >>> state = vb.initialize_state(3)
        >>> out = vb(state, jnp.ones((3, 4)))
        >>> out.output.shape, out.regularization_loss.shape, state["key"].shape
        ((3, 2), (3,), (3, 2))
        >>> theirs = VariationalBottleneck(2, nnx.Rngs(0), 0.1)  # nnx-ppo's form
        >>> out = theirs(theirs.initialize_state(3), jnp.ones((3, 4)))
        >>> theirs.encoder is None, out.output.shape
        (True, (3, 2))
    """

    def __init__(
        self,
        in_features: int | None = None,
        latent_features: int | nnx.Rngs | nnx.RngStream | None = None,
        rngs: nnx.Rngs | float | None = None,
        *nnx_ppo_args: Any,
        kl_weight: float | None = None,
        min_std: float | None = None,
        latent_size: int | None = None,
        rng: nnx.Rngs | nnx.RngStream | None = None,
    ) -> None:
        in_features, latent, streams, options = _resolve_call(
            type(self).__name__,
            in_features,
            latent_features,
            rngs,
            nnx_ppo_args,
            {"kl_weight": (kl_weight, 1.0), "min_std": (min_std, 1e-6)},
            {},
            latent_size,
            rng,
        )
        super().__init__(
            in_features, latent, streams, options["kl_weight"], options.get("min_std", 0.0)
        )

    def _prior(self, state: dict[str, jax.Array]) -> tuple[jax.Array, jax.Array]:
        del state
        return jnp.zeros(()), jnp.ones(())


class AR1VariationalBottleneck(_VariationalBase):
    """A Gaussian bottleneck that favours slowly varying latents.

    Two call forms, which differ in how they tie ``z_t`` to ``z_{t-1}``:

    - ``AR1VariationalBottleneck(in_features, latent_features, rngs=rngs, phi=0.9,
      kl_weight=1e-3)`` owns its encoder (``[mu, log sigma] = Dense(x)``) and has a
      stationary AR(1) *prior* ``z_t ~ N(phi * z_{t-1}, 1 - phi**2)`` per latent
      dimension, whose stationary distribution is ``N(0, 1)``; at an episode's first step
      it is ``N(0, 1)`` itself. The penalty ``kl_weight * KL(N(mu_t, sigma_t) || prior)``
      charges a latent for deviating from the AR(1) prediction ``phi * z_{t-1}``.
      ``phi = 0`` is `VariationalBottleneck`.
    - nnx-ppo 0.3.0's ``AR1VariationalBottleneck(latent_size, rng, kl_weight=1.0,
      min_std=1e-6, ar1_weight=1.0, backprop_through_time=True)`` reads
      ``(mu, pre_std)`` ``[B, 2 * latent_size]`` (``sigma = softplus(pre_std) + min_std``)
      and adds to ``kl_weight * KL(N(mu, sigma) || N(0, I))`` the L2 penalty
      ``ar1_weight * mean_l (z_t - z_{t-1})**2`` on consecutive sampled latents, zero at
      an episode's first step. With ``backprop_through_time=False`` its gradient does
      not reach ``z_{t-1}``.

    Args:
        in_features: Size of the input's last axis, a positive int (nnx-ppo's form:
            the latent size).
        latent_features: Size ``L`` of the latent, a positive int (nnx-ppo's form: the
            random streams).
        rngs: Random streams: ``params`` for the encoder, ``noise`` (or ``default``) for
            the base key of the per-env noise keys (nnx-ppo's form: ``kl_weight``).
        *nnx_ppo_args: nnx-ppo's form only: ``min_std``, ``ar1_weight``,
            ``backprop_through_time`` positionally.
        phi: Encoder form only: AR(1) coefficient, ``-1 < phi < 1`` (default 0.9).
        kl_weight: Non-negative weight of the KL penalty (default ``1e-3``; ``1.0`` in
            nnx-ppo's form).
        min_std: nnx-ppo's form only: non-negative floor added to the softplus.
        ar1_weight: nnx-ppo's form only: non-negative weight of the L2 penalty.
        backprop_through_time: nnx-ppo's form only: whether the L2 penalty's gradient
            flows into the previous latent.
        latent_size: nnx-ppo's keyword for the latent size.
        rng: nnx-ppo's keyword for the random streams.

    Raises:
        TypeError: If a size, ``rngs``, ``phi``, a weight or ``backprop_through_time``
            has the wrong type, or an argument of one form is given to the other.
        ValueError: If a size is not positive, ``phi`` is outside ``(-1, 1)`` or a
            weight is negative.

    Output ``z`` ``[B, L]``; carry ``{"key": [B, 2], "z": [B, L], "started": [B]}`` (the
    previous latent, and whether there is one) in both forms; ``rollout_extras`` ``()``;
    metrics ``{"kl", "posterior_std"}`` plus, in nnx-ppo's form, ``"l2_diff"`` (batch
    means). In eval mode ``z = mu`` (also as the carried latent).
    """

    _carry_keys = ("key", "started", "z")

    def __init__(
        self,
        in_features: int | None = None,
        latent_features: int | nnx.Rngs | nnx.RngStream | None = None,
        rngs: nnx.Rngs | float | None = None,
        *nnx_ppo_args: Any,
        phi: float | None = None,
        kl_weight: float | None = None,
        min_std: float | None = None,
        ar1_weight: float | None = None,
        backprop_through_time: bool | None = None,
        latent_size: int | None = None,
        rng: nnx.Rngs | nnx.RngStream | None = None,
    ) -> None:
        owner = type(self).__name__
        in_features, latent, streams, options = _resolve_call(
            owner,
            in_features,
            latent_features,
            rngs,
            nnx_ppo_args,
            {
                "kl_weight": (kl_weight, 1.0),
                "min_std": (min_std, 1e-6),
                "ar1_weight": (ar1_weight, 1.0),
                "backprop_through_time": (backprop_through_time, True),
            },
            {"phi": (phi, 0.9)},
            latent_size,
            rng,
        )
        self.phi: float | None = None
        self.ar1_weight: float | None = None
        self.backprop_through_time = True
        if in_features is None:  # nnx-ppo's form
            self.ar1_weight = _check_nonnegative(
                owner, "ar1_weight", options["ar1_weight"], "ar1_weight=1.0"
            )
            bptt = options["backprop_through_time"]
            if not isinstance(bptt, bool):
                raise TypeError(
                    f"{owner}: backprop_through_time must be a bool, got {bptt!r} of type "
                    f"{type(bptt).__name__}; e.g. backprop_through_time=False."
                )
            self.backprop_through_time = bptt
        else:
            phi = options["phi"]
            if isinstance(phi, bool) or not isinstance(phi, numbers.Real):
                raise TypeError(
                    f"{owner}: phi must be a float in (-1, 1), got {phi!r} of type "
                    f"{type(phi).__name__}; e.g. phi=0.9."
                )
            if not -1.0 < float(phi) < 1.0:
                raise ValueError(
                    f"{owner}: phi must lie strictly between -1 and 1, got {phi!r}; "
                    "|phi| >= 1 has no stationary distribution (the prior std "
                    "sqrt(1 - phi**2) would vanish). Use e.g. phi=0.9."
                )
            self.phi = float(phi)
        super().__init__(
            in_features, latent, streams, options["kl_weight"], options.get("min_std", 0.0)
        )

    def _initial_prior_state(self, batch_size: int) -> dict[str, jax.Array]:
        return {
            "z": jnp.zeros((batch_size, self.latent_features), jnp.float32),
            "started": jnp.zeros((batch_size,), bool),
        }

    def _prior(self, state: dict[str, jax.Array]) -> tuple[jax.Array, jax.Array]:
        if self.phi is None:  # nnx-ppo's form: N(0, I), and the L2 penalty
            return jnp.zeros(()), jnp.ones(())
        started = state["started"][:, None]
        prior_mean = jnp.where(started, self.phi * state["z"], 0.0)
        prior_std = jnp.where(started, math.sqrt(1.0 - self.phi**2), 1.0)
        return prior_mean, prior_std

    def _penalty(
        self, state: dict[str, jax.Array], z: jax.Array
    ) -> tuple[jax.Array, dict[str, jax.Array]] | None:
        if self.ar1_weight is None:
            return None
        prev = state["z"]
        if not self.backprop_through_time:
            prev = jax.lax.stop_gradient(prev)
        l2_diff = jnp.where(state["started"], jnp.mean(jnp.square(z - prev), axis=-1), 0.0)
        return self.ar1_weight * l2_diff, {"l2_diff": jnp.mean(l2_diff)}

    def _next_prior_state(self, state: dict[str, jax.Array], z: jax.Array) -> dict[str, jax.Array]:
        return {
            "z": z.astype(state["z"].dtype),
            "started": jnp.ones_like(state["started"]),
        }
