"""A fixed integer delay line: `Delay`.

``Delay(sample_input, k)`` outputs, at step ``t``, the input it received at step
``t - k``; for the first ``k`` steps of an episode (before the line has filled) it
outputs ``initial_value``. The carry is a shift buffer per leaf, ``[B, k, ...]``, holding
the last ``k`` inputs oldest first: each step reads slot 0 and appends the new input at
the end. Its memory is ``k`` copies of the signal per environment; the per-step cost is
one copy of the buffer, which for the small delays used in control (a few steps) is as
cheap as the gather and scatter a circular buffer with a per-environment index needs,
and keeps every environment's buffer aligned so a per-environment reset is a plain
select.

Examples:
    >>> import jax.numpy as jnp
    >>> from nnx_ppo.networks.delay import Delay
    >>> delay = Delay(jnp.zeros(()), k_steps=2, initial_value=-1.0)
    >>> state = delay.initialize_state(batch_size=1)
    >>> outputs = []
    >>> for t in range(4):
    ...     out = delay(state, jnp.array([float(t)]))
    ...     state = out.next_state
    ...     outputs.append(float(out.output[0]))
    >>> outputs
    [-1.0, -1.0, 0.0, 1.0]
"""

from __future__ import annotations

import numbers
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from nnx_ppo.networks.types import StatefulModule, StatefulModuleOutput

__all__ = ["Delay"]


