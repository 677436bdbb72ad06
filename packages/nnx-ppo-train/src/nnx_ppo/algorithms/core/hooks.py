"""The hooks of a run: `CheckpointHook`, what a trainer's ``checkpoint=`` argument must
provide, and `Periodic`, a task the run does between device calls (its evaluation and
videos are ones; the ``tasks=`` run option adds yours).

`Checkpointer` implements `CheckpointHook` with orbax; any object with the two methods
below works (e.g. to save to another store).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = ["CheckpointHook", "Periodic"]


@dataclasses.dataclass(frozen=True)
class Periodic:
    """A task a run does between device calls, every ``every_steps`` env steps and after
    the last call: the run's evaluation and videos, and the tasks a user passes as
    ``train_ppo(..., tasks=[Periodic(...)])``.

    A resumed run does its tasks at the steps the uninterrupted run does (`fires`).

    Attributes:
        run: ``run(state, iteration, step)``, given the training state after the call
            (its ``params``, ``network_state``...; in a sweep every leaf has the run
            axis first), the iteration count and the exact env step count. It returns
            metrics to log with that step (a dict of floats; in a sweep a list of one
            dict per run) or ``None``. The state is read-only: the next call donates it.
        every_steps: Run whenever this many env steps have passed since the task last
            ran (checked after every device call). ``None``: only after the last call
            (and before the first, with ``at_start``).
        at_start: Also run before the first call of a fresh run.
        primary_only: Run on process 0 only (e.g. writing files); otherwise every
            process runs it (needed for anything collective on a multi-host mesh).
        history: Its records also go to the run's ``eval_history`` (the evaluation).

    Examples:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> def weight_norm(state, iteration, step):
        ...     leaves = [jnp.sum(x**2) for x in jax.tree.leaves(state.params)]
        ...     return {"diag/weight_norm": float(jnp.sqrt(sum(leaves)))}
        >>> task = Periodic(weight_norm, every_steps=10_000)
    """

    run: Callable[[Any, int, int], dict[str, float] | list[dict[str, float]] | None]
    every_steps: int | None
    at_start: bool = False
    primary_only: bool = False
    history: bool = False

    def __post_init__(self) -> None:
        if not callable(self.run):
            raise TypeError(
                f"Periodic(run={self.run!r}): run must be a function "
                "run(state, iteration, step) -> metrics or None."
            )
        every = self.every_steps
        if every is not None and (
            isinstance(every, bool) or not isinstance(every, int) or every < 1
        ):
            raise ValueError(
                f"Periodic(every_steps={every!r}) must be a positive int number of env "
                "steps, or None (only after the last call)."
            )


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
