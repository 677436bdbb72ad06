"""Mirror symmetry in the rollout and the loss (`PPOConfig.symmetry`, a `Symmetry`).

**Rollout.** Beside the real carry the rollout keeps a *mirrored carry*: at every step
the network also runs on the mirrored observation ``M_o(obs)`` from the mirrored carry,
in two calls (`MirrorStep`)::

    acting   = network(mirror_carry, M_o(obs))                   # what it emits there
    extras   = acting.rollout_extras, each sampler's raw action replaced by
               M_a(the raw action the real step took)            # the mirrored action
    replayed = network(mirror_carry, M_o(obs), extras)           # replay mode
    mirror_carry' = reset where done (replayed.next_state)

``replayed`` scores the mirrored action under the rollout's policy on the mirrored
observations: ``log pi_old(M a | M s)`` (with ``Symmetry.ratio="mirrored"`` the
denominator of the mirrored sample's ratio, 1 before the first update as for a real
sample; in both modes the numerator of its `mirror_weights`) and the mirrored sample's
old value (for value clipping). The first call only supplies
what the network emits besides the sampled actions (e.g. a normalizer's raw input);
XLA drops the rest of it. For a recurrent network the mirrored carry is the carry it
has on the mirrored history, so the mirrored sequences are replayed exactly as the
network would run on them (`MirrorRollout`).

**Loss.** `augmented` adds the mirrored sequences to a minibatch (mirrored
observations and actions), replayed in one call; their PPO loss takes the real samples'
advantages and value targets, with the importance ratio of `Symmetry.ratio` (against
``pi_old(a | s)``, or against ``pi_old(M a | M s)`` with each surrogate weighted by
`mirror_weights`), and the minibatch loss is the mean of the real and mirrored halves'
(the batch doubled, as rsl_rl's augmentation); `mirror_loss` is
``mean |u(M_o s) - M_a u(s)|^2`` on the policy's distribution location ``u`` (each
sampler's raw mode, e.g. the pre-``tanh`` mean), the target held fixed.
`symmetry_error` measures ``|a(M_o s) - M_a a(s)|`` on the deterministic actions of a
trained network; `check_symmetry` checks a symmetry against an environment and a
network before anything is compiled.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, struct

from nnx_ppo.algorithms.core.checks import describe_arrays
from nnx_ppo.algorithms.core.rollout import eval_copy, ppo_output, reset_envs, split_network
from nnx_ppo.algorithms.core.trees import sum_leaves
from nnx_ppo.algorithms.symmetry import Symmetry
from nnx_ppo.algorithms.types import Transition
from nnx_ppo.networks.recording import record_sampler_calls
from nnx_ppo.networks.types import reset_where

__all__ = [
    "MirrorRollout",
    "MirrorStep",
    "augmented",
    "check_symmetry",
    "halves",
    "mirror_loss",
    "mirror_weights",
    "sampler_slots",
    "symmetry_error",
]


@struct.dataclass
class MirrorRollout:
    """The mirrored half of a rollout (`Rollout.mirror`).

    Attributes:
        rollout_extras: What the network emitted on the mirrored observations, with the
            mirrored actions in its samplers' slots, leaves ``[T, B, ...]``.
        log_likelihood: The action tree of ``[T, B]`` log-likelihoods of the mirrored
            actions under the rollout's policy on the mirrored observations.
        value: The reward tree of ``[T, B]`` values of the mirrored observations.
        initial_carry: The mirrored carry before the first step, leaves ``[B, ...]``.
        final_carry: The mirrored carry after the last step (reset where it ended).
        chunk_carries: The mirrored carries at steps ``0, L, 2L, ...`` (leaves
            ``[T / L, B, ...]``) with ``sequence_length=L``; else ``None``.
    """

    rollout_extras: Any
    log_likelihood: Any
    value: Any
    initial_carry: Any
    final_carry: Any
    chunk_carries: Any = None

    @property
    def labels(self) -> tuple[Any, Any, Any]:
        """``(rollout_extras, log_likelihood, value)``: the ``[T, B, ...]`` leaves a
        minibatch cuts with the real transitions."""
        return self.rollout_extras, self.log_likelihood, self.value


def _with_paths(tree: Any) -> Any:
    return jax.tree_util.tree_leaves_with_path(tree)


def _shapes(tree: Any) -> Any:
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(jnp.shape(x), x.dtype), tree)


def _locate(out: Any, calls: list[Any]) -> tuple[int, ...]:
    """Per action leaf, the index of its sampler's raw action among the leaves of
    ``out.rollout_extras`` (matched by identity, inside the trace)."""
    actions = jax.tree_util.tree_flatten_with_path(ppo_output(out).actions)[0]
    extras = jax.tree.leaves(out.rollout_extras)
    slots: list[int | None] = [None] * len(actions)
    for call in calls:
        k = next((i for i, (_, a) in enumerate(actions) if a is call.output.output["action"]), None)
        raw = call.output.rollout_extras
        e = next((j for j, leaf in enumerate(extras) if leaf is raw), None)
        if k is not None and e is not None:
            slots[k] = e
    missing = [jax.tree_util.keystr(p) or "<root>" for (p, _), s in zip(actions, slots, strict=True)
               if s is None]  # fmt: skip
    if missing:
        raise ValueError(
            f"symmetry: the network's actions at {', '.join(missing)} do not come unchanged "
            "from an ActionSampler whose raw action appears unchanged in the network's "
            "rollout_extras, so the mirrored action cannot be scored; end each action with "
            "a sampler (e.g. NormalTanhSampler) and pass children's extras through."
        )
    return tuple(s for s in slots if s is not None)


def _trace_samplers(
    graphdef: nnx.GraphDef, params: nnx.State, network_state: nnx.State, carry: Any, obs: Any
) -> tuple[tuple[int, ...], tuple[int | None, ...]]:
    """``(slots, order)`` of one traced call: `sampler_slots`, and per recorded sampler
    call (in call order) the index of its action leaf (``None``: not an action)."""
    found: list[Any] = []

    def forward(p: Any, s: Any, c: Any, o: Any) -> Any:
        model = nnx.merge(graphdef, p, s)
        with record_sampler_calls() as calls:
            out = model(c, o)
        actions = jax.tree.leaves(ppo_output(out).actions)
        order = tuple(
            next((k for k, a in enumerate(actions) if a is call.output.output["action"]), None)
            for call in calls
        )
        found.append((_locate(out, calls), order))
        return out.rollout_extras

    jax.eval_shape(forward, *_shapes((params, network_state, carry, obs)))
    return found[0]


def sampler_slots(
    graphdef: nnx.GraphDef, params: nnx.State, network_state: nnx.State, carry: Any, obs: Any
) -> tuple[int, ...]:
    """Where the network's samplers store their raw actions: per action leaf
    (``jax.tree.leaves`` order), its index among ``jax.tree.leaves(rollout_extras)``.

    Traces one call (``jax.eval_shape``, nothing computed) on ``carry`` and ``obs``
    (leaves ``[B, ...]``; arrays, tracers or shapes) with the sampler calls recorded.

    Raises:
        ValueError: If an action leaf does not come from a sampler whose raw action is
            a leaf of the network's ``rollout_extras``.
    """
    return _trace_samplers(graphdef, params, network_state, carry, obs)[0]


def _with_raw(extras: Any, slots: tuple[int, ...], raw: list[Any]) -> Any:
    """``extras`` with leaf ``slots[k]`` replaced by ``raw[k]``."""
    leaves, treedef = jax.tree.flatten(extras)
    for slot, value in zip(slots, raw, strict=True):
        leaves[slot] = value
    return jax.tree.unflatten(treedef, leaves)


class MirrorStep:
    """The mirrored network call of each rollout step (see the module docstring), as
    `unroll` takes it (``mirror=``).

    Args:
        graphdef: The network's ``GraphDef`` (train mode).
        symmetry: The `Symmetry`.
        carry_every: Keep the mirrored carry of every ``L``-th step (``sequence_length``).
    """

    def __init__(self, graphdef: nnx.GraphDef, symmetry: Symmetry, carry_every: int | None):
        self.graphdef, self.symmetry, self.carry_every = graphdef, symmetry, carry_every

    def step(
        self, params: nnx.State, network_state: nnx.State, carry: Any, obs: Any, out: Any,
        done: jax.Array,
    ) -> tuple[Any, dict[str, Any]]:  # fmt: skip
        """One step: ``(next mirrored carry, record)``; ``out`` is the real call's
        `StatefulModuleOutput`, ``done`` (``[B]``) where the step ended an episode."""
        obs_m = self.symmetry.mirror_observation(obs)
        slots = sampler_slots(self.graphdef, params, network_state, carry, obs_m)
        real = jax.tree.leaves(out.rollout_extras)
        actions = jax.tree.structure(ppo_output(out).actions)
        raw = self.symmetry.mirror_action(jax.tree.unflatten(actions, [real[s] for s in slots]))
        acting = nnx.merge(self.graphdef, params, network_state)(carry, obs_m)
        extras = _with_raw(acting.rollout_extras, slots, jax.tree.leaves(raw))
        model = nnx.merge(self.graphdef, params, network_state)
        replayed = model(carry, obs_m, extras)
        ppo = ppo_output(replayed)
        record = {
            "rollout_extras": extras,
            "log_likelihood": ppo.loglikelihoods,
            "value": ppo.value_estimates,
            "carry": carry if self.carry_every is not None else None,
        }
        return reset_where(model, done, replayed.next_state), record

    def finish(self, initial: Any, final: Any, records: dict[str, Any]) -> MirrorRollout:
        """The `MirrorRollout` of the stacked ``[T, B, ...]`` step records."""
        every = self.carry_every
        chunks = None if every is None else jax.tree.map(lambda c: c[::every], records["carry"])
        return MirrorRollout(
            rollout_extras=records["rollout_extras"],
            log_likelihood=records["log_likelihood"],
            value=records["value"],
            initial_carry=initial,
            final_carry=final,
            chunk_carries=chunks,
        )


def _cat(axis: int) -> Any:
    return lambda a, b: jnp.concatenate([a, b], axis=axis)


def _mirrored(symmetry: Symmetry, transitions: Transition, labels: tuple[Any, ...]) -> Transition:
    extras, log_likelihood, value = labels
    return transitions.replace(
        obs=symmetry.mirror_observation(transitions.obs),
        rollout_extras=extras,
        log_likelihood=log_likelihood,
        value=value,
    )


def augmented(
    symmetry: Symmetry,
    transitions: Transition,
    carry: Any,
    labels: tuple[Any, Any, Any],
    mirror_carry: Any,
) -> tuple[Transition, Any]:
    """A minibatch with its mirrored sequences added, to replay in one call: ``[T, b]``
    becomes ``[T, 2b]``, the mirrored sequences after the real ones.

    Args:
        symmetry: The `Symmetry`.
        transitions: The real sequences, leaves ``[T, b, ...]``.
        carry: Their initial carries, leaves ``[b, ...]``.
        labels: `MirrorRollout.labels` of the same sequences, leaves ``[T, b, ...]``.
        mirror_carry: The mirrored sequences' initial carries, leaves ``[b, ...]``.

    Returns:
        ``(transitions, carry)``: leaves ``[T, 2b, ...]`` and ``[2b, ...]``. The mirrored
        half has the mirrored observations, the mirrored ``rollout_extras`` (actions),
        the old log-likelihoods and values of the mirrored samples, and the real
        rewards and episode ends.
    """
    both = jax.tree.map(_cat(1), transitions, _mirrored(symmetry, transitions, labels))
    return both, jax.tree.map(_cat(0), carry, mirror_carry)


def mirror_weights(old_log_likelihood: Any, mirrored_log_likelihood: Any) -> jax.Array:
    """The weight of each mirrored sample in the policy loss, ``[T, b]``:
    ``min(1, pi_old(M a | M s) / pi_old(a | s))`` (log-likelihoods summed over the
    action tree).

    A mirrored action was not drawn from ``pi_old(. | M s)`` but from the mirror of
    ``pi_old(. | s)``, which gives it the probability ``pi_old(a | s)``; the clipped
    surrogate of a mirrored sample measures the change of ``pi(M a | M s)`` against
    ``pi_old(M a | M s)`` (its ratio is 1 before the first update), and this weight is
    the importance correction between the two, truncated at 1 as V-trace and ACER
    truncate theirs. It is 1 wherever the policy is already symmetric, and vanishes
    for a mirrored action the policy deems implausible at ``M s`` (whose gradient
    would otherwise be huge).

    Examples:
        >>> import jax.numpy as jnp
        >>> mirror_weights(jnp.log(jnp.array([0.5, 0.5])), jnp.log(jnp.array([0.25, 1.0])))
        Array([0.5, 1. ], dtype=float32)
    """
    log_w = sum_leaves(mirrored_log_likelihood) - sum_leaves(old_log_likelihood)
    return jnp.exp(jnp.minimum(log_w, 0.0))


def halves(tree: Any, b: int) -> tuple[Any, Any]:
    """The real (``[:, :b]``) and mirrored (``[:, b:]``) halves of ``[T, 2b, ...]``
    leaves."""
    return jax.tree.map(lambda x: x[:, :b], tree), jax.tree.map(lambda x: x[:, b:], tree)


def _modes(
    graphdef: nnx.GraphDef, params: nnx.State, network_state: nnx.State, carry: Any,
    transitions: Transition,
) -> list[jax.Array]:  # fmt: skip
    """Per action leaf, the raw mode of its sampler's distribution along the replayed
    sequences, ``[T, b, ...]``, differentiable in ``params`` (`SamplerCall.mode`: the
    sampler's draws and modes themselves are fixed values)."""
    first = jax.tree.map(lambda x: x[0], transitions.obs)
    _, order = _trace_samplers(graphdef, params, network_state, carry, first)
    model = nnx.merge(graphdef, params, network_state)
    with record_sampler_calls() as calls:
        model.replay_sequence(carry, transitions.obs, transitions.rollout_extras, transitions.done)
    steps, b = jnp.shape(transitions.done)
    modes: dict[int, jax.Array] = {}
    for call, k in zip(calls, order, strict=True):
        mode = call.mode
        if k is None:
            continue
        if jnp.shape(mode)[0] != steps * b:
            raise ValueError(
                f"symmetry: the mirror loss reads the {type(call.sampler).__name__}'s "
                "distribution in the sequence replay, which must call it once on every "
                "step (a sampler without a carry); set mirror_loss_weight=0 for this network."
            )
        modes[k] = jnp.reshape(mode, (steps, b, *jnp.shape(mode)[1:]))
    return [modes[k] for k in range(len(modes))]


def mirror_loss(
    graphdef: nnx.GraphDef,
    params: nnx.State,
    network_state: nnx.State,
    symmetry: Symmetry,
    transitions: Transition,
    carry: Any,
    labels: tuple[Any, Any, Any],
    mirror_carry: Any,
) -> jax.Array:
    """``mean_{T, b} sum |u(M_o s) - stop_gradient(M_a u(s))|^2``: the mirror loss of a
    minibatch on the policy's distribution location, ``u`` the samplers' raw mode (for
    `NormalTanhSampler` the pre-``tanh`` mean, which does not saturate as the action
    does), the mirrored sequences replayed from their mirrored carries. Arguments as in
    `augmented`."""
    both, carries = augmented(symmetry, transitions, carry, labels, mirror_carry)
    raws = _modes(graphdef, params, network_state, carries, both)
    b = jnp.shape(transitions.done)[1]
    structure = jax.tree.structure(transitions.log_likelihood)  # the action tree's
    real = jax.tree.unflatten(structure, [r[:, :b] for r in raws])
    mirrored = [r[:, b:] for r in raws]
    target = jax.lax.stop_gradient(jax.tree.leaves(symmetry.mirror_action(real)))
    squares = [
        jnp.sum(jnp.reshape((m - t) ** 2, (*t.shape[:2], -1)), axis=-1)
        for m, t in zip(mirrored, target, strict=True)
    ]
    return jnp.mean(sum(squares))


def symmetry_error(network: nnx.Module, symmetry: Symmetry, obs: Any, done: Any = None) -> float:
    """The symmetry error of a policy: ``mean_{t, b} |a(M_o s_t) - M_a a(s_t)|``.

    ``a`` is the network's deterministic action (an ``eval()`` copy, so samplers return
    their mode), run step by step over the sequences ``obs`` from
    ``network.initialize_state(B)`` and, separately, over their mirror ``M_o(obs)`` from
    the same initial carry (a recurrent network sees the mirrored history); the carry
    is reset after the steps where ``done``. ``|.|`` is the Euclidean norm over every
    element of the action (tree); a discrete action counts 1 where the two differ. A
    symmetric policy has error 0.

    Args:
        network: A PPO network (its variables are read, not changed).
        symmetry: The `Symmetry`.
        obs: Observation sequences, leaves ``[T, B, ...]`` (e.g. a rollout's
            ``transitions.obs``).
        done: ``[T, B]`` bool, the episodes that ended at each step; ``None``: none.

    Returns:
        The mean error over the ``T * B`` steps, a float.
    """
    graphdef, params, network_state = split_network(eval_copy(network))
    steps, batch = jnp.shape(jax.tree.leaves(obs)[0])[:2]
    done = jnp.zeros((steps, batch), bool) if done is None else jnp.asarray(done, bool)

    def actions(o: Any) -> Any:
        model = nnx.merge(graphdef, params, network_state)

        def body(carry: Any, inputs: Any) -> tuple[Any, Any]:
            x, d = inputs
            out = model(carry, x)
            return reset_where(model, d, out.next_state), ppo_output(out).actions

        return jax.lax.scan(body, model.initialize_state(batch), (o, done))[1]

    def error(o: Any) -> jax.Array:
        target = symmetry.mirror_action(actions(o))
        got = actions(symmetry.mirror_observation(o))
        total = jnp.zeros((steps, batch))
        for g, t in zip(jax.tree.leaves(got), jax.tree.leaves(target), strict=True):
            if jnp.issubdtype(g.dtype, jnp.integer):
                total = total + (g != t).astype(jnp.float32)
            else:
                total = total + jnp.sum(jnp.reshape((g - t) ** 2, (steps, batch, -1)), axis=-1)
        return jnp.mean(jnp.sqrt(total))

    return float(jax.jit(error)(obs))


def check_symmetry(env: Any, network: nnx.Module, symmetry: Symmetry, n_envs: int = 2) -> None:
    """Check ``symmetry`` against ``env``'s observation and ``network``'s actions,
    compiling nothing (the trainer calls it before building anything).

    The mirrors must fit the observation and action trees (keys, last-axis sizes), every
    action must come from a sampler whose raw action is in the network's
    ``rollout_extras`` and whose squashing commutes with the action mirror (``tanh`` and
    none do), and a mirror loss needs continuous actions.

    Raises:
        TypeError: If ``symmetry`` is not a `Symmetry`.
        ValueError: On any mismatch, naming the mirror or action and the shapes.
    """
    if not isinstance(symmetry, Symmetry):
        raise TypeError(f"symmetry={symmetry!r} must be a Symmetry (nnx_ppo.algorithms.symmetry).")
    env_state = jax.eval_shape(lambda k: reset_envs(env, k, n_envs), jax.random.PRNGKey(0))
    graphdef, params, network_state = split_network(network)
    carry = jax.eval_shape(lambda: network.initialize_state(n_envs))
    samplers: dict[int, Any] = {}

    def forward(p: Any, s: Any, c: Any, o: Any) -> Any:
        with record_sampler_calls() as calls:
            out = nnx.merge(graphdef, p, s)(c, o)
        leaves = jax.tree.leaves(ppo_output(out).actions)
        for call in calls:
            k = next((i for i, a in enumerate(leaves) if a is call.output.output["action"]), None)
            samplers.setdefault(-1 if k is None else k, call.sampler)
        return out

    out = jax.eval_shape(forward, params, network_state, carry, env_state.obs)
    actions = ppo_output(out).actions
    symmetry.check(env_state.obs, actions)
    slots = sampler_slots(graphdef, params, network_state, carry, env_state.obs)
    extras, leaves = jax.tree.leaves(out.rollout_extras), jax.tree.leaves(actions)
    paths = [jax.tree_util.keystr(p) or "<root>" for p, _ in _with_paths(actions)]
    for path, slot, action in zip(paths, slots, leaves, strict=True):
        raw = extras[slot]
        if (raw.shape, raw.dtype) != (action.shape, action.dtype):
            raise ValueError(
                f"symmetry: the action at {path} is {describe_arrays(action)} but its "
                f"sampler's raw action is {describe_arrays(raw)}; the action mirror is "
                "applied to the raw action, so their shapes must match."
            )
        if symmetry.mirror_loss_weight > 0 and jnp.issubdtype(action.dtype, jnp.integer):
            raise ValueError(
                f"symmetry: mirror_loss_weight={symmetry.mirror_loss_weight} compares mean "
                f"actions, but the action at {path} is discrete ({describe_arrays(action)}); "
                "use augment=True alone for discrete actions."
            )
    if symmetry.mirror_loss_weight > 0:
        for k, sampler in samplers.items():
            if jax.tree.leaves(sampler.initialize_state(1)):
                raise ValueError(
                    f"symmetry: mirror_loss_weight={symmetry.mirror_loss_weight} reads each "
                    f"sampler's distribution in the sequence replay, but the "
                    f"{type(sampler).__name__} of the action at {paths[k]} has a carry "
                    "(held exploration noise, resample_every > 1), so the replay scans it; "
                    "use a sampler without a carry or set mirror_loss_weight=0."
                )
    # A mirrored raw action must squash to the mirrored action: probe each squashing.
    rng = np.random.default_rng(0)
    probe = [
        jnp.zeros(a.shape, a.dtype) if jnp.issubdtype(a.dtype, jnp.integer)
        else jnp.asarray(rng.normal(size=a.shape) * 3, a.dtype) for a in leaves
    ]  # fmt: skip

    def squash(raws: list[Any]) -> list[Any]:
        return [samplers[k]._squash(r) if k in samplers else r for k, r in enumerate(raws)]

    def mirror(raws: list[Any]) -> list[Any]:
        tree = jax.tree.unflatten(jax.tree.structure(actions), raws)
        return jax.tree.leaves(symmetry.mirror_action(tree))

    for k, (x, y) in enumerate(zip(squash(mirror(probe)), mirror(squash(probe)), strict=True)):
        if not jnp.allclose(x, y, atol=1e-6):
            raise ValueError(
                f"symmetry: the {type(samplers[k]).__name__} of the action at {paths[k]} "
                "squashes raw actions with a map that does not commute with the action "
                "mirror, so a mirrored raw action would not give the mirrored action; use "
                "NormalTanhSampler or NormalSampler (or another odd squashing)."
            )
