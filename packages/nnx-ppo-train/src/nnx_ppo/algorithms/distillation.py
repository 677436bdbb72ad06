r"""Policy distillation: train a stateful student to imitate a fixed teacher (DAgger).

Typical use: train a fast MLP teacher with `train_ppo`,
then distill it into the recurrent or graph-structured network you actually study::

    result = train_distillation(env, teacher, student, DistillationConfig(...))

**Algorithm** (on-policy, DAgger-style). Every iteration:

1. *Rollout*: the **student** drives ``n_envs`` environments for ``rollout_length``
   steps, sampling its actions (the same rollout as PPO:
   `nnx_ppo.algorithms.rollout`, with carry resets where episodes end).
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
`NormalTanhSampler` the pre-``tanh`` value,
so the log-likelihood includes the ``tanh`` log-determinant and never inverts it). The
teacher's raw action is its sampler's raw mean, which in ``eval()`` mode its sampler
emits in *its* ``rollout_extras`` slot. Before training, each network is traced once
(``jax.eval_shape``, nothing compiled) with every
`ActionSampler` in it recording what it
returns; a sampler's slot is the leaf of the network's ``rollout_extras`` tree that is
that very raw-action array (containers pass children's extras through unchanged), and
its action leaf is the leaf of ``PPONetworkOutput.actions`` that is its output
``"action"``. During the loss the student's stored extras are kept (normalizer inputs
and everything else) except at its sampler slots, which receive the teacher's raw
actions, matched by action leaf. Teacher and student may therefore differ in
architecture and carry (MLP teacher, LSTM or ``PopulationGraph`` student); their action
trees (structure, shapes, dtypes) and their samplers' squashing must match, which
`check_distillation_pair` verifies before anything is traced for training.

**State and resume.** All mutable state is one `DistillationState` pytree
(student parameters and statistics, optimizer state, environments, both carries,
random key, iteration counter), the same fields a
`TrainState` has plus the teacher's carry, so any
`CheckpointHook` (e.g. the
`Checkpointer`) saves and resumes it exactly.
The teacher's variables are an input of the jitted iteration, never saved: pass the
same teacher when resuming.

**Devices.** Like `train_ppo`, a run uses every device by default (``devices=None``;
one on a plain CPU) and takes ``devices=`` / ``mesh=`` (see
`nnx_ppo.algorithms.distributed`): the environments, both carries and the rollout
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

import contextvars
import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any, Literal

import jax
import jax.numpy as jnp
import optax
from flax import nnx, struct
from jax.sharding import Mesh

from nnx_ppo.algorithms._host_loop import evaluation_task, run_calls
from nnx_ppo.algorithms.config import (
    EvalConfig,
    LogLevel,
    Schedule,
    _check_choice,
    _check_float,
    _check_int,
)
from nnx_ppo.algorithms.distributed import (
    check_batch_divisible,
    constrain_batch,
    gather_state,
    replicate,
    resolve_mesh,
    restore_checkpoint,
    shard_state,
    state_shardings,
    uses_mesh,
)
from nnx_ppo.algorithms.evaluation import make_evaluator
from nnx_ppo.algorithms.faults import healthy
from nnx_ppo.algorithms.iteration import (
    _flatten_metrics,
    _global_norm,
    after_gradients,
    make_train_call,
    reset_on_mesh,
    split_minibatches,
    split_network,
)
from nnx_ppo.algorithms.logging import LogFn
from nnx_ppo.algorithms.losses import explained_variance
from nnx_ppo.algorithms.ppo import CheckpointHook, check_env_network
from nnx_ppo.algorithms.rollout import (
    _ppo_output,
    _unroll,
    initial_episode_stats,
    network_step,
    replay,
    reset_envs,
)
from nnx_ppo.algorithms.types import EpisodeStats, NonFinite, Transition
from nnx_ppo.networks.sampling_layers import ActionSampler
from nnx_ppo.networks.types import StatefulModule, StatefulModuleOutput, reset_where

__all__ = [
    "DistillationConfig",
    "DistillationResult",
    "DistillationState",
    "check_distillation_pair",
    "distillation_loss",
    "train_distillation",
]

Metrics = dict[str, jax.Array]


# --------------------------------------------------------------------------- config


@dataclasses.dataclass(frozen=True, kw_only=True)
class DistillationConfig:
    """A distillation run: sizes, optimisation, loss weights, evaluation and logging.

    Sizes and step accounting are those of `PPOConfig`
    (an iteration collects ``n_envs * rollout_length`` env steps; ``total_steps`` is
    rounded up to whole device calls; counters are exact integers).

    Attributes:
        n_envs: Environments stepped in parallel.
        rollout_length: Steps per environment per iteration (``T``).
        total_steps: Env steps to distill for (``0``: only evaluate).
        n_epochs: Passes over each rollout.
        n_minibatches: Minibatches per epoch; each is a set of
            ``n_envs // n_minibatches`` whole environment sequences.
        learning_rate: A positive float, or an optax schedule ``step -> lr``.
        max_grad_norm: If set, clip gradients to this global norm.
        weight_decay: Decoupled weight decay (AdamW) if > 0, else plain Adam.
        value_loss_weight: Weight ``c_v`` of the value-head distillation (half MSE of
            the student's value estimates to the teacher's, summed over heads). ``0``
            (default) distills the policy only and leaves the student's critic alone;
            > 0 needs the teacher's value tree to match the student's.
        regularization_weight: Weight ``c_reg`` of the student's own per-sample
            ``regularization_loss`` (its samplers' entropy bonus, KL terms of
            variational layers...).
        reset_mode: How finished environments restart, as in
            `PPOConfig`: ``"cached"``, ``"refresh"``
            or ``"fresh"``.
        iterations_per_call: Iterations per jitted device call.
        log_level: Which metric groups to compute (see `LogLevel`; ``ACTOR`` has no
            distillation metric).
        eval: Periodic deterministic evaluation of the student.
        seed: Seed of the run's random key (env resets, minibatch shuffling, eval).
        log_every_calls: Call ``log_fn`` after every this many device calls.

    Raises:
        TypeError: If a field has the wrong type.
        ValueError: If a value is out of range, or ``n_envs`` is not divisible by
            ``n_minibatches``.

    Examples:
        >>> DistillationConfig(n_envs=10, n_minibatches=4)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
            ...
        ValueError: n_envs=10 is not divisible by n_minibatches=4: ...
    """

    n_envs: int = 256
    rollout_length: int = 20
    total_steps: int = 1_000_000
    n_epochs: int = 4
    n_minibatches: int = 8
    learning_rate: float | Schedule = 1e-3
    max_grad_norm: float | None = None
    weight_decay: float = 0.0
    value_loss_weight: float = 0.0
    regularization_weight: float = 1.0
    reset_mode: Literal["cached", "refresh", "fresh"] = "cached"
    iterations_per_call: int = 1
    log_level: LogLevel = LogLevel.DEFAULT
    eval: EvalConfig = dataclasses.field(default_factory=EvalConfig)
    seed: int = 0
    log_every_calls: int = 1

    def __post_init__(self) -> None:
        _check_int("n_envs", self.n_envs, minimum=1)
        _check_int("rollout_length", self.rollout_length, minimum=1)
        _check_int("total_steps", self.total_steps, minimum=0)
        _check_int("n_epochs", self.n_epochs, minimum=1)
        _check_int("n_minibatches", self.n_minibatches, minimum=1)
        _check_int("iterations_per_call", self.iterations_per_call, minimum=1)
        if self.n_envs % self.n_minibatches:
            up = -(-self.n_envs // self.n_minibatches) * self.n_minibatches
            divisors = [d for d in range(self.n_minibatches, 0, -1) if self.n_envs % d == 0]
            raise ValueError(
                f"n_envs={self.n_envs} is not divisible by "
                f"n_minibatches={self.n_minibatches}: each minibatch is a set of whole "
                "environment sequences, so n_envs must be a multiple of n_minibatches "
                f"(e.g. n_envs={up} or n_minibatches={divisors[0]})."
            )
        if not callable(self.learning_rate):
            _check_float("learning_rate", self.learning_rate, low=0.0, low_open=True)
        _check_float("max_grad_norm", self.max_grad_norm, low=0.0, low_open=True, optional=True)
        _check_float("weight_decay", self.weight_decay, low=0.0)
        _check_float("value_loss_weight", self.value_loss_weight, low=0.0)
        _check_float("regularization_weight", self.regularization_weight, low=0.0)
        _check_choice("reset_mode", self.reset_mode, ("cached", "refresh", "fresh"))
        if not isinstance(self.log_level, LogLevel):
            raise TypeError(
                f"log_level={self.log_level!r} must be a LogLevel flag, e.g. "
                "LogLevel.DEFAULT or LogLevel.LOSSES | LogLevel.ROLLOUT."
            )
        if not isinstance(self.eval, EvalConfig):
            raise TypeError(
                f"eval={self.eval!r} must be an EvalConfig; build it with EvalConfig(...)."
            )
        _check_int("seed", self.seed, minimum=0)
        _check_int("log_every_calls", self.log_every_calls, minimum=1)

    @property
    def steps_per_iteration(self) -> int:
        """Env steps collected per iteration: ``n_envs * rollout_length``."""
        return self.n_envs * self.rollout_length

    @property
    def n_iterations(self) -> int:
        """Iterations in the run: enough to reach ``total_steps``, a multiple of
        ``iterations_per_call``."""
        per_call = self.steps_per_iteration * self.iterations_per_call
        return -(-self.total_steps // per_call) * self.iterations_per_call


# --------------------------------------------------------------------------- pytrees


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
    """

    params: Any
    network_state: Any
    opt_state: Any
    env_state: Any
    reset_state: Any
    carry: Any
    teacher_carry: Any
    episodes: EpisodeStats
    rng: jax.Array
    iteration: jax.Array
    non_finite: NonFinite


