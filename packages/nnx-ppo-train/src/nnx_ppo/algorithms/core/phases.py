"""The phases every on-policy iteration is made of, shared by PPO and distillation.

Plain functions over pytrees (no class hierarchy), so an algorithm's iteration still
reads top to bottom::

    state  = init_state(env, network, optimizer, key, ...)       # once, before training
                                                                  # (initial_state)
    def iteration(state):                                         # jitted, donated
        phase = rollout_phase(env, graphdef, state, key, ...)     # 1. T steps, B envs
        ...                                                       # 2. labels (GAE...)
        return update_phase(                                      # 3. epochs x
            loss, optimizer, graphdef, state, phase,              #    minibatches;
            time_major, batch_major, key, rng, config, ...)       # 4. statistics, NaN

`update_phase` is `gradient_phase`, then `finish_phase`, then `advance` (the next
state, with the algorithm's own fields).

A new on-policy algorithm is one loss (``loss(params, network_state, minibatch) ->
(loss, metrics)``) and, if it needs one, one labelling step between the rollout and the
gradient phase. `nnx_ppo.algorithms.ppo.iteration` (PPO) and
`nnx_ppo.algorithms.distillation.train` are the two written so far.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx, struct
from jax.sharding import Mesh

from nnx_ppo.algorithms.config import DistillationConfig, LogLevel, PPOConfig
from nnx_ppo.algorithms.core.distributed import (
    constrain_batch,
)
from nnx_ppo.algorithms.core.faults import record_non_finite
from nnx_ppo.algorithms.core.logging import in_log_level, observation_statistics
from nnx_ppo.algorithms.core.mirroring import MirrorStep
from nnx_ppo.algorithms.core.progress import (
    TRAINING_STEP,
    check_step_range,
    declared_keys,
    training_progress,
    write_progress,
)
from nnx_ppo.algorithms.core.randomization import Models, Randomization
from nnx_ppo.algorithms.core.rollout import (
    ReplayOutput,
    Rollout,
    replay,
    reset_envs,
    unroll,
)
from nnx_ppo.algorithms.core.schedules import LearningRate, learning_rate_rule
from nnx_ppo.algorithms.core.trees import global_norm, key_path
from nnx_ppo.algorithms.types import EpisodeStats, Metrics, Transition

__all__ = [
    "OnPolicyConfig",
    "RolloutPhase",
    "advance",
    "cut_sequences",
    "finish_phase",
    "global_norm",
    "gradient_phase",
    "replay_minibatch",
    "rollout_phase",
    "split_minibatches",
    "update_phase",
    "with_redraws",
]

OnPolicyConfig = PPOConfig | DistillationConfig
"""The configs the phases read their sizes from (``n_envs``, ``rollout_length``,
``n_epochs``, ``n_minibatches``, ``reset_mode``, ``log_level``)."""
Loss = Callable[[nnx.State, nnx.State, Any], tuple[jax.Array, Metrics]]
"""``loss(params, network_state, minibatch) -> (loss, metrics)``; ``minibatch`` is
``(time_major, batch_major)`` as `gradient_phase` cuts them."""


def _flatten_network_metrics(tree: Any, prefix: str = "network/") -> Metrics:
    """Nested network metrics -> ``{"network/<path>": mean}``."""
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {prefix + key_path(path): jnp.mean(leaf) for path, leaf in leaves}


# --------------------------------------------------------------------------- state


# --------------------------------------------------------------------------- rollout


@struct.dataclass
class RolloutPhase:
    """What `rollout_phase` returns: the state fields it advanced and the rollout.

    Attributes:
        network_state: The network's non-parameter state after the rollout (its RNG
            streams advanced).
        env_state: The environments after the last step.
        reset_state: The reset state of this iteration (redrawn with ``"refresh"``).
        carry: The carry after the last step.
        episodes: The open episodes' statistics.
        models: The per-environment model leaves the rollout ran with (redrawn if due),
            or ``None`` without domain randomization.
        rollout: The `Rollout`; its ``transitions`` (``[T, B, ...]``) are kept
            sharded along ``"data"`` on a mesh.
    """

    network_state: Any
    env_state: Any
    reset_state: Any
    carry: Any
    episodes: EpisodeStats
    rollout: Rollout
    models: Any = None

    @property
    def transitions(self) -> Transition:
        """``rollout.transitions``."""
        return self.rollout.transitions


def rollout_phase(
    env: Any,
    graphdef: nnx.GraphDef,
    state: Any,
    key: jax.Array,
    refresh_key: jax.Array,
    config: OnPolicyConfig,
    *,
    bootstrap_on_truncation: bool,
    store_values: bool = True,
    mesh: Mesh | None = None,
) -> RolloutPhase:
    """Phase 1: ``config.rollout_length`` steps of all environments with the current
    parameters.

    With ``config.reset_mode="refresh"`` the reset state is first redrawn from
    ``refresh_key``; the environments' metrics are averaged if ``config.log_level``
    has ``ENV_METRICS``; with ``DIAGNOSTICS`` the rollout counts non-finite values and
    ends the episodes of environments whose next observation is non-finite (`unroll`).
    If the environments' ``info`` declares the training-progress
    keys (`nnx_ppo.algorithms.core.progress`), they are written before every step: the env
    steps trained so far (from ``state.iteration``, exact) and their fraction of
    ``config.total_steps``. See `unroll` for ``bootstrap_on_truncation`` and
    ``store_values``.

    With domain randomization (``state.models``, `nnx_ppo.algorithms.core.randomization`)
    every reset and step runs each environment with its own model (redraws happen
    before the iteration, `with_redraws`). With a symmetry (``config.symmetry``) the
    network also runs on the mirrored observations from ``state.mirror_carry``
    (`nnx_ppo.algorithms.core.mirroring`).
    """
    n_envs = jnp.shape(state.env_state.done)[0]
    reset_state, models = state.reset_state, state.models
    before_step = None
    if declared_keys(state.env_state):  # the environment reads the training progress
        check_step_range(state.env_state, config.n_iterations * config.steps_per_iteration)

        def before_step(env_state: Any, t: jax.Array) -> Any:
            dtype = jnp.asarray(env_state.info.get(TRAINING_STEP, 0)).dtype
            first = state.iteration.astype(dtype) * config.steps_per_iteration
            step = first + t.astype(dtype) * n_envs
            progress = training_progress(step, config.total_steps)
            return write_progress(env_state, step=step, progress=progress, training=True)

    if config.reset_mode == "refresh":
        reset_state = constrain_batch(reset_envs(env, refresh_key, n_envs, models), mesh)
    carry_every = getattr(config, "sequence_length", None)
    symmetry = getattr(config, "symmetry", None)
    mirror = None if symmetry is None else MirrorStep(graphdef, symmetry, carry_every)
    network_state, env_state, carry, episodes, _, rollout = unroll(
        env,
        graphdef,
        state.params,
        state.network_state,
        state.env_state,
        state.carry,
        state.episodes,
        key,
        reset_state,
        length=config.rollout_length,
        bootstrap_on_truncation=bootstrap_on_truncation,
        env_metrics=LogLevel.ENV_METRICS in config.log_level,
        store_values=store_values,
        before_step=before_step,
        models=models,
        diagnostics=LogLevel.DIAGNOSTICS in config.log_level,
        carry_every=carry_every,
        mirror=mirror,
        mirror_carry=None if mirror is None else state.mirror_carry,
    )
    rollout = rollout.replace(transitions=constrain_batch(rollout.transitions, mesh, axis=1))
    if mirror is not None:
        labels = constrain_batch(rollout.mirror.labels, mesh, axis=1)
        rollout = rollout.replace(mirror=rollout.mirror.replace(rollout_extras=labels[0],
                                  log_likelihood=labels[1], value=labels[2]))  # fmt: skip
    return RolloutPhase(
        network_state=network_state,
        env_state=env_state,
        reset_state=reset_state,
        carry=carry,
        episodes=episodes,
        rollout=rollout,
        models=models,
    )


_REDRAW_MODELS, _REDRAW_RESETS = 0x726D, 0x7272  # fold_in data of the redraw keys


def _redraw_models(
    env: Any,
    randomization: Randomization,
    state: Any,
    reset_mode: str,
    mesh: Mesh | None = None,
) -> Any:
    """``state`` with new models if ``state.iteration`` is a positive multiple of
    ``randomization.redraw_every``, else ``state`` (jit-able: a ``lax.cond``).

    The models are drawn from ``state.rng`` folded with a constant (the iteration's own
    splits of ``state.rng`` are unchanged), so a resumed run redraws the same models.
    With ``reset_mode="cached"`` the cached reset states are redrawn with them (a reset
    may depend on the model); environments in mid-episode continue with their new model.
    """
    every = randomization.redraw_every
    due = (state.iteration > 0) & (state.iteration % every == 0)
    n_envs = randomization.n_envs

    def redraw() -> tuple[Models, Any]:
        key = jax.random.fold_in(state.rng, _REDRAW_MODELS)
        models = constrain_batch(randomization.draw(key), mesh)
        if reset_mode != "cached":
            return models, state.reset_state
        key = jax.random.fold_in(state.rng, _REDRAW_RESETS)
        return models, constrain_batch(reset_envs(env, key, n_envs, models), mesh)

    models, reset_state = jax.lax.cond(due, redraw, lambda: (state.models, state.reset_state))
    return state.replace(models=models, reset_state=reset_state)


def with_redraws(
    iteration: Callable[..., tuple[Any, Metrics]],
    env: Any,
    randomization: Randomization | None,
    reset_mode: str,
    mesh: Mesh | None = None,
) -> Callable[..., tuple[Any, Metrics]]:
    """``iteration`` preceded by `_redraw_models` if ``randomization.redraw_every`` is
    set; otherwise ``iteration`` itself."""
    if randomization is None or not randomization.redraw_every:
        return iteration

    def redrawing_iteration(state: Any, *args: Any) -> tuple[Any, Metrics]:
        return iteration(_redraw_models(env, randomization, state, reset_mode, mesh), *args)

    return redrawing_iteration


# --------------------------------------------------------------------------- gradients


def replay_minibatch(
    graphdef: nnx.GraphDef,
    params: nnx.State,
    network_state: nnx.State,
    initial_carry: Any,
    transitions: Transition,
    level: LogLevel,
) -> tuple[ReplayOutput, Metrics]:
    """Replay a minibatch (`replay`) for a loss: the `ReplayOutput` and, with
    ``LogLevel.NETWORK_METRICS``, the network's metrics as ``network/<path>``."""
    collect = LogLevel.NETWORK_METRICS in level
    out = replay(
        graphdef, params, network_state, initial_carry, transitions, collect_metrics=collect
    )
    return out, _flatten_network_metrics(out.metrics) if collect else {}


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


