"""Action samplers: the last layer of a policy, turning distribution parameters into actions.

Every sampler is a `StatefulModule` (carry ``()``, except a Gaussian sampler that holds
its exploration noise for several steps: `NormalSampler`'s ``resample_every``) that
emits the sampler dict ``{"action": [B, ...], "log_likelihood": [B]}``
that `PPOAdapter` collects, and stores what loss replay
needs in ``rollout_extras``: the *raw* action, before any squashing. One call does one
of three things, decided once in `ActionSampler`:

- ``rollout_extras`` given (loss replay): use the stored raw action, whatever the mode;
- ``deterministic`` set (after ``module.eval()``): use the distribution's mode / mean;
- otherwise (``module.train()``, the default): draw from the sampler's RNG stream.

The log-likelihood is always that of the returned action under the distribution the
input parameterizes, so replaying with the stored raw action reproduces the rollout's
log-likelihood exactly while the parameters are unchanged.

The sampler's randomness comes from an `flax.nnx.RngStream` it owns (forked from
the ``rngs`` passed at construction). This is the one exception to "randomness lives in
the carry": a sampler's draw never has to be reproduced, because replay substitutes the
stored action. Each call draws only the random numbers the distribution needs (one
normal per action dimension, or one categorical draw per sample).

The stream's counter is module state that sampling advances. In pure JAX code (a
``lax.scan`` over rollout steps on ``nnx.split`` state), merge the module inside the
step and return ``nnx.state(model)`` with the carry; a module closed over from outside
the scan raises flax's ``TraceContextError`` when it samples. Replay and ``eval()``
calls draw nothing and leave the counter alone.

Every sampler call reports itself: inside a `record_sampler_calls` block, each call
appends a `SamplerCall` (the sampler and its output) to the block's list, so a tool can
find where each sampler's action ends up in a network's output (also importable from
`nnx_ppo.networks.recording`, with the other recording tools).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from nnx_ppo.networks.types import ModuleState, StatefulModule, StatefulModuleOutput

__all__ = [
    "ActionSampler",
    "CategoricalSampler",
    "NormalSampler",
    "NormalTanhSampler",
    "SamplerCall",
    "record_sampler_call",
    "record_sampler_calls",
]

_LOG_2 = math.log(2.0)
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _is_positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _check_weight(name: str, value: Any, *, allow_zero: bool) -> float:
    """Validate a non-negative (or positive) finite real hyper-parameter."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__}).")
    value = float(value)
    ok = math.isfinite(value) and (value >= 0.0 if allow_zero else value > 0.0)
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(
            f"{name} must be finite and {bound}, got {value!r}; pass e.g. {name}=1e-3."
        )
    return value


def _fork_stream(rngs: Any, stream: str) -> nnx.RngStream:
    """A private RNG stream for a sampler, forked from the user's ``rngs``."""
    if isinstance(rngs, nnx.RngStream):
        return rngs.fork()
    if isinstance(rngs, nnx.Rngs):
        if stream not in rngs and "default" not in rngs:
            raise ValueError(
                f"rngs has neither an {stream!r} nor a 'default' stream (streams: "
                f"{sorted(rngs)}); pass nnx.Rngs(seed) or nnx.Rngs({stream}=seed)."
            )
        return rngs[stream].fork()
    raise TypeError(
        f"rngs must be an nnx.Rngs (or nnx.RngStream), got {type(rngs).__name__}; "
        "pass e.g. rngs=nnx.Rngs(0)."
    )


def _one_rngs(owner: str, rngs: Any, rng: Any) -> Any:
    """``rngs``, or nnx-ppo 0.3.0's keyword name for it, ``rng`` (exactly one)."""
    if rngs is not None and rng is not None:
        raise TypeError(
            f"{owner}: got both rngs and rng (nnx-ppo's name for the same argument); "
            "pass one of them, e.g. rngs=nnx.Rngs(0)."
        )
    if rngs is None and rng is None:
        raise TypeError(f"{owner}: rngs is required; pass e.g. {owner}(nnx.Rngs(0)).")
    return rngs if rngs is not None else rng


# --------------------------------------------------------------------------------------
# Sampler calls, recorded on request
# --------------------------------------------------------------------------------------

