"""Checkpoints of PPO runs: save a run and resume it exactly.

`Checkpointer` is the `CheckpointHook` of
`train_ppo`, built on orbax's ``CheckpointManager``::

    checkpointer = Checkpointer("runs/ant/checkpoints", config=config, save_every_steps=100_000)
    train_ppo(env, network, config, checkpoint=checkpointer)  # resumes if it can
    checkpointer.close()

`load_network` and `load_metadata` (`nnx_ppo.algorithms.checkpointing.loading`, re-exported here)
read a checkpoint back outside training, e.g. a policy for deployment.

**What a checkpoint holds.** One folder per save, named by the exact env step count,
with three orbax items:

- ``network``: every network variable (``nnx.Param`` parameters and the rest: normalizer
  statistics, RNG stream keys and counters), all that `load_network` reads;
- ``train``: the rest of the `TrainState`: optimizer
  state, the run's PRNG key, the iteration counter, the environment states and network
  carries (array leaves, zero-size ones included: an MJX ``Data`` has many), the
  open-episode statistics;
- ``meta`` (JSON): the format version, the step, the last logged metrics, the configs as
  plain JSON data (`config_to_dict`; nothing is pickled), the versions of the
  packages, and for every array its path, shape, dtype and CRC-32.

Restoring this state continues a run bit for bit as if it had never stopped (on the
same hardware and software), because the whole iteration is a pure function of it.

**Light checkpoints.** ``Checkpointer(..., env_state=False)`` leaves out everything that
belongs to the environments (`ENV_FIELDS`: environment and reset states, network
carries, open-episode statistics, per-environment randomized models). A resume then
starts every environment from a fresh reset (the trainer's freshly initialised state)
with the saved parameters, optimizer state, statistics, key and step count: not bit for
bit, but the checkpoint is small and holds nothing a simulator defines (a resume after a
simulator upgrade that changed its state still works). The run keeps its ``n_envs``:
the step count is kept as completed iterations. Exact resume with the environment state
is the default.

**Probed before training.** `Checkpointer.restore`, which every trainer calls once
before compiling, first writes the template state to a scratch folder next to the
checkpoints: a state orbax cannot store, or a directory that cannot be written, is an
`UnsavableStateError` naming the leaf, before any training time is spent, not a crash
at the first save.
Arrays are saved as host copies made before `Checkpointer.save` returns, so the
trainer may donate the state's buffers to the next device call right away.

**Atomicity and corruption.** Orbax writes each checkpoint to a temporary folder and
renames it when complete, so a crash mid-save leaves no folder that looks finished (the
leftover temporary folder is ignored and cleaned up). A finished folder that cannot be
read back (deleted or damaged files, a CRC mismatch) is skipped with a
`CorruptedCheckpointWarning` in favour of the previous one.

One process writes a checkpoint directory at a time (several may read it).

**Devices and hosts.** Arrays are stored whole (not per device), so a checkpoint written
by a run on any number of devices resumes on any other number: `Checkpointer.restore`
lays the arrays out like its template (``train_ppo`` passes a state already placed on
its mesh). In a multi-process run (``jax.distributed``) every process builds the same
``Checkpointer``, but only process 0 writes or deletes checkpoints (``save`` does nothing
elsewhere); ``train_ppo`` gathers the sharded state to host memory on every process and
hands it to process 0, and restores on process 0 and broadcasts
(`save_checkpoint`,
`restore_checkpoint`). The directory must be on a
file system process 0 can write; the whole state must fit in its host memory.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from nnx_ppo.algorithms._config_base import check_optional_int
from nnx_ppo.algorithms.checkpointing import _io
from nnx_ppo.algorithms.checkpointing._io import (
    ENV_FIELDS,
    CheckpointMismatchError,
    CorruptedCheckpointError,
    CorruptedCheckpointWarning,
)
from nnx_ppo.algorithms.checkpointing.loading import load_metadata, load_network
from nnx_ppo.algorithms.config import config_from_dict, config_to_dict
from nnx_ppo.algorithms.core.faults import raise_if_non_finite
from nnx_ppo.algorithms.types import TrainState

__all__ = [
    "ENV_FIELDS",
    "CheckpointMismatchError",
    "Checkpointer",
    "CorruptedCheckpointError",
    "CorruptedCheckpointWarning",
    "UnsavableStateError",
    "config_from_dict",
    "config_to_dict",
    "load_metadata",
    "load_network",
]


# Re-exported here, where checkpoints are made: config_to_dict / config_from_dict live
# next to the configs (config.py), load_network / load_metadata in loading.py, and
# ENV_FIELDS and the errors of reading a checkpoint in _checkpoint_io.py (below both).


class UnsavableStateError(ValueError):
    """A training state that cannot be written as a checkpoint (raised by the probe in
    `Checkpointer.restore`, before training starts)."""


def retained_steps(
    steps: Sequence[int], max_to_keep: int | None, keep_every_steps: int | None = None
) -> list[int]:
    """The checkpoints a retention policy keeps (`Checkpointer`'s, a pure function).

    Args:
        steps: The steps of the finished checkpoints.
        max_to_keep: Keep the latest this many (``None``: all).
        keep_every_steps: Also keep, for good, the earliest checkpoint in every window
            ``[k * N, (k + 1) * N)`` of steps.

    Returns:
        The kept steps, ascending.

    Examples:
        >>> retained_steps([48, 80, 128, 160, 208, 240, 256], 2, keep_every_steps=100)
        [48, 128, 208, 240, 256]
    """
    ordered = sorted(steps)
    keep = set(ordered if max_to_keep is None else ordered[-max_to_keep:])
    if keep_every_steps is not None:
        first_in_window: dict[int, int] = {}
        for step in ordered:
            first_in_window.setdefault(step // keep_every_steps, step)
        keep |= set(first_in_window.values())
    return sorted(keep)


class Checkpointer:
    """Saves and restores a PPO run with orbax (the ``checkpoint=`` of ``train_ppo``).

    Policy:

    - **Resume.** `restore` (called by ``train_ppo`` before training) returns the
      latest readable checkpoint's state, skipping unreadable ones with a
      `CorruptedCheckpointWarning` (if none is readable, training starts afresh,
      after the warnings). With ``resume=False`` the directory must hold no checkpoint:
      an existing run is never silently continued or mixed with a new one.
    - **When.** A checkpoint is written when the step count crosses a multiple of
      ``save_every_steps`` (checked after every device call) and always at the end of
      training (``final=True``). With ``save_every_steps=None`` only at the end.
    - **Existing step.** Saving at the step the run was resumed from is skipped (that
      checkpoint holds this very state). Checkpoints at that step or later left by an
      abandoned attempt (e.g. a damaged one skipped at resume, or later ones after an
      explicit ``restore(step=...)``) are deleted first and replaced: the run on disk
      is always one consistent history.
    - **Retention.** After each save only the ``max_to_keep`` latest checkpoints are
      kept, plus, with ``keep_every_steps=N``, the earliest checkpoint in every window
      ``[k*N, (k+1)*N)`` of steps (kept for good).
    - **Non-finite state.** A state whose
      `non_finite` record shows a NaN/inf is
      never written: `save` raises
      `NonFiniteError` instead.

    Args:
        directory: Folder of the run's checkpoints (created if needed; one sub-folder
            per step).
        config: The run's config, stored as JSON in every checkpoint (see
            `config_to_dict`).
        save_every_steps: Save when the env step count crosses a multiple of this;
            ``None`` saves only at the end.
        max_to_keep: How many of the latest checkpoints to keep (``None``: all).
        keep_every_steps: Also keep the earliest checkpoint of every window of this
            many steps.
        async_save: Write in a background thread (``save`` returns once the host copy
            is made); the final save and `close` wait for it.
        resume: Continue from the checkpoints in ``directory``; ``False`` requires it to
            hold none (leftovers of unfinished saves do not count).
        env_state: Save the environment fields (`ENV_FIELDS`) too, so a resume continues
            bit for bit (``None``, the default, means ``True``). ``False`` writes light
            checkpoints: a resume restarts the environments from fresh resets and may
            change ``n_envs``.
        include_env_state: nnx-ppo's name for ``env_state``, accepted as an alias
            (``include_env_state=False`` is ``env_state=False``). Give one of the two.

    Raises:
        TypeError: If an argument has the wrong type, or both ``env_state`` and its
            alias ``include_env_state`` are given.
        ValueError: If a count is < 1.
        FileExistsError: If ``resume=False`` and ``directory`` already holds
            checkpoints, or ``directory`` is a file.

    Examples:
        >>> import tempfile
        >>> from flax import nnx
        >>> from nnx_ppo.algorithms.config import EvalConfig, PPOConfig, TrainConfig
        >>> from nnx_ppo.algorithms.ppo.train import train_ppo
        >>> from nnx_ppo.envs import PointMass
        >>> from nnx_ppo.networks.factories import make_mlp_actor_critic
        >>> from nnx_ppo.wrappers import EpisodeWrapper
        >>> config = TrainConfig(
        ...     ppo=PPOConfig(n_envs=4, rollout_length=8, n_minibatches=2, total_steps=64),
        ...     eval=EvalConfig(enabled=False),
        ... )
        >>> env = EpisodeWrapper(PointMass(), episode_length=16)
        >>> directory = tempfile.mkdtemp()
        >>> with Checkpointer(directory, config=config, save_every_steps=32) as ckpt:
        ...     result = train_ppo(env, make_mlp_actor_critic(2, 2, (8,), (8,),
        ...                        rngs=nnx.Rngs(0)), config, progress=False, checkpoint=ckpt)
        ...     ckpt.steps
        [32, 64]
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        config: Any = None,
        save_every_steps: int | None = None,
        max_to_keep: int | None = 3,
        keep_every_steps: int | None = None,
        async_save: bool = False,
        resume: bool = True,
        env_state: bool | None = None,
        include_env_state: bool | None = None,
    ) -> None:
        if not isinstance(directory, str | os.PathLike):
            raise TypeError(f"directory={directory!r} must be a path (str or os.PathLike).")
        if include_env_state is not None:  # nnx-ppo's name of ``env_state``
            if env_state is not None:
                raise TypeError(
                    f"Checkpointer got both env_state={env_state!r} and "
                    f"include_env_state={include_env_state!r}; include_env_state is "
                    "nnx-ppo's name of the same option: pass only one of them."
                )
            env_state = include_env_state
        env_state = True if env_state is None else env_state
        check_optional_int("save_every_steps", save_every_steps, 1)
        check_optional_int("max_to_keep", max_to_keep, 1)
        check_optional_int("keep_every_steps", keep_every_steps, 1)
        flags = (("async_save", async_save), ("resume", resume), ("env_state", env_state))
        for name, flag in flags:
            if not isinstance(flag, bool):
                raise TypeError(f"{name}={flag!r} must be a bool (True or False).")
        self.directory = Path(directory).expanduser().absolute()
        if self.directory.exists() and not self.directory.is_dir():
            raise FileExistsError(
                f"Checkpointer: directory={str(directory)!r} is a file; pass a folder."
            )
        steps = _io.valid_steps(self.directory)
        if steps and not resume:
            raise FileExistsError(
                f"Checkpointer: directory={str(directory)!r} already holds checkpoints "
                f"(steps {steps}) and resume=False. Pass resume=True to continue that run, "
                "or choose another (or an empty) directory to start a new one."
            )
        # With several processes, only process 0 writes (see the module docstring).
        self._writer = jax.process_index() == 0
        if self._writer:
            _io.remove_leftovers(self.directory)
        self._config = config_to_dict(config)
        self.save_every_steps = save_every_steps
        self.max_to_keep = max_to_keep
        self.keep_every_steps = keep_every_steps
        self.async_save = async_save
        self.resume = resume
        self.env_state = env_state
        self._probed = False
        self._manager = _io.manager(self.directory, create=True, async_save=async_save)
        self._last_saved: int | None = None
        self._restored_step: int | None = None
        self._closed = False
        self._removers: list[threading.Thread] = []

    # -- inspection -------------------------------------------------------------------

    @property
    def steps(self) -> list[int]:
        """The steps of the finished checkpoints on disk, ascending (waits for an
        asynchronous save in flight)."""
        self._manager.wait_until_finished()
        return self._disk_steps()

    @property
    def latest_step(self) -> int | None:
        """The highest step on disk, or ``None`` (it may still turn out unreadable)."""
        steps = self.steps
        return steps[-1] if steps else None

    @property
    def restored_step(self) -> int | None:
        """The step `restore` resumed from, or ``None``."""
        return self._restored_step

    # -- CheckpointHook ---------------------------------------------------------------

    def restore(self, template: TrainState, *, step: int | None = None) -> TrainState | None:
        """The state to resume from, restored into ``template``'s structure and devices.

        Args:
            template: A freshly initialised `TrainState`
                of the same network and config (``train_ppo`` passes its own).
            step: Restore this step instead of the latest readable one (also with
                ``resume=False``); an unreadable one is then an error.

        Returns:
            The restored state, or ``None`` (``resume=False``, no checkpoint, or none
            readable).

        The optimizer state is matched by its arrays, not by where its transforms sit
        in the optimizer's chain: a checkpoint written without ``max_grad_norm`` (or
        ``weight_decay``) resumes into a config with it, and back, because those
        transforms hold no state (the documented recovery from a divergence).

        A light checkpoint (written with ``env_state=False``) restores everything but
        the environment fields, which are taken from ``template`` (fresh resets).

        The first call also probes ``template`` (`probe`), so a state that cannot be
        saved fails here, before training, not at the first checkpoint.

        Raises:
            UnsavableStateError: If ``template`` cannot be written (see `probe`).
            CheckpointMismatchError: If the checkpoint's arrays do not match
                ``template`` (a different network or config, e.g. ``n_envs``, or a
                constant learning rate replaced by a schedule); the message names the
                first differing variable and both shapes.
            CorruptedCheckpointError: If the requested ``step`` cannot be read.
            FileNotFoundError: If there is no checkpoint at ``step``.
        """
        if not self._probed:
            self.probe(template)
        if step is None and not self.resume:
            return None
        self._manager.wait_until_finished()
        self._manager.reload()
        network = {"params": template.params, "network_state": template.network_state}
        train = template.replace(params=None, network_state=None)
        hint = (
            "Resume with the network and config the run was started with, or use "
            "another directory for a different run."
        )
        found = _io.restore_latest(
            self.directory,
            self._manager,
            {"network": network, "train": train},
            hint,
            step,
            stacklevel=3,
        )
        if found is None:
            if self.steps:
                warnings.warn(
                    f"no readable checkpoint in {self.directory}; training starts afresh "
                    "(the damaged checkpoints will be replaced).",
                    CorruptedCheckpointWarning,
                    stacklevel=2,
                )
            return None
        restored_step, trees, meta = found
        if meta.get("env_state") is False and meta.get("n_envs") != _io.n_envs(template):
            raise CheckpointMismatchError(
                f"the light checkpoint at step {restored_step} in {self.directory} was "
                f"written with n_envs={meta.get('n_envs')}, and the run resumes with "
                f"n_envs={_io.n_envs(template)}. Resume with n_envs={meta.get('n_envs')}: the "
                "step count is kept as completed iterations of n_envs x rollout_length."
            )
        self._restored_step = self._last_saved = restored_step
        return _io.with_env_of(trees["train"], template).replace(
            params=trees["network"]["params"],
            network_state=trees["network"]["network_state"],
        )

    def probe(self, template: Any) -> None:
        """Write ``template`` (a training state) to a scratch folder in the checkpoint
        directory and delete it: checks, once and before training, that every leaf of
        the state can be saved and that the directory is writable.

        Every trainer calls it through `restore`. Only the writing process probes.

        Raises:
            UnsavableStateError: Naming the first leaf that is not a numeric array (its
                path, shape and dtype), or the directory that cannot be written, with
                the fix.
        """
        if not self._writer:
            self._probed = True
            return
        trees = self._trees(template)
        for tree in trees.values():
            for record in _io.template_records(tree):
                if not _io.storable(record["dtype"]):
                    raise UnsavableStateError(
                        f"Checkpointer: the training state cannot be saved: its leaf "
                        f"'{record['path']}' ({_io.shape_text(record)}) is not a numeric "
                        "array, and checkpoints store numeric and boolean arrays (and PRNG "
                        "keys). Keep such leaves out of the state (an environment's info "
                        "and metrics should hold JAX arrays), or, if the leaf is an "
                        "environment's, write light checkpoints: Checkpointer(..., "
                        "env_state=False)."
                    )
        scratch = self.directory / _io.PROBE
        try:
            shutil.rmtree(scratch, ignore_errors=True)
            scratch.mkdir(parents=True)
            items = {name: _io.encode(tree)[0] for name, tree in trees.items()}
            _io.write_probe(scratch / "state", items)
        except Exception as error:
            raise UnsavableStateError(
                f"Checkpointer: a test write of the training state to {self.directory} "
                f"fails ({type(error).__name__}: {error}). Choose a directory this process "
                "can write, with room for the state."
            ) from error
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        self._probed = True

    def _trees(self, state: Any) -> dict[str, Any]:
        """The trees of the ``network`` and ``train`` items of ``state``."""
        network = {"params": state.params, "network_state": state.network_state}
        train = state.replace(params=None, network_state=None)
        return {"network": network, "train": train if self.env_state else _io.without_env(train)}

    def is_due(self, step: int, *, final: bool = False) -> bool:
        """Whether `save` at ``step`` would write (on process 0).

        Args:
            step: The exact env step count.
            final: The end of training.

        Returns:
            ``True`` if ``step`` crosses a multiple of ``save_every_steps`` since the last
            save (or ``final``) and is not the step already on disk.
        """
        if isinstance(step, bool) or not isinstance(step, int | np.integer) or step < 0:
            raise TypeError(f"step={step!r} must be a non-negative int (env steps).")
        step = int(step)
        if step == self._last_saved:
            return False  # this state is already on disk (resumed from it, or saved)
        last = self._last_saved or 0
        due = self.save_every_steps is not None and (
            step // self.save_every_steps > last // self.save_every_steps
        )
        return due or final

    def save(
        self,
        state: TrainState,
        step: int,
        metrics: Mapping[str, float] | None = None,
        *,
        final: bool = False,
    ) -> bool:
        """Save ``state`` at env step ``step`` if it is due (or ``final``).

        The arrays are copied to host memory before this returns (the trainer donates
        the state's buffers to the next device call). In a multi-process run only
        process 0 writes: elsewhere this does nothing and returns ``False``.

        Args:
            state: The `TrainState` after ``step`` steps.
            step: The exact env step count (the checkpoint's name).
            metrics: The last logged metrics, stored in the metadata (may be empty).
            final: The end of training: save regardless of ``save_every_steps`` and wait
                until the checkpoint is on disk.

        Returns:
            Whether a checkpoint was written.

        Raises:
            NonFiniteError: If ``state`` records a NaN/inf (nothing is written).
        """
        if not self.is_due(step, final=final) or not self._writer:
            return False
        step = int(step)
        raise_if_non_finite(state.non_finite, step)

        trees = self._trees(state)
        (network, network_records), (train, train_records) = map(
            _io.encode, (trees["network"], trees["train"])
        )
        meta = {
            "format": _io.FORMAT,
            "format_version": _io.FORMAT_VERSION,
            "step": step,
            # A sweep's state holds one (equal) count per run.
            "iteration": int(np.asarray(jax.device_get(state.iteration)).reshape(-1)[0]),
            "metrics": {str(k): _io.to_json(float(v)) for k, v in (metrics or {}).items()},
            "config": self._config,
            "versions": _io.versions(),
            "env_state": self.env_state,
            "n_envs": _io.n_envs(state),
            "arrays": {"network": network_records, "train": train_records},
        }
        # No save is in flight past this point (one writer at a time).
        self._manager.wait_until_finished()
        # Leftovers of an abandoned attempt at this step or later are replaced.
        for old in self._disk_steps():
            if old >= step:
                self._delete(old)
        if self.async_save:
            self._retain()  # over finished checkpoints only, before the next one starts
        self._manager.save(
            step,
            args=ocp.args.Composite(
                network=ocp.args.StandardSave(network),
                train=ocp.args.StandardSave(train),
                meta=ocp.args.JsonSave(meta),
            ),
            force=True,
        )
        self._last_saved = step
        if final or not self.async_save:
            self._manager.wait_until_finished()
            self._retain()
        return True

    # -- housekeeping -----------------------------------------------------------------

    def _disk_steps(self) -> list[int]:
        """Finished checkpoints on disk (call only while no save is in flight)."""
        self._manager.reload()
        return sorted(self._manager.all_steps())

    def _delete(self, step: int) -> None:
        """Delete a checkpoint atomically: rename it out of the step namespace first, so
        a crash during the removal leaves no half-deleted checkpoint behind."""
        path = self.directory / str(step)
        if path.is_dir():
            trash = self.directory / f"{step}{_io.DELETING}{time.time_ns()}"
            path.rename(trash)  # atomic; the slow removal runs in the background
            remover = threading.Thread(
                target=shutil.rmtree, args=(trash,), kwargs={"ignore_errors": True}
            )
            remover.start()
            self._removers.append(remover)
        else:  # an unusual layout: let orbax find it
            self._manager.delete(step)
        self._manager.reload()

    def _retain(self) -> None:
        """Apply ``max_to_keep`` / ``keep_every_steps`` to the finished checkpoints."""
        if not self._writer:
            return
        steps = self._disk_steps()
        keep = retained_steps(steps, self.max_to_keep, self.keep_every_steps)
        for step in steps:
            if step not in keep:
                self._delete(step)

    def wait_until_finished(self) -> None:
        """Block until an asynchronous save is on disk and old checkpoints are gone."""
        self._manager.wait_until_finished()
        while self._removers:
            self._removers.pop().join()

    def close(self) -> None:
        """Wait for a pending save, apply the retention policy and release orbax's
        resources (idempotent)."""
        if self._closed:
            return
        self._manager.wait_until_finished()
        self._retain()
        self.wait_until_finished()
        self._manager.close()
        self._closed = True

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Checkpointer({str(self.directory)!r}, save_every_steps={self.save_every_steps}, "
            f"max_to_keep={self.max_to_keep}, keep_every_steps={self.keep_every_steps}, "
            f"async_save={self.async_save}, resume={self.resume}, env_state={self.env_state})"
        )
