"""The module contract: `StatefulModule` and the pytrees it returns.

A `StatefulModule` is a Flax NNX module whose per-environment memory (an LSTM
carry, a delay buffer, an RNG key) is not stored on the module but threaded through
calls explicitly as a *carry* ``state``::

    state = module.initialize_state(batch_size)
    out = module(state, x)            # rollout: sample fresh, emit extras
    state = out.next_state
    ...
    out = module(state0, x, extras)   # loss replay: consume what the rollout emitted

Conventions every module follows:

- Every leaf of ``state``, ``x``, ``output`` and ``rollout_extras`` is batched with a
  leading axis ``[B, ...]``. A module never sees the time axis, except in
  `StatefulModule.update_statistics`, which gets ``[T, B, ...]``.
- ``__call__`` never writes an NNX variable that changes the forward output; running
  statistics change only in `StatefulModule.update_statistics`. This is what
  makes loss replay reproduce the rollout exactly.
- ``rollout_extras=None`` means rollout / inference; a non-``None`` value means loss
  replay, and has the structure the module emitted during the rollout.
- ``regularization_loss`` is per sample, shape ``[B]`` (a scalar broadcasts).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx, struct

__all__ = [
    "ModuleState",
    "PPONetworkOutput",
    "StatefulModule",
    "StatefulModuleOutput",
    "StatelessModule",
    "reset_where",
]

ModuleState = Any
"""A module's carry: any pytree of arrays with a leading batch axis ``[B, ...]``.

Stateless modules use the empty tuple ``()``.
"""


@struct.dataclass
class StatefulModuleOutput:
    """What every `StatefulModule` call returns (a frozen pytree).

    Attributes:
        next_state: The carry for the next step, same tree structure, shapes and dtypes
            as the ``state`` passed in.
        output: The forward output, any pytree of ``[B, ...]`` arrays.
        regularization_loss: Per-sample regularization to *add* to the loss, shape
            ``[B]`` or a scalar that broadcasts. Containers sum their children's.
        metrics: A (possibly nested) dict of arrays for logging.
        rollout_extras: What loss replay needs to reproduce this call exactly (the raw
            pre-squash action of a sampler, the raw input of a normalizer), routed like
            ``state``. ``()`` when nothing is needed.
    """

    next_state: ModuleState
    output: Any
    regularization_loss: jax.Array
    metrics: dict[str, Any]
    rollout_extras: Any


@struct.dataclass
class PPONetworkOutput:
    """The output of a PPO network (what `PPOAdapter` emits).

    Attributes:
        actions: Pytree of actions, each ``[B, ...]`` (matching the env's action tree).
        loglikelihoods: Pytree of log-likelihoods of ``actions``, each ``[B]``, with the
            same structure as ``actions``.
        value_estimates: Pytree of value estimates, each ``[B]`` (one per reward key for
            dict rewards, or a single array).
    """

    actions: Any
    loglikelihoods: Any
    value_estimates: Any


class StatefulModule(nnx.Module):
    """Base class of every module in the library.

    Subclasses implement `__call__` and, if they carry memory,
    `initialize_state`. The defaults describe a stateless module: the carry is
    ``()``, resetting returns a fresh initial state, and there are no statistics.
    """

    def __call__(
        self, state: ModuleState, x: Any, rollout_extras: Any = None
    ) -> StatefulModuleOutput:
        """Run one step.

        Args:
            state: The carry, leaves ``[B, ...]``, as returned by
                `initialize_state` or a previous call's ``next_state``.
            x: The input pytree, leaves ``[B, ...]``.
            rollout_extras: ``None`` during rollout and inference; during loss replay,
                the ``rollout_extras`` this module emitted for the same step.

        Returns:
            A `StatefulModuleOutput`.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement __call__")

    def initialize_state(self, batch_size: int) -> ModuleState:
        """The carry at the start of an episode for ``batch_size`` environments."""
        del batch_size
        return ()

    def reset_state(self, prev_state: ModuleState) -> ModuleState:
        """The initial carry, shaped like the **batched** ``prev_state``.

        The caller selects per environment with its done mask (see `reset_where`).
        The default re-initializes with the batch size read off ``prev_state``, which is
        right for any module whose initial state does not depend on the previous one.
        """
        leaves = jax.tree.leaves(prev_state)
        if not leaves:
            return prev_state
        return self.initialize_state(leaves[0].shape[0])

    def update_statistics(self, rollout_extras: Any) -> None:
        """Update running statistics from a whole rollout's extras, leaves ``[T, B, ...]``.

        Called by the trainer once per iteration, after the gradient phase. The default
        does nothing; containers route it to their children.
        """
        del rollout_extras


class StatelessModule(StatefulModule):
    """Convenience base for modules without carry, extras, loss or metrics.

    Subclasses implement `forward`; the carry passes through unchanged.
    """

    def forward(self, x: Any) -> Any:
        """The forward computation on a batched input ``[B, ...]``."""
        raise NotImplementedError(f"{type(self).__name__} must implement forward")

    def __call__(
        self, state: ModuleState, x: Any, rollout_extras: Any = None
    ) -> StatefulModuleOutput:
        del rollout_extras
        return StatefulModuleOutput(
            next_state=state,
            output=self.forward(x),
            regularization_loss=jnp.zeros(()),
            metrics={},
            rollout_extras=(),
        )


def reset_where(module: StatefulModule, done: jax.Array, state: ModuleState) -> ModuleState:
    """Reset the carry of the environments where ``done`` is set.

    Args:
        module: The module that owns ``state``.
        done: Boolean (or 0/1) mask, shape ``[B]``.
        state: The batched carry, leaves ``[B, ...]``.

    Returns:
        The carry with ``module.reset_state(state)`` in the rows where ``done`` is true
        and ``state`` elsewhere; same structure, shapes and dtypes.
    """
    fresh = module.reset_state(state)
    done = jnp.asarray(done).astype(bool)

    def select(new: jax.Array, old: jax.Array) -> jax.Array:
        mask = done.reshape(done.shape + (1,) * (old.ndim - done.ndim))
        return jnp.where(mask, new, old)

    return jax.tree.map(select, fresh, state)
