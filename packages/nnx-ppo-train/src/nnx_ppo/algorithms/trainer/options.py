"""The run options every trainer takes: `RunOptions`, defined once.

`train_ppo`, `train_distillation` and `train_many` take their configuration as a
frozen config object and, after it, the same keyword *run options*: where the run
logs, evaluates, checkpoints and which devices it uses. They are declared here once,
as the `RunOptions` ``TypedDict`` the entry points unpack (PEP 692), so a type checker
knows every key and its type, and resolved once, by `resolve_options`, into a
`RunSettings` with every default filled in::

    def train_ppo(env, networks, config, **options: Unpack[RunOptions[LogFn]]):
        run = resolve_options("train_ppo", options, env=env)   # checked, defaults in
        ...run.log_fn, run.eval_env, run.devices...

A misspelled option is a ``TypeError`` that names the function, the key and the valid
keys, raised before anything is compiled.

Examples:
    >>> run = resolve_options("train_ppo", {"progress": False}, env="env")
    >>> run.progress, run.eval_env, run.checkpoint
    (False, 'env', None)
    >>> resolve_options("train_ppo", {"log_func": print}, env="env")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    TypeError: train_ppo() got an unknown run option 'log_func' (did you mean 'log_fn'?); ...
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypedDict, TypeVar

import jax
from jax.sharding import Mesh

from nnx_ppo.algorithms.core.checks import check_run_arguments
from nnx_ppo.algorithms.core.hooks import CheckpointHook, Periodic
from nnx_ppo.algorithms.core.preemption import StopFn
from nnx_ppo.algorithms.core.randomization import RandomizationFn

__all__ = ["Host", "RunOptions", "RunSettings", "resolve_options"]

LogFnT = TypeVar("LogFnT", bound=Callable[..., None])
"""The logging callback's type: `LogFn` for one run, `RunLogFn` for a sweep."""


class RunOptions(TypedDict, Generic[LogFnT], total=False):
    """The keyword run options of `train_ppo`, `train_distillation` and `train_many`.

    Every key is optional; an absent key takes the default of `RunSettings` (given in
    parentheses below). The type parameter is the logging callback's type: `LogFn`
    (``log_fn(metrics, step)``) for one run, `RunLogFn` (``log_fn(metrics, step,
    run)``) for a sweep.

    Attributes:
        log_fn: (``None``) Called as ``log_fn(metrics, step)`` after every
            ``log_every_calls`` device calls and after each evaluation (see
            `nnx_ppo.algorithms.core.logging` for the metric names); in a sweep as
            ``log_fn(metrics, step, run)``, once per run (`PerRun` gives every run its
            own sink). Only process 0 calls it.
        eval_env: (``None``: the training ``env``) The environment evaluations run on,
            e.g. one without reward scaling.
        progress: (``None``: when the output is a terminal) Show a progress bar, or force
            ``True`` / ``False``. A sweep's bar counts the env steps of all runs.
        jsonl_path: (``None``) Also append every log record to this JSONL file (a
            sweep's lines carry a ``"run"`` field). A resumed run first removes the
            records an interrupted attempt wrote after the resume step (see
            `JSONLWriter`).
        checkpoint: (``None``: save nothing) A `CheckpointHook`, e.g. a `Checkpointer`:
            the run resumes from what its ``restore`` returns (given a fresh state of the
            run as template) and offers it the state after every device call and at the
            end (``final=True``). A checkpoint resumes on any device count, and the
            resumed run logs, evaluates and saves at the steps the uninterrupted run
            does. A due checkpoint is written even if that call's evaluation, video or
            logging fails, so a failure after training never loses the trained state.
        devices: (``None``: all of them) The devices to train on: ``None`` for
            ``jax.devices()`` (one on a plain CPU), an ``int`` for the first that many,
            or a sequence of devices. The environments are sharded over them and the
            parameters replicated (see `nnx_ppo.algorithms.core.distributed`).
        mesh: (``None``) Instead of ``devices``, a `jax.sharding.Mesh` with a
            ``"data"`` axis (see `make_mesh`).
        randomization_fn: (``None``: the nominal model) Domain randomization with brax's
            and MuJoCo Playground's function, ``randomization_fn(model, rng[n_envs, 2])
            -> (batched_model, in_axes)`` (e.g. ``registry.get_domain_randomizer(name)``):
            each training environment gets its own model, drawn from the config's
            ``seed`` and kept in the state's ``models`` (checkpointed, resumed, sharded
            with the environments). Evaluation runs the nominal model unless
            ``EvalConfig(randomized=True)``. See `nnx_ppo.algorithms.core.randomization`.
        redraw_every: (``None``: keep the models) Draw new models every this many
            iterations (inside the jitted iteration, from the state's key); ``0`` also
            keeps them.
        stop: (``None``) A stop request, asked after every device call (e.g.
            `StopOnSignal` for a clean stop on ``SIGTERM``): once it answers true the run
            writes a checkpoint and returns with ``result.stopped`` set; resuming
            continues it exactly (see `nnx_ppo.algorithms.core.preemption`).
        stop_fn: (``None``) nnx-ppo's name for ``stop``, accepted as an alias: the same
            option under its upstream name. Give one of the two; both is a
            ``TypeError``.
        initial_eval: (``None``: the config's ``EvalConfig.at_start``) nnx-ppo's name
            for ``EvalConfig.at_start`` as a run option: ``True`` evaluates the
            untrained network at step 0, before the first iteration (logged and kept in
            ``eval_history`` like every evaluation), ``False`` does not. It overrides
            the config's field for this call only, so the config (the data a
            `Checkpointer` records) keeps what you wrote. It concerns a fresh run only:
            a resumed run never evaluates at step 0 again. ``True`` needs evaluation
            enabled (``EvalConfig(enabled=True)``).
        tasks: (``()``) Your own periodic tasks (`Periodic`), run between device calls
            after the evaluation and the videos when due, at the steps an uninterrupted
            run would run them; the metrics they return are logged with that step.
    """

    log_fn: LogFnT | None
    eval_env: Any
    progress: bool | None
    jsonl_path: str | os.PathLike[str] | None
    checkpoint: CheckpointHook | None
    devices: int | Sequence[jax.Device] | None
    mesh: Mesh | None
    randomization_fn: RandomizationFn | None
    redraw_every: int | None
    stop: StopFn | None
    tasks: Sequence[Periodic]
    stop_fn: StopFn | None
    initial_eval: bool | None


