"""One PPO training iteration as a pure function of `TrainState`.

The iteration reads like purejaxrl: nested ``lax.scan``s, one named function per level::

    training_iteration                 # one iteration
    ├── _unroll (env_step)             # rollout scan over T steps
    ├── gae                            # advantages, reverse scan (or in minibatch_loss)
    ├── epoch                          # scan over n_epochs
    │   └── minibatch_update           # scan over n_minibatches
    │       └── minibatch_loss         # replay + ppo_loss (+ gae if "minibatch")
    ├── update_statistics              # e.g. observation normalizer, once
    └── record_non_finite              # NaN/inf check (nnx_ppo.algorithms.core.faults)

The network is split once (``nnx.split(network, nnx.Param, ...)``) into a static
``GraphDef`` and two states; the iteration works on those states only, so the whole
thing is one jitted XLA program (`nnx_ppo.algorithms.trainer.skeleton.make_train_call`, with
the state donated and several iterations per call if asked). Statistics
(``update_statistics``) change only after the gradient phase, so the replay of the
first minibatch reproduces the rollout exactly. The iteration is written for one run:
in a sweep, run ``i``'s config holds its own traced values of the sweepable fields
(`OnPolicyRun.with_values`), read like any other config value.

With a device ``mesh`` (`nnx_ppo.algorithms.core.distributed`) the same program runs
data-parallel: the state is placed by `init_train_state`, the environment axis of
the rollout and of every minibatch is constrained to the mesh's ``"data"`` axis, and
XLA inserts the all-reduces (gradients, normalizer statistics, metrics).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import Mesh

from nnx_ppo.algorithms.config import PPOConfig, sweep_fields
from nnx_ppo.algorithms.core.distributed import check_batch_divisible
from nnx_ppo.algorithms.core.losses import ppo_loss
from nnx_ppo.algorithms.core.mirroring import augmented, halves, mirror_loss, mirror_weights
from nnx_ppo.algorithms.core.phases import (
    cut_sequences,
    replay_minibatch,
    rollout_phase,
    split_minibatches,
    update_phase,
)
from nnx_ppo.algorithms.core.rollout import split_network, value_estimates
from nnx_ppo.algorithms.core.schedules import LearningRate, learning_rate_rule, make_optimizer
from nnx_ppo.algorithms.ppo.advantages import gae
from nnx_ppo.algorithms.ppo.value_normalization import (
    denormalize,
    initial_value_statistics,
    normalize,
)
from nnx_ppo.algorithms.ppo.value_normalization import update as update_value_statistics
from nnx_ppo.algorithms.trainer.initial_state import INITIAL_CARRY, init_state, reset_on_mesh
from nnx_ppo.algorithms.types import Metrics, TrainState

__all__ = [
    "TRACEABLE_FIELDS",
    "AdvantageFn",
    "init_train_state",
    "make_optimizer",
    "make_training_iteration",
    "ppo_state_fields",
    "reset_on_mesh",
    "split_minibatches",
    "split_network",
]


TRACEABLE_FIELDS = sweep_fields(PPOConfig)
"""The `PPOConfig` fields whose values may be traced arrays (a sweep run's config,
`OnPolicyRun.with_values`): each enters the program only as a number in arithmetic.
Every other field sizes an array or a loop, or selects code (each field declares which,
`why_fixed`)."""


AdvantageFn = Callable[..., tuple[Any, Any]]
"""An advantage estimator with `gae`'s signature, ``advantages(rewards, values,
bootstrap_value, terminations, truncations, *, discounting_factor, gae_lambda,
final_values) -> (advantages, value_targets)``: `make_training_iteration`'s
``advantage_fn`` (``None``, the default, is `gae`)."""


def init_train_state(
    env: Any,
    network: nnx.Module,
    config: PPOConfig,
    optimizer: optax.GradientTransformation,
    key: jax.Array,
    *,
    mesh: Mesh | None = None,
) -> tuple[nnx.GraphDef, TrainState]:
    """Split the network and build the initial `TrainState`.

    Every array is copied, so donating the state to the jitted iteration never
    invalidates the arrays held by ``network``.

    Args:
        env: The unbatched environment.
        network: The PPO network (in train mode).
        config: The algorithm configuration.
        optimizer: From `make_optimizer`.
        key: The run's raw PRNG key (``jax.random.PRNGKey``).
        mesh: A device mesh with a ``"data"`` axis: the state is placed on it
            (environment states, carries and episode statistics sharded along
            ``"data"``, the rest replicated; see
            `state_shardings`), and each process
            resets only its own share of the environments. ``None``: default device.

    Returns:
        ``(graphdef, state)``. The state's values do not depend on ``mesh``.

    Raises:
        ValueError: If ``config.n_envs`` is not a multiple of ``n_minibatches`` times
            the mesh's ``"data"`` size.
    """
    if mesh is not None:
        check_batch_divisible(config.n_envs, mesh, n_minibatches=config.n_minibatches)
    return init_state(
        env,
        network,
        optimizer,
        key,
        n_envs=config.n_envs,
        reset_mode=config.reset_mode,
        mesh=mesh,
        **ppo_state_fields(env, config),
    )


def ppo_state_fields(env: Any, config: PPOConfig) -> dict[str, Any]:
    """The initial values of the `TrainState` fields that only PPO has, for
    `init_state`'s ``**fields``: ``value_stats`` (identity statistics, one per
    leaf of the reward tree) with ``config.normalize_values``, and ``mirror_carry``
    (the network's initial carry) with ``config.symmetry``."""
    fields: dict[str, Any] = {}
    if config.symmetry is not None:
        fields["mirror_carry"] = INITIAL_CARRY
    if config.normalize_values:
        rewards = jax.eval_shape(env.reset, jax.random.PRNGKey(0)).reward
        fields["value_stats"] = initial_value_statistics(rewards)
    return fields


def make_training_iteration(
    env: Any,
    graphdef: nnx.GraphDef,
    optimizer: optax.GradientTransformation,
    config: PPOConfig,
    *,
    mesh: Mesh | None = None,
    learning_rate: LearningRate | None = None,
    advantage_fn: AdvantageFn | None = None,
    statistics_first: bool = False,
) -> Callable[[TrainState], tuple[TrainState, Metrics]]:
    """Build the pure function that runs one PPO iteration.

    The last two arguments make variants of PPO, e.g. for ablations: an `Algorithm`
    whose iteration factory passes them (`ppo_algorithm` passes neither) trains the
    variant with `nnx_ppo.algorithms.trainer.skeleton.run` or ``train_many(...,
    algorithm=...)``.

    Args:
        env: The unbatched environment.
        graphdef: The network's ``GraphDef`` (train mode), from `init_train_state`.
        optimizer: The optax optimizer whose state is in ``TrainState.opt_state``.
        config: The algorithm configuration: one run's (in a sweep, its sweepable
            fields may hold that run's traced values, `OnPolicyRun.with_values`).
        mesh: The device mesh the state lives on (from ``init_train_state(...,
            mesh=...)``): the environment axis of the rollout and of each minibatch is
            kept sharded along its ``"data"`` axis. ``None``: no constraints.
        learning_rate: The `LearningRate` rule ``optimizer`` was built with (``None``:
            the one of ``config``); the gradient phase adapts and reports the rate
            through it.
        advantage_fn: The advantage estimator (`AdvantageFn`, `gae`'s signature and
            result), called where `gae` is: once per iteration, or in every minibatch
            with ``config.advantage_estimation="minibatch"``. ``None``: `gae`.
        statistics_first: Let the running statistics (e.g. the observation normalizer)
            take in the rollout before the gradient phase, as brax's PPO does
            (`update_phase`); the default, ``False``, updates them after it, so that
            the first minibatch's replay reproduces the rollout exactly.

    Returns:
        ``training_iteration(state) -> (state, metrics)``: pure and jit-able; metrics
        are scalars, only those of the groups enabled in ``config.log_level``.

    Raises:
        TypeError: If ``advantage_fn`` is not callable or ``statistics_first`` not a bool.
    """
    if advantage_fn is not None and not callable(advantage_fn):
        raise TypeError(
            f"advantage_fn={advantage_fn!r} must be an advantage estimator with gae's "
            "signature (nnx_ppo.algorithms.ppo.advantages.gae, the default)."
        )
    if not isinstance(statistics_first, bool):
        raise TypeError(f"statistics_first={statistics_first!r} must be True or False.")
    level = config.log_level
    per_minibatch = config.advantage_estimation == "minibatch"
    if learning_rate is None:
        learning_rate = learning_rate_rule(config)

    estimate = gae if advantage_fn is None else advantage_fn
    symmetry = config.symmetry

    def advantages_of(transitions, values, bootstrap_value):
        return estimate(
            transitions.reward,
            values,
            bootstrap_value,
            transitions.termination,
            transitions.truncation,
            discounting_factor=config.discounting_factor,
            gae_lambda=config.gae_lambda,
            final_values=transitions.final_value,
        )

    def minibatch_loss(params, network_state, minibatch):
        (transitions, advantages, targets, mirrored), starts = minibatch
        initial_carry, last_obs, mirror_carry = starts
        real = (transitions, initial_carry, mirrored, mirror_carry)
        augment = symmetry is not None and symmetry.augment
        if symmetry is not None and augment:  # the real and the mirrored sequences, one replay
            both, carries = augmented(symmetry, transitions, initial_carry, mirrored, mirror_carry)
            out, network_metrics = replay_minibatch(
                graphdef, params, network_state, carries, both, level
            )
            b = jnp.shape(transitions.done)[1]
            fields = (out.log_likelihood, out.value, out.regularization)
            (new_ll, new_value, reg), mirrored_out = halves(fields, b)
            out = out.replace(log_likelihood=new_ll, value=new_value, regularization=reg)
        else:
            out, network_metrics = replay_minibatch(
                graphdef, params, network_state, initial_carry, transitions, level
            )
        old_values = transitions.value
        if per_minibatch:
            # brax-style: advantages and targets from this replay's values, with the
            # observation after the rollout's last step valued from the replayed carry.
            bootstrap = value_estimates(graphdef, params, network_state, out.final_carry, last_obs)
            values, bootstrap = jax.lax.stop_gradient((out.value, bootstrap))
            advantages, targets = advantages_of(transitions, values, bootstrap)
            old_values = values  # unused: value clipping is off in this mode
        options: dict[str, Any] = dict(
            clip_range=config.clip_range,
            critic_loss_weight=config.critic_loss_weight,
            value_clip_range=config.value_clip_range,
            normalize=config.normalize_advantages,
            advantage_mode=config.advantage_mode,
        )
        loss, metrics = ppo_loss(
            out.log_likelihood, out.value, out.regularization, transitions.log_likelihood,
            old_values, advantages, targets, **options,
        )  # fmt: skip
        if symmetry is not None and augment:  # the mirrored samples: the same labels
            # The network's regularization (entropy bonus, KL terms) is the real half's:
            # at a mirrored action off the policy's support its entropy estimate is not.
            weights = mirror_weights(transitions.log_likelihood, mirrored[1])
            behavior = symmetry.ratio == "behavior"  # the ratio against pi_old(a | s)
            old = transitions.log_likelihood if behavior else mirrored[1]
            m_ll, m_value, _ = mirrored_out
            mirrored_loss, m = ppo_loss(
                m_ll, m_value, jnp.zeros(()), old, mirrored[2], advantages, targets, **options,
                weights=jnp.ones_like(weights) if behavior else weights,
            )  # fmt: skip
            loss = (loss + mirrored_loss + jnp.mean(out.regularization)) / 2
            metrics = {
                **metrics, "loss/total": loss, "loss/mirrored": mirrored_loss,
                "actor/mirror_weight": jnp.mean(weights),
                "actor/mirror_ratio_max_deviation": m["actor/ratio_max_deviation"],
            }  # fmt: skip
        if symmetry is not None and symmetry.mirror_loss_weight > 0:
            mirror = mirror_loss(graphdef, params, network_state, symmetry, *real)
            loss = loss + symmetry.mirror_loss_weight * mirror
            metrics = {**metrics, "loss/total": loss, "loss/mirror": mirror}
        return loss, {**metrics, **network_metrics}

    def training_iteration(state: TrainState) -> tuple[TrainState, Metrics]:
        rng, rollout_key, refresh_key, shuffle_key = jax.random.split(state.rng, 4)

        # 1. Rollout: T steps of all environments with the current parameters.
        phase = rollout_phase(
            env,
            graphdef,
            state,
            rollout_key,
            refresh_key,
            config,
            bootstrap_on_truncation=config.bootstrap_on_truncation,
            store_values=not per_minibatch,
            mesh=mesh,
        )
        transitions, rollout = phase.transitions, phase.rollout

        # 2. Advantages and value targets, once per iteration (or per minibatch, in
        #    minibatch_loss, with the observation after the last step for bootstrapping).
        value_stats = state.value_stats
        mirror = rollout.mirror
        mirrored = None if mirror is None else mirror.labels
        if per_minibatch:
            advantages = targets = None
            last_obs = phase.env_state.obs
        elif state.value_stats is None:
            advantages, targets = advantages_of(
                transitions, transitions.value, rollout.bootstrap_value
            )
            last_obs = None
        else:
            # Standardised value heads: advantages in return units from the outputs
            # mapped back; the statistics take in this iteration's targets, and the
            # critic fits the targets standardised by them.
            stats = state.value_stats
            advantages, targets = advantages_of(
                transitions.replace(final_value=denormalize(stats, transitions.final_value)),
                denormalize(stats, transitions.value),
                denormalize(stats, rollout.bootstrap_value),
            )
            value_stats = update_value_statistics(stats, targets)
            targets = normalize(value_stats, targets)
            # The rollout's outputs restated in the new units (for value clipping).
            restated = normalize(value_stats, denormalize(stats, transitions.value))
            transitions = transitions.replace(value=restated)
            last_obs = None
            if mirror is not None:
                restated = normalize(value_stats, denormalize(stats, mirror.value))
                mirrored = (mirror.rollout_extras, mirror.log_likelihood, restated)

        mirror_carry = None if mirror is None else mirror.initial_carry
        labels = (transitions, advantages, targets, mirrored)
        starts = (rollout.initial_carry, last_obs, mirror_carry)
        if config.sequence_length is not None:  # replayed in shorter stored-carry sequences
            chunks = (rollout.chunk_carries, None if mirror is None else mirror.chunk_carries)
            labels, (carries, mirror_carry) = cut_sequences(config.sequence_length, labels, chunks)
            starts = (carries, None, mirror_carry)
        fields = {} if mirror is None else {"mirror_carry": mirror.final_carry}

        # 3. Gradient phase: n_epochs passes of n_minibatches replayed minibatches;
        # 4. statistics, NaN/inf check, metrics of the enabled groups.
        new_state, metrics = update_phase(
            minibatch_loss, optimizer, graphdef, state, phase, labels, starts,
            shuffle_key, rng, config, mesh=mesh, learning_rate=learning_rate,
            statistics_first=statistics_first, value_stats=value_stats, **fields,
        )  # fmt: skip
        return new_state, metrics

    return training_iteration
