"""Private helpers of `nnx_ppo.algorithms.checkpointing.checkpointer` and
`nnx_ppo.algorithms.checkpointing.loading`: the on-disk format, and reading a
checkpoint back into template trees.

A checkpoint folder holds three orbax items: ``network`` and ``train`` (dicts of host
arrays keyed ``"000000"``, ``"000001"``, ... in pytree-flattening order) and ``meta``
(JSON: for every array its path, shape, dtype and CRC-32, plus run metadata). PRNG key
arrays are stored as their raw ``uint32`` data and rewrapped with the template's
implementation. Arrays with no elements (an MJX ``Data`` holds many: ``contact.dist``
``(0,)``, ``site_xpos`` ``(0, 3)``, ...) carry no data: their record alone (``"key":
None``) restores them, since orbax (tensorstore) refuses to write zero-size arrays.

`restore_latest` reads the latest readable checkpoint (or a given step) into template
trees, checking every array against its record first; it serves both
`Checkpointer.restore` and `load_network`. The errors of reading
(`CheckpointMismatchError`, `CorruptedCheckpointError`, `CorruptedCheckpointWarning`)
and `ENV_FIELDS` are defined here, below both public modules, and re-exported by
`nnx_ppo.algorithms.checkpointing.checkpointer`.
"""

from __future__ import annotations

import platform
import shutil
import warnings
import zlib
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from nnx_ppo.algorithms.config import config_to_json
from nnx_ppo.algorithms.core.trees import key_path

FORMAT = "nnx-ppo-checkpoint"
FORMAT_VERSION = 1
TMP = ".orbax-checkpoint-tmp"
"""Orbax's marker of an unfinished save's folder."""
DELETING = ".nnx-ppo-deleting-"
"""Marker of a checkpoint folder renamed out of the way for deletion."""
PROBE = ".nnx-ppo-probe"
"""The scratch folder of `Checkpointer.probe`'s test write (outside the step names)."""
_PACKAGES = (
    "nnx-ppo-train",
    "nnx-modules",
    "jax",
    "jaxlib",
    "flax",
    "optax",
    "orbax-checkpoint",
    "numpy",
)


class Unreadable(Exception):
    """A checkpoint folder that cannot be read back."""


class CorruptedCheckpointWarning(UserWarning):
    """A checkpoint folder could not be read back and was skipped."""


class CorruptedCheckpointError(RuntimeError):
    """A checkpoint that was asked for explicitly (or the only one) cannot be read."""


class CheckpointMismatchError(ValueError):
    """A checkpoint does not fit the template it is restored into (which variable,
    expected vs found shape and dtype)."""


# --------------------------------------------------------------------------- JSON

to_json = config_to_json  # JSON data for config values and metrics (see config.py)


def versions() -> dict[str, str | None]:
    """Python's and the relevant packages' versions (``None`` if not installed)."""
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


# --------------------------------------------------------------------------- arrays


path_str = key_path
"""A key path as ``"params/layers/0/linear/kernel"`` (`_trees.key_path`)."""


def is_key(x: Any) -> bool:
    """Whether ``x`` is a typed PRNG key array."""
    return jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


def flatten(tree: Any) -> tuple[list[tuple[str, Any]], Any]:
    """``([(path, array leaf)], treedef)``; non-array leaves are not saved."""
    leaves, treedef = jax.tree_util.tree_flatten_with_path(tree)
    return [(path_str(p), x) for p, x in leaves], treedef


def describe(x: Any) -> dict[str, Any]:
    """``{"shape": [...], "dtype": "..."}`` of an array (``key<fry>`` for keys)."""
    return {"shape": list(np.shape(x)), "dtype": str(x.dtype)}


