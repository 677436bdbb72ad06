"""A run's initial training state: the network split, the optimizer's state, the
environments reset (on one device, or each process resetting its own share of them on
a mesh), the episode statistics and the counters. The same for every algorithm: its
own fields come as keyword arguments (`init_state`), and a sweep vmaps it over its runs
(`nnx_ppo.algorithms.trainer.run_axis`)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh

from nnx_ppo.algorithms.core.distributed import (
    gather_state,
    process_env_slice,
    shard_batch,
    shard_state,
)
from nnx_ppo.algorithms.core.faults import healthy
from nnx_ppo.algorithms.core.randomization import Models, Randomization, batched
from nnx_ppo.algorithms.core.rollout import initial_episode_stats, reset_envs, split_network
from nnx_ppo.algorithms.core.trees import copied
from nnx_ppo.algorithms.types import TrainState

__all__ = ["INITIAL_CARRY", "init_state", "reset_on_mesh"]


class _InitialCarry:
    def __repr__(self) -> str:
        return "INITIAL_CARRY"


INITIAL_CARRY: Any = _InitialCarry()
"""A value of `init_state`'s ``**fields`` that stands for the network's initial carry,
``network.initialize_state(n_envs)`` (e.g. PPO's ``mirror_carry`` with a symmetry): an
algorithm's fields are given before the network is at hand."""


def init_state(
    env: Any,
    network: nnx.Module,
    optimizer: optax.GradientTransformation,
    key: jax.Array,
    *,
    n_envs: int,
    reset_mode: str,
    mesh: Mesh | None = None,
    state_type: type = TrainState,
    randomization: Randomization | None = None,
    models: Models | None = None,
    **fields: Any,
) -> tuple[nnx.GraphDef, Any]:
    """Split the network and build an algorithm's initial training state.

    Every array gets its own buffer, so donating the state to the jitted iteration never
    invalidates the arrays held by ``network`` (nor a buffer shared by two leaves: the
    cached reset state starts as the first env state).

    Args:
        env: The unbatched environment.
        network: The network to train (in train mode).
        optimizer: The optax optimizer of its parameters.
        key: The run's raw PRNG key; one split of it resets the environments.
        n_envs: Environments.
        reset_mode: ``"cached"`` / ``"refresh"`` keep a reset state, ``"fresh"`` none.
        mesh: Place the state on this mesh (batch fields sharded along ``"data"``, the
            rest replicated; each process resets only its own environments). ``None``:
            the default device.
        state_type: The state dataclass (`TrainState` or an algorithm's own, with the
            same fields plus ``fields``).
        randomization: Domain randomization: one model per environment is drawn from
            ``key`` (`Randomization.initial`) into ``state.models``, and the
            environments reset with their own models. ``None``: ``models`` is ``None``.
        models: The run's first models, already drawn (`Randomization.initial`; a
            sweep draws every run's before its vmapped program, since the draw checks
            the randomizer eagerly), instead of ``randomization``.
        **fields: The algorithm's extra fields (e.g. distillation's ``teacher_carry``);
            `INITIAL_CARRY` stands for ``network.initialize_state(n_envs)``.

    Returns:
        ``(graphdef, state)``; the state's values do not depend on ``mesh``.

    Raises:
        ValueError: If the randomization function changes a field it declares shared
            (`Randomization.initial`).
    """
    graphdef, params, network_state = split_network(network)
    if models is None and randomization is not None:
        models = randomization.initial(key)
    key, reset_key = jax.random.split(key)
    fields = {
        name: network.initialize_state(n_envs) if value is INITIAL_CARRY else value
        for name, value in fields.items()
    }
    state = state_type(
        params=params,
        network_state=network_state,
        opt_state=optimizer.init(params),
        env_state=None,
        reset_state=None,
        carry=network.initialize_state(n_envs),
        episodes=initial_episode_stats(n_envs),
        rng=key,
        iteration=jnp.zeros((), jnp.int32),
        non_finite=healthy(),
        **fields,
    )
    if models is not None:
        state = state.replace(models=models)
    if mesh is None:
        # Jitted: an eager vmapped reset of a physics env dispatches op by op (slow).
        env_state = jax.jit(lambda k, m: reset_envs(env, k, n_envs, m))(reset_key, models)
        reset_state = None if reset_mode == "fresh" else env_state
        state = state.replace(env_state=env_state, reset_state=reset_state)
        return graphdef, copied(state)
    state = shard_state(copied(state), mesh)
    env_state, reset_state = reset_on_mesh(env, reset_key, n_envs, reset_mode, mesh, models)
    return graphdef, state.replace(env_state=env_state, reset_state=reset_state)


def reset_on_mesh(
    env: Any,
    key: jax.Array,
    n_envs: int,
    reset_mode: str,
    mesh: Mesh,
    models: Models | None = None,
) -> tuple[Any, Any]:
    """The initial ``(env_state, reset_state)`` of ``n_envs`` environments on ``mesh``.

    Each process resets only its own environments (the global reset's keys, sliced:
    the same states as ``reset_envs(env, key, n_envs, models)`` on one device) and
    contributes them to arrays sharded along ``"data"``. ``reset_state`` is a separate
    copy, or ``None`` for ``reset_mode="fresh"``. ``models``: the per-environment model
    leaves of all ``n_envs`` environments (host or single-device arrays), or ``None``.
    """
    mine = process_env_slice(n_envs, mesh)

    def reset_mine(k: jax.Array, m: Models | None) -> Any:
        own = None if m is None else {path: leaf[mine] for path, leaf in m.items()}
        return batched(env, "reset", own)(jax.random.split(k, n_envs)[mine])

    if models is not None:  # host copies: every process slices its own environments
        models = {path: np.asarray(leaf) for path, leaf in gather_state(models).items()}
    local = jax.jit(reset_mine)(key, models)

    def place() -> Any:
        return shard_batch(copied(local), mesh, process_local=True)

    return place(), None if reset_mode == "fresh" else place()