@struct.dataclass
class _Labels:
    """The teacher's labels of a rollout: ``raw_action`` is a tuple (one entry per action
    leaf, in ``jax.tree.leaves`` order) of ``[T, B, ...]`` raw actions; ``value`` the
    teacher's value tree of ``[T, B]`` (``None`` without value distillation)."""

    raw_action: tuple[jax.Array, ...]
    value: Any


@dataclasses.dataclass(frozen=True)
class DistillationResult:
    """What `train_distillation` returns.

    Attributes:
        state: The final `DistillationState`.
        eval_history: ``[(step, eval_metrics), ...]`` of the student, in order.
        metrics: The last logged training metrics (and the last evaluation's), floats.
        total_steps: Env steps trained, an exact ``int``.
    """

    state: DistillationState
    eval_history: list[tuple[int, dict[str, float]]]
    metrics: dict[str, float]
    total_steps: int


# --------------------------------------------------------------------------- loss


def _tree_sum(tree: Any) -> jax.Array:
    leaves = jax.tree.leaves(tree)
    total = leaves[0]
    for leaf in leaves[1:]:
        total = total + leaf
    return total


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
    nll = -jnp.mean(_tree_sum(log_likelihoods))
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


# --------------------------------------------------------------------------- samplers

_RECORDS: contextvars.ContextVar[list[tuple[type, StatefulModuleOutput]] | None] = (
    contextvars.ContextVar("_RECORDS", default=None)
)
_PROBE_CLASSES: dict[type, type] = {}


