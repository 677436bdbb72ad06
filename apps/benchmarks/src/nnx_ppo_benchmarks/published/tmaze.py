"""The T-Maze memory task as POBAX defines it, in the gymnax API.

POBAX (Tao et al., "POBAX: Partially Observable Benchmarks in JAX", 2025) uses the
T-Maze of Bakker (2001) with a corridor of 5 cells as its simplest memory test
(``tmaze_5``). This is an independent implementation of that definition, so that it
trains through `nnx_ppo.envs.GymnaxEnv` like any user's gymnax environment:

- **Cells.** The agent starts at cell 0; cells 1 to ``hallway_length`` are the
  corridor and cell ``hallway_length + 1`` is the junction.
- **Actions** (``Discrete(4)``): 0 north, 1 south, 2 east, 3 west. East and west move
  one cell along the corridor (the ends are walls) and give no reward. North and south
  do nothing away from the junction; at the junction they end the episode with
  ``good_reward`` if they go to the goal's side and ``bad_reward`` otherwise.
- **The goal's side** is drawn at reset: ``goal_south`` is 0 (north) or 1 (south) with
  probability 1/2 each.
- **Observations** are 4 numbers, entry 0 the cue, 1 "corridor", 2 "junction", 3
  unused (always 0), with POBAX's values: at the start ``[goal_south, 1, 0, 0]``, in
  the corridor ``[0, 1, 0, 0]``, at the junction ``[0, 0, 1, 0]``. (As in POBAX, a start
  with the goal north looks like a corridor cell; it is still the first observation
  of an episode.)

The optimal policy walks east ``hallway_length + 1`` times and turns to the cued side:
return ``good_reward`` (4.0). A memoryless policy sees the same observation at the
junction whichever the goal, so its best is a coin flip there:
``(good_reward + bad_reward) / 2`` (1.95 with the defaults). ``max_steps_in_episode``
(1000, POBAX's default) bounds an episode that never turns at the junction.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

__all__ = ["TMaze", "TMazeParams", "TMazeState"]


@struct.dataclass
class TMazeState(environment.EnvState):
    """``cell``: int32 position (0 start, ``hallway_length + 1`` junction);
    ``goal_south``: int32, 1 if the rewarded side is south; ``time``: steps taken."""

    cell: jax.Array
    goal_south: jax.Array


@struct.dataclass
class TMazeParams(environment.EnvParams):
    """The episode's step limit (POBAX's default: 1000)."""

    max_steps_in_episode: int = 1000


class TMaze(environment.Environment[TMazeState, TMazeParams]):
    """POBAX's T-Maze (see the module docstring).

    Args:
        hallway_length: Corridor cells between the start and the junction (POBAX's
            ``tmaze_5``: 5), an int >= 1.
        good_reward: Reward for turning to the cued side (4.0).
        bad_reward: Reward for turning to the other side (-0.1).

    Raises:
        ValueError: If ``hallway_length`` is not an int >= 1.
    """

    def __init__(
        self, hallway_length: int = 5, good_reward: float = 4.0, bad_reward: float = -0.1
    ) -> None:
        super().__init__()
        if isinstance(hallway_length, bool) or not isinstance(hallway_length, int):
            raise ValueError(f"TMaze: hallway_length must be an int >= 1, got {hallway_length!r}")
        if hallway_length < 1:
            raise ValueError(f"TMaze: hallway_length must be >= 1, got {hallway_length}")
        self.hallway_length = hallway_length
        self.good_reward = float(good_reward)
        self.bad_reward = float(bad_reward)

    @property
    def junction(self) -> int:
        """The junction's cell index, ``hallway_length + 1``."""
        return self.hallway_length + 1

    @property
    def default_params(self) -> TMazeParams:
        """POBAX's step limit."""
        return TMazeParams()

    @property
    def name(self) -> str:
        """``"TMaze-<hallway_length>"``."""
        return f"TMaze-{self.hallway_length}"

    @property
    def num_actions(self) -> int:
        """North, south, east, west."""
        return 4

    def action_space(self, params: TMazeParams | None = None) -> spaces.Discrete:
        """``Discrete(4)``."""
        return spaces.Discrete(4)

    def observation_space(self, params: TMazeParams) -> spaces.Box:
        """Four entries in ``[0, 1]``."""
        return spaces.Box(0.0, 1.0, (4,), jnp.float32)

    def get_obs(self, state: TMazeState, params: Any = None, key: Any = None) -> jax.Array:
        """The observation of ``state`` (module docstring)."""
        at_start = state.cell == 0
        at_junction = state.cell == self.junction
        cue = jnp.where(at_start, state.goal_south, 0)
        corridor = jnp.logical_not(at_junction)
        return jnp.stack([cue, corridor, at_junction, jnp.zeros_like(at_start)]).astype(jnp.float32)

    def reset_env(self, key: jax.Array, params: TMazeParams) -> tuple[jax.Array, TMazeState]:
        """Start at cell 0 with the goal's side drawn from ``key``."""
        goal_south = jax.random.bernoulli(key).astype(jnp.int32)
        state = TMazeState(time=0, cell=jnp.int32(0), goal_south=goal_south)
        return self.get_obs(state), state

    def step_env(
        self, key: jax.Array, state: TMazeState, action: Any, params: TMazeParams
    ) -> tuple[jax.Array, TMazeState, jax.Array, jax.Array, dict[str, Any]]:
        """One move; the episode ends when north or south is taken at the junction."""
        action = jnp.asarray(action, jnp.int32)
        turns = action < 2
        at_junction = state.cell == self.junction
        ends = turns & at_junction
        right_side = (action == 1) == (state.goal_south == 1)
        reward = jnp.where(
            ends, jnp.where(right_side, self.good_reward, self.bad_reward), 0.0
        ).astype(jnp.float32)
        moved = jnp.where(action == 2, state.cell + 1, state.cell - 1)
        cell = jnp.where(turns, state.cell, jnp.clip(moved, 0, self.junction))
        next_state = TMazeState(time=state.time + 1, cell=cell, goal_south=state.goal_south)
        return self.get_obs(next_state), next_state, reward, ends, {}
