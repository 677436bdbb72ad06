r"""The PPO loss as free functions returning ``(loss, metrics)``.

The total loss of a minibatch is

.. math::

    L = L_\text{policy} + c_v\, L_\text{critic} + \overline{\text{reg}},

- `policy_loss`: the clipped surrogate
  :math:`-\operatorname{mean}\min(\rho A, \operatorname{clip}(\rho, 1 \pm \epsilon) A)`
  with :math:`\rho = \exp(\log\pi_\text{new} - \log\pi_\text{old})`;
- `critic_loss`: ``0.5 * mean((V - target)**2)``, optionally PPO2-clipped, summed
  over value heads (with the default ``critic_loss_weight=0.5`` this is brax's
  ``0.25 * MSE``);
- the network's own per-sample ``regularization_loss`` (the sampler's entropy bonus
  lives there, as do KL terms of variational layers), averaged over the minibatch.

`ppo_loss` combines them, normalising advantages per minibatch and pairing
advantages with log-likelihoods per reward key or combined (see
`PPOConfig`). Every input is ``[T, b]`` (a minibatch
of ``b`` environment sequences), or any shape as long as all agree.
"""

from __future__ import annotations

from typing import Any, Literal

import jax
import jax.numpy as jnp

from nnx_ppo.algorithms.core.trees import sum_leaves
from nnx_ppo.algorithms.types import Metrics

__all__ = [
    "critic_loss",
    "distillation_loss",
    "explained_variance",
    "normalize_advantages",
    "policy_loss",
    "ppo_loss",
]


def normalize_advantages(advantages: jax.Array, epsilon: float = 1e-8) -> jax.Array:
    """Shift and scale to zero mean and unit standard deviation over all elements.

    Args:
        advantages: Any shape, usually ``[T, b]``.
        epsilon: Added to the standard deviation.

    Returns:
        Same shape: ``(advantages - mean) / (std + epsilon)``.
    """
    return (advantages - advantages.mean()) / (advantages.std() + epsilon)


def policy_loss(
    log_likelihoods: jax.Array,
    old_log_likelihoods: jax.Array,
    advantages: jax.Array,
    *,
    clip_range: float,
    weights: jax.Array | None = None,
) -> tuple[jax.Array, Metrics]:
    """Clipped surrogate objective (to minimise).

    Args:
        log_likelihoods: ``[T, b]`` log-likelihoods of the stored actions under the
            current parameters.
        old_log_likelihoods: ``[T, b]`` the same under the rollout's parameters.
        advantages: ``[T, b]`` (already normalised if desired).
        clip_range: ``epsilon``.
        weights: ``[T, b]`` per-sample weights of the surrogate (no gradient), for
            samples the rollout's policy did not draw (the mirrored ones of a symmetry,
            `nnx_ppo.algorithms.core.mirroring`); their log ratio is then bounded to
            ``+-20`` so that a sample far from the policy cannot overflow it. ``None``:
            unweighted, unbounded.

    Returns:
        ``(loss, metrics)`` with metrics ``actor/clip_fraction`` (share of samples with
        ``|ratio - 1| > epsilon``), ``actor/approx_kl`` (the unbiased, non-negative
        estimator ``mean((ratio - 1) - log ratio)``) and ``actor/ratio_max_deviation``
        (``max |ratio - 1|``; 0 before the first update).
    """
    log_ratio = log_likelihoods - jax.lax.stop_gradient(old_log_likelihoods)
    if weights is not None:
        log_ratio = jnp.clip(log_ratio, -20.0, 20.0)
    ratio = jnp.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = jnp.clip(ratio, 1.0 - clip_range, 1.0 + clip_range) * advantages
    surrogate = jnp.minimum(unclipped, clipped)
    if weights is not None:
        surrogate = surrogate * jax.lax.stop_gradient(weights)
    loss = -jnp.mean(surrogate)
    ratio_sg = jax.lax.stop_gradient(ratio)
    metrics = {
        "actor/clip_fraction": jnp.mean((jnp.abs(ratio_sg - 1.0) > clip_range).astype(jnp.float32)),
        "actor/approx_kl": jnp.mean((ratio_sg - 1.0) - jax.lax.stop_gradient(log_ratio)),
        "actor/ratio_max_deviation": jnp.max(jnp.abs(ratio_sg - 1.0)),
    }
    return loss, metrics


def explained_variance(predictions: jax.Array, targets: jax.Array) -> jax.Array:
    """``1 - Var(targets - predictions) / Var(targets)`` (0 if the targets are constant).

    Args:
        predictions: Any shape.
        targets: Same shape.

    Returns:
        A scalar; 1 is perfect, 0 is no better than predicting the mean.
    """
    target_var = jnp.var(targets)
    ev = 1.0 - jnp.var(targets - predictions) / jnp.where(target_var > 0, target_var, 1.0)
    return jnp.where(target_var > 0, ev, 0.0)


