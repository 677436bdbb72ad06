"""DictObsEnv: a reach-and-grip task with dict observations and dict actions."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from nnx_ppo.envs._helpers import check_action, check_float, move
from nnx_ppo.envs.base import Env, State

__all__ = ["DictObsEnv"]


class DictObsEnv(Env):
    """Move a hand to a goal and close the gripper only when there.

    A pytree-observation, pytree-action environment (solvable by an MLP)::

        obs    = {"proprio": [hand_x, hand_y, grip],   # float32 [3]
                  "goal":    [goal_x, goal_y]}         # float32 [2]
        action = {"arm":     [vx, vy],                 # float32 [2], clipped to [-1, 1]
                  "gripper": [g]}                      # float32 [1], clipped to [-1, 1]

        hand' = clip(hand + step_size * arm, -2, 2)
        d     = ||hand' - goal||
        r     = -d + grip_weight * g * (+1 if d < grip_radius else -1)
        grip' = g                                      # reported in proprio

    So the gripper should be closed (``g = +1``) near the goal and open (``g = -1``)
    elsewhere. Hand and goal start uniform in ``[-1, 1]^2``; the reward is a float32
    scalar; the episode never terminates (wrap in
    `EpisodeWrapper`). Metrics: ``"distance"`` (``d``).

    Args:
        step_size: Hand distance per unit ``arm`` action per step; > 0.
        grip_radius: Distance to the goal within which closing pays; > 0.
        grip_weight: Reward per unit of correct gripper action; >= 0.

    Examples:
        >>> import jax
        >>> env = DictObsEnv()
        >>> env.observation_size, env.action_size
        ({'goal': (2,), 'proprio': (3,)}, {'arm': 2, 'gripper': 1})
    """

    def __init__(
        self, step_size: float = 0.1, grip_radius: float = 0.2, grip_weight: float = 0.1
    ) -> None:
        owner = "DictObsEnv"
        self.step_size = check_float(
            owner, "step_size", step_size, allow_zero=False, meaning="distance per unit action"
        )
        self.grip_radius = check_float(
            owner, "grip_radius", grip_radius, allow_zero=False, meaning="goal radius"
        )
        self.grip_weight = check_float(
            owner, "grip_weight", grip_weight, allow_zero=True, meaning="gripper reward weight"
        )

    @property
    def observation_size(self) -> dict[str, tuple[int, ...]]:
        """``{"goal": (2,), "proprio": (3,)}``."""
        return {"goal": (2,), "proprio": (3,)}

    @property
    def action_size(self) -> dict[str, int]:
        """``{"arm": 2, "gripper": 1}``."""
        return {"arm": 2, "gripper": 1}

    @staticmethod
    def _obs(hand: jax.Array, grip: jax.Array, goal: jax.Array) -> dict[str, jax.Array]:
        return {"goal": goal, "proprio": jnp.concatenate([hand, grip])}

    def reset(self, rng: jax.Array) -> State:
        """Draws hand and goal uniformly in ``[-1, 1]^2``; the gripper starts at 0."""
        hand_key, goal_key = jax.random.split(rng)
        hand = jax.random.uniform(hand_key, (2,), jnp.float32, -1.0, 1.0)
        goal = jax.random.uniform(goal_key, (2,), jnp.float32, -1.0, 1.0)
        grip = jnp.zeros((1,), jnp.float32)
        zero = jnp.zeros((), jnp.float32)
        return State(
            obs=self._obs(hand, grip, goal),
            reward=zero,
            done=zero,
            metrics={"distance": jnp.linalg.norm(hand - goal)},
            info={},
            pipeline_state={"hand": hand, "grip": grip, "goal": goal},
        )

    def step(self, state: State, action: dict[str, jax.Array]) -> State:
        """Moves the hand, sets the gripper, rewards reaching and correct gripping."""
        action = check_action(action, self.action_size, "DictObsEnv")
        ps = state.pipeline_state
        hand = move(ps["hand"], action["arm"], self.step_size, 2.0)
        grip = action["gripper"]
        distance = jnp.linalg.norm(hand - ps["goal"])
        sign = jnp.where(distance < self.grip_radius, 1.0, -1.0)
        reward = -distance + self.grip_weight * grip[0] * sign
        return state.replace(
            obs=self._obs(hand, grip, ps["goal"]),
            reward=reward,
            done=jnp.zeros((), jnp.float32),
            metrics={"distance": distance},
            pipeline_state={"hand": hand, "grip": grip, "goal": ps["goal"]},
        )