def host_copy(x: Any) -> np.ndarray:
    """A NumPy copy owned by the caller (key arrays as their raw data)."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        raise NotImplementedError(
            "Checkpointer saves host copies of arrays, and this one is spread over "
            "several processes; gather it first with "
            "nnx_ppo.algorithms.core.distributed.gather_state (train_ppo does so)."
        )
    if is_key(x):
        x = jax.random.key_data(x)
    return np.array(x, copy=True)


def crc(x: np.ndarray) -> int:
    """CRC-32 of the array's bytes."""
    return zlib.crc32(np.ascontiguousarray(x).reshape(-1).view(np.uint8).data)


def encode(tree: Any) -> tuple[dict[str, np.ndarray], list[dict[str, Any]]]:
    """Host copies of the array leaves keyed ``"000000"``... and their records.

    A zero-size array is recorded (path, shape, dtype) with ``"key": None`` and not
    stored: it has no values, and orbax cannot write it.
    """
    arrays, records = {}, []
    for i, (path, leaf) in enumerate(flatten(tree)[0]):
        if not hasattr(leaf, "dtype"):
            continue
        data = host_copy(leaf)
        key = f"{i:06d}" if data.size else None
        if key is not None:
            arrays[key] = data
        records.append({"key": key, "path": path, **describe(leaf), "crc32": crc(data)})
    return arrays, records


def shape_text(record: Mapping[str, Any]) -> str:
    """``"(2, 8) float32"``."""
    return f"{tuple(record['shape'])} {record['dtype']}"


def mismatch(template: list[dict[str, Any]], saved: list[dict[str, Any]]) -> str | None:
    """The first difference between the template's array records and the saved ones
    (which variable, expected vs found shape and dtype), or ``None``."""
    saved_by_path = {r["path"]: r for r in saved}
    template_paths = {r["path"] for r in template}
    problem = None
    for t in template:
        s = saved_by_path.get(t["path"])
        if s is None:
            problem = (
                f"the template has variable '{t['path']}' ({shape_text(t)}) but the "
                "checkpoint has no such variable"
            )
        elif (t["shape"], t["dtype"]) != (s["shape"], s["dtype"]):
            problem = (
                f"variable '{t['path']}' is {shape_text(t)} in the template but "
                f"{shape_text(s)} in the checkpoint"
            )
        if problem:
            break
    else:
        extra = [s for s in saved if s["path"] not in template_paths]
        if extra:
            problem = (
                f"the checkpoint has variable '{extra[0]['path']}' "
                f"({shape_text(extra[0])}) that the template lacks"
            )
        elif [r["path"] for r in template] != [r["path"] for r in saved]:
            problem = "the same variables appear in a different order"
    return problem


def _state_field_path(path: str, prefix: str) -> str:
    """``"opt_state/1/0/mu/w"`` -> ``"mu/w"``: the path inside the optimizer's state
    without the positions of the transforms that hold it."""
    parts = path[len(prefix) :].split("/")
    while parts and parts[0].isdigit():
        parts.pop(0)
    return "/".join(parts)


def remap_optimizer_state(
    template: list[dict[str, Any]], saved: list[dict[str, Any]], prefix: str = "opt_state/"
) -> list[dict[str, Any]] | None:
    """The saved records with their optimizer-state paths renamed to the template's, if
    the two optimizer states differ only in where stateless transforms sit in a chain.

    Adding or removing ``max_grad_norm`` (a gradient-clipping transform chained before
    Adam) or ``weight_decay`` changes the optimizer state's paths (``opt_state/0/mu/...``
    becomes ``opt_state/1/0/mu/...``) but not its arrays: those transforms hold no state.
    The mapping is made only when everything outside ``prefix`` matches exactly and the
    optimizer-state arrays agree one to one, in order, in shape, dtype and in their path
    inside the state (``mu/...``, ``nu/...``, ``count``). Otherwise ``None``.
    """
    outside_t = [r for r in template if not r["path"].startswith(prefix)]
    outside_s = [r for r in saved if not r["path"].startswith(prefix)]
    inside_t = [r for r in template if r["path"].startswith(prefix)]
    inside_s = [r for r in saved if r["path"].startswith(prefix)]
    if len(inside_t) != len(inside_s) or not inside_t:
        return None
    if [(r["path"], r["shape"], r["dtype"]) for r in outside_t] != [
        (r["path"], r["shape"], r["dtype"]) for r in outside_s
    ]:
        return None
    renamed = {}
    for t, s in zip(inside_t, inside_s, strict=True):
        same_field = _state_field_path(t["path"], prefix) == _state_field_path(s["path"], prefix)
        if not same_field or (t["shape"], t["dtype"]) != (s["shape"], s["dtype"]):
            return None
        renamed[id(s)] = t["path"]
    remapped = [{**r, "path": renamed[id(r)]} if id(r) in renamed else r for r in saved]
    # The template's order: optimizer-state arrays keep their relative order.
    order = {r["path"]: i for i, r in enumerate(template)}
    return sorted(remapped, key=lambda r: order.get(r["path"], len(order)))