@dataclasses.dataclass(frozen=True)
class Host:
    """The host-side run options, checked when built (`check_run_arguments`).

    Attributes:
        log_fn: ``log_fn(metrics, step)`` (a sweep's ``log_fn(metrics, step, run)``) or
            ``None``.
        progress: Show a progress bar (``None``: on a terminal).
        jsonl_path: Also write every record to this JSONL file.
        checkpoint: A `CheckpointHook` or ``None``.
        stop: A stop request (`nnx_ppo.algorithms.core.preemption`) or ``None``.
        tasks: The user's `Periodic` tasks.

    Raises:
        TypeError: If an option is of the wrong kind (`check_run_arguments`).
    """

    log_fn: Any = None
    progress: bool | None = None
    jsonl_path: str | os.PathLike[str] | None = None
    checkpoint: Any = None
    stop: StopFn | None = None
    tasks: Sequence[Periodic] = ()

    def __post_init__(self) -> None:
        check_run_arguments(
            log_fn=self.log_fn,
            progress=self.progress,
            jsonl_path=self.jsonl_path,
            checkpoint=self.checkpoint,
            stop=self.stop,
        )
        tasks = self.tasks
        if isinstance(tasks, Periodic) or not isinstance(tasks, Sequence):
            raise TypeError(
                f"tasks={tasks!r} must be a list of Periodic tasks, e.g. "
                "tasks=[Periodic(my_diagnostic, every_steps=100_000)]."
            )
        for task in tasks:
            if not isinstance(task, Periodic):
                raise TypeError(
                    f"tasks: {task!r} is not a Periodic; wrap the function as "
                    "Periodic(fn, every_steps=...) (fn(state, iteration, step) -> metrics)."
                )
        object.__setattr__(self, "tasks", tuple(tasks))


@dataclasses.dataclass(frozen=True)
class RunSettings(Host):
    """A run's options resolved (`resolve_options`): every key of `RunOptions`, with
    its default where it was not given. Its host-side part (a `Host`) is checked when
    built.

    Attributes:
        eval_env: The evaluation environment (``resolve_options`` puts the training
            environment here when none was given).
        devices: ``None``, an ``int`` or a sequence of devices.
        mesh: A mesh or ``None``.
        randomization_fn: The randomization function or ``None``.
        redraw_every: Iterations between redraws, or ``None``.
        initial_eval: Whether to evaluate at step 0 (overriding
            ``EvalConfig.at_start``), or ``None`` to follow the config. (The alias
            ``stop_fn`` is resolved into ``stop``.)
    """

    eval_env: Any = None
    devices: int | Sequence[jax.Device] | None = None
    mesh: Mesh | None = None
    randomization_fn: RandomizationFn | None = None
    redraw_every: int | None = None
    initial_eval: bool | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.initial_eval is not None and not isinstance(self.initial_eval, bool):
            raise TypeError(
                f"initial_eval={self.initial_eval!r} must be True, False or None (None: "
                "follow EvalConfig.at_start)."
            )


_KEYS = tuple(RunOptions.__annotations__)  # in their documented order


def resolve_options(function: str, options: Mapping[str, Any], *, env: Any) -> RunSettings:
    """Resolve the ``**options`` a trainer received: check the keys, fill in the
    defaults and check the host-side values.

    Args:
        function: The trainer's name, for the messages (e.g. ``"train_ppo"``).
        options: The keyword arguments given (keys of `RunOptions`).
        env: The training environment: the ``eval_env`` when none is given.

    Returns:
        The `RunSettings`.

    Raises:
        TypeError: If a key is not a run option (naming ``function``, the key, a close
            match and every valid key), both ``stop`` and its alias ``stop_fn`` are
            given, ``initial_eval`` is not a bool or ``None``, or ``log_fn``,
            ``progress``, ``jsonl_path`` or ``checkpoint`` is of the wrong kind
            (`check_run_arguments`).
    """
    for key in options:
        if key not in _KEYS:
            close = difflib.get_close_matches(str(key), _KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise TypeError(
                f"{function}() got an unknown run option {key!r}{hint}; the run options "
                f"are {', '.join(_KEYS)} (see nnx_ppo.algorithms.trainer.options.RunOptions)."
            )
    values = dict(options)
    if "stop_fn" in values:  # nnx-ppo's name of ``stop``
        stop_fn = values.pop("stop_fn")
        if stop_fn is not None and not callable(stop_fn):
            raise TypeError(
                f"stop_fn={stop_fn!r} is not callable; pass a stop request asked as "
                "stop_fn() after every device call, e.g. StopOnSignal() (stop_fn is "
                "nnx-ppo's name of the stop option)."
            )
        if "stop" in values:
            raise TypeError(
                f"{function}() got both stop={values['stop']!r} and stop_fn={stop_fn!r}; "
                "stop_fn is nnx-ppo's name of the same option: pass only one of them."
            )
        values["stop"] = stop_fn
    if values.get("eval_env") is None:
        values["eval_env"] = env
    return RunSettings(**values)
