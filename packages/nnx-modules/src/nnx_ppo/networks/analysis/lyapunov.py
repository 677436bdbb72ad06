"""Lyapunov exponents of a recurrent map along a trajectory (Benettin et al. 1980,
Shimada & Nagashima 1979).

A perturbation ``delta`` of the state grows or shrinks along a trajectory as
``delta_T = J_T ... J_2 J_1 delta_0``, with ``J_t`` the Jacobian of the step at step
``t``. The Lyapunov exponents are the average logarithmic growth rates of that product
along its most expanding directions: the largest says whether nearby trajectories
diverge (chaos, > 0) or converge (< 0); the whole spectrum says how many directions
expand, hold (about 0: a memory) or contract. `lyapunov_exponents` carries ``K``
orthonormal tangent vectors along the trajectory, pushes them through each step's
Jacobian (forward-mode products, ``jax.linearize``), and re-orthonormalises them by a
QR decomposition every step, summing ``log |R_ii|``; that keeps the vectors from
collapsing onto the leading direction and the numbers from overflowing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NoReturn

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["LyapunovSpectrum", "lyapunov_exponents"]


@dataclasses.dataclass(frozen=True)
class LyapunovSpectrum:
    """The exponents `lyapunov_exponents` estimated (numpy arrays).

    Exponents are per step of the map (natural log); divide by the step's duration
    (a task's ``dt``) for a rate per unit of time.

    Attributes:
        exponents: ``[K]`` (``[B, K]`` for a batch of trajectories) the estimates, in
            decreasing order.
        running: ``[T - warmup, K]`` (``[T - warmup, B, K]``) the estimate after each
            counted step, per tangent vector in QR order (which converges to
            decreasing order): how far the estimate has settled.
        steps: The number of steps averaged over (``T - warmup``).
    """

    exponents: np.ndarray
    running: np.ndarray
    steps: int

    @property
    def largest(self) -> np.ndarray:
        """The largest exponent: ``[]`` (``[B]`` for a batch)."""
        return self.exponents[..., 0]


def _fail(message: str) -> NoReturn:
    raise ValueError(f"lyapunov_exponents: {message}")


def lyapunov_exponents(
    fn: Callable[..., jax.Array],
    state: Any,
    inputs: Any = None,
    *,
    steps: int | None = None,
    n_exponents: int | None = None,
    warmup: int = 0,
    states: Any = None,
    key: jax.Array | None = None,
) -> LyapunovSpectrum:
    """Estimate the Lyapunov spectrum of ``fn`` along a trajectory.

    The trajectory is driven: ``h_{t+1} = fn(h_t, inputs[t])`` from ``state`` (or
    ``fn(h_t)`` without inputs, for ``steps`` steps), and the Jacobians are taken
    along it. Pass ``states`` to linearise at recorded states instead (e.g. a noisy
    network's, which driving again would not reproduce). The first ``warmup`` steps
    turn the tangent vectors towards the expanding directions without being counted,
    which removes the estimate's ``O(1 / T)`` start-up error.

    Everything runs in one jitted ``lax.scan``; a step costs ``K`` Jacobian-vector
    products and a QR decomposition of ``[N, K]``.

    Args:
        fn: The map on flat states: ``[N] -> [N]`` without inputs, ``([N], x) ->
            [N]`` with inputs; pure and differentiable. A `CarryMap` (its fixed
            observation) or its `CarryMap.step` (an observation per step).
        state: ``[N]`` the first state (for `CarryMap`: ``F.initial_state()``, or a
            visited state), or ``[B, N]`` for ``B`` trajectories at once (estimated
            separately).
        inputs: Optional tree of per-step inputs with leaves ``[T, ...]`` (``[T, B,
            ...]`` with ``B`` states), e.g. the observations a recorded rollout fed
            the network.
        steps: ``T`` without ``inputs`` and ``states``; otherwise their length (must
            match if given).
        n_exponents: ``K``, how many of the largest exponents (default all ``N``).
        warmup: Steps at the start that are not counted (``< T``).
        states: Optional ``[T, N]`` (``[T, B, N]``) states to linearise at:
            ``states[t]`` is the state step ``t`` starts from (``states[0]`` is
            ``state``; `CarryMap.rollout` returns the states *after* each step).
        key: Draws the first tangent vectors (a random orthonormal ``[N, K]``;
            default ``jax.random.key(0)``).

    Returns:
        A `LyapunovSpectrum`. A direction the map removes (a delay line's oldest
        entry, a saturated or rectified unit) has exponent ``-inf``.

    Raises:
        ValueError: If the shapes do not fit together (the message names them) or an
            option is out of range.

    Examples:
        A linear map ``h' = W h`` has the exponents ``log |eigenvalues of W|``:

        >>> import jax.numpy as jnp
        >>> import numpy as np
        >>> w = jnp.array([[0.5, 1.0], [0.0, -2.0]])  # eigenvalues 0.5 and -2
        >>> spectrum = lyapunov_exponents(lambda h: w @ h, jnp.ones(2), steps=60, warmup=20)
        >>> np.round(spectrum.exponents, 4).tolist(), round(float(np.log(2)), 4)
        ([0.6931, -0.6931], 0.6931)
    """
    state = jnp.asarray(state)
    if not jnp.issubdtype(state.dtype, jnp.floating):
        state = state.astype(jnp.float32)
    if state.ndim not in (1, 2):
        _fail(f"state must be [N] or [B, N], got shape {state.shape}.")
    batched = state.ndim == 2
    lead = (state.shape[0],) if batched else ()
    n = state.shape[-1]
    k = n if n_exponents is None else n_exponents
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n:
        _fail(f"n_exponents={n_exponents!r} must be an int in [1, {n}] (the state's units).")

    length = steps
    named = {"inputs": inputs, "states": states}
    for name, tree in named.items():
        for leaf in jax.tree.leaves(tree):
            shape = jnp.shape(leaf)
            if shape[: 1 + len(lead)][1:] != lead or len(shape) < 1 + len(lead):
                _fail(
                    f"{name} leaves must be [T, {'B, ' if batched else ''}...] for state "
                    f"of shape {state.shape}, got a leaf of shape {shape}."
                )
            if length is not None and shape[0] != length:
                _fail(
                    f"{name} has {shape[0]} steps (axis 0 of a leaf of shape {shape}) but "
                    f"{'steps' if steps is not None else 'another argument'} says {length}."
                )
            length = shape[0]
    if states is not None and jnp.shape(states)[1:] != state.shape:
        _fail(
            f"states must be [T, *state.shape] = [T, {', '.join(map(str, state.shape))}], "
            f"got shape {jnp.shape(states)}."
        )
    if length is None:
        _fail("without inputs or states, steps (the trajectory's length) is required.")
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        _fail(f"steps={length!r} must be an int >= 1.")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or not 0 <= warmup < length:
        _fail(f"warmup={warmup!r} must be an int in [0, {length - 1}] (fewer than T = {length}).")

    key = jax.random.key(0) if key is None else key
    start = jnp.linalg.qr(jax.random.normal(key, (n, k), state.dtype))[0]
    driven = inputs is not None

    def one(h0: jax.Array, xs: Any, hs: Any) -> jax.Array:
        def body(carry: tuple[jax.Array, jax.Array, jax.Array], t: Any) -> tuple[Any, Any]:
            h, q, total = carry
            index, x, recorded = t
            at = h if recorded is None else recorded
            step = (lambda v: fn(v, x)) if driven else fn
            nxt, push = jax.linearize(step, at)
            q, r = jnp.linalg.qr(jax.vmap(push, in_axes=1, out_axes=1)(q))
            counted = index >= warmup
            total = total + jnp.where(counted, jnp.log(jnp.abs(jnp.diagonal(r))), 0.0)
            estimate = total / jnp.maximum(index - warmup + 1, 1).astype(total.dtype)
            return (nxt, q, total), estimate

        zeros = jnp.zeros((k,), h0.dtype)
        ts = (jnp.arange(length), xs, hs)
        return jax.lax.scan(body, (h0, start, zeros), ts, length=length)[1]

    run = jax.vmap(one, in_axes=(0, 1, 1)) if batched else one
    running = np.asarray(jax.jit(run)(state, inputs, states), np.float64)  # [(B,) T, K]
    if batched:
        running = np.moveaxis(running, 0, 1)
    running = running[warmup:]
    exponents = -np.sort(-running[-1], axis=-1)
    return LyapunovSpectrum(exponents, running, length - warmup)