def template_records(tree: Any) -> list[dict[str, Any]]:
    """Path, shape and dtype of every array leaf of ``tree``."""
    return [{"path": p, **describe(leaf)} for p, leaf in flatten(tree)[0] if hasattr(leaf, "dtype")]


def decode(
    template: Any, arrays: Mapping[str, Any], saved: list[dict[str, Any]], where: str
) -> Any:
    """Rebuild ``template``'s tree from restored host arrays (CRC-checked)."""
    flat, treedef = flatten(template)
    records = iter(saved)  # in the template's order (checked by mismatch)
    leaves = []
    for path, leaf in flat:
        if not hasattr(leaf, "dtype"):
            leaves.append(leaf)
            continue
        record = next(records)
        if record["key"] is None:  # zero-size: the template's shape and dtype are its value
            data = host_copy(leaf)
        elif record["key"] not in arrays:
            raise Unreadable(f"{where}: array '{path}' is missing")
        else:
            data = np.asarray(arrays[record["key"]])
        if crc(data) != record["crc32"]:
            raise Unreadable(f"{where}: array '{path}' fails its CRC-32 check")
        if is_key(leaf):
            value = jax.random.wrap_key_data(jnp.asarray(data), impl=jax.random.key_impl(leaf))
        else:
            sharding = getattr(leaf, "sharding", None)
            value = jax.device_put(data, sharding) if sharding is not None else jnp.asarray(data)
        leaves.append(value)
    return jax.tree_util.tree_unflatten(treedef, leaves)


def handlers() -> dict[str, ocp.CheckpointHandler]:
    """Orbax handlers of the three items."""
    return {
        "network": ocp.StandardCheckpointHandler(),
        "train": ocp.StandardCheckpointHandler(),
        "meta": ocp.JsonCheckpointHandler(),
    }


def manager(directory: Path, *, create: bool, async_save: bool = False) -> ocp.CheckpointManager:
    """An orbax ``CheckpointManager`` of ``directory`` that leaves retention and the
    cleanup of unfinished saves to `Checkpointer`.

    With several processes (``jax.distributed``) the manager is private to this process
    (no cross-process barriers): process 0 alone writes host copies of the gathered
    state, and any process may read.
    """
    multiprocess: dict[str, Any] = {}
    if jax.process_count() > 1:
        if create:  # orbax cannot create the root itself for a per-process manager
            directory.mkdir(parents=True, exist_ok=True)
        create = False
        me = jax.process_index()
        multiprocess["multiprocessing_options"] = ocp.options.MultiprocessingOptions(
            primary_host=me, active_processes={me}
        )
    options = ocp.CheckpointManagerOptions(
        max_to_keep=None,  # retention is ours (Checkpointer._retain)
        create=create,
        cleanup_tmp_directories=False,  # Checkpointer cleans up synchronously
        enable_async_checkpointing=async_save,
        **multiprocess,
    )
    return ocp.CheckpointManager(directory, options=options, item_handlers=handlers())


