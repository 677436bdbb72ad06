"""PointMass: a 2-D point that must reach the centre (solvable by an MLP)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from nnx_ppo.envs._helpers import check_action, check_float, move
from nnx_ppo.envs.base import Env, State

__all__ = ["PointMass"]


class PointMass(Env):
    """A point in the plane that must move to the origin.

    Dynamics (kinematic, no inertia)::

        a     = clip(action, -1, 1)                               # [2]
        p'    = clip(p + step_size * a, -arena_size, arena_size)  # [2]
        r     = -||p'||                                           # []

    - Observation: the position ``p``, float32 ``[2]``.
    - Action: a velocity command, float32 ``[2]`` in ``[-1, 1]`` (clipped), so
      tanh-squashed samplers fit.
    - Reward: minus the Euclidean distance to the origin *after* the step.
    - Start: ``p`` uniform in ``[-init_radius, init_radius]^2``.
    - Termination: never, unless ``terminate_radius`` is set, in which case the episode
      terminates (``done = 1``) on the step that brings ``||p'|| < terminate_radius``.
      Wrap in `EpisodeWrapper` to bound episode length.
    - Metrics: ``"distance"`` (``||p'||``).

    A memoryless policy is optimal (``a = -p / max|p|``, scaled down near the origin),
    so an MLP solves it. The optimal undiscounted return of an episode of length ``T``
    starting at distance ``d0`` is close to ``-sum_t max(d0 - t * step_size, 0)``
    (slightly better, since diagonal moves cover up to ``sqrt(2) * step_size``); a
    policy that does nothing earns ``-T * d0``.

    Args:
        step_size: Distance moved per unit action per step; must be > 0.
        init_radius: Half-width of the square of start positions; must be >= 0.
        arena_size: Half-width of the square the point is confined to; must be
            >= ``init_radius``.
        terminate_radius: If not ``None``, terminate on reaching this distance of the
            origin; must be > 0.

    Examples:
        >>> import jax
        >>> env = PointMass()
        >>> state = env.reset(jax.random.key(0))
        >>> state.obs.shape, env.observation_size, env.action_size
        ((2,), 2, 2)
        >>> state = env.step(state, -state.obs)
        >>> float(state.reward) == -float(jax.numpy.linalg.norm(state.obs))
        True
    """

    def __init__(
        self,
        step_size: float = 0.1,
        init_radius: float = 1.0,
        arena_size: float = 2.0,
        terminate_radius: float | None = None,
    ) -> None:
        owner = "PointMass"
        self.step_size = check_float(
            owner, "step_size", step_size, allow_zero=False, meaning="distance per unit action"
        )
        self.init_radius = check_float(
            owner, "init_radius", init_radius, allow_zero=True, meaning="start-square half-width"
        )
        self.arena_size = check_float(
            owner, "arena_size", arena_size, allow_zero=False, meaning="arena half-width"
        )
        if self.arena_size < self.init_radius:
            raise ValueError(
                f"PointMass: arena_size={arena_size!r} must be >= init_radius="
                f"{init_radius!r}, else start positions lie outside the arena; raise "
                "arena_size or lower init_radius."
            )
        self.terminate_radius: float | None = None
        if terminate_radius is not None:
            self.terminate_radius = check_float(
                owner,
                "terminate_radius",
                terminate_radius,
                allow_zero=False,
                meaning="distance to the origin that ends the episode; None never ends it",
            )

    @property
    def observation_size(self) -> int:
        """2: the position ``[x, y]``."""
        return 2

    @property
    def action_size(self) -> int:
        """2: the velocity command ``[vx, vy]``."""
        return 2

    def reset(self, rng: jax.Array) -> State:
        """Draws a start position uniformly in ``[-init_radius, init_radius]^2``."""
        pos = jax.random.uniform(
            rng, (2,), jnp.float32, minval=-self.init_radius, maxval=self.init_radius
        )
        zero = jnp.zeros((), jnp.float32)
        return State(
            obs=pos,
            reward=zero,
            done=zero,
            metrics={"distance": jnp.linalg.norm(pos)},
            info={},
            pipeline_state=pos,
        )

    def step(self, state: State, action: jax.Array) -> State:
        """Moves by ``step_size * clip(action)``; reward ``-||p'||``."""
        action = check_action(action, self.action_size, "PointMass")
        pos = move(state.pipeline_state, action, self.step_size, self.arena_size)
        distance = jnp.linalg.norm(pos)
        if self.terminate_radius is None:
            done = jnp.zeros((), jnp.float32)
        else:
            done = (distance < self.terminate_radius).astype(jnp.float32)
        return state.replace(
            obs=pos,
            reward=-distance,
            done=done,
            metrics={"distance": distance},
            pipeline_state=pos,
        )
