"""Evaluation rollouts: one episode per environment, deterministic by default.

`evaluate` runs ``n_envs`` fresh episodes of at most ``max_episode_length`` steps
with the network in ``eval()`` mode (samplers return their mean) and reports

======================================  ===============================================
``eval/episode_reward/mean``            mean undiscounted return over the episodes
``eval/episode_reward/std``             its standard deviation
``eval/episode_reward/<key>/mean``      per reward key, for dict rewards
``eval/episode_length/mean``            mean episode length in steps
======================================  ===============================================

An episode counts rewards up to and including the step at which ``done`` is first set;
environments keep stepping afterwards (their rewards are masked), so the program has a
fixed shape. An episode still running after ``max_episode_length`` steps is cut there.
Carries start from ``initialize_state`` and need no reset (each environment plays one
episode). The network's own state (parameters, statistics, RNG streams) is not changed.
An environment that declares the training-progress keys (`nnx_ppo.algorithms.core.progress`)
sees ``training_progress = 1.0`` and ``is_training = False``: the final task.

**Domain randomization.** Evaluation runs the environment's nominal model. With a
randomization (``EvalConfig(randomized=True)`` in a training run, ``randomization_fn``
here) each evaluation draws ``n_envs`` fresh models from its key, one per environment
(`nnx_ppo.algorithms.core.randomization`): the same key gives the same models, so a key other
than the training run's seed evaluates on held-out models.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh

from nnx_ppo.algorithms._config_base import check_int
from nnx_ppo.algorithms.core.checks import check_env_network
from nnx_ppo.algorithms.core.distributed import constrain_batch, n_shards, replicated_sharding
from nnx_ppo.algorithms.core.progress import check_step_range, write_progress
from nnx_ppo.algorithms.core.randomization import (
    Randomization,
    RandomizationFn,
    batched,
    make_randomization,
)
from nnx_ppo.algorithms.core.rollout import (
    eval_copy,
    network_step,
    ppo_output,
    reset_envs,
    split_network,
    sum_leaves,
)
from nnx_ppo.algorithms.types import Metrics

__all__ = ["episode_returns", "evaluate", "make_evaluator"]

_MODELS = 0x6576  # fold_in data of an evaluation's model key

_EVALUATORS: OrderedDict[tuple[Any, ...], tuple[Any, Callable[..., Metrics]]] = OrderedDict()
"""`evaluate`'s compiled evaluators, most recent last: ``(id(env), graphdef, n_envs,
max_episode_length) -> (env, evaluator)``. Evaluating several networks of one structure
(the seeds of a sweep, checkpoints of a run) compiles once."""

_EVALUATORS_KEPT = 8


def episode_returns(
    env: Any,
    graphdef: nnx.GraphDef,
    params: nnx.State,
    network_state: nnx.State,
    key: jax.Array,
    *,
    n_envs: int,
    max_episode_length: int,
    mesh: Mesh | None = None,
    training_step: int | None = None,
    models: Any = None,
) -> tuple[Any, jax.Array]:
    """The evaluation rollout (jit-able): ``n_envs`` episodes reset from ``key``, run
    for ``max_episode_length`` steps, each reward counted up to and including the step
    that first sets ``done``.

    Args:
        env: The unbatched environment.
        graphdef: The network's ``GraphDef`` (its ``eval()``-mode one for the mean
            action).
        params: The network's parameters.
        network_state: Its other variables.
        key: A raw PRNG key for the resets.
        n_envs: Episodes run in parallel.
        max_episode_length: Steps.
        mesh: Shard the environments along its ``"data"`` axis, or ``None``.
        training_step: Written as the training progress's step (see `make_evaluator`).
        models: Each environment's randomized model leaves, or ``None``.

    Returns:
        ``(returns, lengths)``: the per-episode returns (the reward tree, leaves
        ``[n_envs]``) and int32 ``[n_envs]`` episode lengths.
    """
    model = nnx.merge(graphdef, params, network_state)
    carry = constrain_batch(model.initialize_state(n_envs), mesh)
    env_state = constrain_batch(reset_envs(env, key, n_envs, models), mesh)
    step = batched(env, "step", models)
    zero_reward = jax.tree.map(jnp.zeros_like, env_state.reward)

    def eval_step(loop, _):
        net_state, env_s, net_carry, returns, length, active = loop
        env_s = write_progress(env_s, step=training_step, progress=1.0, training=False)
        net_state, out = network_step(graphdef, params, net_state, net_carry, env_s.obs)
        next_env = step(env_s, ppo_output(out).actions)
        live = active.astype(jnp.float32)
        returns = jax.tree.map(lambda r, x: r + x * live, returns, next_env.reward)
        length = length + active.astype(jnp.int32)
        active = active & ~(jnp.asarray(next_env.done) > 0)
        return (net_state, next_env, out.next_state, returns, length, active), None

    loop = (
        network_state,
        env_state,
        carry,
        zero_reward,
        jnp.zeros((n_envs,), jnp.int32),
        jnp.ones((n_envs,), bool),
    )
    (_, _, _, returns, length, _), _ = jax.lax.scan(
        eval_step, loop, None, length=max_episode_length
    )
    return returns, length


def make_evaluator(
    env: Any,
    graphdef: nnx.GraphDef,
    *,
    n_envs: int,
    max_episode_length: int,
    mesh: Mesh | None = None,
    training_step: int | None = None,
    randomization: Randomization | None = None,
) -> Callable[[nnx.State, nnx.State, jax.Array], Metrics]:
    """Build a jitted ``evaluator(params, network_state, key) -> metrics``.

    Args:
        env: The unbatched evaluation environment.
        graphdef: The network's ``GraphDef`` split with ``(nnx.Param, ...)``; take it
            from the network in ``eval()`` mode for deterministic evaluation.
        n_envs: Episodes run in parallel.
        max_episode_length: Steps per evaluation.
        mesh: The training run's device mesh (parameters replicated on it): the
            evaluation environments are sharded along its ``"data"`` axis if ``n_envs``
            is a multiple of its size (else every device runs them all), and the
            metrics come back replicated. ``None``: no sharding.
        training_step: If the environment declares the training-progress keys
            (`nnx_ppo.algorithms.core.progress`), the ``training_step`` written before
            every step (a training run passes the steps it trains for); ``None`` leaves
            that key as ``reset`` set it. ``training_progress`` is written as ``1.0``
            and ``is_training`` as ``False`` either way.
        randomization: Evaluate on randomized models: each call draws
            ``randomization.n_envs`` (``== n_envs``) models from its ``key`` (folded with
            a constant; the resets use ``key`` as without randomization). ``None``: the
            nominal model.

    Returns:
        A jitted function of the split network state and a raw PRNG key returning the
        metrics in the module table (scalars).
    """
    shard = mesh if mesh is not None and n_envs % n_shards(mesh) == 0 else None
    if randomization is not None and randomization.n_envs != n_envs:
        raise ValueError(
            f"the evaluation randomization draws {randomization.n_envs} models but the "
            f"evaluation runs n_envs={n_envs} environments; build it with n_envs={n_envs}."
        )
    if training_step is not None:
        check_step_range(jax.eval_shape(env.reset, jax.random.PRNGKey(0)), training_step)

    def evaluator(params: nnx.State, network_state: nnx.State, key: jax.Array) -> Metrics:
        models = None
        if randomization is not None:
            models = constrain_batch(randomization.draw(jax.random.fold_in(key, _MODELS)), shard)
        returns, length = episode_returns(
            env, graphdef, params, network_state, key,
            n_envs=n_envs, max_episode_length=max_episode_length, mesh=shard,
            training_step=training_step, models=models,
        )  # fmt: skip
        total = sum_leaves(returns)
        metrics = {
            "eval/episode_reward/mean": jnp.mean(total),
            "eval/episode_reward/std": jnp.std(total),
            "eval/episode_length/mean": jnp.mean(length.astype(jnp.float32)),
        }
        if isinstance(returns, dict):
            for name, value in returns.items():
                metrics[f"eval/episode_reward/{name}/mean"] = jnp.mean(value)
        return metrics

    if mesh is None:
        return jax.jit(evaluator)
    return jax.jit(evaluator, out_shardings=replicated_sharding(mesh))


def _evaluator(
    env: Any,
    graphdef: nnx.GraphDef,
    n_envs: int,
    max_episode_length: int,
    randomization: Randomization | None,
) -> Callable[..., Metrics]:
    """`make_evaluator`'s evaluator, reused from `_EVALUATORS` when ``env`` (the same
    object), the graph definition and the sizes are those of a recent call. Evaluations
    with a randomization are not cached (each call draws from a new `Randomization`)."""

    def build() -> Callable[..., Metrics]:
        return make_evaluator(
            env,
            graphdef,
            n_envs=n_envs,
            max_episode_length=max_episode_length,
            randomization=randomization,
        )

    if randomization is not None:
        return build()
    # The cache holds ``env`` itself, so while an entry lives its id names that object.
    key = (id(env), graphdef, n_envs, max_episode_length)
    try:
        held = _EVALUATORS.get(key)
    except TypeError:  # a graph definition that cannot be hashed: build anew
        return build()
    if held is not None:
        _EVALUATORS.move_to_end(key)
        return held[1]
    evaluator = build()
    _EVALUATORS[key] = (env, evaluator)
    while len(_EVALUATORS) > _EVALUATORS_KEPT:
        _EVALUATORS.popitem(last=False)
    return evaluator


def evaluate(
    env: Any,
    network: nnx.Module,
    key: jax.Array,
    *,
    n_envs: int = 128,
    max_episode_length: int = 1000,
    deterministic: bool = True,
    randomization_fn: RandomizationFn | None = None,
) -> dict[str, float]:
    """Evaluate a network on fresh episodes (see the module docstring).

    With ``deterministic`` the rollout runs a copy of the network in ``eval()`` mode;
    the network itself (its variables and its train/eval mode) is not changed. The
    compiled evaluation is kept for the next call with the same ``env`` object, network
    structure and sizes (the last few are kept), so evaluating every seed of a sweep or
    every checkpoint of a run compiles once. The
    network is checked against ``env`` first (`check_env_network`), before anything
    is compiled.

    Args:
        env: The unbatched evaluation environment (wrap it in
            `EpisodeWrapper` for a time limit).
        network: The PPO network.
        key: A raw PRNG key (``jax.random.PRNGKey``) for the resets.
        n_envs: Episodes run in parallel.
        max_episode_length: Steps per evaluation.
        deterministic: Use the samplers' mean action.
        randomization_fn: Evaluate on ``n_envs`` randomized models drawn from ``key``
            (``(model, rng) -> (batched_model, in_axes)``, brax's and Playground's
            signature; `nnx_ppo.algorithms.core.randomization`). ``None``: the nominal model.

    Returns:
        The metrics in the module table, as Python floats.

    Raises:
        TypeError: If ``key`` is not a PRNG key, a size is not an int, or
            ``randomization_fn`` is given for an environment without a physics model.
        ValueError: If a size is < 1, the network does not fit ``env`` or
            ``randomization_fn`` does not fit its model (`make_randomization`).

    Examples:
        >>> import jax
        >>> from flax import nnx
        >>> from nnx_ppo.envs import PointMass
        >>> from nnx_ppo.wrappers import EpisodeWrapper
        >>> from nnx_ppo.networks.factories import make_mlp_actor_critic
        >>> net = make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0))
        >>> env = EpisodeWrapper(PointMass(), episode_length=20)
        >>> metrics = evaluate(env, net, jax.random.PRNGKey(0), n_envs=4,
        ...                    max_episode_length=30)
        >>> metrics["eval/episode_length/mean"]
        20.0
    """
    check_int("n_envs", n_envs, minimum=1)
    check_int("max_episode_length", max_episode_length, minimum=1)
    if not isinstance(deterministic, bool):
        raise TypeError(f"deterministic={deterministic!r} must be a bool (True or False).")
    if not (hasattr(key, "dtype") and hasattr(key, "shape")):
        raise TypeError(
            f"key={key!r} must be a JAX PRNG key, e.g. jax.random.PRNGKey(0), not a "
            f"{type(key).__name__}."
        )
    # The network against the environment, before anything is compiled.
    check_env_network(env, network, n_envs)
    randomization = make_randomization(env, randomization_fn, n_envs)
    # A copy in the requested mode: the network itself (its mode included) is untouched.
    if deterministic:
        copy = eval_copy(network)
    else:
        copy = nnx.clone(network)
        copy.train()
    graphdef, params, network_state = split_network(copy)
    evaluator = _evaluator(env, graphdef, n_envs, max_episode_length, randomization)
    metrics = evaluator(params, network_state, key)
    return {k: float(v) for k, v in jax.device_get(metrics).items()}