def read_meta(checkpoints: ocp.CheckpointManager, step: int, where: str) -> dict[str, Any]:
    """The ``meta`` item of ``step``; raises `Unreadable` if it cannot be read and
    `CheckpointMismatchError` if a newer nnx-ppo-train wrote it."""
    try:
        meta = checkpoints.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))[
            "meta"
        ]
    except Exception as e:  # orbax raises many kinds for missing/damaged files
        raise Unreadable(f"{where}: cannot read its metadata ({type(e).__name__}: {e})") from e
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise Unreadable(f"{where}: its metadata is not an {FORMAT} record")
    if meta.get("format_version", 0) > FORMAT_VERSION:
        raise CheckpointMismatchError(
            f"{where} was written in format version {meta['format_version']} by a newer "
            f"nnx-ppo-train ({meta.get('versions', {}).get('nnx-ppo-train')}); this one "
            f"reads up to version {FORMAT_VERSION}. Upgrade nnx-ppo-train."
        )
    return meta


def read_items(
    checkpoints: ocp.CheckpointManager, step: int, names: Sequence[str], where: str
) -> dict[str, Any]:
    """The array items ``names`` of ``step`` as host arrays; raises `Unreadable`."""
    try:
        restored = checkpoints.restore(
            step, args=ocp.args.Composite(**{n: ocp.args.StandardRestore() for n in names})
        )
        return {n: restored[n] for n in names}
    except Exception as e:
        raise Unreadable(f"{where}: cannot read its arrays ({type(e).__name__}: {e})") from e


def write_probe(folder: Path, items: Mapping[str, Mapping[str, np.ndarray]]) -> None:
    """Write ``items`` (``{name: {key: array}}``) as orbax items under ``folder``, as
    a checkpoint writes them (`Checkpointer.probe`'s test write). With several processes
    the writer is private to this one, like `manager`'s: no cross-process barrier."""
    options = ocp.options.MultiprocessingOptions()
    if jax.process_count() > 1:
        me = jax.process_index()
        options = ocp.options.MultiprocessingOptions(primary_host=me, active_processes={me})
    folder.mkdir(parents=True, exist_ok=True)
    for name, arrays in items.items():
        handler = ocp.StandardCheckpointHandler(multiprocessing_options=options)
        with ocp.Checkpointer(handler, multiprocessing_options=options) as writer:
            writer.save(folder / name, args=ocp.args.StandardSave(dict(arrays)), force=True)


def storable(dtype: str) -> bool:
    """Whether arrays of ``dtype`` (a record's ``"dtype"``) can be checkpointed: booleans,
    numbers (bfloat16 and the other ML dtypes included) and PRNG keys; not strings,
    objects, dates or ``float0``."""
    if dtype.startswith("key<"):
        return True
    try:
        parsed = jnp.dtype(dtype)
    except TypeError:
        return False
    return parsed == np.bool_ or bool(jnp.issubdtype(parsed, jnp.number))


def remove_leftovers(directory: Path) -> None:
    """Remove unfinished saves, interrupted deletions and probes of an earlier process."""
    if directory.is_dir():
        for entry in directory.iterdir():
            leftover = TMP in entry.name or DELETING in entry.name or entry.name == PROBE
            if entry.is_dir() and leftover:
                shutil.rmtree(entry, ignore_errors=True)


def valid_steps(directory: Path) -> list[int]:
    """The finished checkpoints' steps in ``directory``, ascending."""
    if not directory.is_dir():
        return []
    checkpoints = manager(directory, create=False)
    try:
        return sorted(checkpoints.all_steps())
    finally:
        checkpoints.close()


# --------------------------------------------------------------------------- light checkpoints


ENV_FIELDS = ("env_state", "reset_state", "carry", "teacher_carry", "episodes", "models")
"""The training-state fields that belong to the environments, left out of light
checkpoints (``Checkpointer(env_state=False)``) and re-initialised on resume."""


