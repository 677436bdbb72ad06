"""Value-target normalisation: the critic predicts standardised returns.

With ``PPOConfig(normalize_values=True)`` every value head is trained on its value
targets standardised by running statistics of those targets, and the trainer maps the
head's output back to return units before computing advantages:

``V(s) = mean + std * v(s)``, ``critic loss = 0.5 * (v(s) - (target - mean) / std)^2``.

The statistics (count, mean, variance per value head) live in
``TrainState.value_stats``; each iteration merges the moments of its own targets into
them (Chan et al.'s parallel update) *before* its gradient phase, so the first
iteration already trains on standardised targets. Before any update the statistics
are the identity (mean 0, std 1).

Why: the scale of returns is set by the reward and the discount (with
``reward_scaling=10`` and ``gamma=0.995`` on a 1000-step task, targets reach about
2,000), and the critic's squared error grows with its square. When the actor and the
critic share parameters (a `PopulationGraph` whose read-outs both ports use, or any
shared trunk), that error swamps the policy's gradient in the shared parameters: the
critic's updates move the policy's mean by many standard deviations per iteration and
PPO's clipping then stops the policy from learning. Standardised targets keep the
critic's error of order one whatever the reward scale. This is ``normalize_value`` of
rl_games and MAPPO's value normalisation (PopArt's running statistics, without its
rescaling of the last layer).

The value heads' outputs are then in standardised units: a value read from the trained
network (e.g. an exported policy's value head) is converted back with the run's
``TrainState.value_stats`` (`denormalize`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

__all__ = ["ValueStatistics", "denormalize", "initial_value_statistics", "normalize", "update"]

_MIN_VARIANCE = 1e-8
"""Floor of the variance a standardisation divides by (targets that never change)."""


@struct.dataclass
class ValueStatistics:
    """Running moments of one value head's targets.

    Attributes:
        count: float32 ``[]``, targets merged so far.
        mean: float32 ``[]``, their mean.
        variance: float32 ``[]``, their (population) variance; ``1`` before any update.
    """

    count: jax.Array
    mean: jax.Array
    variance: jax.Array

    @property
    def std(self) -> jax.Array:
        """float32 ``[]``: ``sqrt(max(variance, 1e-8))``."""
        return jnp.sqrt(jnp.maximum(self.variance, _MIN_VARIANCE))


def initial_value_statistics(reward_tree: Any) -> Any:
    """Identity statistics (count 0, mean 0, variance 1), one per leaf of ``reward_tree``
    (a reward pytree of any shapes: one value head per leaf)."""

    def identity(_: Any) -> ValueStatistics:
        return ValueStatistics(
            count=jnp.zeros((), jnp.float32),
            mean=jnp.zeros((), jnp.float32),
            variance=jnp.ones((), jnp.float32),
        )

    return jax.tree.map(identity, reward_tree)


def _leaves_with(stats: Any, tree: Any) -> tuple[list[ValueStatistics], list[Any], Any]:
    """``stats``' per-head leaves, ``tree``'s leaves in the same order, ``tree``'s treedef."""
    heads = jax.tree.leaves(stats, is_leaf=lambda x: isinstance(x, ValueStatistics))
    leaves, treedef = jax.tree.flatten(tree)
    if len(heads) != len(leaves):
        raise ValueError(
            f"value statistics hold {len(heads)} value heads but the values have "
            f"{len(leaves)} leaves; the reward tree of the environment must match the "
            "network's value tree."
        )
    return heads, leaves, treedef


def normalize(stats: Any, values: Any) -> Any:
    """``(values - mean) / std`` per value head (leaves of any shape)."""
    heads, leaves, treedef = _leaves_with(stats, values)
    return treedef.unflatten([(v - s.mean) / s.std for s, v in zip(heads, leaves, strict=True)])


def denormalize(stats: Any, values: Any) -> Any:
    """``mean + std * values`` per value head: standardised outputs back to returns.

    ``values=None`` (e.g. ``Transition.final_value`` without bootstrapping) stays
    ``None``."""
    if values is None:
        return None
    heads, leaves, treedef = _leaves_with(stats, values)
    return treedef.unflatten([s.mean + s.std * v for s, v in zip(heads, leaves, strict=True)])


def update(stats: Any, targets: Any) -> Any:
    """Merge the moments of ``targets`` (a value pytree, leaves ``[T, B]``) into ``stats``.

    Chan et al.'s parallel combination of ``(count, mean, M2)``: with ``n_a, n_b`` the
    counts, ``delta = mean_b - mean_a`` and ``n = n_a + n_b``,
    ``mean = mean_a + delta * n_b / n`` and
    ``M2 = M2_a + M2_b + delta^2 * n_a * n_b / n``; the variance is ``M2 / n``. Under
    ``jit`` with the environment axis sharded the batch moments are global ones.
    """
    heads, leaves, treedef = _leaves_with(stats, targets)
    merged = []
    for s, t in zip(heads, leaves, strict=True):
        t = jnp.asarray(t, jnp.float32)
        n_b = jnp.asarray(t.size, jnp.float32)
        mean_b = jnp.mean(t)
        m2_b = jnp.sum(jnp.square(t - mean_b))
        n = s.count + n_b
        delta = mean_b - s.mean
        mean = s.mean + delta * n_b / n
        m2 = s.variance * s.count + m2_b + jnp.square(delta) * s.count * n_b / n
        merged.append(ValueStatistics(count=n, mean=mean, variance=m2 / n))
    return treedef.unflatten(merged)
