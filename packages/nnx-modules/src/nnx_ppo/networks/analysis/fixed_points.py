"""Fixed and slow points of a recurrent map, after Sussillo & Barak (2013).

For a map ``F`` on states ``h`` (``[N]``), a fixed point has ``F(h) = h``; a slow point
has a small speed ``q(h) = |F(h) - h|^2 / 2``. `find_fixed_points` minimises ``q`` from
many starting states at once (Adam with a decaying step, then Newton steps on
``F(h) - h = 0`` where they lower ``q``), keeps the points slower than ``max_speed``,
merges the ones closer than ``merge_distance`` and linearises ``F`` at each: the
eigenvalues of the Jacobian say whether a point attracts (all ``|lambda| < 1`` for this
discrete-time map), repels, or is a saddle, and along how many directions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["FixedPoints", "find_fixed_points", "speed"]


def speed(fn: Callable[[jax.Array], jax.Array], state: jax.Array) -> jax.Array:
    """``q(h) = |F(h) - h|^2 / 2`` of one state ``[N]`` (a scalar)."""
    step = fn(state) - state
    return 0.5 * jnp.sum(step * step)


@dataclasses.dataclass(frozen=True)
class FixedPoints:
    """The distinct points `find_fixed_points` found, slowest first (numpy arrays).

    Attributes:
        points: ``[M, N]`` states.
        speeds: ``[M]`` ``q`` at each point.
        jacobians: ``[M, N, N]`` ``dF/dh`` at each point.
        eigenvalues: ``[M, N]`` complex eigenvalues of each Jacobian, largest modulus
            first.
        counts: ``[M]`` how many starts converged to each point (merged).
    """

    points: np.ndarray
    speeds: np.ndarray
    jacobians: np.ndarray
    eigenvalues: np.ndarray
    counts: np.ndarray

    def __len__(self) -> int:
        return int(self.points.shape[0])

    @property
    def stable(self) -> np.ndarray:
        """``[M]`` bool: every eigenvalue inside the unit circle (an attractor)."""
        return np.abs(self.eigenvalues).max(axis=-1, initial=0.0) < 1.0

    @property
    def eigenvectors(self) -> np.ndarray:
        """``[M, N, N]`` complex: column ``k`` of point ``m`` is the (unit) eigenvector
        of ``eigenvalues[m, k]``, the direction along which the linearisation
        ``h* + J (h - h*)`` scales a perturbation by that eigenvalue each step."""
        values, vectors = np.linalg.eig(self.jacobians)
        order = np.argsort(-np.abs(values), axis=-1)
        return np.take_along_axis(vectors.astype(complex), order[:, None, :], -1)

    @property
    def unstable_dimensions(self) -> np.ndarray:
        """``[M]`` int: the number of eigenvalues outside the unit circle."""
        return (np.abs(self.eigenvalues) > 1.0).sum(axis=-1)


def _check(name: str, value: Any, *, positive: bool = True, integer: bool = False) -> None:
    kind = int if integer else (int, float)
    ok = isinstance(value, kind) and not isinstance(value, bool)
    if not ok or (value <= 0 if positive else value < 0):
        bound = "> 0" if positive else ">= 0"
        what = "an int" if integer else "a number"
        raise ValueError(f"find_fixed_points: {name}={value!r} must be {what} {bound}.")


def find_fixed_points(
    fn: Callable[[jax.Array], jax.Array],
    starts: Any,
    *,
    steps: int = 2000,
    learning_rate: float = 1e-2,
    newton_steps: int = 10,
    max_speed: float = 1e-8,
    merge_distance: float = 1e-3,
) -> FixedPoints:
    """Find the fixed (or slow) points of ``fn`` reachable from ``starts``.

    Args:
        fn: The map ``[N] -> [N]``, pure and differentiable (a `CarryMap`, or any
            function).
        starts: ``[K, N]`` starting states: states the network visits (from
            `CarryMap.rollout`), with some noise, cover the region that matters.
        steps: Adam steps on ``q`` (the step size decays from ``learning_rate`` to a
            thousandth of it along a cosine).
        learning_rate: Adam's first step size.
        newton_steps: Newton steps on ``F(h) - h = 0`` afterwards, each kept only where
            it lowers ``q`` (0 to skip; slow points are not roots).
        max_speed: Keep points with ``q <= max_speed``; raise it to collect slow points.
        merge_distance: Points closer than this (Euclidean) are one point.

    Returns:
        A `FixedPoints`, slowest first; empty if no start reached ``max_speed``.

    Raises:
        ValueError: If ``starts`` is not ``[K, N]`` or an option is out of range.

    Examples:
        ``h -> tanh(2 h)`` has an unstable fixed point at 0 and two attractors at
        ``+-0.9575``:

        >>> import jax.numpy as jnp
        >>> found = find_fixed_points(lambda h: jnp.tanh(2 * h), jnp.linspace(-2, 2, 9)[:, None])
        >>> sorted(round(float(p), 4) for p in found.points[:, 0])
        [-0.9575, 0.0, 0.9575]
        >>> [bool(s) for s in found.stable[found.points[:, 0].argsort()]]
        [True, False, True]
    """
    starts = jnp.asarray(starts)
    if starts.ndim != 2 or starts.shape[0] < 1:
        raise ValueError(
            f"find_fixed_points: starts must be [K, N] (K starting states of N units), got "
            f"shape {starts.shape}; a single state h is starts=h[None]."
        )
    if not jnp.issubdtype(starts.dtype, jnp.floating):
        starts = starts.astype(jnp.float32)
    _check("steps", steps, positive=False, integer=True)
    _check("newton_steps", newton_steps, positive=False, integer=True)
    _check("learning_rate", learning_rate)
    _check("max_speed", max_speed)
    _check("merge_distance", merge_distance)

    q = jax.vmap(lambda h: speed(fn, h))
    grad_q = jax.grad(lambda h: jnp.sum(q(h)))

    @jax.jit
    def minimise(h: jax.Array) -> jax.Array:
        # Adam (b1 0.9, b2 0.999) with the step decaying from learning_rate to a
        # thousandth of it along a cosine; each start moves on its own (q sums them).
        def adam_step(carry: tuple[jax.Array, ...], t: jax.Array) -> tuple[Any, None]:
            h, m, v = carry
            g = grad_q(h)
            m = 0.9 * m + 0.1 * g
            v = 0.999 * v + 0.001 * g * g
            m_hat, v_hat = m / (1 - 0.9 ** (t + 1)), v / (1 - 0.999 ** (t + 1))
            decay = 0.5 * (1 + jnp.cos(jnp.pi * t / max(steps, 1)))
            rate = learning_rate * (1e-3 + (1 - 1e-3) * decay)
            return (h - rate * m_hat / (jnp.sqrt(v_hat) + 1e-12), m, v), None

        zeros = jnp.zeros_like(h)
        ts = jnp.arange(steps, dtype=h.dtype)
        (h, _, _), _ = jax.lax.scan(adam_step, (h, zeros, zeros), ts)

        def newton_step(h: jax.Array, _: None) -> tuple[jax.Array, None]:
            def one(x: jax.Array) -> jax.Array:
                residual = fn(x) - x
                jacobian = jax.jacfwd(fn)(x) - jnp.eye(x.shape[0], dtype=x.dtype)
                return x - jnp.linalg.lstsq(jacobian, residual)[0]

            proposed = jax.vmap(one)(h)
            better = q(proposed) < q(h)  # NaN compares False: keep h
            return jnp.where(better[:, None], proposed, h), None

        return jax.lax.scan(newton_step, h, None, length=newton_steps)[0]

    found = minimise(starts)
    speeds = np.asarray(q(found), np.float64)
    found_np = np.asarray(found)
    order = [i for i in np.argsort(speeds, kind="stable") if speeds[i] <= max_speed]
    kept: list[int] = []
    counts: list[int] = []
    for i in order:
        distances = [np.linalg.norm(found_np[i] - found_np[j]) for j in kept]
        near = [k for k, d in enumerate(distances) if d < merge_distance]
        if near:
            counts[near[0]] += 1
        else:
            kept.append(i)
            counts.append(1)
    n = found_np.shape[1]
    if not kept:
        empty = np.zeros((0, n), found_np.dtype)
        return FixedPoints(
            empty, np.zeros(0), np.zeros((0, n, n)), np.zeros((0, n), complex), np.zeros(0, int)
        )
    points = found_np[kept]
    jacobians = np.asarray(jax.vmap(jax.jacfwd(fn))(jnp.asarray(points)), np.float64)
    unsorted = np.linalg.eigvals(jacobians).astype(complex)
    eigenvalues = np.take_along_axis(unsorted, np.argsort(-np.abs(unsorted), axis=-1), -1)
    return FixedPoints(points, speeds[kept], jacobians, eigenvalues, np.asarray(counts))