def without_env(state: Any) -> Any:
    """``state`` with its `ENV_FIELDS` set to ``None`` (those it has)."""
    fields = {name: None for name in ENV_FIELDS if hasattr(state, name)}
    return state.replace(**fields)


def n_envs(state: Any) -> int | None:
    """The number of environments of a training state (the last axis of its episode
    statistics: a sweep's have a leading run axis), or ``None``."""
    returns = getattr(getattr(state, "episodes", None), "episode_return", None)
    if returns is None:
        return None
    shape = np.shape(returns)
    return int(shape[-1]) if shape else None


def with_env_of(state: Any, template: Any) -> Any:
    """``state`` with the `ENV_FIELDS` it lacks (``None``) taken from ``template``."""
    fields = {
        name: getattr(template, name)
        for name in ENV_FIELDS
        if hasattr(state, name) and getattr(state, name) is None
    }
    return state.replace(**fields)


# --------------------------------------------------------------------------- restore


def restore_trees(
    checkpoints: ocp.CheckpointManager,
    step: int,
    templates: Mapping[str, Any],
    where: str,
    hint: str,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Restore the items ``templates`` names into those trees: ``(trees, meta)``.

    Raises `Unreadable` for a damaged folder and `CheckpointMismatchError`
    for a readable checkpoint that does not fit the templates.
    """
    meta = read_meta(checkpoints, step, where)
    if "train" in templates and meta.get("env_state") is False:
        # A light checkpoint: no environment fields (`ENV_FIELDS`).
        templates = {**templates, "train": without_env(templates["train"])}
    records = {}
    for name, template in templates.items():
        saved = meta.get("arrays", {}).get(name)
        if not isinstance(saved, list):
            raise Unreadable(f"{where}: its metadata lists no '{name}' arrays")
        expected = template_records(template)
        problem = mismatch(expected, saved)
        if problem and name == "train":
            # A changed max_grad_norm / weight_decay (the documented recovery from a
            # divergence) only moves Adam's state inside the optimizer's chain.
            remapped = remap_optimizer_state(expected, saved)
            if remapped is not None:
                saved, problem = remapped, None
        if problem:
            raise CheckpointMismatchError(f"{where} does not match the template: {problem}. {hint}")
        records[name] = saved
    arrays = read_items(checkpoints, step, list(templates), where)
    trees = {
        name: decode(template, arrays[name], records[name], where)
        for name, template in templates.items()
    }
    return trees, meta


def restore_latest(
    directory: Path,
    checkpoints: ocp.CheckpointManager,
    templates: Mapping[str, Any],
    hint: str,
    step: int | None,
    stacklevel: int,
) -> tuple[int, dict[str, Any], dict[str, Any]] | None:
    """``(step, trees, meta)`` of ``step`` or of the latest readable checkpoint (the
    ones that cannot be read are skipped with a `CorruptedCheckpointWarning`), or
    ``None`` if none can be read."""
    steps = sorted(checkpoints.all_steps(), reverse=True)
    if step is not None:
        if step not in steps:
            raise FileNotFoundError(
                f"there is no checkpoint at step {step} in {directory}; available steps: "
                f"{sorted(steps)}."
            )
        where = f"the checkpoint at step {step} in {directory}"
        try:
            trees, meta = restore_trees(checkpoints, step, templates, where, hint)
        except Unreadable as e:
            raise CorruptedCheckpointError(
                f"{e}. Load another step (available: {sorted(steps)})."
            ) from e
        return step, trees, meta
    for candidate in steps:
        where = f"the checkpoint at step {candidate} in {directory}"
        try:
            trees, meta = restore_trees(checkpoints, candidate, templates, where, hint)
        except Unreadable as e:
            warnings.warn(
                f"{e}; skipping it in favour of the previous checkpoint.",
                CorruptedCheckpointWarning,
                stacklevel=stacklevel,
            )
            continue
        return candidate, trees, meta
    return None