class Delay(StatefulModule):
    """Output the input from ``k_steps`` steps ago.

    Args:
        sample_input: An **unbatched** example of one environment's input: an array
            (or anything with ``shape`` and ``dtype``, e.g. `jax.ShapeDtypeStruct`)
            or a pytree of them. Only shapes, dtypes and the tree structure are used.
        k_steps: The delay, an int ``>= 1``.
        initial_value: What the line outputs before it has filled: a scalar, or a
            pytree with the structure of ``sample_input`` whose leaves broadcast to the
            matching leaf's shape.

    Raises:
        TypeError: If ``k_steps`` is not a number or ``sample_input`` has a leaf without
            ``shape`` / ``dtype``.
        ValueError: If ``k_steps`` is not a whole number ``>= 1``, or ``initial_value``
            does not fit ``sample_input``.

    The input ``x`` has the structure of ``sample_input`` with leaves
    ``[B, *leaf.shape]``; the output has the same structure, shapes and dtypes (inputs
    are cast to ``sample_input``'s dtypes). The carry has leaves ``[B, k_steps,
    *leaf.shape]``. There are no extras, statistics, losses or metrics.
    """

    def __init__(self, sample_input: Any, k_steps: int, initial_value: Any = 0.0) -> None:
        if isinstance(k_steps, bool) or not isinstance(k_steps, numbers.Real):
            raise TypeError(
                f"Delay: k_steps must be an int >= 1, got {k_steps!r} of type "
                f"{type(k_steps).__name__}; pass the delay in steps, e.g. Delay(x, 2)."
            )
        if not isinstance(k_steps, numbers.Integral):
            raise ValueError(
                f"Delay: k_steps must be a whole number of steps (an int >= 1), got "
                f"{k_steps!r}; round it, e.g. Delay(x, {max(1, int(float(k_steps) + 0.5))})."
            )
        if k_steps < 1:
            raise ValueError(
                f"Delay: k_steps must be >= 1, got {k_steps}; a delay of 0 is the input "
                "itself (leave the Delay out), a negative delay would read the future."
            )
        self.k_steps: int = int(k_steps)

        leaves, treedef = jax.tree.flatten(sample_input)
        if not leaves:
            raise ValueError(
                f"Delay: sample_input has no array leaves ({sample_input!r}); pass one "
                "environment's input, e.g. jnp.zeros(obs_size)."
            )
        for leaf in leaves:
            if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
                raise TypeError(
                    f"Delay: every leaf of sample_input must be an array (with shape and "
                    f"dtype), got {leaf!r} of type {type(leaf).__name__}; use e.g. "
                    "jnp.zeros(shape) or jax.ShapeDtypeStruct(shape, dtype)."
                )
        self._treedef: Any = treedef
        self._shapes: tuple[tuple[int, ...], ...] = tuple(
            tuple(int(d) for d in leaf.shape) for leaf in leaves
        )
        self._dtypes: tuple[np.dtype, ...] = tuple(np.dtype(leaf.dtype) for leaf in leaves)

        if jax.tree_util.treedef_is_leaf(jax.tree.structure(initial_value)):
            fills = [initial_value] * len(leaves)
        else:
            fills, fill_def = jax.tree.flatten(initial_value)
            if fill_def != treedef:
                raise ValueError(
                    f"Delay: initial_value must be a scalar or a pytree shaped like "
                    f"sample_input ({treedef}), got {fill_def}."
                )
        initial = []
        for fill, shape, dtype in zip(fills, self._shapes, self._dtypes, strict=True):
            value = np.asarray(fill, dtype=dtype)
            try:
                value = np.broadcast_to(value, shape)
            except ValueError:
                raise ValueError(
                    f"Delay: initial_value of shape {value.shape} does not broadcast to the "
                    f"sample_input leaf shape {shape}; pass a scalar or an array of that "
                    "shape."
                ) from None
            initial.append(tuple(value.ravel().tolist()))
        # Flat tuples of Python scalars keep the module free of array attributes: the
        # fill values are static configuration, not state.
        self._initial: tuple[tuple[Any, ...], ...] = tuple(initial)

    def initialize_state(self, batch_size: int) -> Any:
        """A line filled with ``initial_value``.

        Args:
            batch_size: Number of environments ``B``.

        Returns:
            A pytree like ``sample_input`` with leaves ``[B, k_steps, *leaf.shape]``.
        """
        buffers = [
            jnp.broadcast_to(
                jnp.asarray(fill, dtype).reshape(shape), (batch_size, self.k_steps, *shape)
            )
            for fill, shape, dtype in zip(self._initial, self._shapes, self._dtypes, strict=True)
        ]
        return jax.tree.unflatten(self._treedef, buffers)

    def __call__(self, state: Any, x: Any, rollout_extras: Any = None) -> StatefulModuleOutput:
        """Emit the oldest buffered input and push ``x``.

        Args:
            state: The carry, leaves ``[B, k_steps, *leaf.shape]``.
            x: This step's input, structured like ``sample_input``, leaves
                ``[B, *leaf.shape]``.
            rollout_extras: Ignored.

        Returns:
            A `StatefulModuleOutput` whose ``output`` is the input of ``k_steps``
            steps ago (``initial_value`` before the line has filled).
        """
        del rollout_extras
        x_leaves, x_def = jax.tree.flatten(x)
        if x_def != self._treedef:
            raise ValueError(
                f"Delay: the input's tree structure {x_def} differs from sample_input's "
                f"{self._treedef}; build the Delay from a sample of this input."
            )
        buffers = self._treedef.flatten_up_to(state)
        outputs, next_buffers = [], []
        for leaf, buffer, shape, dtype in zip(
            x_leaves, buffers, self._shapes, self._dtypes, strict=True
        ):
            if tuple(leaf.shape[1:]) != shape:
                raise ValueError(
                    f"Delay: an input leaf has shape {tuple(leaf.shape)}, expected "
                    f"[B, *{shape}] from sample_input; pass batched inputs whose "
                    "per-environment shape matches sample_input."
                )
            outputs.append(buffer[:, 0])
            pushed = jnp.asarray(leaf, dtype)[:, None]
            next_buffers.append(jnp.concatenate([buffer[:, 1:], pushed], axis=1))
        return StatefulModuleOutput(
            next_state=jax.tree.unflatten(self._treedef, next_buffers),
            output=jax.tree.unflatten(self._treedef, outputs),
            regularization_loss=jnp.zeros(()),
            metrics={},
            rollout_extras=(),
        )
