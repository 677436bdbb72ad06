"""TwoAgentEnv: two point masses with per-agent observations, actions and rewards."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from nnx_ppo.envs._helpers import check_action, check_float, move
from nnx_ppo.envs.base import Env, State

__all__ = ["TwoAgentEnv"]


class TwoAgentEnv(Env):
    """A leader that must reach the origin and a follower that must reach the leader.

    Observations, actions and rewards are dicts keyed by agent (``"agent_a"`` the
    leader, ``"agent_b"`` the follower)::

        obs    = {"agent_a": [p_a, p_b],  "agent_b": [p_b, p_a]}    # float32 [4] each
        action = {"agent_a": v_a,         "agent_b": v_b}           # float32 [2] each
        p_a'   = clip(p_a + step_size * v_a, -2, 2)                 # both move at once
        p_b'   = clip(p_b + step_size * v_b, -2, 2)
        reward = {"agent_a": -||p_a'||,   "agent_b": -||p_b' - p_a'||}

    Each agent sees its own position first. Both start uniform in ``[-1, 1]^2``;
    ``done`` is shared and the episode never terminates (wrap in
    `EpisodeWrapper`). Metrics: ``"distance_a"``
    (``||p_a'||``) and ``"distance_ab"`` (``||p_b' - p_a'||``). Memoryless policies are
    optimal.

    Args:
        step_size: Distance per unit action per step, for both agents; > 0.

    Examples:
        >>> env = TwoAgentEnv()
        >>> env.observation_size, env.action_size
        ({'agent_a': (4,), 'agent_b': (4,)}, {'agent_a': 2, 'agent_b': 2})
    """

    def __init__(self, step_size: float = 0.1) -> None:
        self.step_size = check_float(
            "TwoAgentEnv", "step_size", step_size, allow_zero=False, meaning="distance per step"
        )

    @property
    def observation_size(self) -> dict[str, tuple[int, ...]]:
        """``{"agent_a": (4,), "agent_b": (4,)}``."""
        return {"agent_a": (4,), "agent_b": (4,)}

    @property
    def action_size(self) -> dict[str, int]:
        """``{"agent_a": 2, "agent_b": 2}``."""
        return {"agent_a": 2, "agent_b": 2}

    @staticmethod
    def _obs(pos_a: jax.Array, pos_b: jax.Array) -> dict[str, jax.Array]:
        return {
            "agent_a": jnp.concatenate([pos_a, pos_b]),
            "agent_b": jnp.concatenate([pos_b, pos_a]),
        }

    @staticmethod
    def _metrics(pos_a: jax.Array, pos_b: jax.Array) -> dict[str, jax.Array]:
        return {
            "distance_a": jnp.linalg.norm(pos_a),
            "distance_ab": jnp.linalg.norm(pos_b - pos_a),
        }

    def reset(self, rng: jax.Array) -> State:
        """Draws both positions uniformly in ``[-1, 1]^2``; rewards start at 0."""
        key_a, key_b = jax.random.split(rng)
        pos_a = jax.random.uniform(key_a, (2,), jnp.float32, -1.0, 1.0)
        pos_b = jax.random.uniform(key_b, (2,), jnp.float32, -1.0, 1.0)
        zero = jnp.zeros((), jnp.float32)
        return State(
            obs=self._obs(pos_a, pos_b),
            reward={"agent_a": zero, "agent_b": zero},
            done=zero,
            metrics=self._metrics(pos_a, pos_b),
            info={},
            pipeline_state={"agent_a": pos_a, "agent_b": pos_b},
        )

    def step(self, state: State, action: dict[str, jax.Array]) -> State:
        """Moves both agents at once and rewards each by its own distance."""
        action = check_action(action, self.action_size, "TwoAgentEnv")
        ps = state.pipeline_state
        pos_a = move(ps["agent_a"], action["agent_a"], self.step_size, 2.0)
        pos_b = move(ps["agent_b"], action["agent_b"], self.step_size, 2.0)
        metrics = self._metrics(pos_a, pos_b)
        return state.replace(
            obs=self._obs(pos_a, pos_b),
            reward={"agent_a": -metrics["distance_a"], "agent_b": -metrics["distance_ab"]},
            done=jnp.zeros((), jnp.float32),
            metrics=metrics,
            pipeline_state={"agent_a": pos_a, "agent_b": pos_b},
        )
