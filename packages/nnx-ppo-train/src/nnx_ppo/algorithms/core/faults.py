"""Detection of NaN and infinity in training, and the error it raises.

A diverged run (a NaN or infinite reward or observation from the environment, an
exploding learning rate) poisons the parameters within one optimizer step, and every
later iteration and checkpoint is garbage. So each jitted iteration checks a few
scalars, `MONITORED_QUANTITIES`, with ``jnp.isfinite`` and records the first one
that is not finite, and in which iteration, in
`NonFinite` inside the
`TrainState` (`record_non_finite`). The check
adds no host synchronisation: the host reads the record only when it reads the state
or the metrics anyway, i.e. when `train_ppo` logs (every
``log_every_calls`` device calls, and always after the last) and when a
`Checkpointer` is about to write a checkpoint.
Either then raises `NonFiniteError` (`raise_if_non_finite`), naming the
iteration and the quantity, before anything is saved: the last checkpoint written
before the divergence stays the latest one on disk.

There is no automatic rollback. To recover, resume from that checkpoint after fixing
the cause, e.g. with a lower ``learning_rate``, adding a ``max_grad_norm`` if the
gradients spike: Adam's state depends neither on the learning rate nor on the clipping
(or weight decay) chained around it, so the run resumes with the new values (see
`Checkpointer.restore`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from nnx_ppo.algorithms.types import NonFinite

__all__ = [
    "MONITORED_QUANTITIES",
    "NonFiniteError",
    "count_nonfinite",
    "healthy",
    "nonfinite_envs",
    "raise_if_non_finite",
    "record_non_finite",
]

MONITORED_QUANTITIES: tuple[str, ...] = ("loss/total", "params", "network_state")
"""What each iteration checks, in this order (the first non-finite one is reported):
the mean total loss over the iteration's minibatches, every parameter after the
update, and every floating-point leaf of the other network state (e.g. normalizer
statistics) after ``update_statistics``."""


class NonFiniteError(RuntimeError):
    """Training produced a NaN or an infinity; raised instead of continuing or saving.

    Attributes:
        iteration: The 1-based iteration in which the value first appeared.
        quantity: Its name, one of `MONITORED_QUANTITIES`.
        value: The offending value (``nan``, ``inf`` or ``-inf``).
        step: The env steps completed when the host noticed (``None`` if unknown).
        run: In a sweep (`nnx_ppo.algorithms.sweeps.many`), the index of the first run that
            diverged; ``None`` for a single run.
        counts: ``{quantity: how many runs diverged first in it}`` over
            `MONITORED_QUANTITIES` (nnx-ppo's name): ``{quantity: 1}`` (the others 0)
            for a single run; in a sweep, e.g. ``{"loss/total": 3, "params": 1, ...}``
            when four of its runs diverged.
    """

    def __init__(
        self,
        iteration: int,
        quantity: str,
        value: float,
        step: int | None = None,
        run: int | None = None,
        counts: dict[str, int] | None = None,
    ):
        self.iteration = iteration
        self.quantity = quantity
        self.value = value
        self.step = step
        self.run = run
        self.counts = {name: int(name == quantity) for name in MONITORED_QUANTITIES}
        self.counts.update(counts or {})
        where = f"iteration {iteration}"
        if run is not None:
            where = f"run {run}, {where}"
        if step is not None:
            where += f" (noticed at env step {step})"
        super().__init__(
            f"training diverged: {quantity} became {value} in {where}. Training was "
            "stopped and this state was not saved, so the latest checkpoint is the last "
            "one written before the divergence. Check the environment for NaN/inf "
            "rewards or observations, or resume from that checkpoint with a lower "
            "learning_rate (adding a max_grad_norm if gradients spike); the optimizer "
            "state resumes either way."
        )


def nonfinite_envs(tree: Any, n_envs: int) -> jax.Array:
    """``[B]`` bool: whether any element of ``tree``'s leaves (``[B, ...]``) is NaN or
    infinite, per environment (integer leaves never are)."""
    bad = jnp.zeros((n_envs,), bool)
    for leaf in jax.tree.leaves(tree):
        leaf = jnp.asarray(leaf)
        if jnp.issubdtype(leaf.dtype, jnp.inexact):
            bad = bad | ~jnp.all(jnp.isfinite(leaf.reshape(n_envs, -1)), axis=1)
    return bad


def count_nonfinite(
    obs: Any, actions: Any, next_env: Any, n_envs: int
) -> tuple[dict[str, jax.Array], jax.Array]:
    """The ``diagnostics/nonfinite_*`` counts of one env step of the rollout
    (environments with any non-finite element, float32 ``[]``) and the ``[B]`` mask of
    environments whose next observation is non-finite (`LogLevel.DIAGNOSTICS`)."""
    bad_next = nonfinite_envs(next_env.obs, n_envs)
    counts = {
        "diagnostics/nonfinite_obs": nonfinite_envs(obs, n_envs),
        "diagnostics/nonfinite_action": nonfinite_envs(actions, n_envs),
        "diagnostics/nonfinite_reward": nonfinite_envs(next_env.reward, n_envs),
        "diagnostics/nonfinite_next_obs": bad_next,
    }
    return {k: jnp.sum(v.astype(jnp.float32)) for k, v in counts.items()}, bad_next


def healthy() -> NonFinite:
    """The record of a run in which everything has been finite so far."""
    return NonFinite(
        iteration=jnp.zeros((), jnp.int32),
        quantity=jnp.full((), -1, jnp.int32),
        value=jnp.zeros((), jnp.float32),
    )


def _summary(tree: Any) -> jax.Array:
    """float32 ``[]``: NaN if a floating-point leaf of ``tree`` holds a NaN, else inf if
    one holds an infinity, else 0 (an elementwise test, so huge finite values pass)."""
    leaves = [x for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.floating)]
    has_nan = jnp.any(jnp.stack([jnp.isnan(x).any() for x in leaves] or [jnp.bool_(False)]))
    has_inf = jnp.any(jnp.stack([jnp.isinf(x).any() for x in leaves] or [jnp.bool_(False)]))
    return jnp.where(has_nan, jnp.nan, jnp.where(has_inf, jnp.inf, 0.0)).astype(jnp.float32)


def record_non_finite(
    record: NonFinite,
    iteration: jax.Array,
    loss: jax.Array,
    params: Any,
    network_state: Any,
) -> NonFinite:
    """Update ``record`` with this iteration's check (jit-able, no host sync).

    Keeps the first record: once a quantity went non-finite, later iterations do not
    overwrite where and what it was.

    Args:
        record: The record so far.
        iteration: int32 ``[]``, the 1-based number of the iteration being checked.
        loss: ``[]`` the iteration's mean total loss.
        params: The parameters after the update (pytree of arrays).
        network_state: The other network state after ``update_statistics``.

    Returns:
        The updated `NonFinite`.
    """
    values = jnp.stack(
        [
            jnp.asarray(loss, jnp.float32),
            _summary(params),
            _summary(network_state),
        ]
    )
    bad = ~jnp.isfinite(values)
    first = jnp.argmax(bad).astype(jnp.int32)
    new = bad.any() & (record.iteration == 0)
    return NonFinite(
        iteration=jnp.where(new, iteration.astype(jnp.int32), record.iteration),
        quantity=jnp.where(new, first, record.quantity),
        value=jnp.where(new, values[first], record.value),
    )


def raise_if_non_finite(record: NonFinite, step: int | None = None) -> None:
    """Raise `NonFiniteError` if ``record`` holds a non-finite value (host side).

    Reads three scalars from the device (a synchronisation): call it where the host
    waits for the state anyway.

    Args:
        record: ``state.non_finite`` of a `TrainState`: scalars, or ``[K]`` arrays for
            the ``K`` runs of a sweep (the first diverged run is named).
        step: The env step count to mention in the message.

    Raises:
        NonFiniteError: If any monitored quantity was non-finite in some iteration.
    """
    iteration, quantity, value = (
        np.asarray(x) for x in jax.device_get((record.iteration, record.quantity, record.value))
    )
    diverged = np.flatnonzero(iteration.reshape(-1) > 0)
    if diverged.size:
        first = int(diverged[0])
        which = quantity.reshape(-1)[diverged]
        raise NonFiniteError(
            int(iteration.reshape(-1)[first]),
            MONITORED_QUANTITIES[int(which[0])],
            float(value.reshape(-1)[first]),
            step,
            run=first if iteration.ndim else None,
            counts={q: int(np.sum(which == i)) for i, q in enumerate(MONITORED_QUANTITIES)},
        )
