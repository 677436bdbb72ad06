"""Tiny pure-JAX environments for tests, docs and smoke runs.

All follow the brax / MuJoCo Playground API described in `nnx_ppo.envs.base`:
unbatched ``reset(rng)`` and ``step(state, action)``, jit- and vmap-able, deterministic
given the key, no simulator dependency, and no built-in episode limit (wrap them in
`nnx_ppo.wrappers.EpisodeWrapper`).

`GymnaxEnv` adapts any gymnax environment to the same API (the ``gymnax`` extra;
gymnax is imported only when one is built).
"""

from nnx_ppo.envs.base import ActionSize, Env, ObservationSize, State
from nnx_ppo.envs.dict_obs_env import DictObsEnv
from nnx_ppo.envs.gymnax_env import GymnaxEnv
from nnx_ppo.envs.memory_task import MemoryTask
from nnx_ppo.envs.point_mass import PointMass
from nnx_ppo.envs.two_agent_env import TwoAgentEnv

__all__ = [
    "ActionSize",
    "DictObsEnv",
    "Env",
    "GymnaxEnv",
    "MemoryTask",
    "ObservationSize",
    "PointMass",
    "State",
    "TwoAgentEnv",
]
