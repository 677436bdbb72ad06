"""The periodic tasks every run has, for one run or ``K`` (a sweep): its evaluations
and its videos, as `Periodic` tasks of the host loop (`run_calls`).

Run ``i`` of a sweep evaluates and records as its own run would: its variables, its
evaluation or video key folded with the iteration. A sweep's evaluation is the single
run's evaluator vmapped over the runs and returns one record per run; its videos go to
``<video.directory>/run_<i>/``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import Mesh

from nnx_ppo.algorithms.config import EvalConfig, VideoConfig
from nnx_ppo.algorithms.core.distributed import gather_state
from nnx_ppo.algorithms.core.hooks import Periodic
from nnx_ppo.algorithms.trainer.host_loop import split_runs
from nnx_ppo.algorithms.types import Metrics

__all__ = ["evaluation_task", "video_task"]


def evaluation_task(
    evaluator: Callable[[Any, Any, jax.Array], Metrics] | None,
    key: jax.Array,
    config: EvalConfig,
    runs: int | None = None,
) -> Periodic | None:
    """The evaluations of a run as a `Periodic`: ``evaluator(params, network_state,
    key)`` (from `make_evaluator`) on the state's variables, with ``key`` folded with
    the iteration; ``None`` without an evaluator.

    With ``runs=K`` the state and ``key`` (``[K, 2]``) have a leading run axis: the
    evaluator is vmapped over both and the task returns one record per run.
    """
    if evaluator is None:
        return None
    if runs is None:

        def evaluate(state: Any, iteration: int, _: int) -> Any:
            metrics = evaluator(
                state.params, state.network_state, jax.random.fold_in(key, iteration)
            )
            return split_runs(metrics, None)[0]

    else:
        batched = jax.jit(jax.vmap(evaluator))
        fold = jax.jit(jax.vmap(jax.random.fold_in, in_axes=(0, None)))

        def evaluate(state: Any, iteration: int, _: int) -> Any:
            metrics = batched(state.params, state.network_state, fold(key, iteration))
            return split_runs(metrics, runs)

    return Periodic(evaluate, config.every_steps, at_start=config.at_start, history=True)


def video_task(
    recorder: Callable[..., str],
    video: VideoConfig,
    key: jax.Array,
    mesh: Mesh | None,
    runs: int | None = None,
) -> Periodic:
    """The videos of a run as a `Periodic` (process 0): one episode of the state's
    variables (`make_video_recorder`), with ``key`` folded with the iteration.

    With ``runs=K`` the state and ``key`` (``[K, 2]``) have a leading run axis: run
    ``i``'s episode is recorded as its own run records it, to
    ``<video.directory>/run_<i>/video_<step>.mp4``.
    """

    def record(state: Any, at_iteration: int, at_step: int) -> None:
        params, network_state = state.params, state.network_state
        if mesh is not None and jax.process_count() > 1:
            # Process 0 alone records: on local copies of the replicated variables.
            params, network_state = gather_state((params, network_state))
        if runs is None:
            recorder(params, network_state, jax.random.fold_in(key, at_iteration), at_step)
            return
        assert video.directory is not None
        for i in range(runs):
            mine = jax.tree.map(lambda x, i=i: x[i], (params, network_state))
            directory = os.path.join(video.directory, f"run_{i}")
            recorder(*mine, jax.random.fold_in(key[i], at_iteration), at_step, directory=directory)

    return Periodic(record, video.every_steps, primary_only=True)
