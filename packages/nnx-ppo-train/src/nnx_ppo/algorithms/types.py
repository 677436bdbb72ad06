"""The trainer's pytrees: `TrainState`, `Transition` and `EpisodeStats`.

Everything a run needs to continue is one `TrainState` pytree (network
parameters and other network state, optimizer state, random key, iteration counter,
environment states, network carries, open-episode statistics), so saving and restoring
it restores the run exactly. The network's structure (the ``nnx.GraphDef``) is static
and lives outside, in the jitted function's closure.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
from flax import struct

__all__ = [
    "DistillationState",
    "EpisodeStats",
    "Metrics",
    "NonFinite",
    "TrainState",
    "Transition",
    "batch_field",
    "batch_fields",
]

Metrics = dict[str, jax.Array]
"""Named scalar metrics, as an iteration, a loss or an evaluation returns them."""

_BATCH = "batch_axis"


def batch_field(**kwargs: Any) -> Any:
    """Declare a training-state field whose leaves are ``[n_envs, ...]`` (the
    environments' batch axis first): on a mesh it is sharded along the ``"data"`` axis
    with the environments, the other fields are replicated (`state_shardings`)."""
    return struct.field(metadata={_BATCH: 0}, **kwargs)


def batch_fields(state: Any) -> tuple[str, ...]:
    """The fields a training-state dataclass (or instance) declares with `batch_field`.

    Examples:
        >>> batch_fields(DistillationState)  # doctest: +NORMALIZE_WHITESPACE
        ('env_state', 'reset_state', 'carry', 'teacher_carry', 'episodes', 'models',
         'mirror_carry')
    """
    return tuple(f.name for f in dataclasses.fields(state) if _BATCH in f.metadata)


@struct.dataclass
class EpisodeStats:
    """Running statistics of the episodes currently open in each environment.

    Attributes:
        episode_return: ``[B]`` float32, return so far of the open episode (the sum of
            all reward leaves for dict rewards).
        episode_length: ``[B]`` int32, steps so far of the open episode.
    """

    episode_return: jax.Array
    episode_length: jax.Array


@struct.dataclass
class NonFinite:
    """Where training first produced a NaN or an infinity (see
    `nnx_ppo.algorithms.core.faults`), written inside the jitted iteration.

    Attributes:
        iteration: int32 ``[]``, the 1-based iteration in which a monitored quantity
            first went non-finite; ``0`` while everything is finite.
        quantity: int32 ``[]``, its index in
            `MONITORED_QUANTITIES`; ``-1`` while finite.
        value: float32 ``[]``, the offending value (``nan``, ``inf`` or ``-inf``).
    """

    iteration: jax.Array
    quantity: jax.Array
    value: jax.Array


@struct.dataclass
class TrainState:
    """All the mutable state of a PPO run, one pytree (what a checkpoint saves).

    Attributes:
        params: ``nnx.State`` of the network's `flax.nnx.Param` variables (what
            the optimizer updates).
        network_state: ``nnx.State`` of every other network variable (normalizer
            statistics, RNG stream keys and counters).
        opt_state: The optax optimizer state of ``params``.
        env_state: The batched environment state, leaves ``[n_envs, ...]``.
        reset_state: The batched state finished environments restart from
            (``reset_mode`` ``"cached"`` or ``"refresh"``), or ``None`` (``"fresh"``).
        carry: The network carry at the start of the next rollout, leaves
            ``[n_envs, ...]``.
        episodes: `EpisodeStats` of the open episodes.
        rng: The run's PRNG key (raw ``uint32[2]``).
        iteration: int32 ``[]``, completed iterations. Env steps so far are
            ``iteration * steps_per_iteration``, computed exactly on the host.
        non_finite: `NonFinite`, the first NaN/inf seen (the host raises
            `NonFiniteError` when it reads one).
        value_stats: With ``PPOConfig(normalize_values=True)``, the running statistics
            of the value targets, one
            `ValueStatistics` per value head (the
            reward tree's structure); ``None`` otherwise.
        models: With domain randomization, each environment's randomized model leaves,
            ``{path: [n_envs, ...]}`` (only the per-environment ones; see
            `nnx_ppo.algorithms.core.randomization`); ``None`` otherwise.
        mirror_carry: With ``PPOConfig(symmetry=...)``, the carry the network has on
            the mirrored observations (`nnx_ppo.algorithms.core.mirroring`), leaves
            ``[n_envs, ...]``; ``None`` otherwise.
    """

    params: Any
    network_state: Any
    opt_state: Any
    env_state: Any = batch_field()
    reset_state: Any = batch_field()
    carry: Any = batch_field()
    episodes: EpisodeStats = batch_field()
    rng: jax.Array
    iteration: jax.Array
    non_finite: NonFinite
    value_stats: Any = None
    models: Any = batch_field(default=None)
    mirror_carry: Any = batch_field(default=None)


@struct.dataclass
class Transition:
    """One rollout step per environment; the rollout scan stacks it to ``[T, B, ...]``.

    Only what the loss replay and the advantage computation need is stored: the
    observation once (no separate next observation), and no actions (the replay
    recomputes them from the stored ``rollout_extras``).

    Attributes:
        obs: The observation the network acted on, leaves ``[T, B, ...]``.
        rollout_extras: What the network emitted for replay, leaves ``[T, B, ...]``.
        log_likelihood: Pytree (the action tree) of ``[T, B]`` log-likelihoods of the
            actions taken.
        value: Pytree (the reward tree) of ``[T, B]`` value estimates.
        reward: Pytree of ``[T, B]`` rewards.
        done: ``[T, B]`` bool, the episode ended at this step (the carry was reset
            before the next step).
        truncation: ``[T, B]`` bool, the episode was cut by a time limit at this step.
        final_value: Pytree like ``value``: at truncated steps the value of the true
            final observation (zeros elsewhere); ``None`` without
            ``bootstrap_on_truncation``.
    """

    obs: Any
    rollout_extras: Any
    log_likelihood: Any
    value: Any
    reward: Any
    done: jax.Array
    truncation: jax.Array
    final_value: Any = None

    @property
    def termination(self) -> jax.Array:
        """``[T, B]`` bool: the episode ended at this step and was not truncated."""
        return self.done & ~self.truncation


@struct.dataclass
class DistillationState:
    """All the mutable state of a distillation run, one pytree (what a checkpoint saves).

    The fields are those of `TrainState` (for the
    student) plus ``teacher_carry``; the teacher's variables are not part of it.

    Attributes:
        params: ``nnx.State`` of the student's `flax.nnx.Param` variables.
        network_state: ``nnx.State`` of the student's other variables (statistics, RNG
            streams).
        opt_state: The optax optimizer state of ``params``.
        env_state: The batched environment state, leaves ``[n_envs, ...]``.
        reset_state: The batched state finished environments restart from, or ``None``
            (``reset_mode="fresh"``).
        carry: The student's carry at the start of the next rollout, ``[n_envs, ...]``.
        teacher_carry: The teacher's carry at the same point, ``[n_envs, ...]``.
        episodes: `EpisodeStats` of the open episodes.
        rng: The run's PRNG key (raw ``uint32[2]``).
        iteration: int32 ``[]``, completed iterations.
        non_finite: `NonFinite`, the first NaN/inf seen.
        models: With domain randomization, each environment's randomized model leaves
            (as in `TrainState`); ``None`` otherwise.
        mirror_carry: With ``DistillationConfig(symmetry=...)``, the student's carry on
            the mirrored observations (as in `TrainState`), leaves ``[n_envs, ...]``;
            ``None`` otherwise.
    """

    params: Any
    network_state: Any
    opt_state: Any
    env_state: Any = batch_field()
    reset_state: Any = batch_field()
    carry: Any = batch_field()
    teacher_carry: Any = batch_field()
    episodes: EpisodeStats = batch_field()
    rng: jax.Array
    iteration: jax.Array
    non_finite: NonFinite
    models: Any = batch_field(default=None)
    mirror_carry: Any = batch_field(default=None)
