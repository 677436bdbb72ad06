"""Load what a `Checkpointer` saved, outside training: a trained network for inference
(`load_network`) and a checkpoint's metadata (`load_metadata`)::

    policy = load_network("runs/ant/checkpoints", make_network())  # inference only
    load_metadata("runs/ant/checkpoints")["metrics"]  # the last logged metrics

`load_network` reads only a checkpoint's ``network`` item (parameters, normalizer
statistics and RNG state; no optimizer or environment state) into a network built like
the trained one, and `load_metadata` only its JSON ``meta`` item (what a checkpoint
holds is described in `nnx_ppo.algorithms.checkpointing.checkpointer`). Both read the latest
readable checkpoint unless given a ``step``: a damaged one is skipped with a
`CorruptedCheckpointWarning` in favour of the previous one.

Arrays are stored whole (not per device), so a network trained on any number of devices
loads on one. The checkpoint of a sweep (`nnx_ppo.algorithms.sweeps.many.train_many`) holds
every variable with a leading run axis: ``load_network(..., run=i)`` loads run ``i``.

The errors (`CheckpointMismatchError`, `CorruptedCheckpointError`) and the warning are
importable from `nnx_ppo.algorithms.checkpointing.checkpointer`, which re-exports both functions.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx

from nnx_ppo.algorithms.checkpointing import _io
from nnx_ppo.algorithms.checkpointing._io import (
    CheckpointMismatchError,
    CorruptedCheckpointError,
    CorruptedCheckpointWarning,
)

__all__ = ["latest_checkpoint", "load_metadata", "load_network"]


def _network_template(network: nnx.Module) -> dict[str, Any]:
    _, params, network_state = nnx.split(network, nnx.Param, ...)
    return {"params": params, "network_state": network_state}


def _network_hint() -> str:
    return (
        "Build the template network with the same constructor arguments (sizes, "
        "modules, observation and action sizes) as the trained one."
    )


def _open(directory: str | os.PathLike[str]) -> tuple[Path, ocp.CheckpointManager]:
    path = Path(directory).expanduser().absolute()
    if not path.is_dir():
        raise FileNotFoundError(f"no checkpoint directory at {str(directory)!r}.")
    manager = _io.manager(path, create=False)
    if not manager.all_steps():
        manager.close()
        raise FileNotFoundError(
            f"{str(directory)!r} holds no finished checkpoint (train with "
            "train_ppo(..., checkpoint=Checkpointer(directory)) first)."
        )
    return path, manager


def load_network(
    directory: str | os.PathLike[str],
    template_network: nnx.Module,
    step: int | None = None,
    *,
    run: int | None = None,
) -> nnx.Module:
    """Load a trained network's variables into a freshly built template, for inference.

    Reads only the ``network`` item: parameters, normalizer statistics and RNG state;
    no optimizer or environment state. The template is updated in place (its
    train/eval mode is left as it is) and returned.

    Args:
        directory: A `Checkpointer` directory.
        template_network: A network built exactly like the trained one (any seed).
        step: The step to load; ``None`` loads the latest readable checkpoint (skipping
            unreadable ones with a `CorruptedCheckpointWarning`).
        run: For the checkpoint of a sweep (`nnx_ppo.algorithms.sweeps.many.train_many`,
            every variable with a leading run axis): the index of the run to load.
            ``None`` for a single run's checkpoint.

    Returns:
        ``template_network``, now holding the checkpoint's variables.

    Raises:
        FileNotFoundError: If ``directory`` holds no checkpoint, or none at ``step``.
        CheckpointMismatchError: (a ``ValueError``) If the template's variables differ
            from the checkpoint's (with ``run``: from one run's); names the variable and
            both shapes.
        CorruptedCheckpointError: If ``step`` (or every checkpoint) cannot be read.
        IndexError: If ``run`` is not a run of the sweep.
    """
    path, manager = _open(directory)
    try:
        template = _network_template(template_network)
        if run is not None:
            single = (_io.template_records(template) or [{"shape": []}])[0].get("shape") or []
            runs = _runs_of(manager, path, step, run, len(single))
            template = jax.tree.map(lambda x: jnp.stack([x] * runs), template)
        found = _io.restore_latest(path, manager, {"network": template}, _network_hint(), step, 3)
    finally:
        manager.close()
    if found is None:
        raise CorruptedCheckpointError(f"no checkpoint in {path} can be read.")
    tree = found[1]["network"]
    if run is not None:
        tree = jax.tree.map(lambda x: x[run], tree)
    nnx.update(template_network, tree["params"], tree["network_state"])
    return template_network


def _runs_of(
    manager: ocp.CheckpointManager, path: Path, step: int | None, run: Any, single_rank: int
) -> int:
    """The number of runs of the sweep checkpointed at ``step`` (or at the latest step
    with readable metadata), with ``run`` checked against it. ``single_rank``: the rank
    of the template's first network array; a sweep's has one more (the run axis)."""
    if isinstance(run, bool) or not isinstance(run, int | np.integer) or run < 0:
        raise TypeError(f"run={run!r} must be a non-negative int (a run index) or None.")
    available = sorted(manager.all_steps(), reverse=True)
    if step is not None and step not in available:
        raise FileNotFoundError(
            f"there is no checkpoint at step {step} in {path}; available steps: "
            f"{sorted(available)}."
        )
    for candidate in [step] if step is not None else available:
        try:
            meta = _io.read_meta(manager, candidate, f"the checkpoint at step {candidate}")
        except _io.Unreadable:
            continue
        records = meta.get("arrays", {}).get("network") or [{"shape": []}]
        shape = records[0].get("shape") or []
        if len(shape) <= single_rank:
            raise CheckpointMismatchError(
                f"the checkpoint at step {candidate} in {path} is a single run's (its "
                f"variables have no run axis); load it without run={run}."
            )
        if run >= shape[0]:
            raise IndexError(
                f"run={run} is not a run of the sweep checkpointed in {path}: it has "
                f"{shape[0]} runs (indices 0..{shape[0] - 1})."
            )
        return int(shape[0])
    raise CorruptedCheckpointError(f"no checkpoint in {path} has readable metadata.")


def load_metadata(directory: str | os.PathLike[str], step: int | None = None) -> dict[str, Any]:
    """The JSON metadata of a checkpoint (step, metrics, config, versions, arrays).

    Args:
        directory: A `Checkpointer` directory.
        step: The step; ``None`` reads the latest checkpoint whose metadata is readable.

    Returns:
        A dict with ``"format"``, ``"format_version"``, ``"step"``, ``"iteration"``,
        ``"metrics"``, ``"config"`` (`config_to_dict` data or ``None``),
        ``"versions"`` and ``"arrays"``.

    Raises:
        FileNotFoundError: If there is no checkpoint (at ``step``).
        CorruptedCheckpointError: If the metadata cannot be read.
    """
    path, manager = _open(directory)
    try:
        steps = sorted(manager.all_steps(), reverse=True)
        if step is not None and step not in steps:
            raise FileNotFoundError(
                f"there is no checkpoint at step {step} in {path}; available: {sorted(steps)}."
            )
        for candidate in [step] if step is not None else steps:
            try:
                return _io.read_meta(manager, candidate, f"the checkpoint at step {candidate}")
            except _io.Unreadable as e:
                if step is not None:
                    raise CorruptedCheckpointError(str(e)) from e
                warnings.warn(f"{e}; skipping it.", CorruptedCheckpointWarning, stacklevel=2)
        raise CorruptedCheckpointError(f"no checkpoint in {path} has readable metadata.")
    finally:
        manager.close()


def latest_checkpoint(directory: str | os.PathLike[str]) -> int | None:
    """The step of the latest finished checkpoint in a `Checkpointer` directory, or
    ``None`` if it holds none (or does not exist): nnx-ppo's name, for scripts that
    look before they load or resume. Pass it as ``step=`` to `load_network` or
    `load_metadata` to read exactly that checkpoint (without ``step`` they read the
    latest readable one, skipping a damaged one).

    Examples:
        >>> latest_checkpoint("no/such/folder") is None
        True
    """
    steps = _io.valid_steps(Path(directory).expanduser().absolute())
    return steps[-1] if steps else None