def _probe_class(cls: type) -> type:
    """A subclass of the sampler class ``cls`` whose calls are recorded in ``_RECORDS``
    (created once per class)."""
    if cls not in _PROBE_CLASSES:

        def __call__(self: Any, state: Any, x: Any, rollout_extras: Any = None) -> Any:
            out = cls.__call__(self, state, x, rollout_extras)
            records = _RECORDS.get()
            if records is not None:
                records.append((cls, out))
            return out

        _PROBE_CLASSES[cls] = type(
            f"_Recording{cls.__name__}", (cls,), {"__call__": __call__, "__module__": __name__}
        )
    return _PROBE_CLASSES[cls]


@dataclasses.dataclass(frozen=True)
class _Slots:
    """Where a network's samplers are: per action leaf (``jax.tree.leaves`` order of
    ``PPONetworkOutput.actions``), the index of its raw action among
    ``jax.tree.leaves(rollout_extras)``, the sampler class, and the raw action's shape
    and dtype (batched)."""

    indices: tuple[int, ...]
    samplers: tuple[type, ...]
    raw: tuple[jax.ShapeDtypeStruct, ...]


def _keystr(path: Any) -> str:
    return jax.tree_util.keystr(path) or "<root>"


def _locate(who: str, out: StatefulModuleOutput, records: list[Any]) -> _Slots:
    """Match recorded sampler calls to action leaves and ``rollout_extras`` leaves by
    identity (inside the trace)."""
    ppo = _ppo_output(out)
    action_items = jax.tree_util.tree_flatten_with_path(ppo.actions)[0]
    extras_leaves = jax.tree.leaves(out.rollout_extras)
    indices: list[int | None] = [None] * len(action_items)
    samplers: list[type | None] = [None] * len(action_items)
    for cls, sampler_out in records:
        action = sampler_out.output["action"]
        k = next((i for i, (_, leaf) in enumerate(action_items) if leaf is action), None)
        if k is None:  # a sampler whose action is not one of the network's actions
            continue
        e = next(
            (j for j, leaf in enumerate(extras_leaves) if leaf is sampler_out.rollout_extras), None
        )
        if e is None:
            raise ValueError(
                f"the {who}'s {cls.__name__} producing the action at "
                f"{_keystr(action_items[k][0])} emits a raw action that does not appear "
                f"unchanged in the {who}'s rollout_extras, so distillation cannot tell "
                "where to put (or read) the raw action. Every container between the "
                "sampler and the network's output must pass its children's "
                "rollout_extras through unchanged, and the sampler must emit a single "
                "array."
            )
        indices[k], samplers[k] = e, cls
    missing = [
        _keystr(path) for (path, _), i in zip(action_items, indices, strict=True) if i is None
    ]
    if missing:
        raise ValueError(
            f"the {who}'s actions at {', '.join(missing)} do not come unchanged from an "
            "ActionSampler's output (its 'action' entry); distillation needs every "
            "action leaf to be produced by a sampler (e.g. end the action port with "
            "NormalTanhSampler, or Map({key: sampler}) for several actions)."
        )
    return _Slots(
        indices=tuple(i for i in indices if i is not None),
        samplers=tuple(c for c in samplers if c is not None),
        raw=(),
    )


