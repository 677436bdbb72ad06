"""Small pytree helpers shared by the trainer's modules (package-internal)."""

from __future__ import annotations

from typing import Any

import jax

__all__ = ["sum_leaves"]


def sum_leaves(tree: Any) -> jax.Array:
    """The sum of a tree's leaves (e.g. the total of a dict reward), same shape."""
    leaves = jax.tree.leaves(tree)
    total = leaves[0]
    for leaf in leaves[1:]:
        total = total + leaf
    return total
