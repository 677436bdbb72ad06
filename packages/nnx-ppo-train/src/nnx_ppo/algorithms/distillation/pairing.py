"""Pairing a distillation teacher's samplers with the student's, before training.

Distillation scores, in the student's replay, the *raw* action the teacher's sampler
emits (for `NormalTanhSampler` the
pre-``tanh`` mean), in the slot of the student's ``rollout_extras`` where the student's
own sampler stores its raw action. `match_samplers` traces each network once
(``jax.eval_shape``, nothing compiled) with its sampler calls recorded
(`nnx_ppo.networks.recording`): a sampler's slot is the leaf of the network's
``rollout_extras`` that is that very raw-action array (containers pass children's
extras through unchanged), and its action leaf is the leaf of
``PPONetworkOutput.actions`` that is its output ``"action"``. Teacher and student may
differ in architecture and carry; their action trees (structure, shapes, dtypes) and
their samplers' squashing must match, which `check_distillation_pair` verifies.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from nnx_ppo.algorithms.core.checks import check_env_network, describe_arrays
from nnx_ppo.algorithms.core.rollout import eval_copy, ppo_output, reset_envs, split_network
from nnx_ppo.networks.recording import SamplerCall, record_sampler_calls
from nnx_ppo.networks.types import StatefulModule, StatefulModuleOutput

__all__ = ["SamplerSlots", "TargetFn", "check_distillation_pair", "match_samplers"]

TargetFn = Callable[[Any, Any], Any]
"""``target_fn(teacher_extras, student_extras) -> targets``: the distillation targets
when teacher and student differ in action layout (`nnx_ppo.algorithms.distillation.train`).
Both arguments are ``rollout_extras`` trees with leaves ``[T, B, ...]``; the result is
a tree shaped like the student's actions, in its raw action space."""


@dataclasses.dataclass(frozen=True)
class SamplerSlots:
    """Where a network's samplers are.

    Attributes:
        indices: Per action leaf (``jax.tree.leaves`` order of
            ``PPONetworkOutput.actions``), the index of its sampler's raw action among
            ``jax.tree.leaves(rollout_extras)``.
        samplers: The sampler class of each action leaf.
        raw: The raw actions' batched shapes and dtypes.
    """

    indices: tuple[int, ...]
    samplers: tuple[type, ...]
    raw: tuple[jax.ShapeDtypeStruct, ...]


def _keystr(path: Any) -> str:
    return jax.tree_util.keystr(path) or "<root>"


def _locate(who: str, out: StatefulModuleOutput, calls: list[SamplerCall]) -> SamplerSlots:
    """Match recorded sampler calls to action leaves and ``rollout_extras`` leaves by
    identity (inside the trace)."""
    ppo = ppo_output(out)
    action_items = jax.tree_util.tree_flatten_with_path(ppo.actions)[0]
    extras_leaves = jax.tree.leaves(out.rollout_extras)
    indices: list[int | None] = [None] * len(action_items)
    samplers: list[type | None] = [None] * len(action_items)
    for call in calls:
        cls, sampler_out = type(call.sampler), call.output
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
    return SamplerSlots(
        indices=tuple(i for i in indices if i is not None),
        samplers=tuple(c for c in samplers if c is not None),
        raw=(),
    )


def _trace(
    who: str,
    graphdef: nnx.GraphDef,
    params: Any,
    network_state: Any,
    n_envs: int,
    obs: Any,
    *,
    locate: bool = True,
) -> tuple[StatefulModuleOutput, SamplerSlots]:
    """Trace one call of the network (``jax.eval_shape``) with its sampler calls
    recorded (`record_sampler_calls`): the output's shapes and the network's
    `SamplerSlots` (empty with ``locate=False``: a ``target_fn`` teacher's actions
    need not come from samplers)."""
    found: dict[str, Any] = {"slots": SamplerSlots((), (), ())}

    def forward(p: Any, s: Any, o: Any) -> StatefulModuleOutput:
        model = nnx.merge(graphdef, p, s)
        with record_sampler_calls() as calls:
            out = model(model.initialize_state(n_envs), o)
        if not locate:
            return out
        try:
            found["slots"] = _locate(who, out, calls)
        except (TypeError, ValueError) as e:
            found["error"] = e
        return out

    try:
        out = jax.eval_shape(forward, params, network_state, obs)
    except Exception as e:
        raise ValueError(
            f"the {who} failed on the environment's observation (batched shapes "
            f"{describe_arrays(obs)}): {e}"
        ) from e
    if "error" in found:
        raise found["error"]
    slots: SamplerSlots = found["slots"]
    extras_leaves = jax.tree.leaves(out.rollout_extras)
    raw = tuple(
        jax.ShapeDtypeStruct(extras_leaves[i].shape, extras_leaves[i].dtype) for i in slots.indices
    )
    return out, dataclasses.replace(slots, raw=raw)


def _same(a: Any, b: Any) -> bool:
    """Whether two trees of arrays have the same structure, shapes and dtypes."""
    if jax.tree.structure(a) != jax.tree.structure(b):  # type: ignore[operator]
        return False
    return all(
        x.shape == y.shape and x.dtype == y.dtype
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


def _with_time(tree: Any) -> Any:
    """Shapes of ``tree`` with a leading time axis of length 1 (``[1, B, ...]``)."""
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct((1, *x.shape), x.dtype), tree)