_ACTIVE: contextvars.ContextVar[list[SamplerCall] | None] = contextvars.ContextVar(
    "nnx_ppo_sampler_calls", default=None
)


@dataclasses.dataclass(frozen=True)
class SamplerCall:
    """One recorded sampler call.

    Attributes:
        sampler: The `ActionSampler` module that was called.
        output: What it returned: ``output.output["action"]`` is the action,
            ``output.rollout_extras`` the raw action it emitted for replay.
        params: The distribution parameters its input gave (e.g. a Gaussian's
            ``(mean, std)``), differentiable in the network's parameters (the actions
            are not: a sampler's draws and modes are fixed values).
    """

    sampler: ActionSampler
    output: StatefulModuleOutput
    params: Any = None

    @property
    def mode(self) -> jax.Array:
        """The distribution's raw mode (before squashing: a Gaussian's mean, a
        categorical's most likely index), as a differentiable function of ``params``:
        e.g. for a loss on where the policy is centred."""
        return self.sampler._mode_raw(self.params)


@contextlib.contextmanager
def record_sampler_calls() -> Iterator[list[SamplerCall]]:
    """Record every sampler call made inside the block, in call order.

    Blocks nest: an inner block records its calls, and the outer one gets them too.

    Yields:
        The list the calls are appended to.
    """
    calls: list[SamplerCall] = []
    outer = _ACTIVE.get()
    token = _ACTIVE.set(calls)
    try:
        yield calls
    finally:
        _ACTIVE.reset(token)
        if outer is not None:
            outer.extend(calls)


def record_sampler_call(
    sampler: ActionSampler, output: StatefulModuleOutput, params: Any = None
) -> None:
    """Record one call if a `record_sampler_calls` block is active (called by
    `ActionSampler.__call__` with its distribution parameters; a no-op otherwise)."""
    calls = _ACTIVE.get()
    if calls is not None:
        calls.append(SamplerCall(sampler, output, params))


# --------------------------------------------------------------------------------------
# Samplers
# --------------------------------------------------------------------------------------


