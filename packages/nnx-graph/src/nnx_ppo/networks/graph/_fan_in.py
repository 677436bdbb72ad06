"""How ``finalize()`` initialises a graph's default connections (package-internal).

A population sums its incoming connections, so default ``Dense`` kernels initialised
each on its own would start the sum too large. `scale_default_kernels` applies the
graph's ``init_fan_in`` scheme to the connections the graph created itself (custom
transforms are never changed); the scheme, and why, is described in the
`PopulationGraph` docstring, "Initialisation":

- ``"population"``: every default kernel scaled by ``sqrt(src.size / fan_in)`` over
  all of its population's sources;
- ``"recurrent"``: the same over the ``delay=0`` sources only, the delayed sources'
  kernels being the row blocks of one orthogonal matrix per population (scaled
  instead out of signed populations), then `balance_signed_recurrence`.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from nnx_ppo.networks.graph.signed_dense import SignedDense
from nnx_ppo.networks.graph.topology import Connection
from nnx_ppo.networks.types import StatefulModule

__all__ = ["balance_signed_recurrence", "scale_default_kernels"]


def scale_default_kernels(
    transforms: Mapping[str, StatefulModule],
    connections: Sequence[Connection],
    defaults: Collection[str],
    sizes: Mapping[str, int],
    *,
    recurrent: bool,
    rngs: nnx.Rngs,
) -> None:
    """Initialise the default kernels for their population's fan-in, in place.

    Args:
        transforms: The graph's transforms, by connection name.
        connections: All connections, in declaration order (the order of the blocks).
        defaults: The names of the connections whose transform the graph created.
        sizes: Every population's size, by name.
        recurrent: ``init_fan_in == "recurrent"`` (else ``"population"``).
        rngs: Where the orthogonal matrices are drawn from (``rngs.params()``, one per
            population with delayed default connections, in declaration order).
    """

    def group(c: Connection) -> tuple[str, bool]:
        return c.dst, recurrent and c.delay > 0

    fan_in: dict[tuple[str, bool], int] = {}
    for c in connections:
        fan_in[group(c)] = fan_in.get(group(c), 0) + sizes[c.src]
    offsets: dict[tuple[str, bool], int] = {}
    orthogonal: dict[tuple[str, bool], jax.Array] = {}
    for c in connections:
        key, width = group(c), fan_in[group(c)]
        offset = offsets.get(key, 0)
        offsets[key] = offset + sizes[c.src]
        if c.name not in defaults:
            continue
        module = transforms[c.name]
        # A default transform is a Dense, or a SignedDense out of a signed population
        # (weights sign * |kernel|: scaling the kernel scales them alike).
        kernel = module.kernel if isinstance(module, SignedDense) else module.linear.kernel
        if key[1] and not isinstance(module, SignedDense):
            if key not in orthogonal:
                init = nnx.initializers.orthogonal()
                orthogonal[key] = init(rngs.params(), (width, sizes[c.dst]))
            block = orthogonal[key][offset : offset + sizes[c.src]]
            kernel[...] = block.astype(kernel[...].dtype)
        elif width != sizes[c.src]:
            kernel[...] = kernel[...] * math.sqrt(sizes[c.src] / width)
    if recurrent:
        balance_signed_recurrence(transforms, connections, defaults)


def balance_signed_recurrence(
    transforms: Mapping[str, StatefulModule],
    connections: Sequence[Connection],
    defaults: Collection[str],
) -> None:
    """Scale each population's inhibitory delayed default kernels, per receiving unit,
    so that they sum to its excitatory ones (in place): uniform activity then drives
    the unit by zero.

    Args:
        transforms: The graph's transforms, by connection name.
        connections: All connections.
        defaults: The names of the connections whose transform the graph created.
    """
    by_sign: dict[str, dict[str, list[SignedDense]]] = {}
    for c in connections:
        module = transforms[c.name]
        if not isinstance(module, SignedDense) or module.sign is None:
            continue
        if c.delay > 0 and c.name in defaults:
            by_sign.setdefault(c.dst, {}).setdefault(module.sign, []).append(module)
    for signs in by_sign.values():
        excitatory, inhibitory = signs.get("excitatory", []), signs.get("inhibitory", [])
        if not excitatory or not inhibitory:
            continue
        total_e = sum(jnp.sum(jnp.abs(m.kernel[...]), axis=0) for m in excitatory)
        total_i = sum(jnp.sum(jnp.abs(m.kernel[...]), axis=0) for m in inhibitory)
        factor = total_e / jnp.maximum(total_i, 1e-12)  # [dst.size]
        for m in inhibitory:
            m.kernel[...] = m.kernel[...] * factor.astype(m.kernel[...].dtype)
