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
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from nnx_ppo.algorithms.checks import check_env_network, describe_arrays
from nnx_ppo.algorithms.rollout import eval_copy, ppo_output, reset_envs, split_network
from nnx_ppo.networks.recording import SamplerCall, record_sampler_calls
from nnx_ppo.networks.types import StatefulModule, StatefulModuleOutput

__all__ = ["SamplerSlots", "check_distillation_pair", "match_samplers"]


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
    who: str, graphdef: nnx.GraphDef, params: Any, network_state: Any, n_envs: int, obs: Any
) -> tuple[StatefulModuleOutput, SamplerSlots]:
    """Trace one call of the network (``jax.eval_shape``) with its sampler calls
    recorded (`record_sampler_calls`): the output's shapes and the network's
    `SamplerSlots`."""
    found: dict[str, Any] = {}

    def forward(p: Any, s: Any, o: Any) -> StatefulModuleOutput:
        model = nnx.merge(graphdef, p, s)
        with record_sampler_calls() as calls:
            out = model(model.initialize_state(n_envs), o)
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


def match_samplers(
    env: Any, teacher: nnx.Module, student: nnx.Module, n_envs: int, *, value_distillation: bool
) -> tuple[SamplerSlots, SamplerSlots]:
    """Check teacher and student against each other (no compilation; see
    `check_distillation_pair`) and find their samplers: ``(teacher_slots,
    student_slots)``."""
    for name, network in (("teacher", teacher), ("student", student)):
        if not isinstance(network, StatefulModule):
            raise TypeError(
                f"{name} must be a StatefulModule whose output is a PPONetworkOutput (e.g. "
                f"from make_mlp_actor_critic), got {type(network).__name__}."
            )
    check_env_network(env, student, n_envs)
    env_state = jax.eval_shape(lambda k: reset_envs(env, k, n_envs), jax.random.PRNGKey(0))
    teacher_eval = eval_copy(teacher)
    t_out, t_slots = _trace("teacher", *split_network(teacher_eval), n_envs, env_state.obs)
    s_out, s_slots = _trace("student", *split_network(student), n_envs, env_state.obs)
    t_ppo, s_ppo = ppo_output(t_out), ppo_output(s_out)

    def same(a: Any, b: Any) -> bool:
        if jax.tree.structure(a) != jax.tree.structure(b):  # type: ignore[operator]
            return False
        return all(
            x.shape == y.shape and x.dtype == y.dtype
            for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
        )

    if not same(t_ppo.actions, s_ppo.actions):
        raise ValueError(
            f"the teacher's actions {describe_arrays(t_ppo.actions)} and the student's actions "
            f"{describe_arrays(s_ppo.actions)} differ (batched over n_envs={n_envs}); the student "
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
    match_samplers(env, teacher, student, n_envs, value_distillation=value_distillation)