class ActionSampler(StatefulModule):
    """Base class of the action samplers: replay and train/eval bookkeeping, once.

    Subclasses describe a distribution through small hooks and inherit
    `__call__`:

    - ``_params(x)``: validate the input and return the distribution parameters;
    - ``_sample_raw(params, key)``: a raw draw, ``[B, ...]``;
    - ``_mode_raw(params)``: the raw action returned in ``eval()`` mode;
    - ``_log_prob_raw(params, raw)``: log-density of ``raw``, summed over the event, ``[B]``;
    - ``_squash(raw)`` and ``_squash_log_det(raw)``: the action transform and its
      ``log|d squash / d raw|`` summed over the event (identity and ``0`` by default);
    - ``_entropy(params, raw)``: a per-sample entropy (estimate) of the *action*, ``[B]``.

    Output ``{"action": squash(raw), "log_likelihood": log_prob_raw - squash_log_det}``;
    ``rollout_extras`` is ``raw``; ``regularization_loss`` is
    ``-entropy_weight * entropy``, shape ``[B]`` (an entropy bonus); ``metrics`` is
    ``{"entropy": batch mean}`` (a scalar, like every module's metrics). Fresh and mode
    actions are wrapped in ``stop_gradient``: the log-likelihood is that of a fixed
    action, as PPO needs.

    Args:
        rngs: Where the sampler's private stream is forked from: an `nnx.Rngs`
            (its ``rng_stream`` stream, else its ``default`` one) or an
            `nnx.RngStream`.
        entropy_weight: Weight of the entropy bonus, ``>= 0``.
        deterministic: Start in eval mode (return the mode). ``module.eval()`` /
            ``module.train()`` set this flag on every nested sampler.
        rng_stream: Name of the stream forked from ``rngs``.
        rng: nnx-ppo 0.3.0's keyword name for ``rngs`` (``NormalTanhSampler(rng=...)``);
            give one of the two.

    Attributes:
        deterministic: ``True`` after ``eval()``: calls without ``rollout_extras``
            return the mode instead of sampling.
    """

    def __init__(
        self,
        rngs: nnx.Rngs | nnx.RngStream | None = None,
        entropy_weight: float = 0.0,
        *,
        deterministic: bool = False,
        rng_stream: str = "action",
        rng: nnx.Rngs | nnx.RngStream | None = None,
    ) -> None:
        self.entropy_weight = _check_weight("entropy_weight", entropy_weight, allow_zero=True)
        if not isinstance(deterministic, bool):
            raise TypeError(f"deterministic must be a bool, got {deterministic!r}.")
        self.deterministic = deterministic
        self.rngs = _fork_stream(_one_rngs(type(self).__name__, rngs, rng), rng_stream)

    # -- hooks ------------------------------------------------------------------------

    def _params(self, x: Any) -> Any:
        raise NotImplementedError

    def _sample_raw(self, params: Any, key: jax.Array) -> jax.Array:
        raise NotImplementedError

    def _mode_raw(self, params: Any) -> jax.Array:
        raise NotImplementedError

    def _log_prob_raw(self, params: Any, raw: jax.Array) -> jax.Array:
        raise NotImplementedError

    def _entropy(self, params: Any, raw: jax.Array) -> jax.Array:
        raise NotImplementedError

    def _squash(self, raw: jax.Array) -> jax.Array:
        return raw

    def _squash_log_det(self, raw: jax.Array) -> jax.Array:
        del raw
        return jnp.zeros(())

    def _draw(self, params: Any, state: ModuleState) -> tuple[jax.Array, ModuleState]:
        """A raw draw and the next carry (a sampler that keeps noise in its carry
        overrides this; the default draws afresh and keeps the carry ``()``)."""
        return self._sample_raw(params, self.rngs()), self._advance(state)

    def _advance(self, state: ModuleState) -> ModuleState:
        """The next carry when nothing is drawn (replay, ``eval()``)."""
        return state

    # -- shared logic -----------------------------------------------------------------

    def __call__(
        self, state: ModuleState, x: Any, rollout_extras: Any = None
    ) -> StatefulModuleOutput:
        """Sample (or replay) an action.

        Args:
            state: The carry, ``()``.
            x: The distribution parameters, ``[B, ...]`` (see the subclass).
            rollout_extras: ``None`` to sample (or take the mode in ``eval()`` mode);
                during replay, the raw action this sampler emitted, ``[B, ...]``.

        Returns:
            A `StatefulModuleOutput` whose ``output`` is
            ``{"action": [B, ...], "log_likelihood": [B]}`` and whose
            ``rollout_extras`` is the raw action.
        """
        params = self._params(x)
        next_state = self._advance(state)
        if rollout_extras is not None:
            raw = jnp.asarray(rollout_extras)
            expected = jax.eval_shape(self._mode_raw, params).shape
            if raw.shape != expected:
                raise ValueError(
                    f"{type(self).__name__}: rollout_extras has shape {raw.shape} but the "
                    f"input implies raw actions of shape {expected}; pass the "
                    "rollout_extras this sampler emitted for the same step and batch."
                )
        elif self.deterministic:
            raw = jax.lax.stop_gradient(self._mode_raw(params))
        else:
            raw, next_state = self._draw(params, state)
            raw = jax.lax.stop_gradient(raw)
        log_likelihood = self._log_prob_raw(params, raw) - self._squash_log_det(raw)
        entropy = self._entropy(params, raw)
        out = StatefulModuleOutput(
            next_state=next_state,
            output={"action": self._squash(raw), "log_likelihood": log_likelihood},
            regularization_loss=-self.entropy_weight * entropy,
            metrics={"entropy": jnp.mean(entropy)},
            rollout_extras=raw,
        )
        record_sampler_call(self, out, params)  # a no-op outside record_sampler_calls
        return out


def _as_array(owner: str, x: Any) -> jax.Array:
    if isinstance(x, dict | list | tuple):
        raise TypeError(
            f"{owner} takes one array of distribution parameters, got a "
            f"{type(x).__name__}; to sample per key, wrap samplers in "
            "Map({key: sampler, ...})."
        )
    return jnp.asarray(x)