def _trace(
    who: str, graphdef: nnx.GraphDef, params: Any, network_state: Any, n_envs: int, obs: Any
) -> tuple[StatefulModuleOutput, _Slots]:
    """Trace one call of the network (``jax.eval_shape``) with its samplers recording:
    the output's shapes and the network's `_Slots`."""
    found: dict[str, Any] = {}

    def forward(p: Any, s: Any, o: Any) -> StatefulModuleOutput:
        model = nnx.merge(graphdef, p, s)
        carry = model.initialize_state(n_envs)
        samplers: dict[int, Any] = {
            id(node): node for _, node in nnx.iter_graph(model) if isinstance(node, ActionSampler)
        }
        classes = {key: type(node) for key, node in samplers.items()}
        records: list[Any] = []
        token = _RECORDS.set(records)
        try:
            for key, node in samplers.items():
                object.__setattr__(node, "__class__", _probe_class(classes[key]))
            out = model(carry, o)
        finally:
            _RECORDS.reset(token)
            for key, node in samplers.items():
                object.__setattr__(node, "__class__", classes[key])
        try:
            found["slots"] = _locate(who, out, records)
        except (TypeError, ValueError) as e:
            found["error"] = e
        return out

    try:
        out = jax.eval_shape(forward, params, network_state, obs)
    except Exception as e:
        raise ValueError(
            f"the {who} failed on the environment's observation (batched shapes "
            f"{_describe(obs)}): {e}"
        ) from e
    if "error" in found:
        raise found["error"]
    slots: _Slots = found["slots"]
    extras_leaves = jax.tree.leaves(out.rollout_extras)
    raw = tuple(
        jax.ShapeDtypeStruct(extras_leaves[i].shape, extras_leaves[i].dtype) for i in slots.indices
    )
    return out, dataclasses.replace(slots, raw=raw)


def _describe(tree: Any) -> str:
    return str(jax.tree.map(lambda x: f"{jnp.dtype(x.dtype).name}{list(x.shape)}", tree))


def _match(
    env: Any, teacher: nnx.Module, student: nnx.Module, n_envs: int, *, value_distillation: bool
) -> tuple[_Slots, _Slots]:
    """Check teacher and student against each other (no compilation): their slots."""
    for name, network in (("teacher", teacher), ("student", student)):
        if not isinstance(network, StatefulModule):
            raise TypeError(
                f"{name} must be a StatefulModule whose output is a PPONetworkOutput (e.g. "
                f"from make_mlp_actor_critic), got {type(network).__name__}."
            )
    check_env_network(env, student, n_envs)
    env_state = jax.eval_shape(lambda k: reset_envs(env, k, n_envs), jax.random.PRNGKey(0))
    teacher_eval = _eval_copy(teacher)
    t_out, t_slots = _trace("teacher", *split_network(teacher_eval), n_envs, env_state.obs)
    s_out, s_slots = _trace("student", *split_network(student), n_envs, env_state.obs)
    t_ppo, s_ppo = _ppo_output(t_out), _ppo_output(s_out)

    def same(a: Any, b: Any) -> bool:
        if jax.tree.structure(a) != jax.tree.structure(b):  # type: ignore[operator]
            return False
        return all(
            x.shape == y.shape and x.dtype == y.dtype
            for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
        )

    if not same(t_ppo.actions, s_ppo.actions):
        raise ValueError(
            f"the teacher's actions {_describe(t_ppo.actions)} and the student's actions "
            f"{_describe(s_ppo.actions)} differ (batched over n_envs={n_envs}); the student "
            "learns the teacher's action leaf by leaf, so both samplers' action trees must "
            "have the same structure, shapes and dtypes. Give the student one sampler per "
            "teacher action (same keys, same action size)."
        )
    paths = [_keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(s_ppo.actions)[0]]
    for path, t_cls, s_cls, t_raw, s_raw in zip(
        paths, t_slots.samplers, s_slots.samplers, t_slots.raw, s_slots.raw, strict=True
    ):
        if getattr(t_cls, "_squash", None) is not getattr(s_cls, "_squash", None):
            raise ValueError(
                f"at action {path} the teacher's {t_cls.__name__} and the student's "
                f"{s_cls.__name__} map raw actions to actions differently, so the "
                "teacher's raw action would mean a different action to the student; use "
                "the same kind of sampler (e.g. NormalTanhSampler in both)."
            )
        if (t_raw.shape, t_raw.dtype) != (s_raw.shape, s_raw.dtype):
            raise ValueError(
                f"at action {path} the teacher's raw action is "
                f"{jnp.dtype(t_raw.dtype).name}{list(t_raw.shape)} but the student's "
                f"is {jnp.dtype(s_raw.dtype).name}{list(s_raw.shape)}; use the same kind "
                "of sampler with the same action size."
            )
    if value_distillation and not same(t_ppo.value_estimates, s_ppo.value_estimates):
        raise ValueError(
            f"value_loss_weight > 0 distills the teacher's values "
            f"{_describe(t_ppo.value_estimates)} into the student's "
            f"{_describe(s_ppo.value_estimates)}, but their trees or shapes differ; give "
            "the student the teacher's value heads or set value_loss_weight=0."
        )
    return t_slots, s_slots


