"""A run's folder: where it goes, what it refuses, and how its networks load back.

Every run writes to a folder of its own: `default_output_dir` names a new one after the
task, the network and the time, and `prepare_output_dir` refuses a folder that already
holds files unless ``--overwrite`` is given (then the app's own outputs in it are
replaced, and nothing else is touched). `load_trained` rebuilds a finished run's task
and a seed's trained network from its folder, for the analysis tools
(`nnx_ppo.networks.analysis`, `evaluate_trials(..., record=True)`)::

    task, network = load_trained("outputs/cognitive/pdm-gru-20260101-120000", seed=0)

Examples:
    >>> import datetime
    >>> when = datetime.datetime(2026, 1, 2, 3, 4, 5)
    >>> default_output_dir("my_tasks:AntiSaccade", "gru", when=when, root=Path("out"))
    PosixPath('out/my_tasks.AntiSaccade-gru-20260102-030405')
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import shutil
from pathlib import Path
from typing import Any

__all__ = [
    "CHECKPOINTS",
    "OUTPUTS",
    "default_output_dir",
    "load_trained",
    "prepare_output_dir",
]

CHECKPOINTS = "checkpoints"
"""The sub-folder of the trained networks: one `Checkpointer` checkpoint of the whole
sweep (each seed's network is run ``i`` of it, ``i`` its index in ``--seeds``)."""

OUTPUTS = (
    "results.json",
    "results.md",
    "metrics.jsonl",
    "learning_curves.csv",
    "learning_curves.png",
    "psychometric.png",
    "chronometric.png",
    CHECKPOINTS,
)
"""What a run writes in its folder (``--overwrite`` replaces exactly these)."""


def default_output_dir(
    task: str,
    network: str,
    *,
    when: datetime.datetime | None = None,
    root: Path = Path("outputs/cognitive"),
) -> Path:
    """A new folder for a run: ``<root>/<task>-<network>-<YYYYmmdd-HHMMSS>`` (the task
    name with ``:`` and other characters a folder name should not hold as ``.``), with
    ``-2``, ``-3``... appended if that exists."""
    stamp = (when or datetime.datetime.now()).strftime("%Y%m%d-%H%M%S")
    safe = re.sub(r"[^A-Za-z0-9_.-]+", ".", task)
    base = root / f"{safe}-{network}-{stamp}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def prepare_output_dir(path: Path, *, overwrite: bool) -> None:
    """Create ``path``; refuse one that holds files, unless ``overwrite``.

    Raises:
        ValueError: If ``path`` is a file, or a folder that is not empty and
            ``overwrite`` is off; the message names the folder and the fix.
    """
    if path.exists() and not path.is_dir():
        raise ValueError(f"--output-dir {path} is a file; give a folder (a new name)")
    if path.is_dir() and any(path.iterdir()) and not overwrite:
        raise ValueError(
            f"--output-dir {path} already holds files (a previous run's?); give a new "
            "folder, leave --output-dir out for a new timestamped one, or add --overwrite "
            "to replace the run's outputs in it"
        )
    path.mkdir(parents=True, exist_ok=True)
    for name in OUTPUTS:  # with --overwrite: the previous run's outputs, nothing else
        old = path / name
        if old.is_dir():
            shutil.rmtree(old)
        else:
            old.unlink(missing_ok=True)


def load_trained(output_dir: str | Path, seed: int | None = None) -> tuple[Any, Any]:
    """The task and a seed's trained network of a finished run of the app.

    Rebuilds the task and the network from the run's ``results.json`` (its
    ``settings``: task, network, sizes, ``dt``) and loads the seed's variables from
    ``checkpoints/`` (`nnx_ppo.algorithms.checkpointing.load_network`). A task given as
    ``module:Class`` must be importable again (run from the same folder).

    Args:
        output_dir: The run's ``--output-dir``.
        seed: One of the run's ``--seeds`` (default: the first).

    Returns:
        ``(task, network)``: the unbatched task, and the network in its train mode
        (``network.eval()`` for deterministic actions; the analysis tools set it).

    Raises:
        FileNotFoundError: If the folder has no ``results.json`` or no checkpoint.
        ValueError: If ``seed`` is not one of the run's seeds.
    """
    from flax import nnx

    from nnx_ppo.algorithms.checkpointing import load_network
    from nnx_ppo_cognitive.cli import make_network_factory
    from nnx_ppo_cognitive.tasks import resolve_task

    folder = Path(output_dir)
    record = folder / "results.json"
    if not record.is_file():
        raise FileNotFoundError(
            f"{folder} has no results.json: give the --output-dir of a finished "
            "nnx-ppo-cognitive run"
        )
    settings = json.loads(record.read_text())["settings"]
    seeds = list(settings["seeds"])
    chosen = seeds[0] if seed is None else seed
    if chosen not in seeds:
        raise ValueError(f"seed={seed!r} is not a seed of the run in {folder}; its seeds: {seeds}")
    args = argparse.Namespace(**settings)
    task = resolve_task(args.task).make(dt=args.dt)
    template = make_network_factory(args, task)(nnx.Rngs(0))
    network = load_network(folder / CHECKPOINTS, template, run=seeds.index(chosen))
    return task, network
