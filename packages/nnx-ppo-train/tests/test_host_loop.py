"""The host loop shared by train_ppo and train_distillation: the order in which it
dispatches calls, reads their metrics, evaluates and offers checkpoints."""

from __future__ import annotations

import jax.numpy as jnp
import pytest
from flax import struct

from nnx_ppo.algorithms._host_loop import Periodic, run_calls
from nnx_ppo.algorithms.config import LogLevel
from nnx_ppo.algorithms.faults import NonFiniteError, healthy
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


def _run(rec: Recorder, n: int = 4, **kwargs):
    return run_calls(
        State(jnp.asarray(0), healthy()),
        rec.call,
        steps_per_iteration=10,
        iterations_per_call=1,
        n_iterations=n,
        log_every_calls=1,
        log_level=LogLevel.DEFAULT,
        log_fn=rec.log,
        progress=False,
        **kwargs,
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

    result = _run(rec, evaluation=Periodic(evaluate, every_steps=20, at_start=True))
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