def cut_sequences(length: int, time_major: Any, chunk_carries: Any) -> tuple[Any, Any]:
    """The rollout as ``L = length``-step sequences, to be minibatched like environments.

    ``[T, B, ...]`` leaves become ``[L, B * T / L, ...]`` and the carries stored at
    steps ``0, L, 2L, ...`` (`Rollout.chunk_carries`, ``[T / L, B, ...]``) the
    ``[B * T / L, ...]`` carries the sequences start from. Sequences are ordered by
    environment first (environment ``b``'s ``c``-th at ``b * T / L + c``), so each
    device of a mesh keeps its own environments' sequences.

    Examples:
        >>> import jax.numpy as jnp
        >>> steps = jnp.arange(8).reshape(4, 2)  # [T=4, B=2]: step t of env b is 2t + b
        >>> cut, carries = cut_sequences(2, steps, jnp.array([[10, 11], [12, 13]]))
        >>> cut.T.tolist(), carries.tolist()  # each row: one sequence's two steps
        ([[0, 2], [4, 6], [1, 3], [5, 7]], [10, 12, 11, 13])
    """

    def cut(x: jax.Array) -> jax.Array:  # [T, B, ...] -> [L, B * T/L, ...]
        x = x.reshape(x.shape[0] // length, length, *x.shape[1:])  # [T/L, L, B, ...]
        x = jnp.moveaxis(x, 0, 2)  # [L, B, T/L, ...]
        return x.reshape(length, -1, *x.shape[3:])

    def starts(x: jax.Array) -> jax.Array:  # [T/L, B, ...] -> [B * T/L, ...]
        return jnp.swapaxes(x, 0, 1).reshape(-1, *x.shape[2:])

    return jax.tree.map(cut, time_major), jax.tree.map(starts, chunk_carries)


def _reduce_updates(name: str, values: jax.Array) -> jax.Array:
    """One metric over the ``[n_epochs, n_minibatches]`` updates: counts
    (``diagnostics/*``) summed, ``*max_deviation`` maxed, the rest averaged."""
    if name.startswith("diagnostics/"):
        return jnp.sum(values)
    if name.endswith("max_deviation"):
        return jnp.max(values)
    return jnp.mean(values)


def gradient_phase(
    loss: Loss,
    optimizer: optax.GradientTransformation,
    state: Any,
    network_state: nnx.State,
    time_major: Any,
    batch_major: Any,
    key: jax.Array,
    config: OnPolicyConfig,
    *,
    mesh: Mesh | None = None,
    learning_rate: LearningRate | None = None,
) -> tuple[tuple[nnx.State, Any], Metrics]:
    """Phase 3: ``config.n_epochs`` passes of ``config.n_minibatches`` optimizer steps on
    ``loss``, from ``state.params`` and ``state.opt_state``.

    Each epoch shuffles the environments (`split_minibatches`, one key per epoch
    split from ``key``) and scans over the minibatches; ``loss`` gets
    ``(time_major, batch_major)`` of one minibatch (leaves ``[T, B/M, ...]`` and
    ``[B/M, ...]``). The non-parameter network state stays as in the rollout
    throughout.

    Before every step the run's `LearningRate` rule (``learning_rate``, the one its
    optimizer was built with; ``None``: the config's) sees the metrics the loss
    measured on that step's minibatch: with adaptive KL it adapts the rate in
    ``opt_state`` to the KL (`nnx_ppo.algorithms.core.schedules`; on a mesh that mean covers
    every device's share, so the rate is the same everywhere), except on the
    iteration's first step, whose KL is rounding noise around 0.

    Returns:
        ``((params, opt_state), metrics)``: the metrics averaged over every step
        (``*max_deviation`` ones maxed), plus ``train/grad_norm`` with
        ``LogLevel.GRAD_NORM``, ``diagnostics/nonfinite_grad`` (the number of steps
        whose gradient had a NaN or inf) with ``LogLevel.DIAGNOSTICS``,
        ``train/learning_rate`` (the last step's rate) and, with ``target_kl``
        (`PPOConfig`), ``train/updates_taken`` (the share of the updates stepped before
        the KL passed ``1.5 * target_kl``; the skipped ones leave the parameters and
        the optimizer state as they were).
    """

    level, n_minibatches = config.log_level, config.n_minibatches
    n_envs = jax.tree.leaves(time_major)[0].shape[1]  # sequences: n_envs, or more if cut
    rule = learning_rate_rule(config) if learning_rate is None else learning_rate

    target_kl = getattr(config, "target_kl", None)  # PPO's early stop

    def minibatch_update(carry, minibatch):
        params, opt_state, first, stopped = carry
        grad_fn = jax.value_and_grad(loss, has_aux=True)
        (_, metrics), grads = grad_fn(params, network_state, minibatch)
        before = (params, opt_state)
        opt_state = rule.before_step(opt_state, metrics, first)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        if target_kl is not None:  # this and every later update skipped past the target
            stopped = stopped | (metrics["actor/approx_kl"] > 1.5 * target_kl)
            params, opt_state = jax.tree.map(
                lambda old, new: jnp.where(stopped, old, new), before, (params, opt_state)
            )
            metrics["train/updates_taken"] = 1.0 - stopped.astype(jnp.float32)
        if LogLevel.GRAD_NORM in level:
            metrics["train/grad_norm"] = global_norm(grads)
        if LogLevel.DIAGNOSTICS in level:  # this update's gradient had a NaN or inf
            finite = [jnp.all(jnp.isfinite(g)) for g in jax.tree.leaves(grads)]
            metrics["diagnostics/nonfinite_grad"] = 1.0 - jnp.all(jnp.stack(finite)).astype(
                jnp.float32
            )
        return (params, opt_state, jnp.zeros((), bool), stopped), metrics

    def epoch(carry, epoch_key):
        minibatches = split_minibatches(
            epoch_key, n_envs, n_minibatches, time_major, batch_major, mesh
        )
        return jax.lax.scan(minibatch_update, carry, minibatches)

    (params, opt_state, _, _), metrics = jax.lax.scan(
        epoch,
        # the iteration's first step; no update skipped yet (`target_kl`)
        (state.params, state.opt_state, jnp.ones((), bool), jnp.zeros((), bool)),
        jax.random.split(key, config.n_epochs),
    )
    reduced = {k: _reduce_updates(k, v) for k, v in metrics.items()}
    reduced["train/learning_rate"] = rule.last_rate(opt_state, state.iteration)
    return (params, opt_state), reduced


# --------------------------------------------------------------------------- finish


def _take_in_rollout(graphdef: nnx.GraphDef, params: nnx.State, phase: RolloutPhase) -> nnx.State:
    """The network state after its running statistics took in the rollout (``phase``'s
    ``rollout_extras``, once, `StatefulModule.update_statistics`)."""
    model = nnx.merge(graphdef, params, phase.network_state)
    model.update_statistics(phase.transitions.rollout_extras)
    return nnx.split(model, nnx.Param, ...)[2]


def finish_phase(
    graphdef: nnx.GraphDef,
    params: nnx.State,
    phase: RolloutPhase,
    state: Any,
    metrics: Metrics,
    level: LogLevel,
    *,
    network_state: nnx.State | None = None,
) -> tuple[nnx.State, Any, Metrics]:
    """Phase 4: the end of an iteration, after the gradient phase.

    Merges the rollout (``phase``) into the running statistics (e.g. the observation
    normalizer, once, from its ``rollout_extras``), records a NaN/inf of the loss, the
    parameters or the statistics in ``state.non_finite`` (the host reads it when it
    syncs), and adds the rollout metrics and the parameter norm to ``metrics``, keeping
    only the groups enabled in ``level``.

    Args:
        network_state: The network state whose statistics already took in this rollout
            (`update_phase` with ``statistics_first=True``): used as it is. ``None``
            (the default): the statistics take in the rollout here.

    Returns:
        ``(network_state, non_finite, metrics)``.
    """
    if network_state is None:
        network_state = _take_in_rollout(graphdef, params, phase)
    non_finite = record_non_finite(
        state.non_finite, state.iteration + 1, metrics["loss/total"], params, network_state
    )
    metrics = {**metrics, **phase.rollout.metrics}
    if LogLevel.WEIGHTS in level:
        metrics["train/param_norm"] = global_norm(params)
    if LogLevel.ROLLOUT_OBS in level:
        metrics.update(observation_statistics(phase.transitions.obs))
    return network_state, non_finite, {k: v for k, v in metrics.items() if in_log_level(k, level)}


def advance(
    state: Any,
    phase: RolloutPhase,
    params: nnx.State,
    opt_state: Any,
    network_state: nnx.State,
    non_finite: Any,
    rng: jax.Array,
    **fields: Any,
) -> Any:
    """The state after one iteration: the rollout's environments, carries, episodes and
    models, the new parameters, optimizer and network state, NaN/inf record and key, the
    iteration counter plus one, and the algorithm's own ``fields``."""
    return state.replace(
        params=params,
        network_state=network_state,
        opt_state=opt_state,
        env_state=phase.env_state,
        reset_state=phase.reset_state,
        carry=phase.carry,
        episodes=phase.episodes,
        rng=rng,
        iteration=state.iteration + 1,
        non_finite=non_finite,
        models=phase.models,
        **fields,
    )


def update_phase(
    loss: Loss,
    optimizer: optax.GradientTransformation,
    graphdef: nnx.GraphDef,
    state: Any,
    phase: RolloutPhase,
    time_major: Any,
    batch_major: Any,
    key: jax.Array,
    rng: jax.Array,
    config: OnPolicyConfig,
    *,
    mesh: Mesh | None = None,
    learning_rate: LearningRate | None = None,
    statistics_first: bool = False,
    **fields: Any,
) -> tuple[Any, Metrics]:
    """Phases 3 and 4, the end of every on-policy iteration after its labels: the
    `gradient_phase` on ``loss`` (from the rollout's network state), the
    `finish_phase` (statistics, NaN/inf record, metrics of the groups enabled in
    ``config.log_level``) and the next state (`advance`).

    Args:
        loss: ``loss(params, network_state, minibatch) -> (loss, metrics)``.
        optimizer: The optax optimizer whose state is ``state.opt_state``.
        graphdef: The network's ``GraphDef`` (train mode).
        state: The state the iteration started from.
        phase: This iteration's `RolloutPhase`.
        time_major: The ``[T, B, ...]`` leaves the minibatches are cut from.
        batch_major: The ``[B, ...]`` leaves cut with them (e.g. the initial carry).
        key: The shuffling key of the gradient phase.
        rng: The state's key for the next iteration.
        config: The sizes (``n_epochs``, ``n_minibatches``, ...) and ``log_level``.
        mesh: The run's mesh (`gradient_phase`), or ``None``.
        learning_rate: The run's `LearningRate` rule (`gradient_phase`).
        statistics_first: Let the running statistics (e.g. the observation normalizer)
            take in the rollout *before* the gradient phase, as brax's PPO does, so
            that the replay sees newer statistics than the rollout did; ``False`` (the
            default): after it, so that the first minibatch's replay reproduces the
            rollout exactly.
        **fields: The algorithm's own fields of the next state (e.g. PPO's
            ``value_stats``, distillation's ``teacher_carry``).

    Returns:
        ``(next_state, metrics)``.

    Raises:
        TypeError: If ``statistics_first`` is not a bool.
    """
    if not isinstance(statistics_first, bool):
        raise TypeError(f"statistics_first={statistics_first!r} must be True or False.")
    updated = _take_in_rollout(graphdef, state.params, phase) if statistics_first else None
    (params, opt_state), metrics = gradient_phase(
        loss, optimizer, state, phase.network_state if updated is None else updated,
        time_major, batch_major, key, config, mesh=mesh, learning_rate=learning_rate,
    )  # fmt: skip
    network_state, non_finite, metrics = finish_phase(
        graphdef, params, phase, state, metrics, config.log_level, network_state=updated
    )
    next_state = advance(state, phase, params, opt_state, network_state, non_finite, rng, **fields)
    return next_state, metrics
