"""Small pytree helpers shared by the trainer's modules (package-internal)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["copied", "global_norm", "key_path", "sum_leaves"]


@jax.jit
def copied(tree: Any) -> Any:
    """A copy of every leaf of ``tree``, each in a buffer of its own, made by one program
    (an eager ``jnp.copy`` per leaf compiles one program per leaf shape and dtype: dozens
    for a physics environment's state)."""
    return jax.tree.map(jnp.copy, tree)


def sum_leaves(tree: Any) -> jax.Array:
    """The sum of a tree's leaves (e.g. the total of a dict reward), same shape."""
    leaves = jax.tree.leaves(tree)
    total = leaves[0]
    for leaf in leaves[1:]:
        total = total + leaf
    return total


def key_path(path: tuple[Any, ...]) -> str:
    """A pytree key path as ``"layers/0/linear/kernel"`` (dict keys, sequence indices and
    attribute names joined by ``/``; the ``value`` of an ``nnx.Variable`` left out)."""
    parts = []
    for entry in path:
        for attr in ("key", "idx", "name"):
            if hasattr(entry, attr):
                parts.append(str(getattr(entry, attr)))
                break
        else:
            parts.append(str(entry))
    if parts and parts[-1] == "value" and isinstance(path[-1], jax.tree_util.GetAttrKey):
        parts.pop()  # an nnx.Variable's value: name the variable
    return "/".join(parts)


def global_norm(tree: Any) -> jax.Array:
    """L2 norm of all leaves together (``optax.global_norm`` is deprecated, and its
    replacement is newer than our optax floor)."""
    return jnp.sqrt(sum(jnp.sum(jnp.square(x)) for x in jax.tree.leaves(tree)))