class NormalSampler(ActionSampler):
    """Diagonal Gaussian actions, unsquashed (for environments that clip actions).

    The input ``[B, 2A]`` holds the mean (first half) and a pre-std (second half);
    ``std = (softplus(pre_std) + min_std) * std_scale``. The action is the raw draw
    ``[B, A]``; in ``eval()`` mode it is the mean. The entropy is the Gaussian's,
    ``sum_a (0.5 * log(2 pi e) + log std_a)``, exact and per sample ``[B]``.

    **Held exploration noise.** By default every step draws new noise: the raw action
    is ``mean + std * eps`` with a fresh ``eps ~ N(0, 1)``. With ``resample_every=k``
    the draw ``eps`` is kept for ``k`` steps of each environment (counted from the
    episode's first step) and redrawn on steps ``0, k, 2k, ...``: the exploration is
    correlated in time, as gSDE's ``sde_sample_freq`` makes it, while each action's
    distribution (and so its log-likelihood, which replay and the PPO ratio use) stays
    ``N(mean, std)``. White noise averages out over a few steps, so a task whose
    reward needs a sustained push (MountainCar) is almost never solved by chance; held
    noise pushes for ``k`` steps at a time. The carry is then ``{"noise": [B, A],
    "age": [B]}`` (the held draw and the steps since the episode's start), so the
    sampler needs ``action_size``; with ``k = 1`` the carry is ``()``.

    Args:
        rngs: Source of the sampler's RNG stream (see `ActionSampler`).
        entropy_weight: Weight of the entropy bonus, ``>= 0``.
        min_std: Lower bound added to the softplus, ``> 0``.
        std_scale: Multiplies the std, ``> 0``.
        deterministic: Start in eval mode.
        rng_stream: Name of the stream forked from ``rngs``.
        rng: nnx-ppo's keyword name for ``rngs``.
        resample_every: Steps each noise draw is held, an int ``>= 1`` (1: white noise).
        action_size: ``A``, required when ``resample_every > 1`` (the carry's width).

    Raises:
        ValueError: If a weight is out of range, ``resample_every`` is not an int
            ``>= 1``, or ``action_size`` is missing (or not a positive int) while
            ``resample_every > 1``.

    Examples:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> sampler = NormalSampler(nnx.Rngs(0))
        >>> out = sampler((), jnp.zeros((4, 6)))   # B=4, A=3
        >>> out.output["action"].shape, out.output["log_likelihood"].shape
        ((4, 3), (4,))
    """

    def __init__(
        self,
        rngs: nnx.Rngs | nnx.RngStream | None = None,
        entropy_weight: float = 0.0,
        min_std: float = 1e-3,
        std_scale: float = 1.0,
        *,
        deterministic: bool = False,
        rng_stream: str = "action",
        rng: nnx.Rngs | nnx.RngStream | None = None,
        resample_every: int = 1,
        action_size: int | None = None,
    ) -> None:
        super().__init__(
            rngs, entropy_weight, deterministic=deterministic, rng_stream=rng_stream, rng=rng
        )
        self.min_std = _check_weight("min_std", min_std, allow_zero=False)
        self.std_scale = _check_weight("std_scale", std_scale, allow_zero=False)
        name = type(self).__name__
        if not _is_positive_int(resample_every):
            raise ValueError(
                f"{name}: resample_every must be an int >= 1 (steps each noise draw is "
                f"held; 1 draws afresh every step), got {resample_every!r}."
            )
        if resample_every > 1 and not _is_positive_int(action_size):
            raise ValueError(
                f"{name}: resample_every={resample_every} keeps the noise in the carry, "
                f"which needs action_size (the number of action dimensions A), got "
                f"action_size={action_size!r}; pass action_size=A."
            )
        self.resample_every = int(resample_every)
        self.action_size = action_size

    def initialize_state(self, batch_size: int) -> ModuleState:
        """``()``, or with held noise ``{"noise": zeros [B, A], "age": zeros [B]}``."""
        if self.resample_every == 1:
            return ()
        return {
            "noise": jnp.zeros((batch_size, self.action_size), jnp.float32),
            "age": jnp.zeros((batch_size,), jnp.int32),
        }

    def _advance(self, state: ModuleState) -> ModuleState:
        if self.resample_every == 1:
            return state
        return {"noise": state["noise"], "age": state["age"] + 1}

    def _draw(
        self, params: tuple[jax.Array, jax.Array], state: ModuleState
    ) -> tuple[jax.Array, ModuleState]:
        if self.resample_every == 1:
            return super()._draw(params, state)
        mean, std = params
        if mean.shape != state["noise"].shape:
            raise ValueError(
                f"{type(self).__name__}: the input implies actions of shape {mean.shape} "
                f"but the carry holds noise of shape {state['noise'].shape}; build the "
                f"sampler with action_size={mean.shape[-1]}."
            )
        fresh = jax.random.normal(self.rngs(), mean.shape, mean.dtype)
        redraw = (state["age"] % self.resample_every == 0)[:, None]
        noise = jnp.where(redraw, fresh, state["noise"].astype(mean.dtype))
        next_state = {"noise": noise.astype(state["noise"].dtype), "age": state["age"] + 1}
        return mean + std * noise, next_state

    def _params(self, x: Any) -> tuple[jax.Array, jax.Array]:
        x = _as_array(type(self).__name__, x)
        if x.ndim < 1 or x.shape[-1] % 2 or x.shape[-1] == 0:
            raise ValueError(
                f"{type(self).__name__} takes [B, 2A] (mean, pre-std), got shape {x.shape}: "
                "the last axis must be even and non-zero; give the preceding layer "
                "2 * action_size outputs."
            )
        mean, pre_std = jnp.split(x, 2, axis=-1)
        std = (jax.nn.softplus(pre_std) + self.min_std) * self.std_scale
        return mean, std

    def _sample_raw(self, params: tuple[jax.Array, jax.Array], key: jax.Array) -> jax.Array:
        mean, std = params
        return mean + std * jax.random.normal(key, mean.shape, mean.dtype)

    def _mode_raw(self, params: tuple[jax.Array, jax.Array]) -> jax.Array:
        return params[0]

    def _log_prob_raw(self, params: tuple[jax.Array, jax.Array], raw: jax.Array) -> jax.Array:
        mean, std = params
        z = (raw - mean) / std
        return jnp.sum(-0.5 * z**2 - jnp.log(std) - _HALF_LOG_2PI, axis=-1)

    def _entropy(self, params: tuple[jax.Array, jax.Array], raw: jax.Array) -> jax.Array:
        del raw
        return jnp.sum(0.5 + _HALF_LOG_2PI + jnp.log(params[1]), axis=-1)


