"""The T-Maze seen as an image: memory from pixels.

`PixelTMaze` is `.tmaze.TMaze` (POBAX's T-Maze: same cells, actions, rewards and goal
draw) whose observation is a small image instead of 4 numbers, so that a policy must
read the cue with a convolution *and* remember it. The image is ``[3, W, 3]`` (height,
width, channels) with ``W = hallway_length + 2`` columns, one per cell; row 1 is the
corridor, rows 0 and 2 are the north and south arms, which exist only in the
junction's column:

- channel 0, **the maze**: 1 on the corridor's cells and on the two arms (the same in
  every image);
- channel 1, **the agent**: 1 on its cell (row 1, column ``cell``);
- channel 2, **the cue**: while the agent is on the start cell, 1 on the arm that holds
  the goal (row 0 for north, row 2 for south, in the junction's column); 0 everywhere
  else.

Unlike the vector T-Maze, the cue is visible whichever side the goal is on. It is shown
only on the start cell, so at the junction the image is the same for both goals: a
memoryless policy's best return is still the coin flip
``(good_reward + bad_reward) / 2`` (1.95), the optimum ``good_reward`` (4.0).
`GymnaxEnv` flattens the image to ``3 * W * 3`` numbers (63 for ``hallway_length=5``),
which `nnx_ppo.networks.conv.ConvEncoder` reshapes back.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from gymnax.environments import spaces

from nnx_ppo_benchmarks.published.tmaze import TMaze, TMazeParams, TMazeState

__all__ = ["PixelTMaze"]


class PixelTMaze(TMaze):
    """`TMaze` with image observations (see the module docstring).

    Args:
        hallway_length: Corridor cells between the start and the junction, an int
            >= 1 (5, POBAX's ``tmaze_5``).
        good_reward: Reward for turning to the cued side (4.0).
        bad_reward: Reward for turning to the other side (-0.1).

    Raises:
        ValueError: If ``hallway_length`` is not an int >= 1.
    """

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """``(3, hallway_length + 2, 3)``: rows, one column per cell, channels."""
        return (3, self.junction + 1, 3)

    @property
    def name(self) -> str:
        """``"PixelTMaze-<hallway_length>"``."""
        return f"PixelTMaze-{self.hallway_length}"

    def observation_space(self, params: TMazeParams) -> spaces.Box:
        """Images of `image_shape` with entries in ``[0, 1]``."""
        return spaces.Box(0.0, 1.0, self.image_shape, jnp.float32)

    def get_obs(self, state: TMazeState, params: Any = None, key: Any = None) -> jax.Array:
        """The image of ``state`` (module docstring)."""
        height, width, _ = self.image_shape
        rows = jnp.arange(height)[:, None]
        cols = jnp.arange(width)[None, :]
        arms = (cols == self.junction) & (rows != 1)
        maze = (rows == 1) | arms
        agent = (rows == 1) & (cols == state.cell)
        goal_row = jnp.where(state.goal_south == 1, 2, 0)
        cue = (state.cell == 0) & (cols == self.junction) & (rows == goal_row)
        return jnp.stack([maze, agent, cue], axis=-1).astype(jnp.float32)
