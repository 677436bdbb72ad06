"""One PPO training iteration as a pure function of `TrainState`.

The iteration reads like purejaxrl: nested ``lax.scan``s, one named function per level::

    training_iteration                 # one iteration
    ├── _unroll (env_step)             # rollout scan over T steps
    ├── gae                            # advantages, reverse scan (or in minibatch_loss)
    ├── epoch                          # scan over n_epochs
    │   └── minibatch_update           # scan over n_minibatches
    │       └── minibatch_loss         # replay + ppo_loss (+ gae if "minibatch")
    ├── update_statistics              # e.g. observation normalizer, once
    └── record_non_finite              # NaN/inf check (nnx_ppo.algorithms.faults)

The network is split once (``nnx.split(network, nnx.Param, ...)``) into a static
``GraphDef`` and two states; the iteration works on those states only, so the whole
thing is one jitted XLA program (`make_train_call`, with the state donated and
several iterations per call if asked). Statistics (``update_statistics``) change only
after the gradient phase, so the replay of the first minibatch reproduces the rollout
exactly.

With a device ``mesh`` (`nnx_ppo.algorithms.distributed`) the same program runs
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

from nnx_ppo.algorithms.config import LogLevel, PPOConfig
from nnx_ppo.algorithms.distributed import (
    check_batch_divisible,
    constrain_batch,
    process_env_slice,
    replicated_sharding,
    shard_batch,
    shard_state,
)
from nnx_ppo.algorithms.faults import healthy, record_non_finite
from nnx_ppo.algorithms.gae import gae
from nnx_ppo.algorithms.losses import ppo_loss
from nnx_ppo.algorithms.rollout import (
    _unroll,
    initial_episode_stats,
    replay,
    reset_envs,
    value_estimates,
)
from nnx_ppo.algorithms.types import TrainState, Transition

__all__ = [
    "after_gradients",
    "init_train_state",
    "make_optimizer",
    "make_train_call",
    "make_training_iteration",
    "reset_on_mesh",
    "split_minibatches",
    "split_network",
]

Metrics = dict[str, jax.Array]

_GROUPS = {
    "loss/": LogLevel.LOSSES,
    "actor/": LogLevel.ACTOR,
    "critic/": LogLevel.CRITIC,
    "rollout/": LogLevel.ROLLOUT,
    "env/": LogLevel.ENV_METRICS,
    "network/": LogLevel.NETWORK_METRICS,
    "train/grad_norm": LogLevel.GRAD_NORM,
    "train/param_norm": LogLevel.WEIGHTS,
}


def _global_norm(tree: Any) -> jax.Array:
    """L2 norm of all leaves together (``optax.global_norm`` is deprecated, and its
    replacement is newer than our optax floor)."""
    return jnp.sqrt(sum(jnp.sum(jnp.square(x)) for x in jax.tree.leaves(tree)))


def _enabled(name: str, level: LogLevel) -> bool:
    return any(name.startswith(prefix) and group in level for prefix, group in _GROUPS.items())


def split_network(network: nnx.Module) -> tuple[nnx.GraphDef, nnx.State, nnx.State]:
    """``nnx.split(network, nnx.Param, ...)``: ``(graphdef, params, network_state)``."""
    graphdef, params, network_state = nnx.split(network, nnx.Param, ...)
    return graphdef, params, network_state


def make_optimizer(config: PPOConfig) -> optax.GradientTransformation:
    """Adam (AdamW if ``weight_decay > 0``), after global-norm clipping if configured.

    Args:
        config: Reads ``learning_rate`` (float or schedule), ``weight_decay`` and
            ``max_grad_norm``.

    Returns:
        An optax ``GradientTransformation``.
    """
    if config.weight_decay > 0:
        base = optax.adamw(config.learning_rate, weight_decay=config.weight_decay)
    else:
        base = optax.adam(config.learning_rate)
    if config.max_grad_norm is None:
        return base
    return optax.chain(optax.clip_by_global_norm(config.max_grad_norm), base)


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
    graphdef, params, network_state = split_network(network)
    key, reset_key = jax.random.split(key)
    if mesh is not None:
        return graphdef, _init_sharded(env, network, config, optimizer, key, reset_key, mesh)
    # Jitted: an eager vmapped reset of a physics env dispatches op by op (slow).
    env_state = jax.jit(lambda k: reset_envs(env, k, config.n_envs))(reset_key)
    reset_state = None if config.reset_mode == "fresh" else env_state
    state = TrainState(
        params=params,
        network_state=network_state,
        opt_state=optimizer.init(params),
        env_state=env_state,
        reset_state=reset_state,
        carry=network.initialize_state(config.n_envs),
        episodes=initial_episode_stats(config.n_envs),
        rng=key,
        iteration=jnp.zeros((), jnp.int32),
        non_finite=healthy(),
    )
    # Every leaf gets its own buffer: the state is donated to the jitted iteration, and
    # a buffer shared with the network object or between two leaves (the cached reset
    # state is the first env state) cannot be donated.
    return graphdef, jax.tree.map(jnp.copy, state)


def _init_sharded(
    env: Any,
    network: nnx.Module,
    config: PPOConfig,
    optimizer: optax.GradientTransformation,
    key: jax.Array,
    reset_key: jax.Array,
    mesh: Mesh,
) -> TrainState:
    """`init_train_state` on a mesh: the same values, placed on ``mesh``."""
    check_batch_divisible(config.n_envs, mesh, n_minibatches=config.n_minibatches)
    _, params, network_state = split_network(network)
    host = TrainState(
        params=params,
        network_state=network_state,
        opt_state=optimizer.init(params),
        env_state=None,
        reset_state=None,
        carry=network.initialize_state(config.n_envs),
        episodes=initial_episode_stats(config.n_envs),
        rng=key,
        iteration=jnp.zeros((), jnp.int32),
        non_finite=healthy(),
    )
    # Private copies (see init_train_state), then placed on the mesh.
    state = shard_state(jax.tree.map(jnp.copy, host), mesh)
    env_state, reset_state = reset_on_mesh(env, reset_key, config.n_envs, config.reset_mode, mesh)
    return state.replace(env_state=env_state, reset_state=reset_state)


def reset_on_mesh(
    env: Any, key: jax.Array, n_envs: int, reset_mode: str, mesh: Mesh
) -> tuple[Any, Any]:
    """The initial ``(env_state, reset_state)`` of ``n_envs`` environments on ``mesh``.

    Each process resets only its own environments (the global reset's keys, sliced:
    the same states as ``reset_envs(env, key, n_envs)`` on one device) and contributes
    them to arrays sharded along ``"data"``. ``reset_state`` is a separate copy, or
    ``None`` for ``reset_mode="fresh"``.
    """
    mine = process_env_slice(n_envs, mesh)
    local = jax.jit(lambda k: jax.vmap(env.reset)(jax.random.split(k, n_envs)[mine]))(key)

    def place() -> Any:
        return shard_batch(jax.tree.map(jnp.copy, local), mesh, process_local=True)

    return place(), None if reset_mode == "fresh" else place()


def _flatten_metrics(prefix: str, tree: Any) -> Metrics:
    """Nested network metrics -> ``{"network/<path>": mean}``."""
    flat = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        parts = []
        for entry in path:
            for attr in ("key", "idx", "name"):
                if hasattr(entry, attr):
                    parts.append(str(getattr(entry, attr)))
                    break
        flat[prefix + "/".join(parts)] = jnp.mean(leaf)
    return flat


def split_minibatches(
    key: jax.Array,
    n_envs: int,
    n_minibatches: int,
    time_major: Any,
    batch_major: Any,
    mesh: Mesh | None = None,
) -> tuple[Any, Any]:
    """Shuffle the environments and cut them into ``n_minibatches`` minibatches.

    Minibatches are sets of whole environment sequences: one permutation of the
    environment axis is applied to every leaf (axis 1 of the ``[T, B, ...]`` leaves of
    ``time_major``, axis 0 of the ``[B, ...]`` leaves of ``batch_major``, e.g. the
    initial carry). On a mesh the shuffle gathers the rollout across devices; each device
    then keeps its slice of every minibatch.

    Returns:
        ``(time_major, batch_major)`` with leaves ``[M, T, B/M, ...]`` and
        ``[M, B/M, ...]``.
    """
    perm = jax.random.permutation(key, n_envs)

    def split_time_major(x: jax.Array) -> jax.Array:  # [T, B, ...] -> [M, T, B/M, ...]
        x = jnp.take(x, perm, axis=1)
        x = x.reshape(x.shape[0], n_minibatches, -1, *x.shape[2:])
        return jnp.swapaxes(x, 0, 1)

    def split_batch_major(x: jax.Array) -> jax.Array:  # [B, ...] -> [M, B/M, ...]
        return jnp.take(x, perm, axis=0).reshape(n_minibatches, -1, *x.shape[1:])

    return (
        constrain_batch(jax.tree.map(split_time_major, time_major), mesh, axis=2),
        constrain_batch(jax.tree.map(split_batch_major, batch_major), mesh, axis=1),
    )


def after_gradients(
    graphdef: nnx.GraphDef,
    params: nnx.State,
    network_state: nnx.State,
    transitions: Transition,
    state: Any,
    metrics: Metrics,
    rollout_metrics: Metrics,
    level: LogLevel,
) -> tuple[nnx.State, Any, Metrics]:
    """The end of an iteration, after the gradient phase.

    Merges the rollout into the running statistics (e.g. the observation normalizer,
    once, from ``transitions.rollout_extras``), records a NaN/inf of the loss, the
    parameters or the statistics in ``state.non_finite`` (the host reads it when it
    syncs), and adds the rollout metrics and the parameter norm to ``metrics``, keeping
    only the groups enabled in ``level``.

    Returns:
        ``(network_state, non_finite, metrics)``.
    """
    model = nnx.merge(graphdef, params, network_state)
    model.update_statistics(transitions.rollout_extras)
    _, _, network_state = nnx.split(model, nnx.Param, ...)
    non_finite = record_non_finite(
        state.non_finite, state.iteration + 1, metrics["loss/total"], params, network_state
    )
    metrics = {**metrics, **rollout_metrics}
    if LogLevel.WEIGHTS in level:
        metrics["train/param_norm"] = _global_norm(params)
    return network_state, non_finite, {k: v for k, v in metrics.items() if _enabled(k, level)}


def make_training_iteration(
    env: Any,
    graphdef: nnx.GraphDef,
    optimizer: optax.GradientTransformation,
    config: PPOConfig,
    *,
    mesh: Mesh | None = None,
) -> Callable[[TrainState], tuple[TrainState, Metrics]]:
    """Build the pure function that runs one PPO iteration.

    Args:
        env: The unbatched environment.
        graphdef: The network's ``GraphDef`` (train mode), from `init_train_state`.
        optimizer: The optax optimizer whose state is in ``TrainState.opt_state``.
        config: The algorithm configuration (static).
        mesh: The device mesh the state lives on (from ``init_train_state(...,
            mesh=...)``): the environment axis of the rollout and of each minibatch is
            kept sharded along its ``"data"`` axis. ``None``: no constraints.

    Returns:
        ``training_iteration(state) -> (state, metrics)``: pure and jit-able; metrics
        are scalars, only those of the groups enabled in ``config.log_level``.
    """
    level = config.log_level
    n_envs, n_minibatches = config.n_envs, config.n_minibatches
    want_network_metrics = LogLevel.NETWORK_METRICS in level
    per_minibatch = config.advantage_estimation == "minibatch"

    def advantages_of(transitions, values, bootstrap_value):
        return gae(
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
        transitions, (initial_carry, last_obs), advantages, targets = minibatch
        out = replay(
            graphdef,
            params,
            network_state,
            initial_carry,
            transitions,
            collect_metrics=want_network_metrics,
        )
        old_values = transitions.value
        if per_minibatch:
            # brax-style: advantages and targets from this replay's values, with the
            # observation after the rollout's last step valued from the replayed carry.
            bootstrap = value_estimates(graphdef, params, network_state, out.final_carry, last_obs)
            values, bootstrap = jax.lax.stop_gradient((out.value, bootstrap))
            advantages, targets = advantages_of(transitions, values, bootstrap)
            old_values = values  # unused: value clipping is off in this mode
        loss, metrics = ppo_loss(
            out.log_likelihood,
            out.value,
            out.regularization,
            transitions.log_likelihood,
            old_values,
            advantages,
            targets,
            clip_range=config.clip_range,
            critic_loss_weight=config.critic_loss_weight,
            value_clip_range=config.value_clip_range,
            normalize=config.normalize_advantages,
            advantage_mode=config.advantage_mode,
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
        transitions, initial_carry, advantages, targets = data
        (transitions, advantages, targets), initial_carry = split_minibatches(
            key, n_envs, n_minibatches, (transitions, advantages, targets), initial_carry, mesh
        )
        minibatches = (transitions, initial_carry, advantages, targets)
        return jax.lax.scan(
            lambda c, mb: minibatch_update(c, mb, network_state), carry, minibatches
        )

    def training_iteration(state: TrainState) -> tuple[TrainState, Metrics]:
        rng, rollout_key, refresh_key, shuffle_key = jax.random.split(state.rng, 4)

        # 1. Rollout: T steps of all environments with the current parameters.
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
            bootstrap_on_truncation=config.bootstrap_on_truncation,
            env_metrics=LogLevel.ENV_METRICS in level,
            store_values=not per_minibatch,
        )
        transitions: Transition = constrain_batch(rollout.transitions, mesh, axis=1)

        # 2. Advantages and value targets, once per iteration (or per minibatch, in
        #    minibatch_loss, with the observation after the last step for bootstrapping).
        if per_minibatch:
            advantages = targets = None
            last_obs = env_state.obs
        else:
            advantages, targets = advantages_of(
                transitions, transitions.value, rollout.bootstrap_value
            )
            last_obs = None

        # 3. Gradient phase: n_epochs passes of n_minibatches replayed minibatches.
        #    The non-param network state stays as in the rollout throughout.
        data = (transitions, (rollout.initial_carry, last_obs), advantages, targets)
        (params, opt_state), metrics = jax.lax.scan(
            lambda c, k: epoch(c, k, data, network_state),
            (state.params, state.opt_state),
            jax.random.split(shuffle_key, config.n_epochs),
        )
        metrics = {
            k: jnp.max(v) if k.endswith("max_deviation") else jnp.mean(v)
            for k, v in metrics.items()
        }

        # 4-5. Statistics, NaN/inf check, metrics of the enabled groups.
        network_state, non_finite, metrics = after_gradients(
            graphdef, params, network_state, transitions, state, metrics, rollout.metrics, level
        )

        new_state = TrainState(
            params=params,
            network_state=network_state,
            opt_state=opt_state,
            env_state=env_state,
            reset_state=reset_state,
            carry=carry,
            episodes=episodes,
            rng=rng,
            iteration=state.iteration + 1,
            non_finite=non_finite,
        )
        return new_state, metrics

    return training_iteration


_PER_EPISODE = ("rollout/episode_reward", "rollout/episode_length")


def _aggregate(metrics: Metrics) -> Metrics:
    """Combine ``[K]``-stacked iteration metrics: means, except that episode counts add
    up and per-episode means are weighted by the number of episodes of each iteration."""
    out = {k: jnp.mean(v, axis=0) for k, v in metrics.items()}
    if "rollout/episodes" in metrics:
        counts = metrics["rollout/episodes"]
        total = jnp.sum(counts)
        out["rollout/episodes"] = total
        for name in _PER_EPISODE:
            if name in metrics:
                weighted = jnp.sum(jnp.where(counts > 0, metrics[name] * counts, 0.0))
                out[name] = jnp.where(total > 0, weighted / jnp.maximum(total, 1.0), jnp.nan)
    return out


def make_train_call(
    training_iteration: Callable[..., tuple[Any, Metrics]],
    iterations_per_call: int = 1,
    *,
    shardings: Any = None,
    n_args: int = 0,
) -> Callable[..., tuple[Any, Metrics]]:
    """Jit ``iterations_per_call`` iterations into one device call, donating the state.

    Args:
        training_iteration: From `make_training_iteration`:
            ``training_iteration(state, *args) -> (state, metrics)``.
        iterations_per_call: Iterations per call (a ``lax.scan`` if > 1).
        shardings: The state's shardings on a mesh
            (`state_shardings`): the call takes and
            returns the state laid out so, takes ``args`` replicated, and returns
            replicated metrics. ``None``: wherever the state is.
        n_args: The number of arguments after the state (not donated, e.g. the
            teacher's variables in distillation: inputs, not baked-in constants).

    Returns:
        ``train_call(state, *args) -> (state, metrics)``; the metrics are averaged over
        the call's iterations (``rollout/episodes`` is summed and the per-episode means
        are weighted by it). The input state's buffers are donated: do not reuse it.
    """

    def train_call(state: Any, *args: Any) -> tuple[Any, Metrics]:
        if iterations_per_call == 1:
            return training_iteration(state, *args)
        state, metrics = jax.lax.scan(
            lambda s, _: training_iteration(s, *args), state, None, length=iterations_per_call
        )
        return state, _aggregate(metrics)

    if shardings is None:
        return jax.jit(train_call, donate_argnums=0)
    replicated = replicated_sharding(jax.tree.leaves(shardings)[0].mesh)
    return jax.jit(
        train_call,
        donate_argnums=0,
        in_shardings=(shardings, *[replicated] * n_args),
        out_shardings=(shardings, replicated),
    )
