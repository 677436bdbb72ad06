"""The host loop shared by train_ppo and train_distillation: the order in which it
dispatches calls, reads their metrics, evaluates and offers checkpoints."""

from __future__ import annotations

import jax.numpy as jnp
import pytest
from flax import struct

from nnx_ppo.algorithms.config import LogLevel
from nnx_ppo.algorithms.core.faults import NonFiniteError, healthy
from nnx_ppo.algorithms.core.hooks import Periodic
from nnx_ppo.algorithms.trainer.host_loop import run_calls
from nnx_ppo.algorithms.types import NonFinite


@struct.dataclass
class State:
    iteration: jnp.ndarray
    non_finite: NonFinite


class Recorder:
    """A fake device call and hooks that write what happens, in order, to ``events``."""

    def __init__(self, nan_at: int | None = None):
        self.events: list[str] = []
        self.nan_at = nan_at

    def call(self, state: State) -> tuple[State, dict]:
        n = int(state.iteration) + 1
        self.events.append(f"call {n}")
        non_finite = state.non_finite
        if n == self.nan_at:
            non_finite = NonFinite(
                iteration=jnp.asarray(n, jnp.int32),
                quantity=jnp.asarray(0, jnp.int32),
                value=jnp.asarray(jnp.nan, jnp.float32),
            )
        return State(jnp.asarray(n), non_finite), {"loss/total": jnp.asarray(float(n))}

    def log(self, metrics, step) -> None:
        kind = "eval" if "eval/x" in metrics else "log"
        self.events.append(f"{kind} {step}")


def _run(rec: Recorder, n: int = 4, start: int = 0, **kwargs):
    """A loop over ``n`` iterations of 10 steps, one a call, from iteration ``start``
    (a resumed run when > 0), logging to ``rec`` after every call unless told."""
    options = {"log_every_calls": 1, "progress": False, "log_fn": rec.log, **kwargs}
    return run_calls(
        State(jnp.asarray(start), healthy()),
        rec.call,
        steps_per_iteration=10,
        iterations_per_call=1,
        n_iterations=n,
        log_level=LogLevel.DEFAULT,
        **options,
    )


def test_metrics_are_read_after_the_next_call_is_dispatched():
    rec = Recorder()
    result = _run(rec)
    # Each record is logged once the following call is queued, under its own step;
    # the last call is read at once.
    assert rec.events == [
        "call 1",
        "call 2",
        "log 10",
        "call 3",
        "log 20",
        "call 4",
        "log 30",
        "log 40",
    ]
    assert result.step == 40 and result.metrics["loss/total"] == 4.0


def test_a_call_whose_state_is_needed_is_read_before_the_next():
    rec = Recorder()

    def evaluate(state, iteration, step):
        rec.events.append(f"evaluate {step}")
        return {"eval/x": float(iteration)}

    result = _run(rec, tasks=[Periodic(evaluate, every_steps=20, at_start=True, history=True)])
    assert rec.events == [
        "evaluate 0",
        "eval 0",
        "call 1",
        "call 2",
        "log 10",
        "evaluate 20",
        "eval 20",  # the call's record with the evaluation's metrics
        "call 3",
        "call 4",
        "log 30",
        "evaluate 40",
        "eval 40",
    ]
    assert [s for s, _ in result.eval_history] == [0, 20, 40]


class Hook:
    """A checkpoint hook that is due every ``every`` steps."""

    def __init__(self, rec: Recorder, every: int):
        self.rec, self.every = rec, every

    def is_due(self, step, *, final=False):
        return final or step % self.every == 0

    def save(self, state, step, metrics, *, final=False):
        self.rec.events.append(f"save {step}")
        return True


def test_checkpoints_are_offered_only_when_due_and_in_order():
    rec = Recorder()
    _run(rec, checkpoint=Hook(rec, every=30))
    assert rec.events == [
        "call 1",
        "call 2",
        "log 10",
        "call 3",
        "log 20",
        "log 30",
        "save 30",
        "call 4",
        "log 40",
        "save 40",
    ]


def test_a_non_finite_record_raises_when_its_metrics_are_read():
    rec = Recorder(nan_at=2)
    with pytest.raises(NonFiniteError, match="iteration 2"):
        _run(rec, n=6)
    # Read (and raised) while call 3 runs: nothing after it was dispatched.
    assert rec.events == ["call 1", "call 2", "log 10", "call 3"]


# --------------------------------------------------------------------------- resume


def _events_of(start_iteration: int, n: int, **kwargs) -> list[str]:
    """The events of a loop over ``n`` iterations of 10 steps that starts at
    ``start_iteration`` (a resumed run when > 0), with an evaluation every 35 steps, a
    video every 25 and a checkpoint every 40, logging every 3 calls."""
    rec = Recorder()

    def evaluate(state, iteration, step):
        return {"eval/x": float(step)}

    def video(state, iteration, step):
        rec.events.append(f"video {step}")

    _run(
        rec,
        n,
        start=start_iteration,
        log_every_calls=3,
        tasks=[
            Periodic(evaluate, every_steps=35, at_start=kwargs.get("at_start", True), history=True),
            Periodic(video, every_steps=25),
        ],
        checkpoint=Hook(rec, every=40),
    )
    return [e for e in rec.events if not e.startswith("call")]