def _check_target_fn(
    target_fn: TargetFn, teacher_extras: Any, student_out: StatefulModuleOutput, slots: SamplerSlots
) -> None:
    """Trace ``target_fn`` on ``[1, B, ...]`` extras (nothing compiled): it must return
    a tree shaped like the student's actions, each leaf shaped like that action's raw
    action (``[T, B, ...]``)."""
    actions = ppo_output(student_out).actions
    teacher_in, student_in = _with_time(teacher_extras), _with_time(student_out.rollout_extras)
    try:
        target = jax.eval_shape(target_fn, teacher_in, student_in)
    except Exception as e:
        raise ValueError(
            f"target_fn failed on the teacher's rollout_extras "
            f"{describe_arrays(teacher_in)} and the student's "
            f"{describe_arrays(student_in)} (leaves [T, B, ...], here T=1): {e}"
        ) from e
    want = jax.tree.unflatten(
        jax.tree.structure(actions),
        [jax.ShapeDtypeStruct((1, *r.shape), r.dtype) for r in slots.raw],
    )
    same_tree = jax.tree.structure(target) == jax.tree.structure(want)  # type: ignore[operator]
    if not same_tree or any(
        t.shape != w.shape
        for t, w in zip(jax.tree.leaves(target), jax.tree.leaves(want), strict=True)
    ):
        raise ValueError(
            f"target_fn returned {describe_arrays(target)} for T=1, but the student's raw "
            f"actions are {describe_arrays(want)} ([T, B, ...], the tree of its actions "
            f"{describe_arrays(actions)}); return one target per student action leaf, in "
            "the student's raw action space (for NormalTanhSampler the pre-tanh value)."
        )


def match_samplers(
    env: Any,
    teacher: nnx.Module,
    student: nnx.Module,
    n_envs: int,
    *,
    value_distillation: bool,
    target_fn: TargetFn | None = None,
) -> tuple[SamplerSlots, SamplerSlots]:
    """Check teacher and student against each other (no compilation; see
    `check_distillation_pair`) and find their samplers: ``(teacher_slots,
    student_slots)`` (with ``target_fn`` the teacher's are empty: its actions are read
    by ``target_fn``, not by slot)."""
    for name, network in (("teacher", teacher), ("student", student)):
        if not isinstance(network, StatefulModule):
            raise TypeError(
                f"{name} must be a StatefulModule whose output is a PPONetworkOutput (e.g. "
                f"from make_mlp_actor_critic), got {type(network).__name__}."
            )
    if target_fn is not None and not callable(target_fn):
        raise TypeError(
            f"target_fn={target_fn!r} must be callable as target_fn(teacher_extras, "
            "student_extras) -> targets shaped like the student's actions, or None."
        )
    check_env_network(env, student, n_envs)
    env_state = jax.eval_shape(lambda k: reset_envs(env, k, n_envs), jax.random.PRNGKey(0))
    teacher_eval = eval_copy(teacher)
    t_out, t_slots = _trace(
        "teacher", *split_network(teacher_eval), n_envs, env_state.obs,
        locate=target_fn is None,
    )  # fmt: skip
    s_out, s_slots = _trace("student", *split_network(student), n_envs, env_state.obs)
    t_ppo, s_ppo = ppo_output(t_out), ppo_output(s_out)
    same = _same
    if target_fn is not None:
        _check_target_fn(target_fn, t_out.rollout_extras, s_out, s_slots)
    elif not same(t_ppo.actions, s_ppo.actions):
        raise ValueError(
            f"the teacher's actions {describe_arrays(t_ppo.actions)} and the student's actions "
            f"{describe_arrays(s_ppo.actions)} differ (batched over n_envs={n_envs}); the student "
            "learns the teacher's action leaf by leaf, so both samplers' action trees must "
            "have the same structure, shapes and dtypes. Give the student one sampler per "
            "teacher action (same keys, same action size)."
        )
    paths = [_keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(s_ppo.actions)[0]]
    pairs = () if target_fn is not None else zip(
        paths, t_slots.samplers, s_slots.samplers, t_slots.raw, s_slots.raw, strict=True
    )  # fmt: skip
    for path, t_cls, s_cls, t_raw, s_raw in pairs:
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
            f"{describe_arrays(t_ppo.value_estimates)} into the student's "
            f"{describe_arrays(s_ppo.value_estimates)}, but their trees or shapes differ; give "
            "the student the teacher's value heads or set value_loss_weight=0."
        )
    return t_slots, s_slots


def check_distillation_pair(
    env: Any,
    teacher: nnx.Module,
    student: nnx.Module,
    n_envs: int = 2,
    *,
    value_distillation: bool = False,
    target_fn: TargetFn | None = None,
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

    With a ``target_fn`` (teacher and student of different action layouts, see
    `nnx_ppo.algorithms.distillation.train`) the two action trees need not match: instead
    ``target_fn`` is traced on the two networks' ``rollout_extras`` (leaves
    ``[1, B, ...]``) and must return a tree shaped like the student's raw actions.

    Args:
        env: The unbatched environment.
        teacher: The teacher network (a PPO network; checked in ``eval()`` mode, on a
            copy).
        student: The student network.
        n_envs: Batch size used for the check.
        value_distillation: Also require matching value trees.
        target_fn: ``target_fn(teacher_extras, student_extras) -> targets``, or
            ``None`` to pair the actions leaf by leaf.

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
    match_samplers(
        env, teacher, student, n_envs, value_distillation=value_distillation, target_fn=target_fn
    )