def _tanh_log_det(raw: jax.Array) -> jax.Array:
    """``sum log(1 - tanh(raw)^2)`` over the last axis, stable for any ``|raw|``.

    ``1 - tanh(x)^2 = sech(x)^2 = 4 / (e^x + e^-x)^2``, so
    ``log(1 - tanh(x)^2) = 2 * (log 2 - x - softplus(-2 x))``, which never forms
    ``1 - tanh^2`` (that rounds to 0 in float32 beyond ``|x| ~ 9``).
    """
    return jnp.sum(2.0 * (_LOG_2 - raw - jax.nn.softplus(-2.0 * raw)), axis=-1)


class NormalTanhSampler(NormalSampler):
    """Tanh-squashed diagonal Gaussian actions in ``(-1, 1)``.

    The input ``[B, 2A]`` holds the mean (first half) and a pre-std (second half);
    ``std = (softplus(pre_std) + min_std) * std_scale``. The raw action ``u ~ N(mean,
    std)`` (``u = mean`` in ``eval()`` mode) is squashed to ``action = tanh(u)``, and

    ``log_likelihood = sum_a [log N(u_a; mean_a, std_a) - log(1 - tanh(u_a)^2)]``,

    with the log-det in the stable form ``2 * (log 2 - u - softplus(-2 u))``.
    ``rollout_extras`` is the raw ``u`` ``[B, A]``, so replay never inverts the tanh.

    The entropy of a tanh-Gaussian has no closed form. The sampler uses the same
    estimator as brax, *Gaussian entropy plus the log-det at one sample*,
    ``H = sum_a [0.5 * log(2 pi e) + log std_a + log(1 - tanh(u_a)^2)]``, but evaluated
    at the action actually taken instead of a fresh draw (no extra random numbers, and
    replay reproduces it). Its gradient is the reparameterized (pathwise) one: ``u`` is
    rewritten as ``mean + std * stop_gradient((u - mean) / std)``, so the bonus also
    discourages pushing the mean deep into the tanh's flat tails. It is per sample
    ``[B]``; ``regularization_loss = -entropy_weight * H``.

    Args:
        rngs: Source of the sampler's RNG stream (see `ActionSampler`).
        entropy_weight: Weight of the entropy bonus, ``>= 0``.
        min_std: Lower bound added to the softplus, ``> 0``.
        std_scale: Multiplies the std, ``> 0``.
        deterministic: Start in eval mode.
        rng_stream: Name of the stream forked from ``rngs``.
        rng: nnx-ppo's keyword name for ``rngs``.
        resample_every: Steps each noise draw is held (see `NormalSampler`).
        action_size: ``A``, required when ``resample_every > 1``.

    Examples:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> sampler = NormalTanhSampler(nnx.Rngs(0), entropy_weight=1e-2)
        >>> out = sampler((), jnp.zeros((4, 6)))   # B=4, A=3
        >>> bool(jnp.all(jnp.abs(out.output["action"]) < 1))
        True
        >>> sampler.eval()
        >>> sampler((), jnp.zeros((4, 6))).output["action"].tolist()[0]
        [0.0, 0.0, 0.0]
    """

    def _squash(self, raw: jax.Array) -> jax.Array:
        return jnp.tanh(raw)

    def _squash_log_det(self, raw: jax.Array) -> jax.Array:
        return _tanh_log_det(raw)

    def _entropy(self, params: tuple[jax.Array, jax.Array], raw: jax.Array) -> jax.Array:
        mean, std = params
        raw = mean + std * jax.lax.stop_gradient((raw - mean) / std)
        return super()._entropy(params, raw) + _tanh_log_det(raw)