def _eval_copy(network: nnx.Module) -> nnx.Module:
    """A copy of ``network`` in ``eval()`` mode (arrays shared, the original untouched)."""
    copy = nnx.clone(network)
    copy.eval()
    return copy


def check_distillation_pair(
    env: Any,
    teacher: nnx.Module,
    student: nnx.Module,
    n_envs: int = 2,
    *,
    value_distillation: bool = False,
) -> None:
    """Check that ``student`` can drive ``env`` and learn from ``teacher``, compiling nothing.

    Traces (``jax.eval_shape``) one batched reset and one call of each network:
    the student must fit the environment
    (`check_env_network`), the teacher must run on the
    environment's observations, every action leaf of both must come from an
    `ActionSampler` whose raw action appears in
    the network's ``rollout_extras``, the two action trees must have the same
    structure, shapes and dtypes, and the samplers the same squashing. With
    ``value_distillation`` the value trees must match too.

    Args:
        env: The unbatched environment.
        teacher: The teacher network (a PPO network; checked in ``eval()`` mode, on a
            copy).
        student: The student network.
        n_envs: Batch size used for the check.
        value_distillation: Also require matching value trees.

    Raises:
        TypeError: If a network is not a ``StatefulModule`` or does not output a
            ``PPONetworkOutput``.
        ValueError: On any mismatch; the message shows both trees.

    Examples:
        >>> from flax import nnx
        >>> from nnx_ppo.envs import PointMass
        >>> from nnx_ppo.networks.factories import make_mlp_actor_critic
        >>> teacher = make_mlp_actor_critic(2, 3, (8,), (8,), rngs=nnx.Rngs(0))
        >>> student = make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(1))
        >>> check_distillation_pair(PointMass(), teacher, student)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
            ...
        ValueError: the teacher's actions float32[2, 3] and the student's actions ...
    """
    _match(env, teacher, student, n_envs, value_distillation=value_distillation)


# --------------------------------------------------------------------------- iteration


def _make_optimizer(config: DistillationConfig) -> optax.GradientTransformation:
    """Adam (AdamW if ``weight_decay > 0``) after optional global-norm clipping, as
    `make_optimizer`."""
    if config.weight_decay > 0:
        base = optax.adamw(config.learning_rate, weight_decay=config.weight_decay)
    else:
        base = optax.adam(config.learning_rate)
    if config.max_grad_norm is None:
        return base
    return optax.chain(optax.clip_by_global_norm(config.max_grad_norm), base)


def _init_state(
    env: Any,
    student: nnx.Module,
    teacher: nnx.Module,
    config: DistillationConfig,
    optimizer: optax.GradientTransformation,
    key: jax.Array,
    *,
    mesh: Mesh | None = None,
) -> tuple[nnx.GraphDef, DistillationState]:
    """Split the student and build the initial `DistillationState` (every leaf
    its own buffer, so the state can be donated).

    With a ``mesh`` the same values are placed on it (`shard_state`: batch fields
    sharded along ``"data"``, the rest replicated), and each process resets only its
    own share of the environments, as `init_train_state` does.
    """
    graphdef, params, network_state = split_network(student)
    key, reset_key = jax.random.split(key)
    n_envs = config.n_envs
    state = DistillationState(
        params=params,
        network_state=network_state,
        opt_state=optimizer.init(params),
        env_state=None,
        reset_state=None,
        carry=student.initialize_state(n_envs),
        teacher_carry=teacher.initialize_state(n_envs),
        episodes=initial_episode_stats(n_envs),
        rng=key,
        iteration=jnp.zeros((), jnp.int32),
        non_finite=healthy(),
    )
    if mesh is None:
        # Jitted: an eager vmapped reset of a physics env dispatches op by op (slow).
        env_state = jax.jit(lambda k: reset_envs(env, k, n_envs))(reset_key)
        reset_state = None if config.reset_mode == "fresh" else env_state
        state = state.replace(env_state=env_state, reset_state=reset_state)
        return graphdef, jax.tree.map(jnp.copy, state)

    # Private copies, placed on the mesh; each process resets its own environments.
    state = shard_state(jax.tree.map(jnp.copy, state), mesh)
    env_state, reset_state = reset_on_mesh(env, reset_key, n_envs, config.reset_mode, mesh)
    return graphdef, state.replace(env_state=env_state, reset_state=reset_state)