def critic_loss(
    values: Any,
    old_values: Any,
    value_targets: Any,
    *,
    value_clip_range: float | None = None,
) -> tuple[jax.Array, Metrics]:
    """Half mean squared error of the value heads, optionally clipped, summed over heads.

    With ``value_clip_range = c`` the error of each sample is
    ``max((V - y)**2, (V_old + clip(V - V_old, -c, c) - y)**2)``.

    Args:
        values: Pytree of ``[T, b]`` current value estimates.
        old_values: Same structure, the rollout's estimates.
        value_targets: Same structure, GAE value targets.
        value_clip_range: ``c``, or ``None`` for no clipping.

    Returns:
        ``(loss, metrics)`` with ``critic/explained_variance`` (averaged over heads),
        ``critic/value_mean`` and ``critic/target_mean``.
    """
    total = jnp.zeros(())
    evs, value_means, target_means = [], [], []
    for value, old, target in zip(
        jax.tree.leaves(values),
        jax.tree.leaves(old_values),
        jax.tree.leaves(value_targets),
        strict=True,
    ):
        error = jnp.square(value - target)
        if value_clip_range is not None:
            clipped = old + jnp.clip(value - old, -value_clip_range, value_clip_range)
            error = jnp.maximum(error, jnp.square(clipped - target))
        total = total + 0.5 * jnp.mean(error)
        evs.append(explained_variance(jax.lax.stop_gradient(value), target))
        value_means.append(jnp.mean(jax.lax.stop_gradient(value)))
        target_means.append(jnp.mean(target))
    metrics = {
        "critic/explained_variance": jnp.mean(jnp.stack(evs)),
        "critic/value_mean": jnp.mean(jnp.stack(value_means)),
        "critic/target_mean": jnp.mean(jnp.stack(target_means)),
    }
    return total, metrics


def ppo_loss(
    log_likelihoods: Any,
    values: Any,
    regularization: jax.Array,
    old_log_likelihoods: Any,
    old_values: Any,
    advantages: Any,
    value_targets: Any,
    *,
    clip_range: float,
    critic_loss_weight: float,
    value_clip_range: float | None = None,
    normalize: bool = True,
    advantage_mode: Literal["combined", "per_key"] = "combined",
    weights: jax.Array | None = None,
) -> tuple[jax.Array, Metrics]:
    """The PPO loss of one minibatch.

    Args:
        log_likelihoods: Pytree of ``[T, b]`` log-likelihoods from the replay (the
            action tree's structure).
        values: Pytree of ``[T, b]`` value estimates from the replay (the reward
            tree's structure).
        regularization: ``[T, b]`` (or broadcastable) per-sample regularization loss the
            network emitted during replay.
        old_log_likelihoods: Like ``log_likelihoods``, from the rollout.
        old_values: Like ``values``, from the rollout.
        advantages: Like ``values``, from `gae`.
        value_targets: Like ``values``.
        clip_range: Policy ratio clipping ``epsilon``.
        critic_loss_weight: ``c_v``.
        value_clip_range: See `critic_loss`.
        normalize: Normalise advantages over this minibatch (per key in ``"per_key"``
            mode).
        advantage_mode: ``"combined"``: sum the advantages of all reward keys and pair
            the sum with the summed log-likelihood of all action leaves.
            ``"per_key"``: pair each reward key's advantage with the same key's
            log-likelihood and sum the per-key policy losses (the log-likelihood tree
            must have the advantage tree's structure).
        weights: ``[T, b]`` per-sample weights of the policy term (see `policy_loss`),
            or ``None``.

    Returns:
        ``(loss, metrics)``: the scalar loss and the ``loss/*``, ``actor/*`` and
        ``critic/*`` metrics (see `nnx_ppo.algorithms.core.logging`).
    """
    if advantage_mode == "per_key":
        if jax.tree.structure(log_likelihoods) != jax.tree.structure(advantages):  # type: ignore[operator]
            raise ValueError(
                "advantage_mode='per_key' pairs each reward key with the same action "
                f"key, but the log-likelihood tree {jax.tree.structure(log_likelihoods)} "
                f"differs from the reward tree {jax.tree.structure(advantages)}; use "
                "advantage_mode='combined' or give the network one sampler per reward key."
            )
        pairs = list(
            zip(
                jax.tree.leaves(log_likelihoods),
                jax.tree.leaves(old_log_likelihoods),
                jax.tree.leaves(advantages),
                strict=True,
            )
        )
    else:
        pairs = [
            (
                sum_leaves(log_likelihoods),
                sum_leaves(old_log_likelihoods),
                sum_leaves(advantages),
            )
        ]

    actor_loss = jnp.zeros(())
    actor_metrics: list[Metrics] = []
    adv_means, adv_stds = [], []
    for new_ll, old_ll, adv in pairs:
        adv_means.append(jnp.mean(adv))
        adv_stds.append(jnp.std(adv))
        if normalize:
            adv = normalize_advantages(adv)
        loss, pair_metrics = policy_loss(
            new_ll, old_ll, adv, clip_range=clip_range, weights=weights
        )
        actor_loss = actor_loss + loss
        actor_metrics.append(pair_metrics)

    value_loss, value_metrics = critic_loss(
        values, old_values, value_targets, value_clip_range=value_clip_range
    )
    reg = jnp.mean(regularization)
    total = actor_loss + critic_loss_weight * value_loss + reg

    metrics: Metrics = {
        "loss/total": total,
        "loss/policy": actor_loss,
        "loss/critic": value_loss,
        "loss/regularization": reg,
        "actor/clip_fraction": jnp.mean(
            jnp.stack([m["actor/clip_fraction"] for m in actor_metrics])
        ),
        "actor/approx_kl": jnp.mean(jnp.stack([m["actor/approx_kl"] for m in actor_metrics])),
        "actor/ratio_max_deviation": jnp.max(
            jnp.stack([m["actor/ratio_max_deviation"] for m in actor_metrics])
        ),
        "actor/entropy_estimate": -jnp.mean(jax.lax.stop_gradient(sum_leaves(log_likelihoods))),
        "actor/advantage_mean": jnp.mean(jnp.stack(adv_means)),
        "actor/advantage_std": jnp.mean(jnp.stack(adv_stds)),
        **value_metrics,
    }
    return total, metrics


