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

**Resume.** Every periodic decision is a function of the exact step count alone (the
logging cadence counts device calls from the start of the run, a periodic task's
firings are those of the uninterrupted run, see `fires`), so a run resumed from a
checkpoint logs, evaluates, records and saves at exactly the steps the uninterrupted
run does, and its JSONL file is rewound to the resume step first (see `JSONLWriter`).

**Runs.** With ``runs=K`` (a sweep, `nnx_ppo.algorithms.sweeps.many`) the state and the
metrics carry a leading run axis: every record is split into ``K`` records, one per run,
which go to the sinks with their run index (``log_fn(metrics, step, run)``, one JSONL
line per run with a ``"run"`` field); the progress bar counts the env steps of all runs
together; evaluations return one record per run.

**Stopping.** With a ``stop`` request (`nnx_ppo.algorithms.core.preemption`), the loop asks
it after every call; once it answers true the loop logs what is pending, runs what is
due at that step anyway, writes a checkpoint (``final=True``) and returns with
``stopped=True``. The stop adds no log record, evaluation or video of its own, so the
resumed run's records are the uninterrupted run's.

**Nothing lost late.** When a checkpoint is due after a call, it is written even if
that call's evaluation, video or logging raises (the error is re-raised after the
save), so a failure after training never costs the trained state.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

from nnx_ppo.algorithms.config import LogLevel
from nnx_ppo.algorithms.core.distributed import is_primary, save_checkpoint
from nnx_ppo.algorithms.core.faults import raise_if_non_finite
from nnx_ppo.algorithms.core.hooks import Periodic
from nnx_ppo.algorithms.core.logging import EVAL_REWARD, JSONLWriter, LogFn, ProgressBar
from nnx_ppo.algorithms.core.preemption import StopFn, agreed_stop
from nnx_ppo.algorithms.core.trees import copied
from nnx_ppo.algorithms.types import Metrics

__all__ = [
    "CallPlan",
    "Clock",
    "LoopResult",
    "Periodic",
    "fires",
    "plan_call",
    "run_calls",
    "split_runs",
]


