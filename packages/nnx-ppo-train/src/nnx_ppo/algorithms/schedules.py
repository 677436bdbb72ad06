"""The learning rate of a run: fixed, an optax schedule, or adapted to the policy's KL.

**Adaptive KL** (``PPOConfig(desired_kl=...)``) is the rule rsl_rl uses by default
(``PPO(schedule="adaptive", desired_kl=0.01)``, ``rsl_rl/algorithms/ppo.py``) and brax
offers as ``learning_rate_schedule="ADAPTIVE_KL"``
(``brax/training/agents/ppo/optimizer.py``). Before every optimizer step, the KL
between the rollout's policy and the current one is measured on that step's minibatch
(``kl``, averaged over the minibatch and, on a mesh, over every device's share of it,
as rsl_rl all-reduces and brax ``pmean``\\ s it); then, with ``f = learning_rate_factor``:

- ``kl > 2 * desired_kl``: ``lr = max(lr / f, min_learning_rate)``;
- ``0 < kl < desired_kl / 2``: ``lr = min(lr * f, max_learning_rate)``;
- otherwise ``lr`` is unchanged (so the first step of an iteration, where the policy
  has not moved yet and ``kl == 0``, never raises it);

and the step is taken with the new ``lr``. The defaults are rsl_rl's and brax's:
``f = 1.5``, bounds ``1e-5`` and ``1e-2`` (rsl_rl's ``desired_kl`` default is
``0.01``; here ``desired_kl=None`` turns the rule off). One difference: both measure
the closed-form KL of their diagonal Gaussians, we use the sample estimate that
``actor/approx_kl`` logs, ``mean((ratio - 1) - log ratio)`` of ``KL(old || new)``,
which works for every sampler (tanh-squashed, categorical, dict actions).

The learning rate lives in the optimizer state (``optax.inject_hyperparams`` around
Adam), so it is checkpointed with it and a resumed run continues with the rate the
interrupted run had reached. Without ``desired_kl`` the optimizer is not wrapped, and
checkpoints keep the layout they always had.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax

__all__ = [
    "AdaptiveKL",
    "adapt_learning_rate",
    "adaptive_kl_of",
    "iteration_learning_rate",
    "learning_rate_state",
    "with_learning_rate",
    "wrap_optimizer",
]


@dataclasses.dataclass(frozen=True)
class AdaptiveKL:
    """The adaptive-KL rule's constants (from `PPOConfig`).

    Attributes:
        desired_kl: The target KL per optimizer step (> 0).
        factor: ``learning_rate_factor`` (> 1): the rate is divided or multiplied by it.
        min_learning_rate: The lower bound (> 0).
        max_learning_rate: The upper bound (>= ``min_learning_rate``).
    """

    desired_kl: float
    factor: float = 1.5
    min_learning_rate: float = 1e-5
    max_learning_rate: float = 1e-2


def adaptive_kl_of(config: Any) -> AdaptiveKL | None:
    """The rule a config asks for, or ``None`` (no ``desired_kl``, e.g. distillation)."""
    desired = getattr(config, "desired_kl", None)
    if desired is None:
        return None
    return AdaptiveKL(
        desired_kl=float(desired),
        factor=float(config.learning_rate_factor),
        min_learning_rate=float(config.min_learning_rate),
        max_learning_rate=float(config.max_learning_rate),
    )


def adapt_learning_rate(learning_rate: jax.Array, kl: jax.Array, rule: AdaptiveKL) -> jax.Array:
    """One application of the adaptive-KL rule (see the module docstring).

    Args:
        learning_rate: float32 ``[]``, the current rate.
        kl: ``[]``, the KL measured on the minibatch about to be stepped on.
        rule: The constants.

    Returns:
        float32 ``[]``, the rate for this step.

    Examples:
        >>> import jax.numpy as jnp
        >>> rule = AdaptiveKL(desired_kl=0.01)
        >>> float(adapt_learning_rate(jnp.float32(1e-3), jnp.float32(0.03), rule))  # / 1.5
        0.0006666...
    """
    kl = jax.lax.stop_gradient(kl)
    lower = jnp.maximum(learning_rate / rule.factor, rule.min_learning_rate)
    higher = jnp.minimum(learning_rate * rule.factor, rule.max_learning_rate)
    learning_rate = jnp.where(kl > 2.0 * rule.desired_kl, lower, learning_rate)
    raise_it = (kl < rule.desired_kl / 2.0) & (kl > 0.0)
    return jnp.where(raise_it, higher, learning_rate).astype(jnp.float32)


def learning_rate_state(opt_state: Any) -> Any:
    """The ``inject_hyperparams`` state inside ``opt_state`` (the optimizer of
    `make_optimizer` with ``desired_kl``: the state itself, or the last element of the
    clipping chain).

    Raises:
        TypeError: If ``opt_state`` holds no injected ``learning_rate``.
    """
    candidates = [opt_state]
    if isinstance(opt_state, tuple) and not hasattr(opt_state, "hyperparams") and opt_state:
        candidates.append(opt_state[-1])
    for candidate in candidates:
        if "learning_rate" in getattr(candidate, "hyperparams", {}):
            return candidate
    raise TypeError(
        f"the optimizer state {type(opt_state).__name__} holds no injected learning_rate; "
        "adaptive KL needs the optimizer make_optimizer builds for a config with desired_kl."
    )


def with_learning_rate(opt_state: Any, learning_rate: jax.Array) -> Any:
    """``opt_state`` with its injected ``learning_rate`` replaced (a new tree)."""
    inner = learning_rate_state(opt_state)
    hyperparams = {**inner.hyperparams, "learning_rate": learning_rate}
    replaced = inner._replace(hyperparams=hyperparams)
    if inner is opt_state:
        return replaced
    return (*opt_state[:-1], replaced)


def iteration_learning_rate(config: Any, opt_state: Any, iteration: jax.Array) -> jax.Array:
    """float32 ``[]``: the learning rate of iteration ``iteration``'s last optimizer step
    (the ``train/learning_rate`` metric).

    Adaptive KL: the injected rate after the iteration (what the last step used). An
    optax schedule: its value at that step's count, ``(iteration + 1) *
    updates_per_iteration - 1``. A float: itself.
    """
    if adaptive_kl_of(config) is not None:
        return learning_rate_state(opt_state).hyperparams["learning_rate"]
    rate = config.learning_rate
    if callable(rate):
        count = (iteration + 1) * config.updates_per_iteration - 1
        return jnp.asarray(rate(count), jnp.float32)
    return jnp.asarray(rate, jnp.float32)


def wrap_optimizer(base: Any, learning_rate: float) -> optax.GradientTransformation:
    """``base(learning_rate)`` with the rate kept in its state
    (``optax.inject_hyperparams``), so that `with_learning_rate` can change it."""

    def factory(learning_rate: float) -> optax.GradientTransformation:
        return base(learning_rate)

    return optax.inject_hyperparams(factory)(learning_rate=learning_rate)
