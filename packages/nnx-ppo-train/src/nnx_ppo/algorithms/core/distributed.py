"""Scale-out on ``jax.sharding``: one device mesh with a ``"data"`` axis over environments.

The trainer runs the same jitted iteration on one device, on all devices of a host, or
on the devices of many hosts. The training state is placed on a
`jax.sharding.Mesh` as follows:

==========================================  ===========================================
``env_state``, ``reset_state``, ``carry``,  sharded along the ``"data"`` mesh axis on
``episodes``, ``models`` (and the rollout)  their environment axis (``P("data")``)
``params``, ``network_state``,              replicated on every device (``P()``)
``opt_state``, ``rng``, ``iteration``,
``non_finite``
==========================================  ===========================================

and XLA's SPMD partitioner does the rest: each device steps its own environments and
runs the network on them; the mean of the loss over a minibatch (which spans all
devices), and hence the gradient, is all-reduced, as are the normalizer statistics
(``update_statistics`` reduces over the globally sharded ``[T, B, ...]`` rollout) and
the logged metrics. The parameter update is computed identically on every device, so
the parameters stay replicated. The result equals the single-device run up to the
order of floating-point reductions.

**Minibatches.** A minibatch is a random set of ``n_envs // n_minibatches`` whole
environment sequences drawn from all devices (exactly as on one device), so the
shuffle moves rollout data between devices: the shuffled rollout is all-gathered once
per epoch and each device keeps its slice of every minibatch. The rollout
(``[T, n_envs, ...]`` observations and extras) is small next to the simulation and
network work, so this costs little; in exchange, a run's result does not depend on
the number of devices. Each minibatch is split evenly over the devices, which is why
``n_envs`` must be a multiple of ``n_minibatches * n_devices``
(`check_batch_divisible`).

**Multi-host.** After ``jax.distributed.initialize()`` a mesh spans the devices of all
processes (`make_mesh` uses ``jax.devices()``). Each process resets and steps only
its own share of the environments (`process_env_slice`;
`shard_batch` with ``process_local=True`` builds global arrays from per-process data
with ``jax.make_array_from_process_local_data``). Only process 0 (`is_primary`) logs,
shows the progress bar and writes checkpoints: `save_checkpoint` gathers the state to
host memory on every process (a collective) and hands it to process 0's checkpointer;
`restore_checkpoint` reads on process 0 and broadcasts. Every process must run the
same training script with the same arguments.

Examples:
    >>> import jax
    >>> mesh = make_mesh()  # all devices; one on a plain CPU
    >>> mesh.axis_names, n_shards(mesh) == jax.device_count()
    (('data',), True)
    >>> check_batch_divisible(256, mesh, n_minibatches=8)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from nnx_ppo.algorithms.core.faults import raise_if_non_finite
from nnx_ppo.algorithms.types import TrainState
from nnx_ppo.algorithms.types import batch_fields as declared_batch_fields

__all__ = [
    "BATCH_FIELDS",
    "DATA_AXIS",
    "batch_sharding",
    "check_batch_divisible",
    "commit_like",
    "constrain_batch",
    "gather_state",
    "is_primary",
    "make_mesh",
    "n_shards",
    "process_env_slice",
    "replicate",
    "replicated_sharding",
    "resolve_mesh",
    "restore_checkpoint",
    "save_checkpoint",
    "shard_batch",
    "shard_state",
    "state_shardings",
    "uses_mesh",
]

DATA_AXIS = "data"
"""Name of the mesh axis the environment batch is sharded along."""

BATCH_FIELDS = declared_batch_fields(TrainState)
"""`TrainState`'s fields whose leaves are ``[n_envs, ...]`` and are sharded along
`DATA_AXIS`. Every state declares its own (`batch_field`); the functions below read
the declaration of the state they are given."""

State = TypeVar("State")


# --------------------------------------------------------------------------- meshes


def make_mesh(devices: int | Sequence[jax.Device] | None = None) -> Mesh:
    """A one-axis `jax.sharding.Mesh` ``("data",)`` over some devices.

    Args:
        devices: ``None``: every device (``jax.devices()``: all local devices, or with
            ``jax.distributed`` the devices of all processes); an ``int`` ``k``: the
            first ``k`` of them (with several processes ``k`` must be all of them); or
            an explicit sequence of devices.

    Raises:
        TypeError: If ``devices`` is of another type.
        ValueError: If the count is < 1 or more than there are, or the sequence is
            empty or repeats a device.
    """
    available = jax.devices()
    if devices is None:
        chosen = list(available)
    elif isinstance(devices, bool):
        raise TypeError(f"devices={devices!r} must be an int, a sequence of devices or None.")
    elif isinstance(devices, int | np.integer):
        count = int(devices)
        if not 1 <= count <= len(available):
            raise ValueError(
                f"devices={count} must be between 1 and the number of devices, "
                f"{len(available)} ({available[0].platform}); pass devices=None to use all "
                "of them (on CPU, XLA_FLAGS=--xla_force_host_platform_device_count=N "
                "simulates N devices)."
            )
        if jax.process_count() > 1 and count != len(available):
            raise ValueError(
                f"devices={count} with {jax.process_count()} processes: a multi-process "
                f"run uses the devices of every process ({len(available)}); pass "
                "devices=None, or a mesh=... built from devices of every process."
            )
        chosen = list(available[:count])
    elif isinstance(devices, Sequence) and not isinstance(devices, str):
        chosen = list(devices)
        if not chosen:
            raise ValueError("devices=[] is empty; pass at least one device, or None for all.")
        if len({id(d) for d in chosen}) != len(chosen):
            raise ValueError(f"devices={chosen!r} lists a device twice; list each once.")
    else:
        raise TypeError(
            f"devices={devices!r} must be None (all devices), an int (the first N) or a "
            f"sequence of jax devices, not a {type(devices).__name__}."
        )
    return Mesh(np.asarray(chosen, dtype=object), (DATA_AXIS,))


def resolve_mesh(
    devices: int | Sequence[jax.Device] | None = None, mesh: Mesh | None = None
) -> Mesh:
    """The mesh a run uses: ``mesh`` if given, else `make_mesh` of ``devices``.

    Args:
        devices: See `make_mesh`.
        mesh: A `jax.sharding.Mesh` with a ``"data"`` axis (other axes, e.g. for
            a model-parallel layout, are allowed; the state is replicated along them).

    Returns:
        The mesh.

    Raises:
        ValueError: If both are given, or ``mesh`` has no ``"data"`` axis.
        TypeError: If ``mesh`` is not a ``Mesh``.
    """
    if mesh is None:
        return make_mesh(devices)
    if not isinstance(mesh, Mesh):
        raise TypeError(
            f"mesh={mesh!r} must be a jax.sharding.Mesh, e.g. "
            "Mesh(np.array(jax.devices()), ('data',)) or make_mesh()."
        )
    if devices is not None:
        raise ValueError(
            f"pass devices=... or mesh=..., not both (got devices={devices!r} and a mesh "
            f"of shape {dict(mesh.shape)})."
        )
    if DATA_AXIS not in mesh.axis_names:
        raise ValueError(
            f"mesh has axes {tuple(mesh.axis_names)} but no {DATA_AXIS!r} axis, along which "
            f"the environments are sharded; name one axis {DATA_AXIS!r}."
        )
    return mesh


def n_shards(mesh: Mesh) -> int:
    """Size of the mesh's ``"data"`` axis: the number of environment shards."""
    return int(mesh.shape[DATA_AXIS])


