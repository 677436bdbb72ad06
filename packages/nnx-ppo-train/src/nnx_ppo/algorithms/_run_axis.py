"""What a leading run axis changes in a run (`run(..., runs=Runs(...))`, the engine of
`nnx_ppo.algorithms.sweeps`): the initial state (every run's own variables, keys,
models and hyperparameters, vmapped), its layout on a mesh, the resume, the iteration
(vmapped, the swept values as ``[K]`` inputs), the evaluations and the videos (each
run's as its own run would make them).

Run ``i`` of ``K`` is the run its own trainer call would train with ``seeds[i]``, the
``i``-th network and the ``i``-th hyperparameter values: the same keys split from the
same seed, the same models drawn from them, the same updates.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from nnx_ppo.algorithms._host_loop import Periodic, split_runs
from nnx_ppo.algorithms.config import EvalConfig, VideoConfig
from nnx_ppo.algorithms.distributed import (
    batch_sharding,
    commit_like,
    replicated_sharding,
)
from nnx_ppo.algorithms.phases import OnPolicyConfig, init_state, with_redraws
from nnx_ppo.algorithms.randomization import Randomization
from nnx_ppo.algorithms.schedules import Optimization, optimization
from nnx_ppo.algorithms.types import batch_fields

__all__ = [
    "Runs",
    "init_runs",
    "resume_runs",
    "run_keys",
    "runs_evaluation",
    "runs_iteration",
    "runs_video",
    "sweep_shardings",
]


@dataclasses.dataclass(frozen=True)
class Runs:
    """The ``K`` runs of one program, as `run` takes them.

    Attributes:
        seeds: Each run's seed (its keys are split from it as a single run's are).
        params: Every run's initial parameters, stacked (leading ``[K]`` axis).
        network_states: Every run's initial network state, stacked.
        hyperparameters: ``{field: float32 [K]}``: the swept config values, inputs of the
            program (`sweep_fields`).
    """

    seeds: tuple[int, ...]
    params: Any
    network_states: Any
    hyperparameters: Mapping[str, jax.Array]

    @property
    def count(self) -> int:
        """``K``."""
        return len(self.seeds)


def run_keys(seeds: tuple[int, ...], n: int) -> list[jax.Array]:
    """The ``n`` keys a single run splits from its seed, for every run: ``n`` arrays of
    ``[K, 2]``."""
    keys = jnp.stack([jax.random.split(jax.random.PRNGKey(seed), n) for seed in seeds])
    return [keys[:, i] for i in range(n)]


def init_runs(
    env: Any,
    graphdef: nnx.GraphDef,
    runs: Runs,
    config: OnPolicyConfig,
    keys: jax.Array,
    *,
    state_type: type,
    randomization: Randomization | None,
    fields: Mapping[str, Any],
) -> Any:
    """Every run's initial state (`init_state`, vmapped), stacked along a leading axis.

    Each run's first models are drawn from its key as its own run draws them, here
    rather than in the vmapped program: the draw checks the randomizer eagerly.
    """
    models = None
    if randomization is not None:
        models = jax.tree.map(lambda *xs: jnp.stack(xs), *map(randomization.initial, keys))

    def init_one(params: Any, network_state: Any, key: jax.Array, values: Any, models: Any) -> Any:
        network = nnx.merge(graphdef, params, network_state)
        _, state = init_state(
            env, network, optimization(config, values).optimizer, key,
            n_envs=config.n_envs, reset_mode=config.reset_mode, models=models,
            state_type=state_type, **fields,
        )  # fmt: skip
        return state

    return jax.jit(jax.vmap(init_one))(
        runs.params, runs.network_states, keys, dict(runs.hyperparameters), models
    )


def sweep_shardings(state: Any, mesh: Mesh) -> Any:
    """The layout of a sweep's state on ``mesh``: the batch fields' environment axis
    (axis 1, after the run axis) sharded along ``"data"``, everything else (every run's
    parameters, optimizer state, keys, counters) replicated.

    Returns:
        A state of the same structure whose leaves are ``NamedSharding``.
    """
    replicated = replicated_sharding(mesh)
    batch = batch_fields(state)

    def layout(name: str, value: Any) -> Any:
        if name not in batch:
            return jax.tree.map(lambda _: replicated, value)
        return jax.tree.map(
            lambda x: batch_sharding(mesh, 1) if np.ndim(x) > 1 else replicated, value
        )

    fields = [f.name for f in dataclasses.fields(state)]  # type: ignore[arg-type]
    return state.replace(**{name: layout(name, getattr(state, name)) for name in fields})


def resume_runs(checkpoint: Any, state: Any, shardings: Any) -> Any:
    """The state to start from: the checkpoint's whole sweep (laid out like ``state``,
    on ``shardings`` if the sweep is on a mesh), or ``state``. One process only."""
    if checkpoint is None:
        return state
    restored = checkpoint.restore(state)
    if restored is None:
        return state
    return (
        commit_like(restored, state) if shardings is None else jax.device_put(restored, shardings)
    )


def runs_iteration(
    iteration_of: Callable[[Optimization], Callable[..., tuple[Any, Any]]],
    config: OnPolicyConfig,
    env: Any,
    randomization: Randomization | None,
    mesh: Mesh | None,
    n_args: int,
) -> Callable[..., tuple[Any, Any]]:
    """The iteration of every run at once: ``(state, hyperparameters, *args)``, vmapped
    over the state's run axis and the ``[K]`` hyperparameters (``args``, e.g. a
    teacher's variables, shared). Each run's optimizer and learning-rate rule are built
    from its own values (`optimization`)."""

    def one(state: Any, values: Any, *args: Any) -> tuple[Any, Any]:
        body = iteration_of(optimization(config, values))
        return with_redraws(body, env, randomization, config.reset_mode, mesh)(state, *args)

    return jax.vmap(one, in_axes=(0, 0, *[None] * n_args))


def runs_evaluation(
    evaluator: Callable[[Any, Any, jax.Array], Any] | None,
    keys: jax.Array,
    count: int,
    config: EvalConfig,
) -> Periodic | None:
    """Every run's periodic evaluation at once: ``evaluator`` (a single run's) vmapped
    over the runs' variables and evaluation keys, each folded with the iteration as a
    single run folds its own."""
    if evaluator is None:
        return None
    batched = jax.jit(jax.vmap(evaluator))
    fold = jax.jit(jax.vmap(jax.random.fold_in, in_axes=(0, None)))

    def evaluate(state: Any, iteration: int, _: int) -> list[dict[str, float]]:
        metrics = batched(state.params, state.network_state, fold(keys, iteration))
        return split_runs(metrics, count)

    return Periodic(evaluate, config.every_steps, at_start=config.at_start, history=True)


def runs_video(
    recorder: Callable[..., str], keys: jax.Array, count: int, video: VideoConfig
) -> Periodic:
    """Every run's videos: run ``i``'s episode, recorded as its own run records it
    (its variables, its key folded with the iteration), written to
    ``<video.directory>/run_<i>/video_<step>.mp4``."""
    folder = video.directory
    assert folder is not None

    def record(state: Any, at_iteration: int, at_step: int) -> None:
        for i in range(count):
            params, network_state = jax.tree.map(
                lambda x, i=i: x[i], (state.params, state.network_state)
            )
            key = jax.random.fold_in(keys[i], at_iteration)
            directory = os.path.join(folder, f"run_{i}")
            recorder(params, network_state, key, at_step, directory=directory)

    return Periodic(record, video.every_steps, primary_only=True)
