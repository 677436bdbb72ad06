"""Run brax 0.14.2's PPO on JAX >= 0.10: restore ``jax.device_put_replicated``.

JAX deprecated ``jax.device_put_replicated`` in 0.8.1 and removed it in 0.10.0 (the
attribute now raises ``AttributeError``). brax 0.14.2 calls it once per training run,
``training_state = jax.device_put_replicated(training_state, jax.local_devices()[:n])``
in ``brax/training/agents/ppo/train.py`` (and in ``brax.training.pmap
.bcast_local_devices``), to give every leaf of the training state a leading device axis
before its ``jax.pmap``-ed training epoch. That is the only thing that stops brax PPO
on JAX 0.10; its environments and the rest of its training loop run unchanged.

:func:`device_put_replicated` is the removed function written with public JAX APIs:
each leaf ``x`` becomes an array of shape ``[len(devices), *x.shape]`` whose slice ``i``
is a copy of ``x`` on ``devices[i]``, sharded over a one-axis mesh of ``devices``, the
layout the new ``jax.pmap`` (a ``jit`` of ``shard_map``, JAX's only ``pmap`` since 0.10)
expects for a mapped input. Values, dtypes and shapes are those the removed function
returned, so brax's PPO computes exactly what it computes on JAX 0.9: only the call that
places the state on the devices is restored; no part of the algorithm is touched.

:func:`apply` installs it as ``jax.device_put_replicated`` only where the attribute is
missing (JAX >= 0.10), so on older JAX brax runs with JAX's own function. The harness's
brax child (:mod:`nnx_ppo_benchmarks.children.brax_ppo`) calls :func:`apply` before it
imports brax's trainer.

Example:
    >>> import jax, numpy as np
    >>> y = device_put_replicated({"w": np.arange(3.0)}, jax.local_devices()[:1])
    >>> y["w"].shape, float(y["w"][0, 2])
    ((1, 3), 2.0)
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

__all__ = ["apply", "device_put_replicated"]


def device_put_replicated(x: Any, devices: Sequence[Any]) -> Any:
    """A copy of pytree ``x`` on each of ``devices``, stacked along a new leading axis.

    Args:
        x: A pytree of arrays or scalars (numpy, ``jax.Array``, Python numbers).
        devices: A non-empty sequence of ``jax.Device``; slice ``i`` of every output
            leaf lives on ``devices[i]``.

    Returns:
        ``x`` with every leaf of shape ``S`` replaced by a ``jax.Array`` of shape
        ``[len(devices), *S]`` and the same dtype, sharded one slice per device.

    Raises:
        ValueError: If ``devices`` is not a non-empty sequence.
    """
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    if isinstance(devices, str) or not isinstance(devices, Sequence) or not devices:
        raise ValueError(
            f"devices={devices!r} must be a non-empty sequence of jax.Device, e.g. "
            "jax.local_devices()[:1]"
        )
    devices = list(devices)
    sharding = NamedSharding(Mesh(np.array(devices), ("replica",)), PartitionSpec("replica"))

    def replicate(leaf: Any) -> Any:
        leaf = jnp.asarray(leaf)  # keeps a Python scalar's weak type, as JAX's did
        return jax.device_put(jnp.broadcast_to(leaf, (len(devices), *leaf.shape)), sharding)

    return jax.tree.map(replicate, x)


def _missing(module: Any, name: str) -> bool:
    # JAX 0.8.1-0.9.x still provide the function with a DeprecationWarning on access.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            getattr(module, name)
        except AttributeError:
            return True
    return False


def apply() -> bool:
    """Install :func:`device_put_replicated` as ``jax.device_put_replicated`` if JAX
    lacks it (JAX >= 0.10); returns whether it was installed."""
    import jax

    if not _missing(jax, "device_put_replicated"):
        return False
    jax.device_put_replicated = device_put_replicated  # type: ignore[attr-defined]
    return True
