"""The host side of a training run, shared by `train_ppo` and `train_distillation`.

Both trainers compile one device call (several iterations, the state donated) and
drive it from Python: count exact env steps, read and log metrics every
``log_every_calls`` calls, evaluate, record videos, offer the state to a checkpoint
hook, and show a progress bar. `run_calls` does that for any state with an
``iteration`` counter and a ``non_finite`` record.

**Overlap.** Reading metrics blocks until the call that produced them has finished.
When a call's metrics are due but nothing else needs its state (no evaluation, video
or checkpoint at that step), they are read only after the next call has been
dispatched, so the host's reading and logging overlap the device's work instead of
leaving it idle in between. The record is logged under its own step, one call later.
Only the NaN/inf record is copied for that (the next call donates the state).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from nnx_ppo.algorithms.config import EvalConfig, LogLevel
from nnx_ppo.algorithms.distributed import is_primary, save_checkpoint
from nnx_ppo.algorithms.faults import raise_if_non_finite
from nnx_ppo.algorithms.logging import JSONLWriter, LogFn, ProgressBar

__all__ = ["LoopResult", "Periodic", "evaluation_task", "run_calls"]

Metrics = dict[str, jax.Array]


@dataclasses.dataclass(frozen=True)
class Periodic:
    """Something the loop runs every ``every_steps`` env steps and after the last call.

    ``run(state, iteration, step)`` returns metrics to log (or ``None``). ``every_steps``
    ``None``: only after the last call (and before the first, if ``at_start``).
    ``primary_only``: run on process 0 only (videos); otherwise every process runs it
    (evaluations, which are collective on a multi-host mesh).
    """

    run: Callable[[Any, int, int], dict[str, float] | None]
    every_steps: int | None
    at_start: bool = False
    primary_only: bool = False


def evaluation_task(
    evaluator: Callable[[Any, Any, jax.Array], Metrics] | None,
    key: jax.Array,
    config: EvalConfig,
) -> Periodic | None:
    """The evaluations of a run as a `Periodic`: ``evaluator(params, network_state,
    key)`` (from `make_evaluator`) on the state's variables, with ``key`` folded with
    the iteration; ``None`` without an evaluator."""
    if evaluator is None:
        return None

    def evaluate(state: Any, iteration: int, _: int) -> dict[str, float]:
        assert evaluator is not None
        metrics = evaluator(state.params, state.network_state, jax.random.fold_in(key, iteration))
        return {k: float(v) for k, v in jax.device_get(metrics).items()}

    return Periodic(evaluate, config.every_steps, at_start=config.at_start)


@dataclasses.dataclass(frozen=True)
class LoopResult:
    """What `run_calls` returns: the final state, the evaluation history
    ``[(step, metrics)]`` of ``evaluation``, the latest value of every logged metric and
    the exact env step count reached."""

    state: Any
    eval_history: list[tuple[int, dict[str, float]]]
    metrics: dict[str, float]
    step: int


def _due(step: int, last: int | None, every: int | None) -> bool:
    return every is not None and (last is None or step - last >= every)


def run_calls(
    state: Any,
    train_call: Callable[[Any], tuple[Any, Metrics]],
    *,
    steps_per_iteration: int,
    iterations_per_call: int,
    n_iterations: int,
    log_every_calls: int,
    log_level: LogLevel,
    evaluation: Periodic | None = None,
    video: Periodic | None = None,
    checkpoint: Any = None,
    mesh: Mesh | None = None,
    log_fn: LogFn | None = None,
    jsonl_path: str | os.PathLike[str] | None = None,
    progress: bool | None = None,
    description: str = "train_ppo",
) -> LoopResult:
    """Run ``train_call`` until ``n_iterations`` iterations are done.

    Args:
        state: The (possibly restored) training state; ``state.iteration`` says where it
            stands.
        train_call: ``state -> (state, metrics)``, donating its input.
        steps_per_iteration: Env steps per iteration.
        iterations_per_call: Iterations per ``train_call``.
        n_iterations: Iterations of the whole run.
        log_every_calls: Read and log the metrics every this many calls (and after the
            last).
        log_level: Adds ``throughput/*`` if it includes ``LogLevel.THROUGHPUT``.
        evaluation: Evaluations (their metrics also go to ``eval_history``).
        video: Video recording (process 0).
        checkpoint: A checkpoint hook offered the state after every call (see
            `save_checkpoint`); its optional ``is_due`` lets the loop skip the offer.
        mesh: The run's mesh, or ``None``.
        log_fn: Called as ``log_fn(metrics, step)`` on process 0.
        jsonl_path: Also append every record to this JSONL file (process 0).
        progress: Show a progress bar (``None``: when the output is a terminal).
        description: The progress bar's label.

    Returns:
        A `LoopResult`.

    Raises:
        NonFiniteError: If the state records a NaN/inf when its metrics are read.
    """
    primary = is_primary()
    iteration = int(state.iteration)
    step = iteration * steps_per_iteration
    n_calls = max(0, (n_iterations - iteration) // iterations_per_call)
    disable = (None if progress is None else not progress) if primary else True
    bar = ProgressBar(
        n_iterations * steps_per_iteration,
        initial_step=step,
        disable=disable,
        description=description,
    )
    jsonl = JSONLWriter(jsonl_path) if jsonl_path is not None and primary else None
    sinks = [fn for fn in (log_fn if primary else None, jsonl, bar) if fn is not None]
    eval_history: list[tuple[int, dict[str, float]]] = []
    latest: dict[str, float] = {}
    last_run: dict[str, int | None] = {"evaluation": None, "video": None}
    clock = {"time": time.perf_counter(), "step": step, "excluded": 0.0}
    start = clock["time"]

    def emit(record: dict[str, float], at_step: int) -> None:
        latest.update(record)
        for sink in sinks:
            sink(record, at_step)

    def read(metrics: Metrics, non_finite: Any, at_step: int) -> dict[str, float]:
        # One sync for the metrics and the NaN/inf record.
        host_metrics, host_non_finite = jax.device_get((metrics, non_finite))
        raise_if_non_finite(host_non_finite, at_step)
        record = {k: float(v) for k, v in host_metrics.items()}
        if LogLevel.THROUGHPUT in log_level:
            now = time.perf_counter()
            busy = max(now - clock["time"] - clock["excluded"], 1e-9)
            record["throughput/sps"] = (at_step - clock["step"]) / busy
            record["throughput/wall_time"] = now - start
            clock.update(time=now, step=at_step, excluded=0.0)
        return record

    def periodic(name: str, task: Periodic | None, at_step: int, last: bool) -> bool:
        if task is None or (task.primary_only and not primary):
            return False
        return last or _due(at_step, last_run[name], task.every_steps)

    def run_task(
        name: str, task: Periodic, current: Any, at_iteration: int, at_step: int
    ) -> dict[str, float]:
        began = time.perf_counter()
        result = task.run(current, at_iteration, at_step) or {}
        clock["excluded"] += time.perf_counter() - began
        last_run[name] = at_step
        if name == "evaluation":
            eval_history.append((at_step, dict(result)))
        return result

    def save_due(at_step: int, last: bool) -> bool:
        # With several processes every one must call save_checkpoint (it agrees on the
        # decision collectively); alone, a hook's is_due spares the call.
        if checkpoint is None:
            return False
        is_due = getattr(checkpoint, "is_due", None)
        if is_due is None or jax.process_count() > 1:
            return True
        return bool(is_due(at_step, final=last))

    pending: tuple[Metrics, Any, int] | None = None
    try:
        if evaluation is not None and evaluation.at_start and step == 0:
            emit(run_task("evaluation", evaluation, state, iteration, step), step)

        for call in range(n_calls):
            state, metrics = train_call(state)
            if pending is not None:  # the previous call's metrics, read while this one runs
                emit(read(*pending), pending[2])
                pending = None
            iteration += iterations_per_call
            step = iteration * steps_per_iteration
            last = call == n_calls - 1
            log_due = last or (call + 1) % log_every_calls == 0
            evaluate = periodic("evaluation", evaluation, step, last)
            record_video = periodic("video", video, step, last)
            save = save_due(step, last)

            if log_due and not (last or evaluate or record_video or save):
                pending = (metrics, jax.tree.map(jnp.copy, state.non_finite), step)
                continue
            record = read(metrics, state.non_finite, step) if log_due else {}
            if evaluate:
                assert evaluation is not None
                record.update(run_task("evaluation", evaluation, state, iteration, step))
            if record_video:
                assert video is not None
                record.update(run_task("video", video, state, iteration, step))
            if record:
                emit(record, step)
            if save:
                save_checkpoint(checkpoint, state, step, record, final=last, mesh=mesh)

        if n_calls == 0 and evaluation is not None and last_run["evaluation"] != step:
            emit(run_task("evaluation", evaluation, state, iteration, step), step)
    finally:
        bar.close()
        if jsonl is not None:
            jsonl.close()
    return LoopResult(state=state, eval_history=eval_history, metrics=latest, step=step)
