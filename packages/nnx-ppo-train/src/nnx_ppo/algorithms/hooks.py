"""`CheckpointHook`: what a trainer's ``checkpoint=`` argument must provide.

`Checkpointer` implements it with orbax; any
object with the two methods below works (e.g. to save to another store).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = ["CheckpointHook"]


@runtime_checkable
class CheckpointHook(Protocol):
    """What ``train_ppo(..., checkpoint=...)`` calls; implemented by
    `Checkpointer`.

    ``restore`` is called once before training with a freshly initialised state as
    template and returns the state to resume from (or ``None`` to start fresh);
    ``save`` is called after every device call with the new state and the exact env
    step count, with ``final=True`` after the last one (the hook decides whether to
    write; it must write when ``final``). ``save`` must have read (copied) ``state``
    before it returns: the next device call donates the state's buffers. It should not
    write a state whose ``non_finite`` record is set (raise
    `NonFiniteError`).

    In a multi-process run ``restore`` and ``save`` are called on process 0 only, with
    host copies of the state (see `save_checkpoint`);
    an optional ``is_due(step, *, final)`` method lets the other processes skip
    gathering the state when no save is due.
    """

    def restore(self, template: Any) -> Any:
        """The state to resume from, or ``None``."""
        ...

    def save(
        self,
        state: Any,
        step: int,
        metrics: Mapping[str, float],
        *,
        final: bool = False,
    ) -> bool | None:
        """Save (or skip, per the hook's own policy) the state at ``step``."""
        ...