def fires(task: Periodic, step: int, previous: int, call_steps: int) -> bool:
    """Whether ``task`` runs after the call that took the run from ``previous`` to
    ``step`` env steps (not counting the last call, after which every task runs).

    The uninterrupted run's rule is "when ``every_steps`` have passed since the task last
    ran", checked after every call of ``call_steps`` steps. Its firings are therefore
    periodic: they start at step 0 for a task that runs before training
    (``at_start``), else after the first call (the task has never run), and recur every
    ``ceil(every_steps / call_steps)`` calls. This computes them from the step alone, so a
    resumed run fires at the same steps as the uninterrupted one.

    Examples:
        >>> task = Periodic(lambda *_: None, every_steps=50, at_start=True)
        >>> [s for s in range(16, 257, 16) if fires(task, s, s - 16, 16)]
        [64, 128, 192, 256]
        >>> late = Periodic(lambda *_: None, every_steps=50)
        >>> [s for s in range(16, 257, 16) if fires(late, s, s - 16, 16)]
        [16, 80, 144, 208]
    """
    if task.every_steps is None:
        return False
    anchor = 0 if task.at_start else call_steps
    period = -(-task.every_steps // call_steps) * call_steps
    if step < anchor:
        return False
    return previous < anchor or (step - anchor) // period > (previous - anchor) // period


@dataclasses.dataclass(frozen=True)
class LoopResult:
    """What `run_calls` returns: the final state, the evaluation history
    ``[(step, metrics)]`` of the tasks with ``history`` (the evaluation), the latest
    value of every logged metric and the exact env step count reached, and whether a
    stop request ended the run early (``stopped``). With ``runs=K`` each ``metrics`` (in
    the history and the latest) is a list of ``K`` dicts, one per run."""

    state: Any
    eval_history: list[tuple[int, Any]]
    metrics: Any
    step: int
    stopped: bool = False


Record = list[dict[str, float]]
"""The loop's records: one dict of float metrics per run (one for a single run)."""


def split_runs(metrics: Metrics, runs: int | None) -> Record:
    """Host copies of ``metrics`` as one dict of floats per run: their ``[K]`` leaves
    split by run with ``runs=K``, else one dict of the scalars."""
    host = jax.device_get(metrics)
    if runs is None:
        return [{k: float(v) for k, v in host.items()}]
    return [{k: float(v[i]) for k, v in host.items()} for i in range(runs)]


def _bar_record(records: Record) -> dict[str, float]:
    """What the progress bar shows for a sweep's records: the runs' summed throughput
    and their median evaluation return."""
    if len(records) == 1:
        return records[0]
    shown: dict[str, float] = {}
    if "throughput/sps" in records[0]:
        shown["throughput/sps"] = sum(r["throughput/sps"] for r in records)
    returns = [r[EVAL_REWARD] for r in records if EVAL_REWARD in r]
    if returns:
        shown[EVAL_REWARD] = float(np.median(returns))
    return shown


def _flat(records: Record, sweep: bool) -> dict[str, float]:
    """A checkpoint's metrics: the record of a single run, or a sweep's as
    ``run_<i>/<name>``."""
    if not sweep:
        return records[0]
    return {f"run_{i}/{k}": v for i, record in enumerate(records) for k, v in record.items()}


class Clock:
    """The ``throughput/*`` metrics: env steps per second of device work since the last
    log (the time spent in evaluations and videos excluded) and the wall time."""

    def __init__(self, step: int) -> None:
        self.start = self._time = time.perf_counter()
        self._step = step
        self._excluded = 0.0

    def exclude(self, seconds: float) -> None:
        """Leave ``seconds`` (an evaluation, a video) out of the next throughput."""
        self._excluded += seconds

    def throughput(self, step: int) -> dict[str, float]:
        """The metrics at ``step``; the next measurement starts here."""
        now = time.perf_counter()
        busy = max(now - self._time - self._excluded, 1e-9)
        record = {
            "throughput/sps": (step - self._step) / busy,
            "throughput/wall_time": now - self.start,
        }
        self._time, self._step, self._excluded = now, step, 0.0
        return record


@dataclasses.dataclass(frozen=True)
class CallPlan:
    """What the host does after one device call (a function of the step alone).

    Attributes:
        log: Read and log the call's metrics.
        tasks: The periodic tasks due (evaluation, videos, the user's), in order.
        save: Offer the state to the checkpoint hook.
        last: The run's last call.
    """

    log: bool
    tasks: tuple[Periodic, ...]
    save: bool
    last: bool

    @property
    def defer_read(self) -> bool:
        """Only a log is due: read the metrics after the next call is dispatched."""
        return self.log and not (self.last or self.tasks or self.save)


def _offers_save(checkpoint: Any, step: int, last: bool) -> bool:
    """Whether the hook is offered the state at ``step``. With several processes every
    one must call save_checkpoint (it agrees on the decision collectively); alone, a
    hook's ``is_due`` spares the call."""
    if checkpoint is None:
        return False
    is_due = getattr(checkpoint, "is_due", None)
    if is_due is None or jax.process_count() > 1:
        return True
    return bool(is_due(step, final=last))


def plan_call(
    *,
    iteration: int,
    step: int,
    call_steps: int,
    iterations_per_call: int,
    log_every_calls: int,
    last: bool,
    tasks: Sequence[Periodic],
    checkpoint: Any,
    primary: bool,
) -> CallPlan:
    """The `CallPlan` after the call that reached ``iteration`` / ``step``. Calls are
    counted from the start of the run, so a resumed run keeps the uninterrupted run's
    logging cadence; periodic tasks fire as `fires` says."""

    def due(task: Periodic) -> bool:
        if task.primary_only and not primary:
            return False
        return last or fires(task, step, step - call_steps, call_steps)

    return CallPlan(
        log=last or (iteration // iterations_per_call) % log_every_calls == 0,
        tasks=tuple(task for task in tasks if due(task)),
        save=_offers_save(checkpoint, step, last),
        last=last,
    )


def run_calls(
    state: Any,
    train_call: Callable[[Any], tuple[Any, Metrics]],
    *,
    steps_per_iteration: int,
    iterations_per_call: int,
    n_iterations: int,
    log_every_calls: int,
    log_level: LogLevel,
    tasks: Sequence[Periodic] = (),
    checkpoint: Any = None,
    mesh: Mesh | None = None,
    log_fn: LogFn | None = None,
    jsonl_path: str | os.PathLike[str] | None = None,
    progress: bool | None = None,
    description: str = "train_ppo",
    runs: int | None = None,
    stop: StopFn | None = None,
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
        tasks: The periodic tasks (the evaluation, videos, the user's), run in this
            order when due; the records of those with ``history`` also go to
            ``eval_history``.
        checkpoint: A checkpoint hook offered the state after every call (see
            `save_checkpoint`); its optional ``is_due`` lets the loop skip the offer.
        mesh: The run's mesh, or ``None``.
        log_fn: Called as ``log_fn(metrics, step)`` on process 0.
        jsonl_path: Also append every record to this JSONL file (process 0).
        progress: Show a progress bar (``None``: when the output is a terminal).
        description: The progress bar's label.
        runs: ``K`` for a sweep: the state and metrics have a leading axis of ``K``
            runs, ``log_fn`` is called as ``log_fn(metrics, step, run)`` and JSONL lines
            get a ``"run"`` field (see the module docstring). ``None``: one run.
        stop: Asked after every call; when it answers true the run stops there, after a
            checkpoint (see the module docstring).

    Returns:
        A `LoopResult`.

    Raises:
        NonFiniteError: If the state records a NaN/inf when its metrics are read.
    """
    primary = is_primary()
    # A sweep's runs share their iteration count: [K] equal values.
    iteration = int(np.asarray(jax.device_get(state.iteration)).reshape(-1)[0])
    step = start_step = iteration * steps_per_iteration
    call_steps = steps_per_iteration * iterations_per_call
    n_calls = max(0, (n_iterations - iteration) // iterations_per_call)
    disable = (None if progress is None else not progress) if primary else True
    n_runs = 1 if runs is None else runs
    bar = ProgressBar(
        n_iterations * steps_per_iteration * n_runs,
        initial_step=step * n_runs,
        disable=disable,
        description=description,
    )
    jsonl = None
    if jsonl_path is not None and primary:
        # A resumed run first drops what the interrupted attempt logged after its step.
        jsonl = JSONLWriter(jsonl_path, resume_from=start_step if start_step > 0 else None)
    # The file first: a failing log_fn cannot keep a record from it.
    sinks = [fn for fn in (jsonl, log_fn if primary else None) if fn is not None]
    eval_history: list[tuple[int, Record]] = []
    latest: Record = [{} for _ in range(n_runs)]
    evaluated_at: int | None = None
    tasks = [task for task in tasks if task is not None]
    clock = Clock(step)

    def emit(records: Record, at_step: int) -> None:
        for run, record in enumerate(records):
            latest[run].update(record)
            for sink in sinks:
                if runs is None:
                    sink(record, at_step)
                else:
                    sink(record, at_step, run)  # type: ignore[call-arg]
        bar(_bar_record(records), at_step * n_runs)

    def read(metrics: Metrics, non_finite: Any, at_step: int) -> Record:
        # One sync for the metrics and the NaN/inf record.
        host_metrics, host_non_finite = jax.device_get((metrics, non_finite))
        raise_if_non_finite(host_non_finite, at_step)
        records = split_runs(host_metrics, runs)
        if LogLevel.THROUGHPUT in log_level:
            throughput = clock.throughput(at_step)
            for record in records:
                record.update(throughput)
        return records

    def run_task(task: Periodic, current: Any, at_iteration: int, at_step: int) -> Record:
        nonlocal evaluated_at
        began = time.perf_counter()
        result = task.run(current, at_iteration, at_step) or {}
        clock.exclude(time.perf_counter() - began)
        records = [dict(r) for r in result] if isinstance(result, list) else [dict(result)]
        if len(records) == 1 and n_runs > 1:  # no metrics (e.g. a video): none per run
            records = [dict(records[0]) for _ in range(n_runs)]
        if task.history:
            evaluated_at = at_step
            eval_history.append((at_step, [dict(r) for r in records]))
        return records

    def merge(records: Record, more: Record) -> Record:
        for record, extra in zip(records, more, strict=True):
            record.update(extra)
        return records

    pending: tuple[Metrics, Any, int] | None = None
    stopped = False
    try:
        if step == 0:
            first = [task for task in tasks if task.at_start]
            if first and n_calls:  # the evaluation before training compiles too
                bar.compiling(note="with the evaluation before training")
            starting = [run_task(task, state, iteration, step) for task in first]
            if starting:
                emit(functools.reduce(merge, starting), step)

        for call in range(n_calls):
            if call == 0:  # the first call compiles (synchronously) before it runs
                bar.compiling()
                compile_start = time.perf_counter()
            state, metrics = train_call(state)
            if call == 0:
                bar.compiled()
                # throughput/sps counts training: the compilation is left out of it.
                clock.exclude(time.perf_counter() - compile_start)
            if pending is not None:  # the previous call's metrics, read while this one runs
                emit(read(*pending), pending[2])
                pending = None
            iteration += iterations_per_call
            step = iteration * steps_per_iteration
            plan = plan_call(
                iteration=iteration,
                step=step,
                call_steps=call_steps,
                iterations_per_call=iterations_per_call,
                log_every_calls=log_every_calls,
                last=call == n_calls - 1,
                tasks=tasks,
                checkpoint=checkpoint,
                primary=primary,
            )
            stopped = not plan.last and agreed_stop(stop)
            if stopped:  # the checkpoint a resume continues from, and nothing else added
                plan = dataclasses.replace(plan, save=checkpoint is not None, last=True)
            elif plan.defer_read:
                pending = (metrics, copied(state.non_finite), step)
                continue
            records = (
                read(metrics, state.non_finite, step) if plan.log else [{} for _ in range(n_runs)]
            )
            try:
                for task in plan.tasks:
                    merge(records, run_task(task, state, iteration, step))
                if any(records):
                    emit(records, step)
            finally:
                # Written even if an evaluation, a video or a sink failed: a failure
                # after training never costs the trained state. (A NaN/inf record
                # raised in read() above, and such a state is never saved.)
                if plan.save:
                    save_checkpoint(
                        checkpoint,
                        state,
                        step,
                        _flat(records, runs is not None),
                        final=plan.last,
                        mesh=mesh,
                    )
            if stopped:
                break

        # Nothing to train (total_steps=0): evaluate once. A resumed finished run does
        # not: its evaluations are the interrupted attempt's.
        if n_calls == 0 and start_step == 0 and evaluated_at != step:
            ending = [run_task(task, state, iteration, step) for task in tasks if task.history]
            if ending:
                emit(functools.reduce(merge, ending), step)
    finally:
        bar.close()
        if jsonl is not None:
            jsonl.close()
    if runs is None:  # one run: plain dicts
        return LoopResult(
            state=state,
            eval_history=[(at, records[0]) for at, records in eval_history],
            metrics=latest[0],
            step=step,
            stopped=stopped,
        )
    return LoopResult(
        state=state, eval_history=eval_history, metrics=latest, step=step, stopped=stopped
    )
