"""Fixtures shared by the benchmarks' tests (the tests run with
``--import-mode=importlib``, so test files reach helpers through fixtures, not imports)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest


def _play(env: Any, goal_south: int, actions: list[int]) -> tuple[list[np.ndarray], float, bool]:
    params = env.default_params
    key = jax.random.key(0)
    _, state = env.reset_env(key, params)
    state = state.replace(goal_south=jnp.int32(goal_south))
    seen, total = [np.asarray(env.get_obs(state))], 0.0
    for a in actions:
        obs, state, reward, done, _ = env.step_env(key, state, a, params)
        seen.append(np.asarray(obs))
        total += float(reward)
        if bool(done):
            return seen, total, True
    return seen, total, False


@pytest.fixture
def play_tmaze() -> Any:
    """``play(env, goal_south, actions) -> (observations, return, ended)``: a T-Maze
    (`TMaze` or `PixelTMaze`) played with a fixed action list from a start whose goal is
    ``goal_south``; the observations begin with the start's."""
    return _play
