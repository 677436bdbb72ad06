"""Logging: the ``log_fn(metrics, step)`` callback and built-in sinks.

`train_ppo` calls every sink with a flat dict of Python
floats and the exact number of env steps so far (a Python ``int``). A sink is any
callable ``(metrics, step) -> None``; the built-in ones also have ``close()``.

- `ProgressBar`: a live tqdm bar (steps, steps per second, latest eval reward,
  ETA) on a terminal, plain progress lines elsewhere (a batch job's log);
- `JSONLWriter`: one JSON object per call, ``{"step": ..., **metrics}``;
- `TensorBoardWriter`: scalars via ``tensorboardX`` (extra ``logging``);
- `WandbWriter`: ``wandb.log`` (extra ``wandb``).

Metric names. Which groups are computed is set by
`LogLevel` (``PPOConfig.log_level``); training metrics
are averaged over the epochs and minibatches of an iteration (and over the iterations
of one device call), evaluation metrics are logged when an evaluation runs. The
``diagnostics/*`` counts are the exception: each counts *environment steps* (one
environment at one time step) with any non-finite element in that quantity (any leaf
of a dict), or *optimizer updates* with any non-finite gradient element, summed over
the iterations of the device call (`LogLevel.DIAGNOSTICS`, not part of ``ALL``).

================================== ================ ============================================
name                               group            meaning
================================== ================ ============================================
``loss/total``                     LOSSES           total minibatch loss
``loss/policy``                    LOSSES           clipped surrogate loss
``loss/critic``                    LOSSES           ``0.5 * MSE`` of the value heads (summed)
``loss/regularization``            LOSSES           mean network regularization (entropy bonus...)
``actor/clip_fraction``            ACTOR            share of samples with ``|ratio - 1| > clip``
``actor/approx_kl``                ACTOR            ``mean((ratio - 1) - log ratio)``
``actor/ratio_max_deviation``      ACTOR            ``max |ratio - 1|`` (max over minibatches)
``actor/entropy_estimate``         ACTOR            ``-mean log pi(a)`` of the replayed actions
``actor/advantage_mean``           ACTOR            advantage mean before normalisation
``actor/advantage_std``            ACTOR            advantage std before normalisation
``critic/explained_variance``      CRITIC           ``1 - Var(target - V) / Var(target)``
``critic/value_mean``              CRITIC           mean value estimate
``critic/target_mean``             CRITIC           mean value target
``rollout/episode_reward``         ROLLOUT          mean return of episodes ended (NaN if none)
``rollout/episode_length``         ROLLOUT          their mean length
``rollout/episodes``               ROLLOUT          how many ended
``rollout/reward``                 ROLLOUT          mean reward per env step
``rollout_obs/<path>/mean``        ROLLOUT_OBS      each observation leaf's mean over the
                                                    rollout (``rollout_obs/mean`` for an
                                                    array observation)
``rollout_obs/<path>/std``         ROLLOUT_OBS      its standard deviation
``env/<name>``                     ENV_METRICS      ``state.metrics[name]`` averaged over steps
``network/<path>``                 NETWORK_METRICS  the network's metrics, e.g. sampler entropy
``train/grad_norm``                GRAD_NORM        global gradient norm (before clipping)
``train/param_norm``               WEIGHTS          global parameter norm
``train/updates_taken``            LOSSES           share of the updates stepped (``target_kl``)
``throughput/sps``                 THROUGHPUT       env steps per second since the last log
                                                    (evaluations, videos and the first
                                                    call's compilation left out)
``throughput/wall_time``           THROUGHPUT       seconds since training started
``diagnostics/nonfinite_obs``      DIAGNOSTICS      env steps whose observation had a NaN/inf
``diagnostics/nonfinite_action``   DIAGNOSTICS      env steps whose action had a NaN/inf
``diagnostics/nonfinite_reward``   DIAGNOSTICS      env steps whose reward had a NaN/inf
``diagnostics/nonfinite_next_obs`` DIAGNOSTICS      env steps whose next observation had one
                                                    (that episode ended and was reset there)
``diagnostics/nonfinite_grad``     DIAGNOSTICS      optimizer updates whose gradient had one
``eval/episode_reward/mean``       (evaluation)     mean deterministic episode return
``eval/episode_reward/std``        (evaluation)     its standard deviation
``eval/episode_reward/<key>/mean`` (evaluation)     per reward key, for dict rewards
``eval/episode_length/mean``       (evaluation)     mean episode length
================================== ================ ============================================
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping
from typing import IO, Any

from nnx_ppo.algorithms.config import LogLevel

__all__ = [
    "JSONLWriter",
    "LogFn",
    "PerRun",
    "ProgressBar",
    "RunLogFn",
    "TensorBoardWriter",
    "WandbWriter",
    "combine",
    "in_log_level",
    "observation_statistics",
]

_GROUPS = {
    "loss/": LogLevel.LOSSES,
    "actor/": LogLevel.ACTOR,
    "critic/": LogLevel.CRITIC,
    "rollout/": LogLevel.ROLLOUT,
    "rollout_obs/": LogLevel.ROLLOUT_OBS,
    "env/": LogLevel.ENV_METRICS,
    "network/": LogLevel.NETWORK_METRICS,
    "train/grad_norm": LogLevel.GRAD_NORM,
    "train/param_norm": LogLevel.WEIGHTS,
    "train/learning_rate": LogLevel.LOSSES,
    "train/updates_taken": LogLevel.LOSSES,
    "diagnostics/": LogLevel.DIAGNOSTICS,
}


def in_log_level(name: str, level: LogLevel) -> bool:
    """Whether the training metric ``name`` belongs to a group enabled in ``level`` (the
    groups of the table above).

    Examples:
        >>> in_log_level("actor/approx_kl", LogLevel.LOSSES | LogLevel.ACTOR)
        True
        >>> in_log_level("train/grad_norm", LogLevel.DEFAULT)
        False
    """
    return any(name.startswith(prefix) and group in level for prefix, group in _GROUPS.items())


def observation_statistics(obs: Any) -> dict[str, Any]:
    """The ``rollout_obs/*`` metrics (`LogLevel.ROLLOUT_OBS`): the mean and standard
    deviation of each floating-point leaf of ``obs`` (``[T, B, ...]``) over every step,
    environment and element, named by the leaf's path (jit-able).

    Examples:
        >>> import jax.numpy as jnp
        >>> stats = observation_statistics({"pos": jnp.array([[1.0, 3.0]])})
        >>> {k: float(v) for k, v in stats.items()}
        {'rollout_obs/pos/mean': 2.0, 'rollout_obs/pos/std': 1.0}
    """
    import jax
    import jax.numpy as jnp

    from nnx_ppo.algorithms.core.trees import key_path

    stats = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(obs):
        if jnp.issubdtype(leaf.dtype, jnp.floating):
            name = f"rollout_obs/{key_path(path)}/".replace("//", "/")
            stats[f"{name}mean"] = jnp.mean(leaf)
            stats[f"{name}std"] = jnp.std(leaf)
    return stats


LogFn = Callable[[Mapping[str, float], int], None]
"""A logging callback: ``log_fn(metrics, step)`` with float metrics and an int step."""

RunLogFn = Callable[[Mapping[str, float], int, int], None]
"""A sweep's logging callback: ``log_fn(metrics, step, run)``, called once per run with
that run's metrics and its index (`nnx_ppo.algorithms.sweeps.many.train_many`)."""

EVAL_REWARD = "eval/episode_reward/mean"


class ProgressBar:
    """Training progress over env steps: a live tqdm bar on a terminal, plain lines
    elsewhere (a batch job's log, ``nohup``, a pipe).

    **On a terminal** the bar shows the steps, one rate (env steps per second of
    training, ``throughput/sps`` once logged, in tqdm's unit-scaled format: ``2.35k
    steps/s``), the latest evaluation return and the ETA. The trainers mark the first
    call's compilation (`compiling`, `compiled`): the label says "(compiling)" until it
    is done, and the ETA leaves the compilation out.

    **Elsewhere** (``disable=None`` and an output that is not a terminal, where a bar
    would draw nothing readable) it prints plain lines instead: ``compiling the training
    program ...`` and ``compiled in 12.3 s``, then one line right after the compilation,
    one per ``line_every_s`` seconds of training and one at the end, each with the step,
    the rate, the latest evaluation return, the time elapsed since the compilation and
    the ETA::

        train_ppo: step 120k/1.5M (8%), 2.35k steps/s, eval return 123.4, elapsed 00:52, ETA 09:48

    Args:
        total_steps: The run's env steps (the bar's total).
        initial_step: Steps already done (when resuming).
        disable: ``None`` (default): the bar on a terminal, plain lines elsewhere;
            ``True``: nothing; ``False``: the bar wherever the output goes.
        file: Where to draw or print (default ``sys.stderr``).
        description: The label.
        line_every_s: Seconds between plain lines (at most; a line is printed when
            metrics arrive, after every logged device call).

    Examples:
        >>> bar = ProgressBar(1000, disable=True)
        >>> bar.compiling(); bar.compiled()
        >>> bar({"throughput/sps": 500.0, "eval/episode_reward/mean": 3.0}, 500)
        >>> bar.close()
    """

    def __init__(
        self,
        total_steps: int,
        *,
        initial_step: int = 0,
        disable: bool | None = None,
        file: IO[str] | None = None,
        description: str = "train_ppo",
        line_every_s: float = 20.0,
    ) -> None:
        import sys
        import time

        from tqdm.auto import tqdm

        self._bar = tqdm(
            total=total_steps,
            initial=initial_step,
            disable=disable,
            file=file,
            unit="step",
            unit_scale=True,
            dynamic_ncols=True,
            desc=description,
            # One rate: the training throughput in the postfix (tqdm's own counts the
            # evaluations too, in another format).
            bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}{postfix}]",
        )
        self._file = file if file is not None else sys.stderr
        # Plain lines where tqdm switched itself off because the output is no terminal.
        self._lines = disable is None and bool(self._bar.disable)
        self._clock = time.perf_counter
        self._total = total_steps
        self._step = initial_step
        self._eval: float | None = None
        self._sps: float | None = None
        self._description = description
        self._line_every = float(line_every_s)
        self._began: float | None = None  # the end of the compilation
        self._began_step = initial_step
        self._compile_start: float | None = None
        self._compile_note = ""
        self._last_line: float | None = None

    def _print(self, text: str) -> None:
        print(f"{self._description}: {text}", file=self._file, flush=True)

    def compiling(self, note: str | None = None) -> None:
        """Show that the first call is being compiled (the bar stands still meanwhile).

        Args:
            note: What else happens before `compiled` (e.g. ``"with the evaluation
                before training"``), for the plain lines; a second call while compiling
                keeps the first one's start and note.
        """
        self._bar.set_description(f"{self._description} (compiling)")
        if self._lines and self._compile_start is None:
            self._compile_start = self._clock()
            self._compile_note = f" ({note})" if note else ""
            self._print("compiling the training program ...")

    def compiled(self) -> None:
        """The compilation is over: restore the label and restart the clock, so the rate
        and the ETA count training time only."""
        self._bar.set_description(self._description, refresh=False)
        self._bar.unpause()
        self._began, self._began_step = self._clock(), self._step
        if self._lines and self._compile_start is not None:
            took = self._began - self._compile_start
            self._print(f"compiled in {took:.1f} s{self._compile_note}")

    def __call__(self, metrics: Mapping[str, float], step: int) -> None:
        """Advance to ``step`` and show the rate and the latest eval reward."""
        from tqdm import tqdm

        if EVAL_REWARD in metrics:
            self._eval = float(metrics[EVAL_REWARD])
        if "throughput/sps" in metrics:
            self._sps = float(metrics["throughput/sps"])
        shown = []
        if self._sps is not None:
            shown.append(f"{tqdm.format_sizeof(self._sps)} steps/s")
        if self._eval is not None:
            shown.append(f"eval {self._eval:.4g}")
        if shown:
            self._bar.set_postfix_str(", ".join(shown), refresh=False)
        self._bar.update(step - self._step)
        self._step = step
        if self._lines:
            self._line()

    def _line(self) -> None:
        """A plain line: after the compilation, every ``line_every_s``, at the end."""
        from tqdm import tqdm

        now = self._clock()
        if self._began is None:  # before training (an evaluation at step 0)
            return
        due = self._last_line is None or now - self._last_line >= self._line_every
        if not (due or self._step >= self._total):
            return
        self._last_line = now
        elapsed = now - self._began
        done = self._step - self._began_step
        rate = self._sps if self._sps is not None else (done / elapsed if elapsed > 0 else 0.0)
        parts = [
            f"step {tqdm.format_sizeof(self._step)}/{tqdm.format_sizeof(self._total)} "
            f"({100 * self._step / max(self._total, 1):.0f}%)",
            f"{tqdm.format_sizeof(rate)} steps/s",
        ]
        if self._eval is not None:
            parts.append(f"eval return {self._eval:.4g}")
        parts.append(f"elapsed {tqdm.format_interval(elapsed)}")
        if done > 0 and self._step < self._total:
            remaining = (self._total - self._step) * elapsed / done  # wall time, evals too
            parts.append(f"ETA {tqdm.format_interval(remaining)}")
        self._print(", ".join(parts))

    def close(self) -> None:
        """Close the bar."""
        self._bar.close()


class JSONLWriter:
    """Append one JSON line ``{"step": step, **metrics}`` per call to a file
    (``{"step": step, "run": run, **metrics}`` when called with a sweep's run index).

    Non-finite values are written as ``null`` (strict JSON). The file is flushed after
    every line, so it can be followed while training runs.

    **Resume.** With ``resume_from=N`` (what `train_ppo` passes when it resumes from a
    checkpoint at env step ``N``) the lines an interrupted attempt wrote after step ``N``
    (and a line cut short by a crash) are removed before anything is appended, so the
    file of a resumed run is line for line the file of the uninterrupted run. The file
    is rewritten atomically (a temporary file renamed over it).

    Args:
        path: The ``.jsonl`` file; parent directories are created.
        resume_from: Keep only the existing lines with ``"step" <= resume_from``
            (``None``: keep the file as it is).

    Raises:
        TypeError: If ``resume_from`` is not a non-negative int or ``None``.
        ValueError: If ``resume_from`` is given and a complete line of the existing file
            is not a JSON object with an integer ``"step"`` (not a file of this writer).

    Examples:
        >>> import json, pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "metrics.jsonl"
        >>> with JSONLWriter(path) as log:
        ...     log({"loss/total": 1.5}, 100)
        ...     log({"loss/total": 1.0}, 200)
        >>> with JSONLWriter(path, resume_from=100) as log:  # resumed at step 100
        ...     log({"loss/total": 0.5}, 200)
        >>> [json.loads(line) for line in path.read_text().splitlines()]
        [{'step': 100, 'loss/total': 1.5}, {'step': 200, 'loss/total': 0.5}]
    """

    def __init__(self, path: str | os.PathLike[str], *, resume_from: int | None = None) -> None:
        if resume_from is not None and (
            isinstance(resume_from, bool) or not isinstance(resume_from, int) or resume_from < 0
        ):
            raise TypeError(
                f"resume_from={resume_from!r} must be a non-negative int (the env step the "
                "run resumed from) or None."
            )
        directory = os.path.dirname(os.fspath(path))
        if directory:
            os.makedirs(directory, exist_ok=True)
        self.path = os.fspath(path)
        if resume_from is not None and os.path.exists(self.path):
            _rewind(self.path, resume_from)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115

    def __call__(self, metrics: Mapping[str, float], step: int, run: int | None = None) -> None:
        """Write one line (with ``"run": run`` after the step, if given)."""
        record: dict[str, Any] = {"step": int(step)}
        if run is not None:
            record["run"] = int(run)
        for name, value in metrics.items():
            value = float(value)
            record[name] = value if math.isfinite(value) else None
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        """Close the file."""
        self._file.close()

    def __enter__(self) -> JSONLWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _rewind(path: str, step: int) -> None:
    """Keep the complete lines of ``path`` whose ``"step"`` is at most ``step``."""
    with open(path, encoding="utf-8") as file:
        text = file.read()
    lines = text.split("\n")
    complete = lines[:-1]  # the last piece is empty, or a line cut short by a crash
    kept = []
    for number, line in enumerate(complete, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            raise ValueError(
                f"jsonl_path={path!r}: line {number} is not a record of a JSONLWriter "
                "(a JSON object with an integer 'step'), so the file cannot be rewound to "
                f"the resume step {step}; pass another jsonl_path or remove the file."
            )
        if record["step"] <= step:
            kept.append(line + "\n")
    temporary = f"{path}.rewind-{os.getpid()}"
    with open(temporary, "w", encoding="utf-8") as file:
        file.writelines(kept)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)


class TensorBoardWriter:
    """Write every metric as a TensorBoard scalar (needs ``tensorboardX``).

    Args:
        logdir: The event directory.

    Raises:
        ImportError: If ``tensorboardX`` is not installed (``pip install
            nnx-ppo-train[logging]``).
    """

    def __init__(self, logdir: str | os.PathLike[str]) -> None:
        try:
            from tensorboardX import SummaryWriter
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError(
                "TensorBoardWriter needs tensorboardX: pip install 'nnx-ppo-train[logging]'."
            ) from e
        self._writer = SummaryWriter(os.fspath(logdir))

    def __call__(self, metrics: Mapping[str, float], step: int) -> None:
        """Add one scalar per finite metric at ``step``.

        Non-finite values are left out: a NaN means "no data" here (e.g.
        ``rollout/episode_reward`` when no episode ended), and a NaN loss stops
        training with `NonFiniteError` anyway.
        """
        for name, value in metrics.items():
            if math.isfinite(float(value)):
                self._writer.add_scalar(name, float(value), int(step))
        self._writer.flush()

    def close(self) -> None:
        """Close the event file."""
        self._writer.close()


class WandbWriter:
    """Log metrics to Weights & Biases (needs ``wandb``).

    Args:
        **init_kwargs: Passed to ``wandb.init`` (``project``, ``name``, ``config``...).
            If a run is already active and no arguments are given, it is used.

    Raises:
        ImportError: If ``wandb`` is not installed (``pip install
            nnx-ppo-train[wandb]``).
    """

    def __init__(self, **init_kwargs: Any) -> None:
        try:
            import wandb
        except ImportError as e:
            raise ImportError("WandbWriter needs wandb: pip install 'nnx-ppo-train[wandb]'.") from e
        self._wandb = wandb
        self._run: Any
        self._run = wandb.run if (wandb.run is not None and not init_kwargs) else None
        if self._run is None:
            self._run = wandb.init(**init_kwargs)

    def __call__(self, metrics: Mapping[str, float], step: int) -> None:
        """``run.log(metrics, step=step)``."""
        self._run.log({k: float(v) for k, v in metrics.items()}, step=int(step))

    def close(self) -> None:
        """Finish the run."""
        self._run.finish()


class PerRun:
    """One sink per run of a sweep: ``PerRun(make_sink)`` is a `RunLogFn` that sends
    each run's records to its own ``make_sink(run)`` (built on the run's first record),
    e.g. a TensorBoard event directory or a W&B run per run.

    Args:
        make_sink: ``run -> log_fn``, e.g.
            ``lambda run: TensorBoardWriter(f"runs/sweep/run_{run}")``.

    Raises:
        TypeError: If ``make_sink`` is not callable.

    Examples:
        >>> seen = []
        >>> log = PerRun(lambda run: lambda metrics, step: seen.append((run, step)))
        >>> log({"loss/total": 1.0}, 10, 0)
        >>> log({"loss/total": 2.0}, 10, 1)
        >>> seen, sorted(log.sinks)
        ([(0, 10), (1, 10)], [0, 1])
    """

    def __init__(self, make_sink: Callable[[int], LogFn]) -> None:
        if not callable(make_sink):
            raise TypeError(
                f"PerRun: make_sink={make_sink!r} is not callable; pass run -> log_fn, "
                "e.g. lambda run: TensorBoardWriter(f'runs/run_{run}')."
            )
        self._make_sink = make_sink
        self.sinks: dict[int, LogFn] = {}

    def __call__(self, metrics: Mapping[str, float], step: int, run: int) -> None:
        """Send ``metrics`` at ``step`` to run ``run``'s sink."""
        if run not in self.sinks:
            self.sinks[run] = self._make_sink(run)
        self.sinks[run](metrics, step)

    def close(self) -> None:
        """Close every sink that has a ``close`` method."""
        for sink in self.sinks.values():
            close = getattr(sink, "close", None)
            if close is not None:
                close()


def combine(*log_fns: LogFn | None) -> LogFn:
    """One ``log_fn`` calling each given callable in order (``None`` entries skipped).

    Args:
        *log_fns: Sinks or user callbacks ``(metrics, step) -> None``.

    Returns:
        A ``log_fn``.
    """
    sinks = [fn for fn in log_fns if fn is not None]
    for fn in sinks:
        if not callable(fn):
            raise TypeError(
                f"combine: {fn!r} is not callable; a log_fn is called as log_fn(metrics, step)."
            )

    def log_fn(metrics: Mapping[str, float], step: int) -> None:
        for fn in sinks:
            fn(metrics, step)

    return log_fn