class CategoricalSampler(ActionSampler):
    """Discrete actions from logits.

    The input is logits ``[B, N]``; the action is an ``int32`` index ``[B]`` (the
    argmax in ``eval()`` mode), its log-likelihood ``log_softmax(logits)[action]``
    ``[B]``, and ``rollout_extras`` the action itself. The entropy is exact,
    ``-sum_n p_n log p_n`` ``[B]``. Logits of ``-inf`` mask actions out.

    Args:
        rngs: Source of the sampler's RNG stream (see `ActionSampler`).
        entropy_weight: Weight of the entropy bonus, ``>= 0``.
        deterministic: Start in eval mode.
        rng_stream: Name of the stream forked from ``rngs``.
        rng: nnx-ppo's keyword name for ``rngs``.

    Examples:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> sampler = CategoricalSampler(nnx.Rngs(0))
        >>> sampler.eval()
        >>> sampler((), jnp.array([[0.0, 2.0, 1.0]])).output["action"]
        Array([1], dtype=int32)
    """

    def _params(self, x: Any) -> jax.Array:
        x = _as_array(type(self).__name__, x)
        if x.ndim < 1 or x.shape[-1] == 0:
            raise ValueError(
                f"CategoricalSampler takes logits [B, N] with N >= 1, got shape {x.shape}; "
                "give the preceding layer one output per discrete action."
            )
        return jax.nn.log_softmax(x, axis=-1)

    def _sample_raw(self, params: jax.Array, key: jax.Array) -> jax.Array:
        return jax.random.categorical(key, params, axis=-1).astype(jnp.int32)

    def _mode_raw(self, params: jax.Array) -> jax.Array:
        return jnp.argmax(params, axis=-1).astype(jnp.int32)

    def _log_prob_raw(self, params: jax.Array, raw: jax.Array) -> jax.Array:
        index = raw.astype(jnp.int32)[..., None]
        return jnp.take_along_axis(params, index, axis=-1)[..., 0]

    def _entropy(self, params: jax.Array, raw: jax.Array) -> jax.Array:
        del raw
        # Masked logits (-inf) have p log p = 0; keep NaN out of values and gradients.
        finite = jnp.isfinite(params)
        safe = jnp.where(finite, params, 0.0)
        return -jnp.sum(jnp.where(finite, jnp.exp(safe) * safe, 0.0), axis=-1)