def uses_mesh(mesh: Mesh | None) -> bool:
    """Whether a run on ``mesh`` places its state on it: more than one device, more
    than one process, or a single device other than JAX's default one. Otherwise
    (one default device) the trainer uses plain, unsharded arrays."""
    if mesh is None:
        return False
    if mesh.size > 1 or jax.process_count() > 1:
        return True
    default = next(iter(jnp.zeros(()).devices()))
    return bool(mesh.devices.flat[0] != default)


def is_primary() -> bool:
    """Whether this is process 0, the one that logs and writes checkpoints."""
    return jax.process_index() == 0


def check_batch_divisible(
    n_envs: int, mesh: Mesh | int, *, n_minibatches: int = 1, name: str = "n_envs"
) -> None:
    """Check that every device gets the same number of environments per minibatch.

    Args:
        n_envs: Environments in the batch.
        mesh: The mesh (its ``"data"`` axis size ``D`` counts), or ``D`` itself.
        n_minibatches: Minibatches per epoch (``M``); each is split over the devices.
        name: The argument name used in the error.

    Raises:
        ValueError: If ``n_envs`` is not a multiple of ``M * D``; the message proposes
            the nearest valid ``n_envs``.
    """
    shards = mesh if isinstance(mesh, int) else n_shards(mesh)
    unit = shards * n_minibatches
    if n_envs % unit:
        up = -(-n_envs // unit) * unit
        down = (n_envs // unit) * unit
        suggestion = f"{name}={up}" + (f" or {name}={down}" if down else "")
        per = f"n_minibatches={n_minibatches} * " if n_minibatches > 1 else ""
        raise ValueError(
            f"{name}={n_envs} is not divisible by {per}{shards} devices = {unit}: the "
            f"environments{' of each minibatch' if n_minibatches > 1 else ''} are split "
            f"evenly over the {shards} devices of the mesh's {DATA_AXIS!r} axis. Use "
            f"{suggestion}, or fewer devices (devices=...)."
        )


# --------------------------------------------------------------------------- shardings


def batch_sharding(mesh: Mesh, axis: int = 0) -> NamedSharding:
    """``NamedSharding`` splitting dimension ``axis`` along ``"data"`` (rest replicated)."""
    return NamedSharding(mesh, P(*([None] * axis), DATA_AXIS))


def replicated_sharding(mesh: Mesh) -> NamedSharding:
    """``NamedSharding`` replicating an array on every device of ``mesh``."""
    return NamedSharding(mesh, P())


def _leaf_sharding(leaf: Any, mesh: Mesh, axis: int) -> NamedSharding:
    return batch_sharding(mesh, axis) if np.ndim(leaf) > axis else replicated_sharding(mesh)


def _fields(state: Any) -> list[str]:
    if not dataclasses.is_dataclass(state) or isinstance(state, type):
        raise TypeError(
            f"state must be a training-state dataclass (e.g. TrainState), not "
            f"{type(state).__name__}."
        )
    return [f.name for f in dataclasses.fields(state)]


def _batch_of(state: Any, given: Sequence[str] | None) -> Sequence[str]:
    return declared_batch_fields(state) if given is None else given


def state_shardings(
    state: State, mesh: Mesh, *, batch_fields: Sequence[str] | None = None, axis: int = 0
) -> State:
    """The sharding of every leaf of a training state (the same dataclass, with
    ``NamedSharding`` leaves), for ``jax.jit``'s ``in_shardings`` / ``out_shardings``.

    Args:
        state: A `TrainState` (or another state dataclass), arrays or
            ``jax.ShapeDtypeStruct`` leaves.
        mesh: The mesh.
        batch_fields: Fields whose leaves are ``[n_envs, ...]``: sharded along ``"data"``
            on ``axis`` (their leaves of fewer dimensions, if any, are replicated).
            All other fields are replicated. ``None``: the fields the state's class
            declares (`batch_field`).
        axis: The environment axis: 0 for a run's state, 1 for a sweep's (after its
            leading run axis; every run's environments sharded, the rest replicated).

    Returns:
        A state of the same structure whose leaves are ``NamedSharding``.
    """
    updates = {}
    batch = _batch_of(state, batch_fields)
    for name in _fields(state):
        value = getattr(state, name)
        if name in batch:
            updates[name] = jax.tree.map(lambda x: _leaf_sharding(x, mesh, axis), value)
        else:
            updates[name] = jax.tree.map(lambda _: replicated_sharding(mesh), value)
    return dataclasses.replace(state, **updates)  # type: ignore[type-var]


def constrain_batch(tree: Any, mesh: Mesh | None, *, axis: int = 0) -> Any:
    """Inside a jitted function: shard every leaf's dimension ``axis`` along ``"data"``.

    A no-op for ``mesh=None`` (single device). Leaves with ``ndim <= axis`` are left as
    they are.

    Args:
        tree: Arrays whose dimension ``axis`` is the environment axis (e.g. ``[T, B,
            ...]`` rollout leaves with ``axis=1``).
        mesh: The mesh, or ``None``.
        axis: The environment axis.

    Returns:
        ``tree`` with sharding constraints (``jax.lax.with_sharding_constraint``).
    """
    if mesh is None:
        return tree

    def constrain(x: Any) -> Any:
        if np.ndim(x) <= axis:
            return x
        return jax.lax.with_sharding_constraint(x, batch_sharding(mesh, axis))

    return jax.tree.map(constrain, tree)


def _local_blocks(n_envs: int, mesh: Mesh) -> list[tuple[int, int]]:
    """The distinct ``[start, stop)`` blocks of ``n_envs`` held by this process's
    devices (devices along other mesh axes hold the same blocks), sorted."""
    blocks = set()
    for index in batch_sharding(mesh).addressable_devices_indices_map((n_envs,)).values():
        rows = index[0] if index else slice(None)
        blocks.add((rows.start or 0, n_envs if rows.stop is None else rows.stop))
    return sorted(blocks)


def process_env_slice(n_envs: int, mesh: Mesh) -> slice:
    """The environments whose data lives on this process's devices.

    With one process this is ``slice(0, n_envs)``. With several, process ``p`` of a mesh
    built from ``jax.devices()`` holds a contiguous block of ``n_envs`` (its devices'
    shards).

    Args:
        n_envs: Environments in the global batch (a multiple of the ``"data"`` size).
        mesh: The mesh.

    Returns:
        ``slice(start, stop)`` into the global environment axis.

    Raises:
        ValueError: If this process's shards are not one contiguous block (a mesh whose
            device order interleaves processes); build it with `make_mesh`.
    """
    check_batch_divisible(n_envs, mesh)
    blocks = _local_blocks(n_envs, mesh)
    start, stop = blocks[0][0], blocks[-1][1]
    if sum(b - a for a, b in blocks) != stop - start:
        raise ValueError(
            f"the devices of process {jax.process_index()} do not hold one contiguous "
            f"block of the {n_envs} environments (blocks {blocks}); order the mesh's "
            "devices by process, as make_mesh() and jax.devices() do."
        )
    return slice(start, stop)


# --------------------------------------------------------------------------- placement


def _is_key(x: Any) -> bool:
    return hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


def _put(x: Any, sharding: NamedSharding, global_shape: tuple[int, ...]) -> jax.Array:
    """One leaf (this process's part, host or device) -> a global array."""
    if _is_key(x):
        raw = jax.random.key_data(x)  # [..., key words]: the trailing axis is replicated
        data = _put(raw, sharding, (*global_shape, *raw.shape[x.ndim :]))
        return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
    if jax.process_count() == 1:
        return jax.device_put(x, sharding)
    return jax.make_array_from_process_local_data(sharding, np.asarray(x), global_shape)


def shard_batch(tree: Any, mesh: Mesh, *, process_local: bool = False) -> Any:
    """Place ``[n_envs, ...]`` leaves on ``mesh``, sharded along ``"data"`` on axis 0.

    Scalar leaves are replicated. Typed PRNG key arrays are supported.

    Args:
        tree: Host or single-device arrays. With ``process_local=False`` every process
            passes the whole batch (identical on all processes); with
            ``process_local=True`` each process passes only its share,
            ``global[process_env_slice(n_envs, mesh)]``.
        mesh: The mesh.
        process_local: See ``tree``.

    Returns:
        ``tree`` with global ``jax.Array`` leaves.
    """
    shards = n_shards(mesh)
    mine = len(_local_blocks(shards, mesh))  # data shards on this process's devices

    def put(x: Any) -> Any:
        if np.ndim(x) == 0:
            return _put(x, replicated_sharding(mesh), ())
        n = x.shape[0] * shards // mine if process_local else x.shape[0]
        if not process_local and jax.process_count() > 1:
            x = x[process_env_slice(n, mesh)]
        return _put(x, batch_sharding(mesh), (n, *x.shape[1:]))

    return jax.tree.map(put, tree)


def replicate(tree: Any, mesh: Mesh) -> Any:
    """Place host or single-device arrays (identical on all processes) on every device
    of ``mesh``."""
    return jax.tree.map(lambda x: _put(x, replicated_sharding(mesh), np.shape(x)), tree)


def shard_state(state: State, mesh: Mesh, *, batch_fields: Sequence[str] | None = None) -> State:
    """Place a whole host-side training state on ``mesh`` as `state_shardings`
    says (``batch_fields`` sharded, the rest replicated).

    Args:
        state: A training-state dataclass of host or single-device arrays, the same on
            every process (e.g. freshly initialised, or gathered from a checkpoint).
        mesh: The mesh.
        batch_fields: As in `state_shardings`.

    Returns:
        The state with global ``jax.Array`` leaves.
    """
    batch = _batch_of(state, batch_fields)
    updates = {
        name: shard_batch(getattr(state, name), mesh)
        if name in batch
        else replicate(getattr(state, name), mesh)
        for name in _fields(state)
    }
    return dataclasses.replace(state, **updates)  # type: ignore[type-var]


def _fetch(x: Any) -> np.ndarray:
    """A host copy of a (possibly global) non-key array. Collective if ``x`` is sharded
    over several processes."""
    if not isinstance(x, jax.Array):
        return np.array(x, copy=True)
    if x.is_fully_addressable:
        return np.array(jax.device_get(x), copy=True)
    if x.is_fully_replicated:
        return np.array(x.addressable_data(0), copy=True)
    return np.array(multihost_utils.process_allgather(x, tiled=True), copy=True)


def gather_state(tree: Any) -> Any:
    """Host copies of a (possibly sharded, possibly multi-process) state.

    Sharded arrays are gathered whole onto every process (with several processes this is
    a collective: every process must call it, in the same order); replicated ones are
    copied from a local device. Typed PRNG key arrays come back as single-device key
    arrays, everything else as NumPy arrays.

    Args:
        tree: A pytree of arrays (e.g. a `TrainState`).

    Returns:
        The same pytree with host (fully addressable) leaves.
    """

    def fetch(x: Any) -> Any:
        if _is_key(x):
            return jax.random.wrap_key_data(
                jnp.asarray(_fetch(jax.random.key_data(x))), impl=jax.random.key_impl(x)
            )
        return _fetch(x)

    return jax.tree.map(fetch, tree)


def _broadcast(tree: Any) -> Any:
    """Process 0's values of a host pytree, on every process."""
    leaves, treedef = jax.tree.flatten(tree)
    impls = [jax.random.key_impl(x) if _is_key(x) else None for x in leaves]
    data = [np.asarray(jax.random.key_data(x)) if _is_key(x) else np.asarray(x) for x in leaves]
    data = multihost_utils.broadcast_one_to_all(data)
    out = [
        np.asarray(d) if impl is None else jax.random.wrap_key_data(jnp.asarray(d), impl=impl)
        for d, impl in zip(data, impls, strict=True)
    ]
    return jax.tree.unflatten(treedef, out)


# --------------------------------------------------------------------------- checkpoints


def commit_like(restored: State, template: State) -> State:
    """``restored`` (e.g. a checkpoint's unsharded state) with every array committed to
    the device of ``template``'s arrays.

    A restored state mixes arrays orbax placed (committed to a device) with leaves taken
    from the template (uncommitted, like every array of a fresh state). A jitted
    program is compiled once per pattern of committed inputs, and its outputs are
    committed when any input is, so a mixed first call would compile the training
    program a second time at the next call. All committed: one compilation, and with
    ``commit_like(state, state)`` for a fresh state, the same one as a resumed run's.
    """
    arrays = [leaf for leaf in jax.tree.leaves(template) if isinstance(leaf, jax.Array)]
    if not arrays:
        return restored
    return jax.device_put(restored, next(iter(arrays[0].devices())))


def restore_checkpoint(
    checkpoint: Any,
    state: State,
    mesh: Mesh | None,
    *,
    batch_fields: Sequence[str] | None = None,
    axis: int = 0,
) -> State | None:
    """Ask a checkpoint hook for the state to resume from, placed like ``state``.

    With one process the hook's ``restore`` gets ``state`` itself as template (a
    `Checkpointer` restores into the
    template's shardings, whatever device count the checkpoint was written with). With
    several processes, process 0 restores into a host copy of ``state`` and broadcasts
    the result; every process must call this.

    Args:
        checkpoint: A `CheckpointHook`.
        state: The freshly initialised state (on ``mesh``).
        mesh: The mesh, or ``None`` (unsharded: the hook's ``restore`` as is).
        batch_fields: As in `state_shardings`.
        axis: As in `state_shardings` (1: a sweep's state, one process only).

    Returns:
        The restored state on ``mesh``, or ``None`` to start afresh.
    """
    if mesh is None:
        restored = checkpoint.restore(state)
        return None if restored is None else commit_like(restored, state)
    if jax.process_count() == 1:
        restored = checkpoint.restore(state)
        if restored is None:
            return None
        shardings = state_shardings(state, mesh, batch_fields=batch_fields, axis=axis)
        return jax.device_put(restored, shardings)
    template = gather_state(state)
    restored = checkpoint.restore(template) if is_primary() else None
    found = multihost_utils.broadcast_one_to_all(np.int32(restored is not None))
    if not int(found):
        return None
    host = _broadcast(restored if restored is not None else template)
    return shard_state(host, mesh, batch_fields=batch_fields)


def save_checkpoint(
    checkpoint: Any,
    state: Any,
    step: int,
    metrics: Mapping[str, float],
    *,
    final: bool,
    mesh: Mesh | None = None,
) -> None:
    """Offer ``state`` to a checkpoint hook; with several processes only process 0
    writes.

    With one process this is ``checkpoint.save(state, step, metrics, final=final)``.
    With several, process 0 decides whether a save is due (the hook's optional
    ``is_due(step, final=...)``, else always), the decision is broadcast, every process
    checks the state for NaN/inf, the state is gathered to host memory on every process
    (a collective) and process 0's hook saves it. Every process must call this.

    Args:
        checkpoint: A `CheckpointHook`.
        state: The state after ``step`` env steps.
        step: The exact env step count.
        metrics: The last logged metrics.
        final: The end of training.
        mesh: The run's mesh, or ``None``.

    Raises:
        NonFiniteError: If the state records a NaN/inf and a save is due.
    """
    if mesh is None or jax.process_count() == 1:
        checkpoint.save(state, step, metrics, final=final)
        return
    is_due: Callable[..., bool] | None = getattr(checkpoint, "is_due", None)
    due = bool(is_due(step, final=final)) if is_due is not None and is_primary() else True
    if not int(multihost_utils.broadcast_one_to_all(np.int32(due))):
        return
    raise_if_non_finite(state.non_finite, step)
    host = gather_state(state)
    if is_primary():
        checkpoint.save(host, step, metrics, final=final)
