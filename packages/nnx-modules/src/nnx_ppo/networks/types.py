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

Loss replay may also run a module over a whole stored sequence at once with
`StatefulModule.replay_sequence` (leaves ``[T, B, ...]``). Its default is defined in
terms of ``__call__`` (one batched call for a module without carry, else a scan over
time), so a module only overrides it to compute something for all steps at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx, struct

__all__ = [
    "ACTIVATION_KEY",
    "Metrics",
    "ModuleState",
    "PPONetworkOutput",
    "StatefulModule",
    "StatefulModuleOutput",
    "StatelessModule",
    "replay_batched",
    "replay_scanned",
    "reset_where",
]

ACTIVATION_KEY = "__activation__"
"""The ``metrics`` key under which a recording module puts its activation (see
`nnx_ppo.networks.recording`; the same string as nnx-ppo 0.3.0's, so metrics trees
read by either library agree)."""

ModuleState = Any
"""A module's carry: any pytree of arrays with a leading batch axis ``[B, ...]``.

Stateless modules use the empty tuple ``()``.
"""

Metrics = dict[Any, Any]
"""A module's ``metrics``: a (possibly nested) dict of arrays for logging, keyed by
name (containers nest their children's under the child's key: an int position for a
``Sequential``, a name otherwise)."""


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
            ``state``. ``()`` when nothing is needed; defaults to ``None`` (as in
            nnx-ppo 0.3.0), which containers route like ``()``.
    """

    next_state: ModuleState
    output: Any
    regularization_loss: jax.Array
    metrics: Metrics
    rollout_extras: Any = None


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

    def canonical_state(self, state: ModuleState) -> ModuleState:
        """An equivalent carry in a time-invariant form (for analysis).

        Some carries store their history with a bookkeeping index: a circular delay
        buffer and the integer position it writes next. Two such carries that differ
        only in where the ring starts hold the same state, and a map of the carry
        (fixed points, Jacobians: `nnx_ppo.networks.analysis`) needs one form of it.
        ``canonical_state`` returns that form: a carry with the same tree structure,
        shapes and dtypes, such that this module's outputs and (canonical) next carry
        are the same function of it as of ``state``. For a population graph every
        buffer is rolled so that its write position is 0 (slot 0 holds the oldest entry,
        slot ``L - 1`` the newest) and the positions are all 0.

        The default returns ``state`` unchanged, which is right for every carry without
        such an index; containers route it to each child, as `reset_state`. A module
        with an integer carry that is a time index (a ring position, a step counter the
        dynamics do not depend on) overrides it.

        Args:
            state: The batched carry, leaves ``[B, ...]``.

        Returns:
            The canonical carry, same structure, shapes and dtypes.
        """
        return state

    def update_statistics(self, rollout_extras: Any) -> None:
        """Update running statistics from a whole rollout's extras, leaves ``[T, B, ...]``.

        Called by the trainer once per iteration, after the gradient phase. The default
        does nothing; containers route it to their children.
        """
        del rollout_extras

    def replay_sequence(
        self, state: ModuleState, xs: Any, rollout_extras: Any, done: jax.Array
    ) -> tuple[ModuleState, StatefulModuleOutput]:
        """Replay ``T`` stored steps in one call (loss replay).

        The result is that of the step-by-step replay, with the carry reset after
        every step that ended an episode::

            for t in range(T):
                out_t = module(state, xs[t], rollout_extras[t])
                state = reset_where(module, done[t], out_t.next_state)

        but a module may compute what does not depend on its carry for all steps at
        once. The default: a module whose carry has no leaves is called once on the
        ``[T * B]`` flattened batch (its steps are independent, since ``__call__`` does
        not change what it computes); any other module is scanned over time. The
        containers and `PPOAdapter` replay each child with
        its own ``replay_sequence``, so in a recurrent network only the recurrent
        cells are scanned; the recurrent cells project their inputs for all steps at
        once.

        Args:
            state: The carry before the first step, leaves ``[B, ...]``.
            xs: The inputs, leaves ``[T, B, ...]``.
            rollout_extras: What this module emitted in the rollout, stacked over
                time (leaves ``[T, B, ...]``).
            done: ``[T, B]`` bool: reset the carry after step ``t`` where set.

        Returns:
            ``(final_state, out)``: the carry after the last step (reset where that step
            ended an episode) and the outputs with leaves ``[T, B, ...]``:
            ``out.output``, ``out.regularization_loss`` (``[T, B]``) and ``out.metrics``
            (stacked over time; a batched call's metric is repeated ``T`` times).
            ``out.next_state`` and ``out.rollout_extras`` are ``()``.
        """
        if not jax.tree.leaves(state):
            return state, replay_batched(self, state, xs, rollout_extras, done)
        return replay_scanned(self, state, xs, rollout_extras, done)


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


def _sequence_output(output: Any, regularization: jax.Array, metrics: Any) -> StatefulModuleOutput:
    return StatefulModuleOutput(
        next_state=(),
        output=output,
        regularization_loss=regularization,
        metrics=metrics,
        rollout_extras=(),
    )


def replay_batched(
    module: StatefulModule, state: ModuleState, xs: Any, rollout_extras: Any, done: jax.Array
) -> StatefulModuleOutput:
    """`StatefulModule.replay_sequence` of a module whose carry has no leaves: one call
    on the ``[T * B]`` flattened inputs and extras. Returns the ``[T, B, ...]`` outputs."""
    t, b = jnp.shape(done)[:2]

    def flat(x: jax.Array) -> jax.Array:  # [T, B, ...] -> [T * B, ...]
        return jnp.reshape(x, (t * b, *jnp.shape(x)[2:]))

    def unflat(x: jax.Array) -> jax.Array:  # [T * B, ...] -> [T, B, ...]
        return jnp.reshape(x, (t, b, *jnp.shape(x)[1:]))

    out = module(state, jax.tree.map(flat, xs), jax.tree.map(flat, rollout_extras))
    regularization = jnp.broadcast_to(jnp.asarray(out.regularization_loss), (t * b,))
    metrics = jax.tree.map(lambda m: jnp.broadcast_to(m, (t, *jnp.shape(m))), out.metrics)
    return _sequence_output(jax.tree.map(unflat, out.output), unflat(regularization), metrics)


def replay_scanned(
    module: StatefulModule,
    state: ModuleState,
    xs: Any,
    rollout_extras: Any,
    done: jax.Array,
    *,
    step: Callable[[Any, ModuleState, Any, Any], StatefulModuleOutput] | None = None,
) -> tuple[ModuleState, StatefulModuleOutput]:
    """`StatefulModule.replay_sequence` as a scan over time of ``module.__call__``
    (or of ``step(module, state, x_t, extras_t)``), resetting the carry where ``done``.
    Returns ``(final_state, [T, B, ...] outputs)``.

    The module is split once and merged inside the scanned step, so that its variables
    belong to the scan's trace (a step may use them as it would in a rollout).
    """
    b = jnp.shape(done)[1]
    graphdef, variables = nnx.split(module)

    def body(carry: ModuleState, inputs: Any) -> tuple[ModuleState, Any]:
        x, extras, step_done = inputs
        stepped = nnx.merge(graphdef, variables)
        out = stepped(carry, x, extras) if step is None else step(stepped, carry, x, extras)
        regularization = jnp.broadcast_to(jnp.asarray(out.regularization_loss), (b,))
        next_carry = reset_where(stepped, step_done, out.next_state)
        return next_carry, (out.output, regularization, out.metrics)

    final, (output, regularization, metrics) = jax.lax.scan(body, state, (xs, rollout_extras, done))
    return final, _sequence_output(output, regularization, metrics)
