"""The learning rate of a run and its optimizer: fixed, an optax schedule, or adapted to
the policy's KL.

A run's rate is one `LearningRate` rule, built once from its config (in a sweep, the
run's config holds its own traced rate, `OnPolicyRun.with_values`) by
`learning_rate_rule`; `make_optimizer` builds the optax
optimizer around it and the gradient phase asks the same object what to do before each
step (`LearningRate.before_step`) and which rate an iteration ended with
(`LearningRate.last_rate`). Nothing else reads ``learning_rate`` or ``desired_kl``.

**Adaptive KL** (``PPOConfig(desired_kl=...)``) is the rule rsl_rl uses by default
(``PPO(schedule="adaptive", desired_kl=0.01)``, ``rsl_rl/algorithms/ppo.py``) and brax
offers as ``learning_rate_schedule="ADAPTIVE_KL"``
(``brax/training/agents/ppo/optimizer.py``). Before every optimizer step, the KL
between the rollout's policy and the current one is measured on that step's minibatch
(``kl``, averaged over the minibatch and, on a mesh, over every device's share of it,
as rsl_rl all-reduces and brax ``pmean``\\ s it); then, with ``f = learning_rate_factor``:

- ``kl > 2 * desired_kl``: ``lr = max(lr / f, min_learning_rate)``;
- ``0 < kl < desired_kl / 2``: ``lr = min(lr * f, max_learning_rate)``;
- otherwise ``lr`` is unchanged;

except on the first step of an iteration, which keeps ``lr``: the policy has not moved
since the rollout, so its KL is 0 in exact arithmetic, and the float32 value is rounding
noise of either sign (``+-1e-9``) whose sign would otherwise decide whether the rate
rises, and differ between machines and device counts;

and the step is taken with the new ``lr``. The KL is the one the loss reports as
``actor/approx_kl`` (`AdaptiveKL.kl_metric`). The defaults are rsl_rl's and brax's:
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
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax

__all__ = [
    "AdaptiveKL",
    "LearningRate",
    "Optimization",
    "adapt_learning_rate",
    "learning_rate_rule",
    "learning_rate_state",
    "linear_decay",
    "make_optimizer",
    "optimization",
    "with_learning_rate",
]


@dataclasses.dataclass(frozen=True)
class AdaptiveKL:
    """The adaptive-KL rule's constants (from `PPOConfig`).

    Attributes:
        desired_kl: The target KL per optimizer step (> 0).
        factor: ``learning_rate_factor`` (> 1): the rate is divided or multiplied by it.
        min_learning_rate: The lower bound (> 0).
        max_learning_rate: The upper bound (>= ``min_learning_rate``).
        kl_metric: The metric of the loss the rule reads the KL from.
    """

    desired_kl: float
    factor: float = 1.5
    min_learning_rate: float = 1e-5
    max_learning_rate: float = 1e-2
    kl_metric: str = "actor/approx_kl"


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


@dataclasses.dataclass(frozen=True)
class LearningRate:
    """A run's learning-rate rule, built once (`learning_rate_rule`) and used by its
    optimizer (`make_optimizer`) and its gradient phase.

    Attributes:
        rate: The fixed rate (a float, or a traced ``[]`` array in a sweep), the optax
            schedule ``count -> rate``, or with ``adaptive`` the initial rate.
        adaptive: The adaptive-KL rule, or ``None``.
        updates_per_iteration: Optimizer steps per iteration (a schedule's count).
    """

    rate: Any
    adaptive: AdaptiveKL | None = None
    updates_per_iteration: int = 1

    def transformation(
        self, adam: Callable[[Any], optax.GradientTransformation]
    ) -> optax.GradientTransformation:
        """``adam(rate)``; with adaptive KL wrapped in ``optax.inject_hyperparams``, so
        that the rate lives in the optimizer state (checkpointed with it), where
        `before_step` changes it."""
        if self.adaptive is None:
            return adam(self.rate)

        def factory(learning_rate: Any) -> optax.GradientTransformation:
            return adam(learning_rate)

        return optax.inject_hyperparams(factory)(learning_rate=self.rate)

    def before_step(
        self, opt_state: Any, metrics: Mapping[str, jax.Array], first: jax.Array | bool
    ) -> Any:
        """The optimizer state to step with, given the loss's ``metrics`` on this step's
        minibatch: the rate adapted to ``metrics[kl_metric]`` (adaptive KL), unless
        ``first`` (bool ``[]``: the iteration's first step, whose KL is rounding noise
        around 0; see the module docstring), else ``opt_state`` unchanged."""
        if self.adaptive is None:
            return opt_state
        rate = learning_rate_state(opt_state).hyperparams["learning_rate"]
        adapted = adapt_learning_rate(rate, metrics[self.adaptive.kl_metric], self.adaptive)
        return with_learning_rate(opt_state, jnp.where(first, rate, adapted))

    def last_rate(self, opt_state: Any, iteration: jax.Array) -> jax.Array:
        """float32 ``[]``: the rate of iteration ``iteration``'s last optimizer step (the
        ``train/learning_rate`` metric). Adaptive KL: the rate in ``opt_state`` after
        the iteration. A schedule: its value at that step's count, ``(iteration + 1) *
        updates_per_iteration - 1``. A fixed rate: itself."""
        if self.adaptive is not None:
            return learning_rate_state(opt_state).hyperparams["learning_rate"]
        if callable(self.rate):
            count = (iteration + 1) * self.updates_per_iteration - 1
            return jnp.asarray(self.rate(count), jnp.float32)
        return jnp.asarray(self.rate, jnp.float32)


def linear_decay(config: Any, final: float = 0.0) -> optax.Schedule:
    """An optax schedule for ``PPOConfig.learning_rate``: ``config.learning_rate`` at the
    run's first optimizer update, falling linearly to ``final`` at its last one
    (``n_iterations * updates_per_iteration`` updates).

    Why decay: once a policy has learnt its task, its advantages are mostly noise (their
    raw standard deviation falls several-fold), but PPO normalises them to unit scale,
    so at a constant rate every iteration still moves the policy about as far as while
    it was learning. Recurrent and graph policies on ``CartpoleBalance`` drift through
    collapses of their return this way; a rate that decays to 0 makes the policy settle
    (the learning-quality page has the measurements). The schedule counts optimizer
    updates, which the optimizer state holds, so a resumed run continues on it.

    Args:
        config: A `PPOConfig` (or `TrainConfig`, whose ``ppo`` is used) with a float
            ``learning_rate``.
        final: The rate at the last update (>= 0).

    Returns:
        ``count -> rate``, to pass as ``PPOConfig(learning_rate=...)``.

    Raises:
        TypeError: If the config's ``learning_rate`` is already a schedule.
        ValueError: If ``final`` is negative.

    Examples:
        >>> import dataclasses
        >>> from nnx_ppo.algorithms.config import PPOConfig
        >>> ppo = PPOConfig(n_envs=8, n_minibatches=2, rollout_length=10, n_epochs=2,
        ...                 total_steps=800, learning_rate=1e-3)
        >>> rate = linear_decay(ppo)  # 10 iterations x 2 epochs x 2 minibatches
        >>> [round(float(rate(n)), 6) for n in (0, 20, 40)]
        [0.001, 0.0005, 0.0]
        >>> ppo = dataclasses.replace(ppo, learning_rate=rate)
    """
    ppo = getattr(config, "ppo", config)
    if callable(ppo.learning_rate):
        raise TypeError(
            "linear_decay: the config's learning_rate is already a schedule; give it the "
            "config with the float rate to start from."
        )
    if not final >= 0.0:
        raise ValueError(f"linear_decay: final={final!r} must be a rate >= 0.")
    updates = ppo.n_iterations * ppo.updates_per_iteration
    return optax.linear_schedule(float(ppo.learning_rate), float(final), updates)


def learning_rate_rule(config: Any) -> LearningRate:
    """The `LearningRate` a config asks for: ``config.learning_rate`` (a float, a
    schedule, or a sweep run's traced ``[]`` value), adapted to the KL if the config has
    a ``desired_kl``.

    Examples:
        >>> from nnx_ppo.algorithms.config import PPOConfig
        >>> learning_rate_rule(PPOConfig(desired_kl=0.01)).adaptive.desired_kl
        0.01
    """
    rate = config.learning_rate
    desired = getattr(config, "desired_kl", None)
    adaptive = None
    if desired is not None:
        adaptive = AdaptiveKL(
            desired_kl=float(desired),
            factor=float(config.learning_rate_factor),
            min_learning_rate=float(config.min_learning_rate),
            max_learning_rate=float(config.max_learning_rate),
        )
        if not isinstance(rate, jax.Array):
            rate = float(rate)
    return LearningRate(rate, adaptive, config.updates_per_iteration)


def make_optimizer(
    config: Any, *, learning_rate: LearningRate | None = None
) -> optax.GradientTransformation:
    """Adam (AdamW if ``weight_decay > 0``), after global-norm clipping if configured,
    at the rate of the config's `LearningRate` rule.

    With ``desired_kl`` (`PPOConfig`) Adam is wrapped in ``optax.inject_hyperparams``,
    so that its learning rate is part of the optimizer state, where the adaptive-KL rule
    changes it; otherwise the state has the plain Adam layout.

    Args:
        config: A `PPOConfig` or `DistillationConfig`: reads ``weight_decay``,
            ``adam_eps``, ``max_grad_norm`` and (through `learning_rate_rule`) the
            learning rate. In a sweep, a run's config holds its own traced values of these
            (`OnPolicyRun.with_values`); a traced ``weight_decay`` always selects AdamW
            (AdamW with a decay of 0 is Adam), so the state's layout does not depend on
            the values.
        learning_rate: The run's rule, if already built (else built here).

    Returns:
        An optax ``GradientTransformation``.
    """
    if learning_rate is None:
        learning_rate = learning_rate_rule(config)
    weight_decay, max_grad_norm = config.weight_decay, config.max_grad_norm
    eps = config.adam_eps
    decays = isinstance(weight_decay, jax.Array) or weight_decay > 0

    def adam(rate: Any) -> optax.GradientTransformation:
        if decays:
            return optax.adamw(rate, eps=eps, weight_decay=weight_decay)
        return optax.adam(rate, eps=eps)

    base = learning_rate.transformation(adam)
    if max_grad_norm is None:
        return base
    return optax.chain(optax.clip_by_global_norm(max_grad_norm), base)


@dataclasses.dataclass(frozen=True)
class Optimization:
    """A run's optimization, built once (`optimization`) and handed to its iteration.

    Attributes:
        optimizer: The optax optimizer (`make_optimizer`).
        learning_rate: The `LearningRate` rule it was built with, which the gradient
            phase applies before each step and reports.
    """

    optimizer: optax.GradientTransformation
    learning_rate: LearningRate


def optimization(config: Any) -> Optimization:
    """The `Optimization` of a run of ``config`` (a sweep run's config holds its own
    values, `OnPolicyRun.with_values`)."""
    rule = learning_rate_rule(config)
    return Optimization(make_optimizer(config, learning_rate=rule), rule)


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
