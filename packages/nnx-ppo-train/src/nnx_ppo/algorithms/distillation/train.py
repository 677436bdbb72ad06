r"""Policy distillation: train a stateful student to imitate a fixed teacher (DAgger).

Typical use: train a fast MLP teacher with `train_ppo`,
then distill it into the recurrent or graph-structured network you actually study::

    result = train_distillation(env, teacher, student, DistillationConfig(...))

**Algorithm** (on-policy, DAgger-style). Every iteration:

1. *Rollout*: the **student** drives ``n_envs`` environments for ``rollout_length``
   steps, sampling its actions (the same rollout as PPO:
   `nnx_ppo.algorithms.core.rollout`, with carry resets where episodes end).
2. *Labels*: the **teacher**, in ``eval()`` mode, is run over the visited observations
   with its own carry (reset where the student's episodes ended) and labels every
   state with its deterministic (mean) action and, optionally, its value.
3. *Gradient phase*: ``n_epochs`` passes over ``n_minibatches`` minibatches of whole
   environment sequences; each replays the student from the carry stored at the start
   of the rollout (`replay`) with the teacher's
   action in place of the student's own, and minimises

   .. math::

       L = -\overline{\log \pi_\text{student}(a_\text{teacher} \mid \text{history})}
           + c_\text{reg}\, \overline{\text{reg}}
           + c_v \sum_\text{heads} \tfrac12 \overline{(V_\text{student} - V_\text{teacher})^2}

   (`distillation_loss`; the value term only if ``value_loss_weight > 0``).
4. The student's running statistics (e.g. its observation normalizer) are updated
   once from the rollout, as in PPO. The teacher never changes.

**How the teacher's action reaches the student's likelihood.** A sampler scores, during
replay, the *raw* action stored in its ``rollout_extras`` slot (for
`NormalTanhSampler` the pre-``tanh`` value, so the log-likelihood includes the ``tanh``
log-determinant and never inverts it); the teacher's raw action is its sampler's raw
mean. During the loss the student's stored extras are kept except at its sampler slots,
which receive the teacher's raw actions, matched by action leaf. The slots are found
before training (`nnx_ppo.algorithms.distillation.pairing`), so teacher and student may differ in
architecture and carry (MLP teacher, LSTM or ``PopulationGraph`` student) as long as
their action trees and samplers' squashing match (`check_distillation_pair`).

**Teacher and student of different layouts** (``target_fn``). By default the student
learns the teacher's raw action leaf by leaf, so both need the same action tree and
sampler kinds. Otherwise (a teacher with a dict of two actuators, a student with one
concatenated action; a teacher with another sampler) give
``train_distillation(..., target_fn=fn)``: ``fn(teacher_extras, student_extras)`` gets
the ``rollout_extras`` trees (the per-step records the networks emit: each sampler
its raw action, a ``Normalizer`` its raw input) of the teacher, run in ``eval()`` mode
over the visited observations (so its samplers' raw actions are their means), and of
the student's own rollout, with leaves ``[T, B, ...]``, and returns the targets: a tree
shaped like the student's actions, each leaf the *raw* action (for
`NormalTanhSampler` pre-``tanh``) the student's sampler of that action should score.
It is traced once before training (`check_distillation_pair`), and runs inside the
jitted iteration, so write it with ``jax.numpy``. A function is an argument, not a
`DistillationConfig` field: the config is data saved as JSON with the checkpoints::

    # teacher: Sequential([Normalizer, PPOAdapter(action=Parallel(left=..., right=...))]),
    # whose extras are [raw obs, {"action": {"left": [mlp, raw], "right": ...}, ...}]
    def target_fn(teacher_extras, student_extras):
        actuators = teacher_extras[1]["action"]
        return jnp.concatenate([actuators["left"][1], actuators["right"][1]], axis=-1)

The tree of a network's ``rollout_extras`` is printed by ``jax.tree.map(jnp.shape,
network(network.initialize_state(1), obs).rollout_extras)``.

**Symmetry** (``DistillationConfig(symmetry=...)``, a
`Symmetry`): a symmetric student. The rollout
runs the student on the mirrored observations beside the real ones from its *mirrored
carry* (`nnx_ppo.algorithms.core.mirroring`, as in PPO), so the mirrored sequences are
what a recurrent student really has on the mirrored history. With ``augment`` each
minibatch also replays the mirrored sequences, with the mirror of the teacher's raw
action on the original state, ``M_a a_teacher(s)``, as their target (the target
``target_fn`` returns, mirrored, with ``target_fn``); the minibatch loss is the mean of
the two halves' action NLL and value terms (the value target ``V_teacher(s)`` for both:
a mirror leaves the reward unchanged) plus the real half's regularization. With
``mirror_loss_weight`` the mirror loss ``|u(M s) - M u(s)|^2`` on the student's
sampler modes is added, as in PPO.

The teacher is *not* run on the mirrored observations. The mirrored target ``M_a
a_teacher(s)`` is what makes the student symmetric: at a mirrored state ``M s`` it
learns both ``a_teacher(M s)`` (from the real sequences, where visited) and ``M_a
a_teacher(s)``, i.e. the teacher's policy symmetrised, even when the teacher is not
symmetric. Labelling ``M s`` with ``a_teacher(M s)`` instead would only teach the
teacher's own asymmetry on more states (for a symmetric teacher both targets are the
same), and would cost a second teacher pass per step and a mirrored teacher carry in
the state.

**State and resume.** All mutable state is one `DistillationState` pytree
(student parameters and statistics, optimizer state, environments, both carries
and, with a symmetry, the student's mirrored carry, random key, iteration counter),
the same fields a `TrainState` has plus the teacher's carry, so any
`CheckpointHook` (e.g. the
`Checkpointer`) saves and resumes it exactly.
The teacher's variables are an input of the jitted iteration, never saved: pass the
same teacher when resuming.

**Devices.** Like `train_ppo`, a run uses every device by default (``devices=None``;
one on a plain CPU) and takes ``devices=`` / ``mesh=`` (see
`nnx_ppo.algorithms.core.distributed`): the environments, both carries and the rollout
(with the teacher's labels) are sharded along the mesh's ``"data"`` axis, the
student's parameters, statistics and optimizer state and the teacher's variables are
replicated. The result equals a one-device run up to floating-point reduction order,
and a checkpoint resumes on any device count.

Examples:
    >>> from flax import nnx
    >>> from nnx_ppo.algorithms.config import EvalConfig
    >>> from nnx_ppo.envs import PointMass
    >>> from nnx_ppo.networks.factories import make_lstm_actor_critic, make_mlp_actor_critic
    >>> from nnx_ppo.wrappers import EpisodeWrapper
    >>> env = EpisodeWrapper(PointMass(), episode_length=10)
    >>> teacher = make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0))
    >>> student = make_lstm_actor_critic(2, 2, 8, (8,), (8,), rngs=nnx.Rngs(1))
    >>> config = DistillationConfig(
    ...     n_envs=4, rollout_length=5, n_minibatches=2, total_steps=40,
    ...     eval=EvalConfig(n_envs=4, max_episode_length=10))
    >>> result = train_distillation(env, teacher, student, config, progress=False)
    >>> result.total_steps, [step for step, _ in result.eval_history]
    (40, [0, 40])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Unpack

import jax
import jax.numpy as jnp
from flax import nnx, struct
from jax.sharding import Mesh

from nnx_ppo.algorithms.config import DistillationConfig
from nnx_ppo.algorithms.core.distributed import constrain_batch, replicate
from nnx_ppo.algorithms.core.logging import LogFn
from nnx_ppo.algorithms.core.losses import distillation_loss
from nnx_ppo.algorithms.core.mirroring import augmented, halves, mirror_loss
from nnx_ppo.algorithms.core.phases import (
    replay_minibatch,
    rollout_phase,
    update_phase,
)
from nnx_ppo.algorithms.core.rollout import eval_copy, network_step, ppo_output, split_network
from nnx_ppo.algorithms.core.schedules import Optimization
from nnx_ppo.algorithms.distillation.pairing import (
    SamplerSlots,
    TargetFn,
    check_distillation_pair,
    match_samplers,
)
from nnx_ppo.algorithms.symmetry import Symmetry
from nnx_ppo.algorithms.trainer import skeleton as trainer
from nnx_ppo.algorithms.trainer.initial_state import INITIAL_CARRY
from nnx_ppo.algorithms.trainer.options import RunOptions, resolve_options
from nnx_ppo.algorithms.types import DistillationState, Metrics
from nnx_ppo.networks.types import reset_where

# DistillationConfig (config), DistillationState (types), distillation_loss (losses) and
# check_distillation_pair and TargetFn (pairing) live with their kind and are
# re-exported here.
__all__ = [
    "DistillationConfig",
    "DistillationResult",
    "DistillationState",
    "TargetFn",
    "check_distillation_pair",
    "distillation_algorithm",
    "distillation_loss",
    "train_distillation",
]


# --------------------------------------------------------------------------- pytrees


@struct.dataclass
class _Labels:
    """The teacher's labels of a rollout: ``raw_action`` is a tuple (one entry per
    student action leaf, in ``jax.tree.leaves`` order) of ``[T, B, ...]`` raw actions;
    ``value`` the teacher's value tree of ``[T, B]`` (``None`` without value
    distillation)."""

    raw_action: tuple[jax.Array, ...]
    value: Any


@dataclasses.dataclass(frozen=True)
class DistillationResult(trainer.RunResult):
    """What `train_distillation` returns (the fields of `RunResult`): the final
    `DistillationState`, the student's evaluations of this call, the last logged
    metrics and the exact env steps trained."""


# --------------------------------------------------------------------------- iteration


def _label(
    teacher_graphdef: nnx.GraphDef,
    teacher_slots: SamplerSlots,
    teacher: tuple[Any, Any],
    teacher_carry: Any,
    obs: Any,
    done: jax.Array,
    *,
    with_value: bool,
    target_fn: TargetFn | None = None,
    student_extras: Any = None,
) -> tuple[Any, _Labels]:
    """Run the teacher over visited observations ``[T, B, ...]``, its carry reset where
    ``done`` (``[T, B]``, the student's episode ends) is set, as the rollout resets it.

    ``teacher`` is ``(params, network_state)`` of the teacher in ``eval()`` mode; its
    network state is not advanced (an eval-mode sampler draws nothing). The raw actions
    are read from the teacher's sampler slots, or, with ``target_fn``, are
    ``target_fn(teacher_extras, student_extras)`` on the teacher's whole
    ``rollout_extras`` and the student's stored ones (leaves ``[T, B, ...]``). Returns
    the teacher's carry after the last step and its `_Labels`.
    """
    teacher_params, teacher_state = teacher

    def label_step(carry, step):
        obs_t, done_t = step
        _, out = network_step(teacher_graphdef, teacher_params, teacher_state, carry, obs_t)
        if target_fn is None:
            extras = jax.tree.leaves(out.rollout_extras)
            labels = tuple(extras[i] for i in teacher_slots.indices)
        else:
            labels = out.rollout_extras
        value = ppo_output(out).value_estimates if with_value else None
        model = nnx.merge(teacher_graphdef, teacher_params, teacher_state)
        return reset_where(model, done_t, out.next_state), (labels, value)

    teacher_carry, (labels, value) = jax.lax.scan(label_step, teacher_carry, (obs, done))
    if target_fn is not None:
        labels = tuple(jax.tree.leaves(target_fn(labels, student_extras)))
    return teacher_carry, _Labels(raw_action=labels, value=value)


def _with_raw_actions(extras: Any, slots: SamplerSlots, raw_action: tuple[Any, ...]) -> Any:
    """``extras`` (a student's ``rollout_extras``) with ``raw_action`` (one entry per
    action leaf) in its samplers' slots, cast to the slots' dtypes."""
    leaves, treedef = jax.tree.flatten(extras)
    for index, raw in zip(slots.indices, raw_action, strict=True):
        leaves[index] = raw.astype(leaves[index].dtype)
    return jax.tree.unflatten(treedef, leaves)


def _mirrored_labels(
    symmetry: Symmetry,
    slots: SamplerSlots,
    mirror: Any,
    raw_action: tuple[jax.Array, ...],
    action_tree: Any,
) -> tuple[Any, Any, Any]:
    """The labels of the mirrored sequences (`MirrorRollout.labels`'s form, as
    `augmented` takes them): what the student emitted on the mirrored observations
    (``mirror``, a `MirrorRollout`), with ``M_a`` of the teacher's raw actions
    ``raw_action`` (``[T, B, ...]`` per student action leaf) in its samplers' slots.
    ``action_tree`` is the treedef of the student's actions."""
    mirrored = symmetry.mirror_action(jax.tree.unflatten(action_tree, list(raw_action)))
    extras = _with_raw_actions(mirror.rollout_extras, slots, tuple(jax.tree.leaves(mirrored)))
    return extras, mirror.log_likelihood, mirror.value


def _make_iteration(
    env: Any,
    graphdef: nnx.GraphDef,
    teacher_graphdef: nnx.GraphDef,
    own: Optimization,
    config: DistillationConfig,
    teacher_slots: SamplerSlots,
    student_slots: SamplerSlots,
    *,
    mesh: Mesh | None = None,
    target_fn: TargetFn | None = None,
) -> Callable[[DistillationState, Any], tuple[DistillationState, Metrics]]:
    """Build ``iteration(state, (teacher_params, teacher_state)) -> (state, metrics)``
    with the run's `Optimization` ``own`` (its optimizer, learning-rate rule and, in a
    sweep, its own ``learning_rate``, ``weight_decay``, ``max_grad_norm`` or
    ``regularization_weight``).

    With a ``mesh`` the environment axis of the rollout, the labels and every
    minibatch is kept sharded along its ``"data"`` axis (as in
    `make_training_iteration`).
    """
    level = config.log_level
    distill_value = config.value_loss_weight > 0
    symmetry = config.symmetry
    augment = symmetry is not None and symmetry.augment
    weights = dict(
        value_loss_weight=config.value_loss_weight,
        regularization_weight=config.regularization_weight,
    )

    def minibatch_loss(params, network_state, minibatch):
        (transitions, labels, mirrored), (initial_carry, mirror_carry) = minibatch
        transitions = transitions.replace(
            rollout_extras=_with_raw_actions(
                transitions.rollout_extras, student_slots, labels.raw_action
            )
        )
        if symmetry is not None and augment:  # the real and the mirrored sequences, one replay
            both, carries = augmented(symmetry, transitions, initial_carry, mirrored, mirror_carry)
            out, network_metrics = replay_minibatch(
                graphdef, params, network_state, carries, both, level
            )
            b = jnp.shape(transitions.done)[1]
            fields = (out.log_likelihood, out.value, out.regularization)
            (own_ll, own_value, reg), (m_ll, m_value, _) = halves(fields, b)
            out = out.replace(log_likelihood=own_ll, value=own_value, regularization=reg)
        else:
            out, network_metrics = replay_minibatch(
                graphdef, params, network_state, initial_carry, transitions, level
            )
        loss, metrics = distillation_loss(
            out.log_likelihood, out.regularization, out.value, labels.value, **weights
        )
        if augment:  # the mirrored samples: M_a of the teacher's action, its value
            # The student's regularization (entropy bonus, KL terms) is the real half's.
            mirrored_loss, _ = distillation_loss(
                m_ll, jnp.zeros(()), m_value, labels.value, **weights
            )
            reg = config.regularization_weight * jnp.mean(out.regularization)
            loss = (loss + mirrored_loss + reg) / 2
            metrics = {**metrics, "loss/total": loss, "loss/mirrored": mirrored_loss}
        if symmetry is not None and symmetry.mirror_loss_weight > 0:
            mirror = mirror_loss(
                graphdef, params, network_state, symmetry, transitions, initial_carry,
                mirrored, mirror_carry,
            )  # fmt: skip
            loss = loss + symmetry.mirror_loss_weight * mirror
            metrics = {**metrics, "loss/total": loss, "loss/mirror": mirror}
        return loss, {**metrics, **network_metrics}

    def iteration(state: DistillationState, teacher: Any) -> tuple[DistillationState, Metrics]:
        rng, rollout_key, refresh_key, shuffle_key = jax.random.split(state.rng, 4)

        # 1. Rollout: the student drives all environments for T steps.
        phase = rollout_phase(
            env, graphdef, state, rollout_key, refresh_key, config,
            bootstrap_on_truncation=False, mesh=mesh,
        )  # fmt: skip
        transitions = phase.transitions

        # 2. Labels: the teacher's mean action (and value) at every visited state.
        teacher_carry, labels = _label(
            teacher_graphdef,
            teacher_slots,
            teacher,
            state.teacher_carry,
            transitions.obs,
            transitions.done,
            with_value=distill_value,
            target_fn=target_fn,
            student_extras=transitions.rollout_extras,
        )
        labels = constrain_batch(labels, mesh, axis=1)

        # With a symmetry: the mirrored sequences' labels (M_a of the teacher's action)
        # and the mirrored carries they start from.
        mirrored, mirror_carry, fields = None, None, {}
        if symmetry is not None:
            mirror = phase.rollout.mirror
            action_tree = jax.tree.structure(transitions.log_likelihood)
            mirrored = _mirrored_labels(
                symmetry, student_slots, mirror, labels.raw_action, action_tree
            )
            mirror_carry, fields = mirror.initial_carry, {"mirror_carry": mirror.final_carry}

        # 3. Gradient phase: n_epochs passes of n_minibatches replayed minibatches;
        # 4. the student's statistics (from its own rollout), NaN/inf check, metrics.
        new_state, metrics = update_phase(
            minibatch_loss, own.optimizer, graphdef, state, phase,
            (transitions, labels, mirrored), (phase.rollout.initial_carry, mirror_carry),
            shuffle_key, rng, config, mesh=mesh, learning_rate=own.learning_rate,
            teacher_carry=teacher_carry, **fields,
        )  # fmt: skip
        return new_state, metrics

    return iteration


# --------------------------------------------------------------------------- train


def train_distillation(
    env: Any,
    teacher: nnx.Module,
    student: nnx.Module,
    config: DistillationConfig,
    *,
    target_fn: TargetFn | None = None,
    **options: Unpack[RunOptions[LogFn]],
) -> DistillationResult:
    """Distill ``teacher`` into ``student`` on-policy (see the module docstring).

    The student drives the environments; the teacher (in ``eval()`` mode: its mean
    action) labels every visited state; the student minimises its negative
    log-likelihood of the teacher's actions plus its regularization (plus, optionally,
    the value-head MSE). Rollout, replay, logging, evaluation, videos
    (``config.video``), progress bar and checkpointing work as in `train_ppo`. At the end the
    trained state is written back into ``student`` (left in ``train()`` mode); the
    teacher is not modified.

    Devices work as in `train_ppo`: on several devices (``devices`` / ``mesh``) the
    environments, the student's and the teacher's carries and the rollout are sharded
    along the mesh's ``"data"`` axis; the student's parameters, statistics and
    optimizer state and the teacher's variables are replicated; gradients and
    statistics are reduced across devices, so the result equals a one-device run up to
    floating-point reduction order (see `nnx_ppo.algorithms.core.distributed`). After
    ``jax.distributed.initialize()`` the run spans every process's devices; each
    process steps its own environments, and only process 0 calls ``log_fn``, writes
    ``jsonl_path``, shows the progress bar and has ``checkpoint`` write (every process
    must call ``train_distillation`` with the same arguments).

    Args:
        env: An unbatched environment (``reset(key)``, ``step(state, action)``), e.g.
            wrapped in `EpisodeWrapper`.
        teacher: A PPO network (output a ``PPONetworkOutput``), e.g. trained with
            ``train_ppo``. Any architecture and carry.
        student: The PPO network to train. Any architecture and carry, but the same
            action tree and sampler kinds as the teacher, unless ``target_fn`` is given.
        config: A `DistillationConfig`.
        target_fn: (``None``: the teacher's raw actions, paired leaf by leaf)
            ``target_fn(teacher_extras, student_extras) -> targets`` for a student whose
            actions are laid out differently from the teacher's (see "Teacher and
            student of different layouts" in the module docstring). A function, not a
            config field: a config is data saved as JSON. Pass the same one when
            resuming.
        **options: The run options, `RunOptions`, as for `train_ppo` (each documented
            there with its default). Particular to distillation: ``log_fn`` also gets
            ``loss/action_nll`` and ``loss/value`` (`distillation_loss`); ``eval_env``
            evaluates the student; ``checkpoint`` restores from a fresh
            `DistillationState` as template, so resume with the same teacher; with
            ``randomization_fn`` the models live in ``DistillationState.models`` and
            the teacher labels the states the randomized environments visit.

    Returns:
        A `DistillationResult` (its ``state`` laid out on the mesh, ``student``
        updated with single-device copies).

    Raises:
        TypeError: If ``config`` is not a `DistillationConfig`, a network is not a PPO
            network, an option is not a run option (`resolve_options`), or ``log_fn``,
            ``progress``, ``jsonl_path`` or ``checkpoint`` is of the wrong kind (see
            `check_run_arguments`).
        ValueError: If the student does not fit ``env`` or ``eval_env``, or teacher and
            student do not fit each other (see `check_distillation_pair`), if
            ``n_envs`` is not a multiple of ``n_minibatches`` times the number of
            devices (see `check_batch_divisible`), or if ``devices`` / ``mesh`` are
            invalid (see `resolve_mesh`), or if ``randomization_fn`` does not fit
            ``env``'s model (see `make_randomization`), or if ``config.symmetry`` does not
            fit the environment's observations and the student's actions and samplers
            (see `check_symmetry`); all checked before anything is compiled.
        NonFiniteError: (`nnx_ppo.algorithms.core.faults`) If a loss, parameter or
            statistic became NaN or infinite (raised at the next log or checkpoint).
    """
    if not isinstance(config, DistillationConfig):
        raise TypeError(
            f"config={config!r} must be a DistillationConfig, e.g. "
            "DistillationConfig(n_envs=256, total_steps=1_000_000)."
        )

    settings = resolve_options("train_distillation", options, env=env)
    algorithm = distillation_algorithm(teacher, student, target_fn=target_fn)
    loop = trainer.run(algorithm, env, student, config, settings)
    return DistillationResult(loop.state, loop.eval_history, loop.metrics, loop.step, loop.stopped)


def distillation_algorithm(
    teacher: nnx.Module, student: nnx.Module, *, target_fn: TargetFn | None = None
) -> trainer.Algorithm:
    """Distillation of ``teacher`` as `trainer.run` takes it: the `DistillationState`
    (with the teacher's carry), the samplers' slots matched before anything is
    compiled (``student`` is the template of the students: its action tree and
    samplers), and the teacher's variables as an input of every call. With
    ``target_fn`` the targets are ``target_fn(teacher_extras, student_extras)``
    (`train_distillation`), checked by tracing before anything is compiled."""

    def prepare(env: Any, config: DistillationConfig, mesh: Mesh | None) -> trainer.Prepared:
        # The samplers' slots, before anything is compiled.
        teacher_slots, student_slots = match_samplers(
            env, teacher, student, config.n_envs,
            value_distillation=config.value_loss_weight > 0, target_fn=target_fn,
        )  # fmt: skip
        teacher_graphdef, *teacher_vars = split_network(eval_copy(teacher))
        teacher_arrays = tuple(teacher_vars)
        if mesh is not None:
            teacher_arrays = replicate(teacher_arrays, mesh)

        def iteration(
            graphdef: nnx.GraphDef, run: DistillationConfig, own: Optimization, mesh: Mesh | None
        ) -> Any:
            return _make_iteration(
                env, graphdef, teacher_graphdef, own, run, teacher_slots, student_slots,
                mesh=mesh, target_fn=target_fn,
            )  # fmt: skip

        fields = {"teacher_carry": teacher.initialize_state(config.n_envs)}
        if config.symmetry is not None:  # the student's carry on the mirrored observations
            fields["mirror_carry"] = INITIAL_CARRY
        return trainer.Prepared(
            fields=fields,
            iteration=iteration,
            call_args=(teacher_arrays,),
        )

    return trainer.Algorithm("train_distillation", prepare, state_type=DistillationState)
