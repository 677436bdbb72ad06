"""Rollout collection (`unroll_env`) and its exact replay (`replay`).

A rollout runs ``T`` steps of ``B`` environments with a stateful network. Per step::

    out      = network(carry_t, obs_t)                  # sample actions, emit extras
    next     = vmap(env.step)(env_state_t, out.actions)
    carry'   = reset where next.done (per environment)  # lockstep with the env reset
    env'     = restart the environments where next.done

and the step is recorded as a `Transition`. The replay runs the same recurrence over a
stored rollout from the carry stored at its start, feeding the stored observations and
``rollout_extras`` (samplers re-score the stored actions instead of drawing new ones)
and resetting the carry exactly where the rollout did: with unchanged parameters it
reproduces the rollout's log-likelihoods and values (ratio 1 before the first update).

**Auto-reset.** Finished environments restart without resetting every environment at
every step (``reset_mode`` of `PPOConfig`):

- ``"cached"`` (default, brax's approach): a batched reset state drawn once at the start
  of training; each finished environment is replaced by its cached state with one
  elementwise select (`nnx_ppo.wrappers.reset_done`). No reset is ever computed
  in the loop, but each environment always restarts from the same state (diversity
  comes from having many environments); only a staggered start
  (`nnx_ppo.wrappers.EpisodeWrapper`'s ``stagger``) is redrawn per episode.
- ``"refresh"``: as ``"cached"``, but the cache is redrawn with fresh keys at the start
  of every iteration: one batched reset per iteration.
- ``"fresh"``: every finished environment restarts from a newly drawn state (a batched
  reset, under ``lax.cond`` at the steps where some environment finished).

With staggered starts some environment finishes at almost every step, so ``"fresh"``
pays a batched reset at almost every step: use ``"cached"`` where ``reset`` is expensive
(Playground's ``CheetahRun`` settles its physics for 200 steps). The measured costs are
on the documentation's Benchmarks page ("Measured costs of trainer options").

**Truncation** is read from ``state.info["truncation"]`` (written by our `EpisodeWrapper`,
brax's and Playground's); environments without it never truncate. With
``bootstrap_on_truncation`` the value of the true final observation (before the reset
replaces it) enters the advantage estimate: one more network call, under ``lax.cond``
only at steps where some environment was truncated.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx, struct

from nnx_ppo.algorithms.core.faults import count_nonfinite
from nnx_ppo.algorithms.core.randomization import Models, batched
from nnx_ppo.algorithms.core.trees import sum_leaves
from nnx_ppo.algorithms.types import EpisodeStats, Transition
from nnx_ppo.networks.types import PPONetworkOutput, StatefulModuleOutput, reset_where
from nnx_ppo.wrappers.auto_reset import reset_done

__all__ = [
    "ReplayOutput",
    "Rollout",
    "eval_copy",
    "eval_graphdef",
    "initial_episode_stats",
    "network_step",
    "ppo_output",
    "replay",
    "reset_envs",
    "split_network",
    "sum_leaves",
    "unroll",
    "unroll_env",
    "value_estimates",
]


@struct.dataclass
class Rollout:
    """The result of a rollout.

    Attributes:
        transitions: `Transition` with leaves
            ``[T, B, ...]``.
        initial_carry: The network carry before the first step, leaves ``[B, ...]``
            (where the replay starts).
        chunk_carries: With ``unroll(..., carry_every=L)``, the carry the network acted
            on at steps ``0, L, 2L, ...``, leaves ``[T / L, B, ...]`` (where the replay
            of ``L``-step sequences starts, `PPOConfig.sequence_length`); else ``None``.
        bootstrap_value: Pytree (the reward tree) of ``[B]`` values of the observation
            after the last step, computed with the carry after the last step.
        metrics: Scalar rollout statistics: ``rollout/episode_reward`` and
            ``rollout/episode_length`` (means over the episodes that ended in this
            rollout; NaN if none did), ``rollout/episodes`` (their number),
            ``rollout/reward`` (mean reward per step) and, if requested, ``env/<name>``
            (each ``state.metrics`` entry averaged over the rollout) and the
            ``diagnostics/nonfinite_*`` counts (`unroll`).
        mirror: With ``unroll(..., mirror=...)`` (a symmetry), the mirrored half, a
            `nnx_ppo.algorithms.core.mirroring.MirrorRollout`; else ``None``.
    """

    transitions: Transition
    initial_carry: Any
    bootstrap_value: Any
    metrics: dict[str, jax.Array]
    chunk_carries: Any = None
    mirror: Any = None


# --------------------------------------------------------------------------- helpers


def network_step(
    graphdef: nnx.GraphDef,
    params: nnx.State,
    network_state: nnx.State,
    carry: Any,
    obs: Any,
    rollout_extras: Any = None,
) -> tuple[nnx.State, StatefulModuleOutput]:
    """One network call on split state (pure: returns the updated non-param state).

    Args:
        graphdef: The network's ``nnx.GraphDef``.
        params: Its ``nnx.Param`` state.
        network_state: The rest of its state (statistics, RNG streams).
        carry: The carry, leaves ``[B, ...]``.
        obs: The observation, leaves ``[B, ...]``.
        rollout_extras: ``None`` to act, or stored extras to replay.

    Returns:
        ``(network_state, output)``: the non-param state after the call (RNG streams
        advance when sampling) and the module's `StatefulModuleOutput`, whose
        ``output`` is a `PPONetworkOutput`.
    """
    model = nnx.merge(graphdef, params, network_state)
    out = model(carry, obs, rollout_extras)
    _, _, network_state = nnx.split(model, nnx.Param, ...)
    return network_state, out


def value_estimates(
    graphdef: nnx.GraphDef, params: nnx.State, network_state: nnx.State, carry: Any, obs: Any
) -> Any:
    """The network's ``value_estimates`` for ``obs`` from ``carry`` (acting mode).

    The call is traced as its own (inlined) jitted function with every operand passed
    explicitly, so that it can run inside other transformations (``grad``, ``cond``):
    NNX creates the network's variables at that trace level, where sampling may advance
    the random streams. The network state after the call is discarded.
    """

    def compute(p: nnx.State, ns: nnx.State, c: Any, o: Any) -> Any:
        _, out = network_step(graphdef, p, ns, c, o)
        return ppo_output(out).value_estimates

    return jax.jit(compute)(params, network_state, carry, obs)


def _reset_carry(
    graphdef: nnx.GraphDef, params: nnx.State, network_state: nnx.State, done: jax.Array, carry: Any
) -> Any:
    """The carry with ``reset_state`` applied where ``done`` (``[B]``)."""
    return reset_where(nnx.merge(graphdef, params, network_state), done, carry)


def _truncation_of(env_state: Any) -> jax.Array:
    """``[B]`` bool: ``env_state.info["truncation"] > 0``, all False if absent."""
    done = jnp.asarray(env_state.done)
    truncation = env_state.info.get("truncation") if hasattr(env_state, "info") else None
    if truncation is None:
        return jnp.zeros(done.shape, bool)
    return jnp.asarray(truncation).reshape(done.shape) > 0


def split_network(network: nnx.Module) -> tuple[nnx.GraphDef, nnx.State, nnx.State]:
    """``nnx.split(network, nnx.Param, ...)``: ``(graphdef, params, network_state)``."""
    graphdef, params, network_state = nnx.split(network, nnx.Param, ...)
    return graphdef, params, network_state


def eval_copy(network: nnx.Module) -> nnx.Module:
    """A copy of ``network`` in ``eval()`` mode (samplers return their mean); arrays are
    shared, and ``network`` itself, its mode included, is left untouched."""
    copy = nnx.clone(network)
    copy.eval()
    return copy


def eval_graphdef(network: nnx.Module) -> nnx.GraphDef:
    """The ``GraphDef`` of ``network`` in ``eval()`` mode (`eval_copy`): the one graph
    definition every evaluation and video of a run is made with."""
    return split_network(eval_copy(network))[0]


def reset_envs(env: Any, key: jax.Array, n_envs: int, models: Models | None = None) -> Any:
    """``jax.vmap(env.reset)`` over ``n_envs`` keys split from ``key``: a batched state.

    With ``models`` (per-environment model leaves ``[n_envs, ...]``,
    `nnx_ppo.algorithms.core.randomization`) each environment resets with its own model."""
    return batched(env, "reset", models)(jax.random.split(key, n_envs))


def ppo_output(out: StatefulModuleOutput) -> PPONetworkOutput:
    """``out.output`` of a PPO network.

    Raises:
        TypeError: If the network's output is not a ``PPONetworkOutput``.
    """
    if not isinstance(out.output, PPONetworkOutput):
        raise TypeError(
            f"the network's output is a {type(out.output).__name__}, not a "
            "PPONetworkOutput; end the network with a PPOAdapter(action=..., value=...)."
        )
    return out.output


def _store_extras(extras: Any, obs: Any, aliases: list[Any]) -> list[Any]:
    """The extras leaves to stack over the rollout, without copies of the observation.

    A module that emits (part of) its input as ``rollout_extras`` unchanged, e.g. the
    `Normalizer`'s raw observations, would make the rollout buffer hold those
    observations twice. At trace time, leaves that *are* observation leaves (the same
    traced value) are stored as ``None`` and their observation index is recorded in
    ``aliases`` as ``(treedef, [obs index or None per leaf])``; `_restore_extras`
    puts the stacked observations back after the scan.
    """
    leaves, treedef = jax.tree.flatten(extras)
    obs_leaves = jax.tree.leaves(obs)
    index = [next((i for i, o in enumerate(obs_leaves) if o is leaf), None) for leaf in leaves]
    aliases[:] = [(treedef, index)]
    return [None if i is not None else leaf for leaf, i in zip(leaves, index, strict=True)]


def _restore_extras(stored: list[Any], obs: Any, aliases: list[Any]) -> Any:
    """Invert `_store_extras` on the stacked ``[T, B, ...]`` rollout."""
    (treedef, index), obs_leaves = aliases[0], jax.tree.leaves(obs)
    leaves = [leaf if i is None else obs_leaves[i] for leaf, i in zip(stored, index, strict=True)]
    return jax.tree.unflatten(treedef, leaves)


# --------------------------------------------------------------------------- rollout


def unroll(
    env: Any,
    graphdef: nnx.GraphDef,
    params: nnx.State,
    network_state: nnx.State,
    env_state: Any,
    carry: Any,
    episodes: EpisodeStats,
    key: jax.Array,
    reset_state: Any,
    *,
    length: int,
    bootstrap_on_truncation: bool,
    env_metrics: bool = False,
    store_values: bool = True,
    before_step: Callable[[Any, jax.Array], Any] | None = None,
    models: Models | None = None,
    diagnostics: bool = False,
    carry_every: int | None = None,
    mirror: Any = None,
    mirror_carry: Any = None,
) -> tuple[nnx.State, Any, Any, EpisodeStats, jax.Array, Rollout]:
    """The rollout on split network state (the jitted trainer's building block; see
    `unroll_env` for the same on a network object).

    ``reset_state`` is the batched state finished environments restart from, or
    ``None`` to draw fresh reset states from ``key``. With ``store_values=False`` the
    transitions' ``value`` and the rollout's ``bootstrap_value`` are ``None``: nothing
    uses the critic's output inside the scan, so XLA leaves its computation out (the
    values of truncated episodes' final observations are still computed if
    ``bootstrap_on_truncation``). ``before_step(env_state, t)`` (``t``: int32 ``[]``,
    the step's index in the rollout), if given, prepares the batched state before the
    network acts on it and the environment steps it (e.g. writes the training progress
    into ``info``, `nnx_ppo.algorithms.core.progress`); it must keep the state's structure.
    With ``models`` (domain randomization, `nnx_ppo.algorithms.core.randomization`) every
    step and fresh reset runs each environment with its own model leaves ``[B, ...]``.

    With ``diagnostics`` (``LogLevel.DIAGNOSTICS``) the rollout's metrics also count the
    env steps with a non-finite element (``diagnostics/nonfinite_obs``, ``_action``,
    ``_reward``, ``_next_obs``; summed over the rollout), and an environment whose next
    observation is non-finite ends its episode there: its ``done`` is set (a
    termination, not a truncation, so nothing is bootstrapped from that observation),
    its carry is reset and the auto-reset restarts it, so the non-finite observation
    never reaches the network. The step's reward is kept. Where every next observation
    is finite, the rollout is the same, bit for bit, as without ``diagnostics``.
    With ``carry_every=L`` the rollout also keeps the carry of every ``L``-th step
    (`Rollout.chunk_carries`). With ``mirror`` (a `MirrorStep`) the network also runs on
    the mirrored observations from ``mirror_carry`` (`Rollout.mirror`). Returns
    ``(network_state, env_state, carry, episodes, key, rollout)``.
    """
    batched_reset = batched(env, "reset", models)
    batched_step = batched(env, "step", models)
    n_envs = jnp.shape(env_state.done)[0]

    def final_value(net_state: nnx.State, next_carry: Any, final_obs: Any, trunc: jax.Array):
        """Values of the pre-reset observations (only computed if some env truncated)."""

        def compute(p, ns, c, o):
            # The network state after this extra call is discarded, so the rollout's
            # random streams do not depend on when truncations happen.
            return value_estimates(graphdef, p, ns, c, o)

        operands = (params, net_state, next_carry, final_obs)
        shapes = jax.eval_shape(compute, *operands)

        def zeros(*_):
            return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

        values = jax.lax.cond(jnp.any(trunc), compute, zeros, *operands)
        return jax.tree.map(lambda v: jnp.where(trunc, v, jnp.zeros_like(v)), values)

    # An EpisodeWrapper with staggered starts redraws the start of an episode that
    # restarts from the cached state (else every episode of an env would repeat it).
    redraw_starts = getattr(env, "redraw_starts", None)

    def restart(next_env: Any, done: jax.Array, step_key: jax.Array) -> Any:
        if reset_state is not None:
            restarted = reset_done(next_env, reset_state)
            return restarted if redraw_starts is None else redraw_starts(restarted, done, step_key)
        return jax.lax.cond(
            jnp.any(done),
            lambda: reset_done(next_env, batched_reset(jax.random.split(step_key, n_envs))),
            lambda: next_env,
        )

    def env_step(loop, t):
        net_state, env_s, net_carry, eps, key, m_carry = loop
        key, step_key = jax.random.split(key)
        if before_step is not None:
            env_s = before_step(env_s, t)
        obs = env_s.obs
        net_state, out = network_step(graphdef, params, net_state, net_carry, obs)
        ppo = ppo_output(out)
        next_env = batched_step(env_s, ppo.actions)

        done = jnp.asarray(next_env.done) > 0
        trunc = _truncation_of(next_env) & done
        if diagnostics:
            counts, bad_next = count_nonfinite(obs, ppo.actions, next_env, n_envs)
            # A non-finite next observation ends the episode: a termination (no
            # bootstrap from it), then the carry reset and the auto-reset, as any end.
            env_done = jnp.asarray(next_env.done)
            next_env = next_env.replace(done=jnp.where(bad_next, jnp.ones_like(env_done), env_done))
            done = done | bad_next
            trunc = trunc & ~bad_next
        final = (
            final_value(net_state, out.next_state, next_env.obs, trunc)
            if bootstrap_on_truncation
            else None
        )
        next_carry = _reset_carry(graphdef, params, net_state, done, out.next_state)
        m_step = None
        if mirror is not None:  # the network on the mirrored observations
            m_carry, m_step = mirror.step(params, net_state, m_carry, obs, out, done)
        next_env_state = restart(next_env, done, step_key)

        step_return = eps.episode_return + sum_leaves(next_env.reward)
        step_length = eps.episode_length + 1
        done_f = done.astype(step_return.dtype)
        summary = {
            "return": jnp.sum(step_return * done_f),
            "length": jnp.sum(step_length * done_f),
            "episodes": jnp.sum(done_f),
            "reward": jnp.mean(sum_leaves(next_env.reward)),
        }
        if env_metrics:
            summary.update(
                {f"env/{k}": jnp.mean(v) for k, v in getattr(next_env, "metrics", {}).items()}
            )
        if diagnostics:
            summary.update(counts)
        eps = EpisodeStats(
            episode_return=jnp.where(done, 0.0, step_return),
            episode_length=jnp.where(done, 0, step_length),
        )
        transition = Transition(
            obs=obs,
            rollout_extras=_store_extras(out.rollout_extras, obs, aliases),
            log_likelihood=ppo.loglikelihoods,
            value=ppo.value_estimates if store_values else None,
            reward=next_env.reward,
            done=done,
            truncation=trunc,
            final_value=final,
        )
        kept = net_carry if carry_every is not None else None
        loop = (net_state, next_env_state, next_carry, eps, key, m_carry)
        return loop, (transition, summary, kept, m_step)

    initial_carry = carry
    aliases: list[Any] = []  # filled when env_step is traced
    loop = (network_state, env_state, carry, episodes, key, mirror_carry)
    steps = None if before_step is None else jnp.arange(length, dtype=jnp.int32)
    loop, (transitions, summary, carries, m_steps) = jax.lax.scan(env_step, loop, steps, length)
    transitions = transitions.replace(
        rollout_extras=_restore_extras(transitions.rollout_extras, transitions.obs, aliases)
    )
    network_state, env_state, carry, episodes, key, m_final = loop

    bootstrap_value = None
    if store_values:
        bootstrap_value = jax.lax.stop_gradient(
            value_estimates(graphdef, params, network_state, carry, env_state.obs)
        )

    n_done = jnp.sum(summary["episodes"])

    def per_episode(total: jax.Array) -> jax.Array:  # NaN if no episode ended
        return jnp.where(n_done > 0, jnp.sum(total) / jnp.maximum(n_done, 1.0), jnp.nan)

    metrics = {
        "rollout/episode_reward": per_episode(summary["return"]),
        "rollout/episode_length": per_episode(summary["length"]),
        "rollout/episodes": n_done,
        "rollout/reward": jnp.mean(summary["reward"]),
    }
    metrics.update({k: jnp.mean(v) for k, v in summary.items() if k.startswith("env/")})
    metrics.update({k: jnp.sum(v) for k, v in summary.items() if k.startswith("diagnostics/")})
    rollout = Rollout(
        transitions=transitions,
        initial_carry=initial_carry,
        bootstrap_value=bootstrap_value,
        metrics=metrics,
        chunk_carries=None
        if carry_every is None
        else jax.tree.map(lambda c: c[::carry_every], carries),
        mirror=None if mirror is None else mirror.finish(mirror_carry, m_final, m_steps),
    )
    return network_state, env_state, carry, episodes, key, rollout


def initial_episode_stats(n_envs: int) -> EpisodeStats:
    """Zeroed `EpisodeStats` for ``n_envs`` environments."""
    return EpisodeStats(
        episode_return=jnp.zeros((n_envs,), jnp.float32),
        episode_length=jnp.zeros((n_envs,), jnp.int32),
    )


def unroll_env(
    env: Any,
    network: nnx.Module,
    env_state: Any,
    carry: Any,
    length: int,
    *,
    reset_state: Any = None,
    key: jax.Array | None = None,
    bootstrap_on_truncation: bool = True,
    env_metrics: bool = False,
) -> tuple[Any, Any, Rollout]:
    """Run ``length`` steps of a batch of environments with a stateful network.

    The network's non-parameter state (its sampler RNG streams) is advanced in place;
    parameters and statistics are not changed. Jit-able (e.g. inside ``nnx.jit``).

    Args:
        env: An unbatched environment (``reset(key)``, ``step(state, action)``); it is
            vmapped here.
        network: A `StatefulModule` whose output is a
            `PPONetworkOutput`.
        env_state: Batched environment state, leaves ``[B, ...]`` (e.g. from
            `reset_envs`).
        carry: The network carry, leaves ``[B, ...]``.
        length: ``T``, the number of steps.
        reset_state: Batched state that finished environments restart from (the cached
            reset, e.g. the ``env_state`` of the first reset).
        key: If ``reset_state`` is ``None``: the key fresh reset states are drawn from.
        bootstrap_on_truncation: Compute the value of the true final observation at
            truncated steps (``Transition.final_value``).
        env_metrics: Also average the environments' ``state.metrics`` into
            ``Rollout.metrics`` (``env/<name>``).

    Returns:
        ``(env_state, carry, rollout)``: the batched environment state and the carry
        after the last step (finished environments already restarted and their carries
        reset), and the `Rollout`.

    Raises:
        ValueError: If neither ``reset_state`` nor ``key`` is given.
        TypeError: If the network's output is not a ``PPONetworkOutput``.

    Examples:
        >>> import jax
        >>> from flax import nnx
        >>> from nnx_ppo.envs import PointMass
        >>> from nnx_ppo.networks.factories import make_mlp_actor_critic
        >>> env = PointMass()
        >>> net = make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0))
        >>> first = reset_envs(env, jax.random.key(0), 4)
        >>> state, carry, rollout = unroll_env(
        ...     env, net, first, net.initialize_state(4), 5, reset_state=first)
        >>> rollout.transitions.reward.shape
        (5, 4)
    """
    if reset_state is None and key is None:
        raise ValueError(
            "unroll_env needs reset_state=... (restart finished environments from a "
            "cached batched state, e.g. the first reset) or key=... (draw fresh reset "
            "states)."
        )
    if key is None:
        key = jax.random.PRNGKey(0)
    graphdef, params, network_state = nnx.split(network, nnx.Param, ...)
    n_envs = jnp.shape(env_state.done)[0]
    network_state, env_state, carry, _, _, rollout = unroll(
        env,
        graphdef,
        params,
        network_state,
        env_state,
        carry,
        initial_episode_stats(n_envs),
        key,
        reset_state,
        length=length,
        bootstrap_on_truncation=bootstrap_on_truncation,
        env_metrics=env_metrics,
    )
    nnx.update(network, network_state)
    return env_state, carry, rollout


# --------------------------------------------------------------------------- replay


@struct.dataclass
class ReplayOutput:
    """What the replay of a stored rollout recomputes, leaves ``[T, b, ...]``.

    Attributes:
        log_likelihood: Pytree (action tree) of ``[T, b]``.
        value: Pytree (reward tree) of ``[T, b]``.
        regularization: ``[T, b]`` per-sample regularization loss (broadcast).
        metrics: The network's metrics dicts, stacked over time.
        final_carry: The carry after the last step (reset where the last step ended
            an episode), leaves ``[b, ...]``: where the rollout's next step would start.
    """

    log_likelihood: Any
    value: Any
    regularization: jax.Array
    metrics: Any
    final_carry: Any = None


def replay(
    graphdef: nnx.GraphDef,
    params: nnx.State,
    network_state: nnx.State,
    initial_carry: Any,
    transitions: Transition,
    *,
    collect_metrics: bool = False,
) -> ReplayOutput:
    """Re-run the network over stored transitions, as the rollout ran it.

    Starts from ``initial_carry``, consumes the stored ``obs`` and ``rollout_extras``,
    and resets the carry where ``transitions.done`` is set, exactly as the rollout did.
    Differentiable in ``params``.

    The network replays the whole sequence in one call of its
    `StatefulModule.replay_sequence`: a network without a
    carry (e.g. an MLP actor-critic) is called once on the flattened ``[T * b]`` batch,
    so each weight gradient is formed once instead of once per step (see the
    Benchmarks page for the measured gain); in a recurrent network the containers replay each
    child the same way, so only the modules with a carry (and for the recurrent cells
    only their recurrent part) are scanned over time.

    Args:
        graphdef: The network's ``nnx.GraphDef`` (train mode).
        params: ``nnx.Param`` state to evaluate (gradients flow into it).
        network_state: The rest of the network state (statistics as in the rollout).
        initial_carry: Carry at the start of the stored rollout, leaves ``[b, ...]``.
        transitions: Stored transitions, leaves ``[T, b, ...]``.
        collect_metrics: Also return the network's ``metrics`` (else ``{}``).

    Returns:
        A `ReplayOutput`.
    """
    model = nnx.merge(graphdef, params, network_state)
    final_carry, out = model.replay_sequence(
        initial_carry, transitions.obs, transitions.rollout_extras, transitions.done
    )
    ppo = ppo_output(out)
    return ReplayOutput(
        log_likelihood=ppo.loglikelihoods,
        value=ppo.value_estimates,
        regularization=jnp.broadcast_to(
            jnp.asarray(out.regularization_loss), jnp.shape(transitions.done)
        ),
        metrics=out.metrics if collect_metrics else {},
        final_carry=final_carry,
    )
