r"""Generalized advantage estimation with separate termination and truncation.

An episode can end in two ways, and they mean different things for the value of what
comes next:

- **termination** (the task ended: the pole fell, the goal was reached): there is no
  future, the next value is 0;
- **truncation** (a time limit cut the episode): the future exists, we just do not see
  it. With auto-reset, the observation stored after that step already belongs to the
  *next* episode, so ``values[t + 1]`` is the wrong bootstrap.

`gae` computes, for each step ``t`` of a ``[T, B]`` rollout,

.. math::

    \delta_t = r_t + \gamma\, \hat V_{t+1} - V_t, \qquad
    A_t = \delta_t + \gamma \lambda\, (1 - d_t)\, A_{t+1}, \qquad A_T = 0,

where ``d_t`` is 1 if the episode ended at ``t`` (either way) and the next value
:math:`\hat V_{t+1}` is

- ``0`` after a termination,
- ``final_values[t]`` (the value of the true final observation) after a truncation, if
  ``final_values`` is given (``bootstrap_on_truncation=True``),
- ``values[t + 1]`` otherwise, with ``values[T] = bootstrap_value``.

Without ``final_values`` a truncated step follows brax: its TD error is set to 0, so its
advantage is 0 and its value target is its own value (the step teaches nothing, rather
than something wrong). Value targets are ``advantages + values``.

Rewards and values may be pytrees (e.g. one reward and one value head per agent): every
leaf gets its own advantages, with the shared ``terminations`` and ``truncations``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["combine_advantages", "gae"]


def gae(
    rewards: Any,
    values: Any,
    bootstrap_value: Any,
    terminations: jax.Array,
    truncations: jax.Array,
    *,
    discounting_factor: float,
    gae_lambda: float,
    final_values: Any = None,
) -> tuple[Any, Any]:
    """Advantages and value targets of a rollout.

    Args:
        rewards: Pytree of rewards, leaves ``[T, B]``.
        values: Pytree of value estimates ``V(s_t)``, same structure, leaves ``[T, B]``.
        bootstrap_value: Pytree of ``V(s_T)`` for the observation after the last step,
            same structure, leaves ``[B]``.
        terminations: ``[T, B]``, 1 (or True) where the episode terminated at step ``t``.
        truncations: ``[T, B]``, 1 where the episode was truncated at step ``t``. A step
            flagged as both counts as truncated.
        discounting_factor: ``gamma``.
        gae_lambda: ``lambda``.
        final_values: Optional pytree like ``values``: at truncated steps, the value of
            the true final observation (ignored elsewhere). ``None`` zeroes the TD error
            at truncated steps instead.

    Returns:
        ``(advantages, value_targets)``, each a pytree like ``values`` with leaves
        ``[T, B]``. Both are free of gradients (``stop_gradient``).

    Examples:
        A three-step episode that terminates at the last step, ``gamma = 0.5``,
        ``lambda = 1`` and zero values: the advantages are the discounted returns
        ``[1 + 0.5 * (2 + 0.5 * 4), 2 + 0.5 * 4, 4] = [3, 4, 4]``.

        >>> import jax.numpy as jnp
        >>> adv, targets = gae(
        ...     jnp.array([[1.0], [2.0], [4.0]]), jnp.zeros((3, 1)), jnp.zeros(1),
        ...     jnp.array([[0], [0], [1]]), jnp.zeros((3, 1)),
        ...     discounting_factor=0.5, gae_lambda=1.0)
        >>> adv[:, 0].tolist()
        [3.0, 4.0, 4.0]
    """
    reward_tree = jax.tree.structure(rewards)
    for name, tree in (
        ("values", values),
        ("bootstrap_value", bootstrap_value),
        ("final_values", final_values),
    ):
        if tree is None and name == "final_values":
            continue
        if jax.tree.structure(tree) != reward_tree:  # type: ignore[operator]
            raise ValueError(
                f"{name} has tree structure {jax.tree.structure(tree)} but rewards have "
                f"{reward_tree}: every reward leaf needs its own value estimate (one "
                "value head per reward key)."
            )

    def per_leaf(reward, value, bootstrap, final):
        dtype = value.dtype
        term = jnp.asarray(terminations).astype(dtype)
        trunc = jnp.asarray(truncations).astype(dtype)
        done = jnp.maximum(term, trunc)
        term = term * (1 - trunc)  # truncation wins if both are set
        next_values = jnp.concatenate([value[1:], bootstrap[None]], axis=0)
        # After a termination the future is worth 0; after a truncation values[t + 1]
        # belongs to the next episode, so it is replaced below (or the step masked).
        next_values = next_values * (1 - done)
        if final is None:
            delta = (reward + discounting_factor * next_values - value) * (1 - trunc)
        else:
            next_values = next_values + trunc * final
            delta = reward + discounting_factor * next_values - value
        decay = discounting_factor * gae_lambda * (1 - done)

        def backward(next_advantage, step):
            delta_t, decay_t = step
            advantage = delta_t + decay_t * next_advantage
            return advantage, advantage

        _, advantages = jax.lax.scan(
            backward, jnp.zeros_like(bootstrap), (delta, decay), reverse=True
        )
        advantages = jax.lax.stop_gradient(advantages)
        return advantages, jax.lax.stop_gradient(advantages + value)

    reward_leaves = jax.tree.leaves(rewards)
    final_leaves = (
        [None] * len(reward_leaves) if final_values is None else jax.tree.leaves(final_values)
    )
    pairs = [
        per_leaf(r, v, b, f)
        for r, v, b, f in zip(
            reward_leaves,
            jax.tree.leaves(values),
            jax.tree.leaves(bootstrap_value),
            final_leaves,
            strict=True,
        )
    ]
    advantages = jax.tree.unflatten(reward_tree, [a for a, _ in pairs])
    targets = jax.tree.unflatten(reward_tree, [t for _, t in pairs])
    return advantages, targets


def combine_advantages(advantages: Any) -> jax.Array:
    """Sum a pytree of per-reward-key advantages into one ``[T, B]`` array.

    With one value head per reward key, the advantage of the summed reward is the sum
    of the per-key advantages (GAE is linear in rewards and values).

    Args:
        advantages: Pytree of ``[T, B]`` arrays (or a single array).

    Returns:
        ``[T, B]``, the elementwise sum of the leaves.
    """
    leaves = jax.tree.leaves(advantages)
    total = leaves[0]
    for leaf in leaves[1:]:
        total = total + leaf
    return total