def _label(
    teacher_graphdef: nnx.GraphDef,
    teacher_slots: _Slots,
    teacher: tuple[Any, Any],
    teacher_carry: Any,
    obs: Any,
    done: jax.Array,
    *,
    with_value: bool,
) -> tuple[Any, _Labels]:
    """Run the teacher over visited observations ``[T, B, ...]``, its carry reset where
    ``done`` (``[T, B]``, the student's episode ends) is set, as the rollout resets it.

    ``teacher`` is ``(params, network_state)`` of the teacher in ``eval()`` mode; its
    network state is not advanced (an eval-mode sampler draws nothing). Returns the
    teacher's carry after the last step and its `_Labels`.
    """
    teacher_params, teacher_state = teacher

    def label_step(carry, step):
        obs_t, done_t = step
        _, out = network_step(teacher_graphdef, teacher_params, teacher_state, carry, obs_t)
        extras = jax.tree.leaves(out.rollout_extras)
        raw = tuple(extras[i] for i in teacher_slots.indices)
        value = _ppo_output(out).value_estimates if with_value else None
        model = nnx.merge(teacher_graphdef, teacher_params, teacher_state)
        return reset_where(model, done_t, out.next_state), (raw, value)

    teacher_carry, (raw, value) = jax.lax.scan(label_step, teacher_carry, (obs, done))
    return teacher_carry, _Labels(raw_action=raw, value=value)