# --------------------------------------------------------------------------- distillation


def distillation_loss(
    log_likelihoods: Any,
    regularization: jax.Array,
    values: Any = None,
    teacher_values: Any = None,
    *,
    value_loss_weight: float = 0.0,
    regularization_weight: float = 1.0,
) -> tuple[jax.Array, Metrics]:
    """The distillation loss of one minibatch.

    ``loss = nll + regularization_weight * mean(regularization)
    + value_loss_weight * value``, where ``nll = -mean(sum over action leaves of
    log_likelihoods)`` and ``value = sum over heads of 0.5 * mean((V - V_teacher)**2)``.

    Args:
        log_likelihoods: Pytree (the action tree) of ``[T, b]`` student
            log-likelihoods of the teacher's actions.
        regularization: ``[T, b]`` (or broadcastable) per-sample regularization loss of
            the student.
        values: Pytree (the reward tree) of ``[T, b]`` student value estimates; needed
            if ``value_loss_weight > 0``.
        teacher_values: Same structure, the teacher's (no gradient flows into them).
        value_loss_weight: ``c_v``; ``0`` skips the value term (and its metrics).
        regularization_weight: ``c_reg``.

    Returns:
        ``(loss, metrics)`` with ``loss/total``, ``loss/action_nll``,
        ``loss/regularization`` (unweighted mean) and, with value distillation,
        ``loss/value`` and ``critic/explained_variance`` (of the teacher's values by
        the student's, averaged over heads).

    Raises:
        ValueError: If ``value_loss_weight > 0`` and ``values`` or ``teacher_values`` is
            missing or their trees differ.

    Examples:
        >>> import jax.numpy as jnp
        >>> loss, metrics = distillation_loss(
        ...     jnp.array([[-1.0, -3.0]]), jnp.array([[0.5, 1.5]]),
        ...     jnp.array([[1.0, 2.0]]), jnp.zeros((1, 2)),
        ...     value_loss_weight=2.0, regularization_weight=0.5)
        >>> float(loss)  # 2 + 0.5 * 1 + 2 * 0.5 * (1 + 4) / 2
        5.0
    """
    nll = -jnp.mean(sum_leaves(log_likelihoods))
    reg = jnp.mean(regularization)
    total = nll + regularization_weight * reg
    metrics: Metrics = {"loss/action_nll": nll, "loss/regularization": reg}
    if value_loss_weight > 0:
        if values is None or teacher_values is None:
            raise ValueError(
                f"value_loss_weight={value_loss_weight} distills the value heads and "
                "needs values and teacher_values; pass both or set value_loss_weight=0."
            )
        if jax.tree.structure(values) != jax.tree.structure(teacher_values):  # type: ignore[operator]
            raise ValueError(
                f"the student's value tree {jax.tree.structure(values)} differs from the "
                f"teacher's {jax.tree.structure(teacher_values)}; value distillation "
                "pairs heads leaf by leaf."
            )
        value_loss = jnp.zeros(())
        evs = []
        for v, t in zip(jax.tree.leaves(values), jax.tree.leaves(teacher_values), strict=True):
            t = jax.lax.stop_gradient(t)
            value_loss = value_loss + 0.5 * jnp.mean(jnp.square(v - t))
            evs.append(explained_variance(jax.lax.stop_gradient(v), t))
        total = total + value_loss_weight * value_loss
        metrics["loss/value"] = value_loss
        metrics["critic/explained_variance"] = jnp.mean(jnp.stack(evs))
    metrics["loss/total"] = total
    return total, metrics
