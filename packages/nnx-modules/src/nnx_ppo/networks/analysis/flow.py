"""`flow_field`: the velocity of a recurrent map on a plane of principal-component space.

A network's state moves by ``F(h) - h`` in one step. On the plane spanned by two
principal components (`pca`) that displacement, projected onto the plane, is the flow
field one draws with arrows or streamlines around the fixed points (`find_fixed_points`,
whose Jacobians give the linearised dynamics there). Each grid point of the plane is
lifted back to a full state through the basis: ``h = mean + sum_k z_k c_k``, the two
plane coordinates on a grid and the other components' coordinates fixed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import jax
import jax.numpy as jnp
import numpy as np

from nnx_ppo.networks.analysis.pca import PCA

__all__ = ["FlowField", "flow_field"]


@dataclasses.dataclass(frozen=True)
class FlowField:
    """The flow of a map on a grid of a principal-component plane (numpy arrays).

    The arrays are laid out as matplotlib's ``quiver`` and ``streamplot`` take them:
    ``x`` varies along the columns, ``y`` along the rows.

    Attributes:
        x: ``[Gx]`` coordinates along component ``components[0]``.
        y: ``[Gy]`` coordinates along component ``components[1]``.
        velocity: ``[Gy, Gx, 2]`` ``F(h) - h`` at each grid state, projected onto the
            two components (the change of the two coordinates in one step).
        speed: ``[Gy, Gx]`` ``|F(h) - h|`` in the full state, out-of-plane motion
            included: where it is much larger than the in-plane velocity, the plane
            is not where the dynamics happen.
        states: ``[Gy, Gx, N]`` the grid's states.
        components: The two component indices of the plane.
        coordinates: ``[K]`` the coordinates of the plane's origin along all
            components (the two plane entries are 0).
        basis: The `PCA` basis.
    """

    x: np.ndarray
    y: np.ndarray
    velocity: np.ndarray
    speed: np.ndarray
    states: np.ndarray
    components: tuple[int, int]
    coordinates: np.ndarray
    basis: PCA

    def project(self, states: Any) -> np.ndarray:
        """``[..., N]`` states -> ``[..., 2]`` their coordinates on the plane."""
        return self.basis.transform(states)[..., list(self.components)]


def _fail(message: str) -> NoReturn:
    raise ValueError(f"flow_field: {message}")


def flow_field(
    fn: Callable[..., jax.Array],
    basis: PCA,
    *,
    components: Sequence[int] = (0, 1),
    bounds: Sequence[Sequence[float]] | None = None,
    resolution: int | Sequence[int] = 21,
    coordinates: Any = None,
    obs: Any = None,
) -> FlowField:
    """The velocity ``F(h) - h`` of ``fn`` on a grid of a principal-component plane.

    Args:
        fn: The map ``[N] -> [N]`` (a `CarryMap`, at its fixed observation), or
            ``([N], x) -> [N]`` with ``input`` (`CarryMap.step`); pure and jit-able.
        basis: A `PCA` of the states (e.g. of `CarryMap.rollout`'s).
        components: The two component indices spanning the plane.
        bounds: ``((x_min, x_max), (y_min, y_max))`` in component coordinates
            (default: three standard deviations, ``3 sqrt(explained_variance)``, each
            way).
        resolution: Grid points per axis, or ``(Gx, Gy)``.
        coordinates: ``[K]`` coordinates of the plane's origin along every component
            (default 0: the plane passes through the mean); the two plane entries are
            ignored. E.g. ``basis.transform(point)`` puts a fixed point on the plane.
        obs: The input ``x`` of a map that takes one (one observation, without the
            batch axis, for `CarryMap.step`).

    Returns:
        A `FlowField`.

    Raises:
        ValueError: If ``components``, ``bounds``, ``resolution`` or ``coordinates``
            do not fit the basis.

    Examples:
        ``h' = 0.5 h`` moves every state halfway to the origin, so on any plane
        the velocity at ``(x, y)`` is ``(-x / 2, -y / 2)``:

        >>> import numpy as np
        >>> basis = PCA(np.zeros(3), np.eye(3), np.ones(3), np.ones(3) / 3)
        >>> field = flow_field(lambda h: 0.5 * h, basis, bounds=((-1, 1), (0, 2)), resolution=3)
        >>> field.x.tolist(), field.y.tolist()
        ([-1.0, 0.0, 1.0], [0.0, 1.0, 2.0])
        >>> field.velocity[2, 0].tolist()  # at (x, y) = (-1, 2)
        [0.5, -1.0]
    """
    n_components = basis.components.shape[0]
    pair = tuple(components)
    if (
        len(pair) != 2
        or pair[0] == pair[1]
        or not all(isinstance(c, int | np.integer) and 0 <= c < n_components for c in pair)
    ):
        _fail(
            f"components={components!r} must be two different component indices in "
            f"[0, {n_components - 1}] (the basis has {n_components})."
        )
    i, j = int(pair[0]), int(pair[1])
    given = list(resolution) if isinstance(resolution, Sequence) else [resolution] * 2
    if len(given) != 2 or not all(isinstance(s, int | np.integer) and s >= 2 for s in given):
        _fail(f"resolution={resolution!r} must be an int >= 2 or a pair of them (Gx, Gy).")
    sizes = (int(given[0]), int(given[1]))
    if bounds is None:
        spread = 3.0 * np.sqrt(np.asarray(basis.explained_variance, np.float64)[[i, j]])
        spread = np.where(spread > 0, spread, 1.0)
        limits = [(-s, s) for s in spread]
    else:
        limits = [tuple(float(v) for v in b) for b in bounds]
        if len(limits) != 2 or not all(len(b) == 2 and b[0] < b[1] for b in limits):
            _fail(f"bounds={bounds!r} must be ((x_min, x_max), (y_min, y_max)), min < max.")
    origin = np.zeros(n_components)
    if coordinates is not None:
        origin = np.asarray(coordinates, np.float64).copy()
        if origin.shape != (n_components,):
            _fail(
                f"coordinates must be [K] = [{n_components}] (one per component of the "
                f"basis), got shape {origin.shape}."
            )
        origin[[i, j]] = 0.0
    x = np.linspace(*limits[0], sizes[0])
    y = np.linspace(*limits[1], sizes[1])
    z = np.broadcast_to(origin, (sizes[1], sizes[0], n_components)).copy()
    z[..., i] = x[None, :]
    z[..., j] = y[:, None]
    states = basis.inverse_transform(z)  # [Gy, Gx, N]
    flat = jnp.asarray(states.reshape(-1, states.shape[-1]))
    step = (lambda h: fn(h, obs)) if obs is not None else fn
    moved = np.asarray(jax.jit(jax.vmap(step))(flat), np.float64).reshape(states.shape)
    change = moved - np.asarray(flat, np.float64).reshape(states.shape)  # the states fn saw
    velocity = change @ basis.components[[i, j]].T
    speed = np.linalg.norm(change, axis=-1)
    return FlowField(x, y, velocity, speed, states, (i, j), origin, basis)
