"""A sweep past one machine: shards, each an ordinary resumable `train_many` program in
its own folder, merged afterwards.

A sweep is ``K`` runs (``seeds`` with one value per run of each swept field, as for
`train_many`). When ``K`` outgrows one machine, a cluster's scheduler starts ``N``
copies of the same script (a SLURM job array, submitit's ``map_array``), and copy ``i``
trains **shard** ``i`` of ``N``: the runs ``j`` with ``j % N == i`` (round-robin, so
shard sizes differ by at most one and every value of the last swept field is spread over
the shards). Each shard is one `train_many` program (compiled once, its runs vmapped),
writing to its own folder, resumable exactly as a single run is: a ``SIGTERM`` stops
it after the current device call with a checkpoint, and starting the same command again
continues it. The scheduler is the cluster's; nothing here submits, waits or retries.

    shard = Shard.resolve(args.shard)          # "--shard 2/8", else $SLURM_ARRAY_TASK_ID
    with StopOnSignal() as stop:
        result = train_shard(env, make_network, config, seeds=seeds, overrides=overrides,
                             shard=shard, directory=shard.folder("runs/sweep"), stop=stop)
    if result.stopped:
        raise SystemExit(stop.exit_code)       # 143: preempted, start again to resume

**A shard folder** holds ``sweep.json`` (the sweep's identity, `SweepIdentity`, and
which runs are this shard's), ``checkpoints/`` (a `Checkpointer`), ``metrics.jsonl``
(every run's log records, `JSONLWriter`; a resume rewinds it to the checkpoint, so it is
the uninterrupted run's file) and, once the shard finished, ``result.json``.

**The sweep's identity** is a hash of the base config (`config_to_dict`), the
environment's name, the full run list (each run's seed and swept values, in order) and
the library version. A folder that already holds another sweep's shard is refused before
training, and so is, in `merge_shards`, a shard whose identity differs from the others'
(`SweepMismatchError`, naming the folder and the part that differs): runs trained with
another config or code are not silently pooled. The network factory is not part of it
(code cannot be compared): a sweep folder per network is the rule.

`merge_shards` (`nnx_ppo.algorithms.sweeps.merge`) reads the finished shard folders back into
one sweep's results.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib.metadata import version as _version
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from nnx_ppo.algorithms.checkpointing.checkpointer import Checkpointer
from nnx_ppo.algorithms.config import config_to_dict
from nnx_ppo.algorithms.sweeps.many import plan_runs, run_config, train_many

__all__ = [
    "Shard",
    "SweepIdentity",
    "SweepMismatchError",
    "shard_runs",
    "sweep_identity",
    "train_shard",
]

T = TypeVar("T")

SWEEP_FILE = "sweep.json"
RESULT_FILE = "result.json"
METRICS_FILE = "metrics.jsonl"
CHECKPOINTS = "checkpoints"
_FORMAT = 1


# --------------------------------------------------------------------------- the rule


def _check_index(index: Any, count: Any, where: str) -> tuple[int, int]:
    for name, value in (("count", count), ("index", index)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise TypeError(f"{where}: {name}={value!r} must be an int.")
    if count < 1:
        raise ValueError(f"{where}: count={count} must be >= 1 (the number of shards).")
    if not 0 <= index < count:
        raise ValueError(
            f"{where}: index={index} must be in [0, {count}) (shards are numbered from 0)."
        )
    return int(index), int(count)


def shard_runs(runs: Sequence[T], index: int, count: int) -> list[T]:
    """Shard ``index`` of ``count``'s share of ``runs``: ``runs[index::count]``.

    The rule is round-robin: run ``j`` belongs to shard ``j % count``. Every run is in
    exactly one shard, the shards' sizes differ by at most one, and the order of the
    runs within a shard is theirs in the sweep. A shard may be empty (``count > K``).

    Args:
        runs: The sweep's runs in order (anything: seeds, configs, run indices).
        index: The shard, ``0 <= index < count``.
        count: The number of shards, ``>= 1``.

    Examples:
        >>> shard_runs(list(range(10)), 1, 4)
        [1, 5, 9]
        >>> [shard_runs("abcde", i, 2) for i in range(2)]
        [['a', 'c', 'e'], ['b', 'd']]
    """
    index, count = _check_index(index, count, "shard_runs")
    return list(runs)[index::count]


@dataclasses.dataclass(frozen=True)
class Shard:
    """One shard of a sweep: ``index`` of ``count`` (see `shard_runs` for its runs).

    Attributes:
        index: ``0 <= index < count``.
        count: The number of shards, ``>= 1``.

    Examples:
        >>> Shard.parse("2/8")
        Shard(index=2, count=8)
        >>> Shard.from_environment({"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_MIN": "1",
        ...                         "SLURM_ARRAY_TASK_COUNT": "8"})  # --array=1-8
        Shard(index=4, count=8)
        >>> Shard(1, 4).runs(10)
        [1, 5, 9]
    """

    index: int
    count: int

    def __post_init__(self) -> None:
        _check_index(self.index, self.count, "Shard")

    def runs(self, n_runs: int) -> list[int]:
        """The indices of this shard's runs in a sweep of ``n_runs`` runs."""
        return shard_runs(range(n_runs), self.index, self.count)

    def folder(self, root: str | os.PathLike[str]) -> Path:
        """``root/shard-<index>-of-<count>``: a folder per shard under one sweep folder."""
        return Path(root) / f"shard-{self.index}-of-{self.count}"

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``"i/N"`` (a ``--shard`` argument) as a `Shard`.

        Raises:
            ValueError: If ``text`` is not two ints ``i/N`` with ``0 <= i < N``.
        """
        index, sep, count = str(text).partition("/")
        try:
            if not sep:
                raise ValueError
            return cls(int(index), int(count))
        except ValueError as error:
            detail = f" ({error})" if str(error) else ""
            raise ValueError(
                f"shard={text!r} must be 'INDEX/COUNT' with 0 <= INDEX < COUNT, e.g. "
                f"'0/4' for the first of four shards{detail}."
            ) from None

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str] | None = None, *, count: int | None = None
    ) -> Shard:
        """The shard of a SLURM array task.

        Without ``count``, the array is the whole sweep: the index is
        ``(SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN) // SLURM_ARRAY_TASK_STEP`` (the
        minimum defaults to 0 and the step to 1, so ``--array=0-7``, ``--array=1-8`` and
        ``--array=0-14:2`` all number the shards 0..7) and the count
        ``SLURM_ARRAY_TASK_COUNT``. A ``%`` limit (``--array=0-99%10``) only caps how
        many run at once. With ``count``, the task id *is* the shard index, so an array
        of some shards only (``--array=3,7`` to redo shards 3 and 7 of 10) trains the
        right ones.

        Args:
            environ: The environment to read (``None``: ``os.environ``).
            count: The number of shards, when the array is not exactly ``0..count-1``
                (its ids are then the shard indices).

        Raises:
            ValueError: If ``SLURM_ARRAY_TASK_ID`` (or, without ``count``,
                ``SLURM_ARRAY_TASK_COUNT``) is not set (not an array task: pass
                ``--shard i/N``) or not an int, or the index falls outside
                ``[0, count)`` (without ``count``: ids that are not one range, such as
                ``--array=1,5,9``).
        """
        env = os.environ if environ is None else environ

        def number(name: str, default: int | None = None) -> int:
            text = env.get(name)
            if text is None:
                if default is None:
                    raise ValueError(
                        f"${name} is not set: this is not a SLURM array task. Run it as "
                        "one (sbatch --array=0-<N-1>) or pass the shard explicitly, "
                        "e.g. --shard 0/4."
                    )
                return default
            try:
                return int(text)
            except ValueError:
                raise ValueError(f"${name}={text!r} is not an int.") from None

        task = number("SLURM_ARRAY_TASK_ID")
        if count is not None:
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise ValueError(f"count={count!r} must be an int >= 1 (the number of shards).")
            if not 0 <= task < count:
                raise ValueError(
                    f"SLURM array task {task} is not a shard of count={count}: with count, "
                    f"the task ids are the shard indices 0..{count - 1}."
                )
            return cls(task, count)
        total = number("SLURM_ARRAY_TASK_COUNT")
        low, step = number("SLURM_ARRAY_TASK_MIN", 0), number("SLURM_ARRAY_TASK_STEP", 1)
        index, rest = divmod(task - low, max(step, 1))
        if rest or not 0 <= index < total:
            raise ValueError(
                f"SLURM array task {task} (min {low}, step {step}, count {total}) is not "
                "shard 0..count-1 of one range of ids; submit the array as one range "
                "(--array=0-<N-1>), or pass count= (the task ids are then the shard "
                "indices) or --shard i/N."
            )
        return cls(index, total)

    @classmethod
    def resolve(cls, shard: str | Shard | None = None, *, count: int | None = None) -> Shard:
        """The shard to train: ``shard`` if given (a `Shard` or ``"i/N"``, e.g. a
        ``--shard`` argument), else the SLURM array task's (`from_environment`, with
        ``count``)."""
        if isinstance(shard, Shard):
            return shard
        if shard is not None:
            return cls.parse(shard)
        return cls.from_environment(count=count)


# --------------------------------------------------------------------------- identity


class SweepMismatchError(ValueError):
    """A shard folder belongs to another sweep (or another shard) than expected.

    Attributes:
        folder: The shard folder.
        field: What differs: ``"config"``, ``"env"``, ``"runs"``, ``"version"`` or
            ``"shard"``.
    """

    def __init__(self, message: str, *, folder: Path, field: str) -> None:
        super().__init__(message)
        self.folder = folder
        self.field = field


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    return value


@dataclasses.dataclass(frozen=True)
class SweepIdentity:
    """What makes two shards parts of one sweep (`sweep_identity`).

    Attributes:
        config: The base config as JSON data (`config_to_dict`).
        env: The environment's name.
        runs: Per run, in order: ``{"seed": seed, field: value, ...}``.
        version: The ``nnx-ppo-train`` version that trained it.
    """

    config: Any
    env: str
    runs: tuple[Mapping[str, Any], ...]
    version: str

    FIELDS = ("config", "env", "runs", "version")

    def to_json(self) -> dict[str, Any]:
        """JSON data: the fields and their ``digest``."""
        return {**self._fields(), "digest": self.digest}

    def _fields(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "env": self.env,
            "runs": [dict(run) for run in self.runs],
            "version": self.version,
        }

    @property
    def digest(self) -> str:
        """The SHA-256 of the fields' canonical JSON, the first 16 hex digits."""
        text = json.dumps(self._fields(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SweepIdentity:
        """The identity `to_json` wrote."""
        return cls(
            config=data["config"],
            env=str(data["env"]),
            runs=tuple(dict(run) for run in data["runs"]),
            version=str(data["version"]),
        )

    def difference(self, other: SweepIdentity) -> str | None:
        """The first field (in `FIELDS` order) where ``other`` differs, or ``None``."""
        mine, theirs = self._fields(), other._fields()
        for name in self.FIELDS:
            if json.dumps(mine[name], sort_keys=True) != json.dumps(theirs[name], sort_keys=True):
                return name
        return None


def _env_name(env: Any) -> str:
    """``Outer(Inner(...))`` along the wrappers' ``.env`` attributes."""
    names: list[str] = []
    while env is not None and len(names) < 32:
        names.append(type(env).__name__)
        env = getattr(env, "env", None)
    return "(".join(names) + ")" * (len(names) - 1)


def sweep_identity(
    config: Any,
    env: Any,
    seeds: Iterable[int],
    overrides: Mapping[str, Sequence[Any]] | None = None,
) -> SweepIdentity:
    """The identity of the sweep ``train_many(env, ..., config, seeds=seeds,
    overrides=overrides)``: its base config, environment, runs and library version.

    Args:
        config: The base config (as for `train_many`; validated with its runs,
            `plan_runs`).
        env: The environment, or its name as a ``str`` (default: the class names along
            its wrappers, e.g. ``"EpisodeWrapper(PointMass)"``). Name it yourself when
            two environments of one class differ (a registry name, a task variant).
        seeds: One seed per run.
        overrides: ``{field: [one value per run]}``.

    Raises:
        TypeError, ValueError: As `plan_runs` for invalid seeds or overrides.

    Examples:
        >>> from nnx_ppo.algorithms.config import PPOConfig
        >>> a = sweep_identity(PPOConfig(n_envs=8, n_minibatches=2), "PointMass", [0, 1])
        >>> a.runs
        ({'seed': 0}, {'seed': 1})
        >>> b = sweep_identity(PPOConfig(n_envs=8, n_minibatches=2), "PointMass", [0, 2])
        >>> a.digest == b.digest, a.difference(b)
        (False, 'runs')
    """
    config = run_config(config)
    seed_list = [run.seed for run in plan_runs(config, seeds, overrides)]
    columns = {name: list(values) for name, values in (overrides or {}).items()}
    runs = tuple(
        {"seed": seed, **{name: _plain(column[i]) for name, column in columns.items()}}
        for i, seed in enumerate(seed_list)
    )
    name = env if isinstance(env, str) else _env_name(env)
    return SweepIdentity(config_to_dict(config), name, runs, _version("nnx-ppo-train"))


# --------------------------------------------------------------------------- training


def read_json(path: Path) -> Any:
    """The JSON document at ``path`` (a shard's or a sweep's record); a ``ValueError``
    naming the file where it cannot be read or parsed."""
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} cannot be read as JSON ({error}).") from None


def _write_json(path: Path, data: Any) -> None:
    temporary = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    temporary.write_text(json.dumps(data, indent=1, allow_nan=False) + "\n")
    os.replace(temporary, path)


def _check_folder(folder: Path, identity: SweepIdentity, shard: Shard) -> None:
    """Refuse a folder that already holds another sweep's (or another shard's) run."""
    path = folder / SWEEP_FILE
    if not path.exists():
        if (folder / CHECKPOINTS).exists() or (folder / METRICS_FILE).exists():
            raise SweepMismatchError(
                f"directory={str(folder)!r} holds checkpoints or logs but no {SWEEP_FILE}: "
                "it is not a shard folder. Choose another (or an empty) directory.",
                folder=folder,
                field="shard",
            )
        return
    data = read_json(path)
    theirs = SweepIdentity.from_json(data["identity"])
    field = identity.difference(theirs)
    if field is not None:
        raise SweepMismatchError(
            f"directory={str(folder)!r} holds a shard of another sweep: its {field} "
            f"differs (sweep {theirs.digest} there, {identity.digest} here). Train this "
            "sweep in another directory, or restore the script's config, runs and "
            "library version to continue that one.",
            folder=folder,
            field=field,
        )
    there = Shard(**data["shard"])
    if there != shard:
        raise SweepMismatchError(
            f"directory={str(folder)!r} holds shard {there} of this sweep, not shard "
            f"{shard}; give every shard its own folder (Shard.folder(root)).",
            folder=folder,
            field="shard",
        )


class _SweepRuns:
    """A sweep's ``log_fn`` called with each run's index in the whole sweep."""

    def __init__(self, log_fn: Callable[..., Any], runs: Sequence[int]) -> None:
        self.log_fn, self.runs = log_fn, list(runs)

    def __call__(self, metrics: Mapping[str, float], step: int, run: int) -> None:
        self.log_fn(metrics, step, self.runs[run])


def train_shard(
    env: Any,
    make_network: Callable[[Any], Any],
    config: Any,
    *,
    seeds: Iterable[int],
    overrides: Mapping[str, Sequence[Any]] | None = None,
    shard: Shard,
    directory: str | os.PathLike[str],
    env_name: str | None = None,
    save_every_steps: int | None = None,
    **options: Any,
) -> Any:
    """Train shard ``shard`` of the sweep ``(seeds, overrides)`` as one `train_many`
    program in ``directory``, resuming what an earlier attempt left there.

    The whole sweep is validated first (`plan_runs`), so every shard refuses a bad
    sweep the same way. The shard's runs (`Shard.runs`) are trained by
    ``train_many(env, make_network, config, seeds=..., overrides=..., checkpoint=...,
    jsonl_path=..., **options)`` with a `Checkpointer` in ``directory/checkpoints``
    (resuming the latest checkpoint) and the log in ``directory/metrics.jsonl``. When
    the shard finishes, ``directory/result.json`` records it for `merge_shards`;
    when ``stop`` ended it early, it does not (start the same command again to resume).

    Args:
        env: The environment (as for `train_many`).
        make_network: The network factory (as for `train_many`).
        config: The base config (as for `train_many`).
        seeds: The whole sweep's seeds, one per run.
        overrides: The whole sweep's ``{field: [one value per run]}``.
        shard: Which shard to train (`Shard.resolve`).
        directory: This shard's folder (e.g. ``shard.folder("runs/sweep")``).
        env_name: The environment's name in the sweep identity (`sweep_identity`).
        save_every_steps: The `Checkpointer`'s cadence (``None``: only at the end, and
            on a stop).
        **options: The other run options of `train_many` (``stop``, ``progress``,
            ``log_fn``, ``devices``, ...); not ``checkpoint`` nor ``jsonl_path``, which
            the shard folder provides. ``log_fn(metrics, step, run)`` is given the
            run's index in the whole sweep (so `PerRun` sinks of different shards do
            not collide); ``metrics.jsonl`` numbers the shard's runs from 0, and
            ``sweep.json`` maps them to the sweep's (`merge_shards` reads them so).

    Returns:
        The `SweepResult` of this shard's runs (``result.stopped`` after a stop). With
        no run in the shard (more shards than runs), ``None``, after writing an empty
        ``result.json``.

    Raises:
        SweepMismatchError: If ``directory`` holds another sweep's shard (or another
            shard of this sweep).
        TypeError: If ``shard`` is not a `Shard`, or ``checkpoint`` / ``jsonl_path``
            is given.
        TypeError, ValueError: As `train_many`.
    """
    if not isinstance(shard, Shard):
        raise TypeError(
            f"shard={shard!r} must be a Shard, e.g. Shard.resolve(args.shard) or Shard(0, 4)."
        )
    for name in ("checkpoint", "jsonl_path"):
        if name in options:
            raise TypeError(
                f"train_shard: {name}= is the shard folder's ({CHECKPOINTS}/ and "
                f"{METRICS_FILE} in directory); drop it."
            )
    identity = sweep_identity(config, env if env_name is None else env_name, seeds, overrides)
    folder = Path(directory).expanduser().absolute()
    if folder.exists() and not folder.is_dir():
        raise FileExistsError(f"train_shard: directory={str(directory)!r} is a file.")
    _check_folder(folder, identity, shard)
    mine = shard.runs(len(identity.runs))
    folder.mkdir(parents=True, exist_ok=True)
    _write_json(
        folder / SWEEP_FILE,
        {
            "format": _FORMAT,
            "identity": identity.to_json(),
            "shard": {"index": shard.index, "count": shard.count},
            "runs": mine,
        },
    )
    if not mine:
        _write_json(folder / RESULT_FILE, {"format": _FORMAT, "finished": True, "steps": 0})
        return None
    columns = {name: list(values) for name, values in (overrides or {}).items()}
    log_fn = options.pop("log_fn", None)
    if log_fn is not None:
        options["log_fn"] = _SweepRuns(log_fn, mine)
    with Checkpointer(
        folder / CHECKPOINTS, config=config, save_every_steps=save_every_steps
    ) as checkpointer:
        result = train_many(
            env,
            make_network,
            config,
            seeds=[identity.runs[j]["seed"] for j in mine],
            overrides={name: [column[j] for j in mine] for name, column in columns.items()},
            checkpoint=checkpointer,
            jsonl_path=folder / METRICS_FILE,
            **options,
        )
    if not result.stopped:
        _write_json(
            folder / RESULT_FILE,
            {"format": _FORMAT, "finished": True, "steps": int(result.total_steps)},
        )
    return result
