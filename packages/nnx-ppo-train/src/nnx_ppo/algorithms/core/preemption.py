"""Stopping a run cleanly: a stop request the trainers honour between device calls.

Cluster schedulers (SLURM, Kubernetes) preempt a job with ``SIGTERM`` and a grace
period before ``SIGKILL``. A trainer given ``stop=`` (a run option of `train_ppo`,
`train_distillation` and `train_many`) asks it after every device call; once it answers
true, the run stops there: the pending metrics are logged, what was due at that step
anyway runs, a checkpoint is written (``final=True``: whatever the hook's cadence, and
waited for) and the trainer returns with ``result.stopped`` set. The stop adds no log
record, evaluation or video of its own, so resuming from that checkpoint continues the
run exactly: the resumed run logs, evaluates and saves at the steps the uninterrupted
run does and ends with the same state, bit for bit.

`StopOnSignal` turns ``SIGTERM`` and ``SIGINT`` (Ctrl-C) into such a request for the
duration of a ``with`` block; a second ``SIGINT`` interrupts at once, as usual::

    with Checkpointer("runs/a/checkpoints", config=config, resume=True) as ckpt, \\
            StopOnSignal() as stop:
        result = train_ppo(env, nets, config, checkpoint=ckpt, stop=stop)
    if result.stopped:
        raise SystemExit(stop.exit_code)   # 143 after SIGTERM: "terminated, resumable"

Any callable without arguments is a stop request too (``stop=lambda: time.time() >
deadline``); `StopRequest` is one that code can set (``request()``), e.g. from another
thread. With several processes, process 0's answer is broadcast, so every process stops
after the same call.

Examples:
    >>> stop = StopRequest()
    >>> bool(stop()), stop.reason
    (False, None)
    >>> stop.request("time limit")
    >>> bool(stop()), stop.reason
    (True, 'time limit')
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils

__all__ = ["StopFn", "StopOnSignal", "StopRequest", "agreed_stop"]

StopFn = Callable[[], Any]
"""A stop request: called without arguments after every device call; truthy stops."""


class StopRequest:
    """A stop request that code sets: ``request(reason)``; calling it says whether a
    stop was requested. Thread-safe (a flag)."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason: str | None = None

    def request(self, reason: str = "requested") -> None:
        """Ask the run to stop after its current device call."""
        if not self._event.is_set():
            self.reason = reason
        self._event.set()

    def __call__(self) -> bool:
        return self._event.is_set()


class StopOnSignal(StopRequest):
    """A `StopRequest` set by ``SIGTERM`` or ``SIGINT`` while its ``with`` block runs.

    Entering installs the handlers (in the main thread only, as Python requires);
    leaving restores the previous ones. The first signal requests the stop; a second
    ``SIGINT`` raises ``KeyboardInterrupt`` at once (a user's Ctrl-C twice still
    interrupts); further ``SIGTERM`` are ignored while the run finishes its checkpoint.

    Args:
        signals: The signals that request a stop (default ``SIGTERM`` and ``SIGINT``).

    Attributes:
        signal: The first signal received (a ``signal.Signals``), or ``None``.

    Examples:
        >>> import os, signal
        >>> with StopOnSignal() as stop:
        ...     os.kill(os.getpid(), signal.SIGTERM)
        ...     stopped = stop()
        >>> stopped, stop.reason, stop.exit_code
        (True, 'SIGTERM', 143)
    """

    def __init__(self, signals: Sequence[int] = (signal.SIGTERM, signal.SIGINT)) -> None:
        super().__init__()
        self.signals = tuple(signal.Signals(s) for s in signals)
        self.signal: signal.Signals | None = None
        self._previous: dict[signal.Signals, Any] = {}

    @property
    def exit_code(self) -> int:
        """The shell's status for a process ended by the signal received, ``128 +
        signum`` (143 for ``SIGTERM``, 130 for ``SIGINT``); ``0`` without one."""
        return 0 if self.signal is None else 128 + int(self.signal)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        received = signal.Signals(signum)
        if self.signal is not None and received == signal.SIGINT:
            raise KeyboardInterrupt  # Ctrl-C twice: stop now
        if self.signal is None:
            self.signal = received
            self.request(received.name)

    def __enter__(self) -> StopOnSignal:
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError(
                "StopOnSignal() must be entered in the main thread (Python delivers "
                "signals there); in another thread pass a StopRequest() and call its "
                "request() from the main thread's handler."
            )
        for sig in self.signals:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()


def agreed_stop(stop: StopFn | None) -> bool:
    """Whether the run stops now: ``stop()``, with several processes process 0's
    answer broadcast to all (a collective: every process calls this after every call)."""
    if stop is None:
        return False
    wanted = bool(stop())
    if jax.process_count() == 1:
        return wanted
    return bool(int(multihost_utils.broadcast_one_to_all(np.int32(wanted))))