def _make_iteration(
    env: Any,
    graphdef: nnx.GraphDef,
    teacher_graphdef: nnx.GraphDef,
    optimizer: optax.GradientTransformation,
    config: DistillationConfig,
    teacher_slots: _Slots,
    student_slots: _Slots,
    *,
    mesh: Mesh | None = None,
) -> Callable[[DistillationState, Any], tuple[DistillationState, Metrics]]:
    """Build ``iteration(state, (teacher_params, teacher_state)) -> (state, metrics)``.

    With a ``mesh`` the environment axis of the rollout, the labels and every
    minibatch is kept sharded along its ``"data"`` axis (as in
    `make_training_iteration`).
    """
    level = config.log_level
    n_envs, n_minibatches = config.n_envs, config.n_minibatches
    distill_value = config.value_loss_weight > 0
    want_network_metrics = LogLevel.NETWORK_METRICS in level

    def with_teacher_actions(extras: Any, raw_action: tuple[jax.Array, ...]) -> Any:
        """The student's stored extras with the teacher's raw actions in its slots."""
        leaves, treedef = jax.tree.flatten(extras)
        for index, raw in zip(student_slots.indices, raw_action, strict=True):
            leaves[index] = raw.astype(leaves[index].dtype)
        return jax.tree.unflatten(treedef, leaves)

    def minibatch_loss(params, network_state, minibatch):
        transitions, initial_carry, labels = minibatch
        transitions = transitions.replace(
            rollout_extras=with_teacher_actions(transitions.rollout_extras, labels.raw_action)
        )
        out = replay(
            graphdef,
            params,
            network_state,
            initial_carry,
            transitions,
            collect_metrics=want_network_metrics,
        )
        loss, metrics = distillation_loss(
            out.log_likelihood,
            out.regularization,
            out.value,
            labels.value,
            value_loss_weight=config.value_loss_weight,
            regularization_weight=config.regularization_weight,
        )
        if want_network_metrics:
            metrics.update(_flatten_metrics("network/", out.metrics))
        return loss, metrics

    def minibatch_update(carry, minibatch, network_state):
        params, opt_state = carry
        grad_fn = jax.value_and_grad(minibatch_loss, has_aux=True)
        (_, metrics), grads = grad_fn(params, network_state, minibatch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        if LogLevel.GRAD_NORM in level:
            metrics["train/grad_norm"] = _global_norm(grads)
        return (params, opt_state), metrics

    def epoch(carry, key, data, network_state):
        transitions, initial_carry, labels = data
        (transitions, labels), initial_carry = split_minibatches(
            key, n_envs, n_minibatches, (transitions, labels), initial_carry, mesh
        )
        return jax.lax.scan(
            lambda c, mb: minibatch_update(c, mb, network_state),
            carry,
            (transitions, initial_carry, labels),
        )

    def iteration(state: DistillationState, teacher: Any) -> tuple[DistillationState, Metrics]:
        rng, rollout_key, refresh_key, shuffle_key = jax.random.split(state.rng, 4)

        # 1. Rollout: the student drives all environments for T steps.
        reset_state = state.reset_state
        if config.reset_mode == "refresh":
            reset_state = constrain_batch(reset_envs(env, refresh_key, n_envs), mesh)
        network_state, env_state, carry, episodes, _, rollout = _unroll(
            env,
            graphdef,
            state.params,
            state.network_state,
            state.env_state,
            state.carry,
            state.episodes,
            rollout_key,
            reset_state,
            length=config.rollout_length,
            bootstrap_on_truncation=False,
            env_metrics=LogLevel.ENV_METRICS in level,
        )
        transitions: Transition = constrain_batch(rollout.transitions, mesh, axis=1)

        # 2. Labels: the teacher's mean action (and value) at every visited state.
        teacher_carry, labels = _label(
            teacher_graphdef,
            teacher_slots,
            teacher,
            state.teacher_carry,
            transitions.obs,
            transitions.done,
            with_value=distill_value,
        )
        labels = constrain_batch(labels, mesh, axis=1)

        # 3. Gradient phase: n_epochs passes of n_minibatches replayed minibatches.
        data = (transitions, rollout.initial_carry, labels)
        (params, opt_state), metrics = jax.lax.scan(
            lambda c, k: epoch(c, k, data, network_state),
            (state.params, state.opt_state),
            jax.random.split(shuffle_key, config.n_epochs),
        )
        metrics = {k: jnp.mean(v) for k, v in metrics.items()}

        # 4-5. The student's statistics (from its own rollout), NaN/inf check, metrics.
        network_state, non_finite, metrics = after_gradients(
            graphdef, params, network_state, transitions, state, metrics, rollout.metrics, level
        )
        new_state = DistillationState(
            params=params,
            network_state=network_state,
            opt_state=opt_state,
            env_state=env_state,
            reset_state=reset_state,
            carry=carry,
            teacher_carry=teacher_carry,
            episodes=episodes,
            rng=rng,
            iteration=state.iteration + 1,
            non_finite=non_finite,
        )
        return new_state, metrics

    return iteration


# --------------------------------------------------------------------------- train


def train_distillation(
    env: Any,
    teacher: nnx.Module,
    student: nnx.Module,
    config: DistillationConfig,
    *,
    log_fn: LogFn | None = None,
    eval_env: Any = None,
    progress: bool | None = None,
    jsonl_path: str | os.PathLike[str] | None = None,
    checkpoint: CheckpointHook | None = None,
    devices: int | Sequence[jax.Device] | None = None,
    mesh: Mesh | None = None,
) -> DistillationResult:
    """Distill ``teacher`` into ``student`` on-policy (see the module docstring).

    The student drives the environments; the teacher (in ``eval()`` mode: its mean
    action) labels every visited state; the student minimises its negative
    log-likelihood of the teacher's actions plus its regularization (plus, optionally,
    the value-head MSE). Rollout, replay, logging, evaluation, progress bar and
    checkpointing work as in `train_ppo`. At the end the
    trained state is written back into ``student`` (left in ``train()`` mode); the
    teacher is not modified.

    Devices work as in `train_ppo`: on several devices (``devices`` / ``mesh``) the
    environments, the student's and the teacher's carries and the rollout are sharded
    along the mesh's ``"data"`` axis; the student's parameters, statistics and
    optimizer state and the teacher's variables are replicated; gradients and
    statistics are reduced across devices, so the result equals a one-device run up to
    floating-point reduction order (see `nnx_ppo.algorithms.distributed`). After
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
            action tree and sampler kinds as the teacher.
        config: A `DistillationConfig`.
        log_fn: Called as ``log_fn(metrics, step)`` after every ``log_every_calls``
            device calls and after each evaluation. Metric names are those of
            `nnx_ppo.algorithms.logging` plus ``loss/action_nll`` and
            ``loss/value`` (see `distillation_loss`).
        eval_env: Environment for evaluating the student (default: ``env``).
        progress: Show a progress bar: ``None`` (default) when the output is a
            terminal, or force ``True`` / ``False``.
        jsonl_path: Also append every log record to this JSONL file.
        checkpoint: A `CheckpointHook` (e.g. a
            `Checkpointer`): the run resumes
            from what its ``restore`` returns (given a fresh `DistillationState`
            as template) and offers it the state after every device call
            (``final=True`` after the last). Resume with the same teacher. A
            checkpoint resumes on any device count.
        devices: Devices to train on: ``None`` (default) for all of them
            (``jax.devices()``; one on a plain CPU), an ``int`` for the first that
            many, or a sequence of devices.
        mesh: Instead of ``devices``, a `jax.sharding.Mesh` with a ``"data"``
            axis (see `make_mesh`).

    Returns:
        A `DistillationResult`. On several devices its ``state`` is laid out on the
        mesh; ``student`` gets plain single-device copies.

    Raises:
        TypeError: If ``config`` is not a `DistillationConfig` or a network is
            not a PPO network.
        ValueError: If the student does not fit the environment, or teacher and student
            do not fit each other (see `check_distillation_pair`), if ``n_envs`` is
            not a multiple of ``n_minibatches`` times the number of devices (see
            `check_batch_divisible`), or if ``devices`` / ``mesh`` are invalid (see
            `resolve_mesh`); all checked before anything is compiled.
        NonFiniteError: (`nnx_ppo.algorithms.faults`) If a loss, parameter or
            statistic became NaN or infinite (raised at the next log or checkpoint).
    """
    if not isinstance(config, DistillationConfig):
        raise TypeError(
            f"config={config!r} must be a DistillationConfig, e.g. "
            "DistillationConfig(n_envs=256, total_steps=1_000_000)."
        )
    eval_env = env if eval_env is None else eval_env
    # One default device and one process: no mesh at all (plain arrays).
    run_mesh = resolve_mesh(devices, mesh)
    sharded = run_mesh if uses_mesh(run_mesh) else None
    if sharded is not None:
        check_batch_divisible(config.n_envs, sharded, n_minibatches=config.n_minibatches)

    # Check the pair before compiling anything; find the samplers' extras slots.
    student.train()
    teacher_slots, student_slots = _match(
        env, teacher, student, config.n_envs, value_distillation=config.value_loss_weight > 0
    )

    # Split once; the jitted iteration works on (graphdef, state) from here on.
    key = jax.random.PRNGKey(config.seed)
    init_key, eval_key = jax.random.split(key)
    teacher_graphdef, *teacher_vars = split_network(_eval_copy(teacher))
    teacher_arrays = tuple(teacher_vars)
    if sharded is not None:
        teacher_arrays = replicate(teacher_arrays, sharded)
    optimizer = _make_optimizer(config)
    graphdef, state = _init_state(env, student, teacher, config, optimizer, init_key, mesh=sharded)
    if checkpoint is not None:
        restored = restore_checkpoint(checkpoint, state, sharded)
        if restored is not None:
            state = restored
    train_call = make_train_call(
        _make_iteration(
            env,
            graphdef,
            teacher_graphdef,
            optimizer,
            config,
            teacher_slots,
            student_slots,
            mesh=sharded,
        ),
        config.iterations_per_call,
        shardings=None if sharded is None else state_shardings(state, sharded),
        n_args=1,
    )
    evaluator = (
        make_evaluator(
            eval_env,
            split_network(_eval_copy(student))[0] if config.eval.deterministic else graphdef,
            n_envs=config.eval.n_envs,
            max_episode_length=config.eval.max_episode_length,
            mesh=sharded,
        )
        if config.eval.enabled
        else None
    )

    loop = run_calls(
        state,
        lambda current: train_call(current, teacher_arrays),
        steps_per_iteration=config.steps_per_iteration,
        iterations_per_call=config.iterations_per_call,
        n_iterations=config.n_iterations,
        log_every_calls=config.log_every_calls,
        log_level=config.log_level,
        evaluation=evaluation_task(evaluator, eval_key, config.eval),
        checkpoint=checkpoint,
        mesh=sharded,
        log_fn=log_fn,
        jsonl_path=jsonl_path,
        progress=progress,
        description="train_distillation",
    )
    state = loop.state

    # Write the trained state back into the student (copies: the returned state's
    # buffers may be donated if the caller keeps training from it; off a mesh: plain
    # default-device arrays).
    variables = (state.params, state.network_state)
    if sharded is not None:
        variables = jax.tree.map(jnp.asarray, gather_state(variables))
    nnx.update(student, *jax.tree.map(jnp.copy, variables))
    student.train()
    return DistillationResult(
        state=state, eval_history=loop.eval_history, metrics=loop.metrics, total_steps=loop.step
    )
