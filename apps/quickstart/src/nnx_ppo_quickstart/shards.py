"""``--shard``: the seeds of a ``--seeds`` run split across a scheduler's array tasks,
and ``--merge``, which reads the shards back into the run's summary.

A SLURM job array (or any scheduler that starts ``N`` copies of one command) runs
``nnx-ppo-quickstart --seeds S0,S1,... --shard slurm --output-dir DIR``; task ``i``
trains shard ``i`` of ``N``: the seeds at positions ``j`` with ``j % N == i``
(`nnx_ppo.algorithms.sweeps.shards.shard_runs`), as one `train_shard` program in
``DIR/shard-<i>-of-<N>/``. A shard folder is an ordinary resumable run: ``SIGTERM``
stops it with a checkpoint (exit status 143), and the same command started again (a
requeued task) continues it exactly; a folder of another run (other options, other
seeds) is refused before training. It holds the library's ``sweep.json``,
``checkpoints/``, ``metrics.jsonl`` and ``result.json``, and the quickstart's
``config.json`` and ``summary.json`` (the shard's throughput).

Every shard that finishes looks at the others; **the last one to finish** merges them
(`merge_run`, with `nnx_ppo.algorithms.sweeps.merge.merge_shards`): each seed's
folder ``DIR/seed_<s>/`` and ``DIR/summary.json``, as one ``--seeds`` program writes
them. ``nnx-ppo-quickstart --merge DIR`` does the same by hand (e.g. after redoing a
failed shard, or in a job that depends on the array).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the library's shards import JAX; --help stays instant
    from nnx_ppo.algorithms.sweeps.shards import Shard

__all__ = [
    "SHARDS_HELP",
    "SHARD_HELP",
    "SLURM",
    "finished_shards",
    "merge_run",
    "resolve_shard",
    "shard_text",
    "sweep_name",
]

SLURM = "slurm"
"""``--shard slurm``: the shard of the SLURM array task running the command."""

SHARD_HELP = (
    "with --seeds: train only shard I of N of the seeds (the seeds at positions j with "
    "j %% N == I) in <output-dir>/shard-I-of-N/, for a scheduler's array tasks; "
    "'slurm' takes I and N from the SLURM array task ($SLURM_ARRAY_TASK_ID, "
    "$SLURM_ARRAY_TASK_COUNT). The same command again resumes the shard; the last shard "
    "to finish writes every seed's folder and the summary in <output-dir>, as --seeds in "
    "one program does (or run --merge <output-dir>) (default: every seed in one program)"
)
SHARDS_HELP = (
    "with --shard slurm: the number of shards, when the array is not 0..N-1 (the task "
    "ids are then the shard indices, e.g. sbatch --array=3,7 to redo shards 3 and 7) "
    "(default: $SLURM_ARRAY_TASK_COUNT)"
)


def shard_text(text: str) -> str:
    """``--shard``'s argparse ``type``: ``"I/N"`` with ``0 <= I < N``, or ``"slurm"``.

    Raises:
        argparse.ArgumentTypeError: For anything else, with examples of both forms.

    Examples:
        >>> shard_text("1/4"), shard_text("slurm")
        ('1/4', 'slurm')
        >>> shard_text("4/4")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: '4/4' is not a shard: give I/N with 0 <= I < N ...
    """
    from nnx_ppo.algorithms.sweeps.shards import Shard

    if text == SLURM:
        return text
    try:
        shard = Shard.parse(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a shard: give I/N with 0 <= I < N (shards are numbered from "
            "0), e.g. 0/4 for the first of four, or 'slurm' for the SLURM array task's"
        ) from None
    return str(shard)


def resolve_shard(
    text: str,
    shards: int | None,
    seeds: Sequence[int],
    environ: Mapping[str, str] | None = None,
) -> Shard:
    """The shard ``--shard text`` (and ``--shards``) names, for ``seeds``.

    Raises:
        ValueError: Naming the flag, its value and the fix: ``--shard`` without
            ``--seeds``, ``--shards`` without ``--shard slurm``, ``slurm`` outside a
            SLURM array task, or more shards than seeds (a shard would train nothing).

    Examples:
        >>> resolve_shard("1/2", None, [0, 1, 2])
        Shard(index=1, count=2)
        >>> resolve_shard("slurm", None, [0, 1, 2],
        ...               {"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "3"})
        Shard(index=2, count=3)
        >>> resolve_shard("0/4", None, [0, 1, 2])  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: --shard 0/4 splits --seeds 0,1,2 into 4 shards, more than its 3 seeds: ...
    """
    from nnx_ppo.algorithms.sweeps.shards import Shard

    if not seeds:
        raise ValueError(
            f"--shard {text} splits the seeds of --seeds, which is not given; add e.g. "
            "--seeds 0,1,2,3 (every shard gets the same list)"
        )
    if shards is not None and text != SLURM:
        fix = (
            f"--shard {text} names its count already: drop --shards"
            if text
            else ("add --shard slurm")
        )
        raise ValueError(
            f"--shards {shards} goes with --shard slurm (a SLURM array of some shards); {fix}"
        )
    if text == SLURM:
        try:
            shard = Shard.from_environment(environ, count=shards)
        except ValueError as error:
            raise ValueError(f"--shard slurm: {error}") from None
    else:
        shard = Shard.parse(text)
    if shard.count > len(seeds):
        listed = ",".join(map(str, seeds))
        raise ValueError(
            f"--shard {text} splits --seeds {listed} into {shard.count} shards, more than "
            f"its {len(seeds)} seeds: a shard would train nothing; give at most "
            f"{len(seeds)} shards"
        )
    return shard


def sweep_name(cli: Mapping[str, Any], per_invocation: Sequence[str]) -> str:
    """The run's name in the shards' sweep identity (`train_shard`'s ``env_name``):
    every option of the run's record ``cli`` (its ``config.json``'s) that decides what
    is trained, so a shard folder of a run with another network, env or wrapper is
    refused. ``per_invocation`` options, the shard's own and ``--checkpoint-every``
    are left out (they differ between the shards of one run, or do not change it)."""
    skipped = {*per_invocation, "shard", "shards", "merge", "checkpoint_every"}
    options = {name: value for name, value in cli.items() if name not in skipped}
    return "nnx-ppo-quickstart " + json.dumps(options, sort_keys=True, default=str)


def _folders(out: Path, count: int | None = None) -> list[Path]:
    pattern = f"shard-*-of-{count}" if count is not None else "shard-*-of-*"
    return sorted(path for path in out.glob(pattern) if path.is_dir())


def finished_shards(out: Path, count: int) -> int:
    """How many of the ``count`` shard folders in ``out`` hold a finished shard."""
    return sum((folder / "result.json").exists() for folder in _folders(out, count))


def merge_run(out: Path) -> dict[str, Any]:
    """Merge the finished shards in ``out`` (``DIR/shard-*-of-*``) into the run's
    outputs, as one ``--seeds`` program writes them: each seed's folder (its
    ``metrics.jsonl``, ``summary.json`` and ``learning_curve.png``) and
    ``out/summary.json`` (`sweep_summary`, with ``"shards"``: the shard count).

    The seeds' results are those of their shards; the throughput is the array's: all
    seeds' steps, the longest shard's wall time, the sum of the shards' rates (they run
    side by side). A seed's own summary gives its shard's throughput.

    Returns:
        The summary written.

    Raises:
        ValueError: If ``out`` holds no shard folder, a shard is unfinished or missing,
            or the folders are of different runs (`merge_shards`' errors, after
            ``--merge``).
    """
    from nnx_ppo_apps_common.results import write_json

    from nnx_ppo.algorithms.sweeps.merge import merge_shards
    from nnx_ppo_quickstart.seeds import sweep_summary, write_seed_outputs

    folders = _folders(out)
    if not folders:
        raise ValueError(
            f"--merge {out}: no shard folder (shard-I-of-N/) there; pass the --output-dir "
            "the --shard commands trained in"
        )
    try:
        merged = merge_shards(folders)
    except ValueError as error:
        raise ValueError(f"--merge {out}: {error}") from None
    seeds = [run.seed for run in merged.runs]
    shard_records = []
    finals_by_seed: dict[int, float] = {}
    for folder in merged.folders:
        record = json.loads((folder / "config.json").read_text())["cli"]
        steps = int(json.loads((folder / "result.json").read_text())["steps"])
        try:
            measured = json.loads((folder / "summary.json").read_text())
        except FileNotFoundError:
            # That shard finished a moment ago and writes its throughput next; it then
            # merges again, with it.
            unknown = {"wall_time_s": None, "steps_per_second": None}
            measured = {"steps_per_seed": steps, **unknown, "per_seed": {"steps": steps, **unknown}}
        runs = json.loads((folder / "sweep.json").read_text())["runs"]
        mine = [seeds[j] for j in runs]
        finals = write_seed_outputs(
            out, folder / "metrics.jsonl", mine, env=record["env"], network=record["network"],
            measured=measured["per_seed"], finished=True,
        )  # fmt: skip
        finals_by_seed.update(zip(mine, finals, strict=True))
        shard_records.append((record, measured))
    record = shard_records[0][0]
    walls = [measured["wall_time_s"] for _, measured in shard_records]
    steps_per_seed = shard_records[0][1]["steps_per_seed"]
    rates = [measured["steps_per_second"] for _, measured in shard_records]
    known = None not in walls and None not in rates
    throughput = {
        "steps": steps_per_seed * len(seeds),
        "wall_time_s": max(walls) if known else None,
        "steps_per_second": round(sum(rates), 1) if known else None,
    }
    summary = sweep_summary(
        record["env"], record["network"], seeds, steps_per_seed, throughput,
        [finals_by_seed[seed] for seed in seeds], finished=True,
    )  # fmt: skip
    summary["shards"] = len(merged.folders)
    write_json(out / "summary.json", summary)
    return summary