@pytest.mark.parametrize("at_start", [True, False])
@pytest.mark.parametrize("resume_at", [1, 4, 5, 7, 11])
def test_a_resumed_loop_runs_every_periodic_task_where_the_uninterrupted_one_does(
    at_start, resume_at
):
    # Uninterrupted: evaluations at 0 (at_start) and after 40, 80, 120 (35 steps have
    # passed since the last one, checked every 10), or without at_start after 10 (never
    # evaluated yet), 50, 90, 120 (the end); videos after 10, 40, 70, 100, 120; saves at
    # 40, 80, 120; logs after calls 3, 6, 9 and 12 (a record with an evaluation counts
    # as "eval"). A run resumed after `resume_at` calls must do exactly what the
    # uninterrupted run does after that point, with the logs still after calls 3, 6, 9.
    def after(events, iteration):
        return [e for e in events if int(e.split()[-1]) > iteration * 10]

    full = _events_of(0, 12, at_start=at_start)
    evaluations = [0, 40, 80, 120] if at_start else [10, 50, 90, 120]
    assert [e for e in full if e.startswith("eval")] == [f"eval {s}" for s in evaluations]
    assert [e for e in full if e.startswith("video")] == [
        "video 10", "video 40", "video 70", "video 100", "video 120"
    ]  # fmt: skip
    assert [e for e in full if e.startswith("save")] == ["save 40", "save 80", "save 120"]
    logs = [s for s in (30, 60, 90) if s not in evaluations]
    assert [e for e in full if e.startswith("log")] == [f"log {s}" for s in logs]
    resumed = _events_of(resume_at, 12, at_start=at_start)
    assert resumed == after(full, resume_at)


def test_a_resumed_finished_run_repeats_nothing():
    rec = Recorder()
    result = _run(
        rec, start=4, tasks=[Periodic(lambda *_: {"eval/x": 1.0}, every_steps=None, history=True)]
    )
    # The interrupted attempt already evaluated at step 40, its last step.
    assert rec.events == [] and result.eval_history == [] and result.step == 40


class FailingEvaluation(Exception):
    pass


@pytest.mark.parametrize("fails", ["evaluation", "video", "log_fn"])
def test_a_due_checkpoint_is_written_even_if_the_calls_tasks_fail(fails):
    rec = Recorder()

    def evaluate(state, iteration, step):
        if fails == "evaluation" and step == 40:
            raise FailingEvaluation("the final evaluation failed")
        return {"eval/x": 1.0}

    def video(state, iteration, step):
        if fails == "video" and step == 40:
            raise FailingEvaluation("rendering failed")

    def log_fn(metrics, step):
        if fails == "log_fn" and step == 40:
            raise FailingEvaluation("the logging service is down")
        rec.log(metrics, step)

    with pytest.raises(FailingEvaluation):
        _run(
            rec,
            log_fn=log_fn,
            tasks=[
                Periodic(evaluate, every_steps=None, at_start=False, history=True),
                Periodic(video, every_steps=None),
            ],
            checkpoint=Hook(rec, every=1000),
        )
    # The final checkpoint is written although the end of the run failed.
    assert rec.events[-1] == "save 40"


def test_a_stop_request_ends_the_run_after_the_call_with_a_final_save():
    # Asked after every call: true after the 3rd (step 30). Logs every 2 calls (due at
    # 20, 40), evaluations every 20 steps (at 10, 30, 50), checkpoints every 20: the stop
    # runs what is due at 30 (the evaluation), adds no log, and saves (final).
    rec = Recorder()
    asked = []

    def stop() -> bool:
        asked.append(len(asked) + 1)
        return len(asked) == 3

    class Final(Hook):
        def save(self, state, step, metrics, *, final=False):
            self.rec.events.append(f"save {step}{' final' if final else ''}")

    result = _run(
        rec, n=6, stop=stop, checkpoint=Final(rec, every=20), log_every_calls=2,
        tasks=[Periodic(lambda *_: {"eval/x": 1.0}, every_steps=20, history=True)],
    )  # fmt: skip
    assert result.stopped and result.step == 30
    assert rec.events == [
        "call 1", "eval 10", "call 2", "log 20", "save 20", "call 3", "eval 30", "save 30 final"
    ]  # fmt: skip
    last = _run(Recorder(), n=1, stop=lambda: True)  # not asked after the last call
    assert not last.stopped and last.step == 10


def test_the_progress_bar_shows_the_first_call_compiling(capsys):
    _run(Recorder(), n=2, progress=True)
    err = capsys.readouterr().err
    assert "train_ppo (compiling)" in err and "train_ppo: 100%" in err


def test_throughput_leaves_the_first_calls_compilation_out(monkeypatch):
    # A fake clock: the first call "compiles" for 100 s, every call runs for 1 s. The
    # first record's rate counts that call's 10 steps over its 1 s of running, not 101 s.
    from nnx_ppo.algorithms.trainer import host_loop

    now = [0.0]
    monkeypatch.setattr(host_loop.time, "perf_counter", lambda: now[0])
    rec = Recorder()

    def call(state):
        now[0] += 101.0 if int(state.iteration) == 0 else 1.0
        return rec.call(state)

    seen = []
    run_calls(
        State(jnp.asarray(0), healthy()), call, steps_per_iteration=10, iterations_per_call=1,
        n_iterations=3, log_every_calls=1, log_level=LogLevel.DEFAULT | LogLevel.THROUGHPUT,
        progress=False, log_fn=lambda metrics, step: seen.append(metrics["throughput/sps"]),
    )  # fmt: skip
    # The first record is read once the second call is dispatched, 1 s after the first
    # returned: 10 steps per second, not 10 over 102 s (0.1) as it was with the
    # compilation counted; the second likewise. (The last is read at once, which this
    # clock, standing still while reading, cannot time.)
    assert seen[:2] == pytest.approx([10.0, 10.0])
