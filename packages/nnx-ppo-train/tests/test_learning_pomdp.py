"""A partially observable learning task for the recurrent path (marked ``slow``).

brax ``inverted_pendulum`` with the velocities removed from the observation (cart
position and pole angle only): a memoryless policy cannot tell which way the pole is
moving, a recurrent one can infer it from successive angles. The settings are the
learning-quality suite's (``apps/benchmarks``, task ``pendulum_novel``, family
``lstm``); the threshold's comment says what the suite measured.
"""

from __future__ import annotations

import numpy as np
import pytest
from _train_test_helpers import PENDULUM_PPO

from nnx_ppo.algorithms.config import EvalConfig, PPOConfig, TrainConfig
from nnx_ppo.algorithms.sweeps.many import train_many
from nnx_ppo.networks.factories import make_lstm_actor_critic
from nnx_ppo.wrappers import EpisodeWrapper, RewardScalingWrapper, Wrapper


class _Positions(Wrapper):
    """Keeps the first ``n`` observation entries (brax ``inverted_pendulum``: qpos)."""

    def __init__(self, env, n: int) -> None:
        super().__init__(env)
        self.n = n

    def reset(self, rng):
        state = self.env.reset(rng)
        return state.replace(obs=state.obs[..., : self.n])

    def step(self, state, action):
        state = self.env.step(state, action)
        return state.replace(obs=state.obs[..., : self.n])

    @property
    def observation_size(self) -> int:
        return self.n


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Brax System:UserWarning")
def test_lstm_learns_velocity_masked_inverted_pendulum():
    brax_envs = pytest.importorskip("brax.envs")
    base = _Positions(brax_envs.get_environment("inverted_pendulum", backend="generalized"), 2)
    eval_env = EpisodeWrapper(base, episode_length=1000)
    env = RewardScalingWrapper(eval_env, 10.0)
    config = TrainConfig(
        ppo=PPOConfig(
            **PENDULUM_PPO, clip_range=0.3, bootstrap_on_truncation=False, total_steps=204_800
        ),
        eval=EvalConfig(every_steps=40_960, n_envs=64, max_episode_length=1000),
    )
    # Three seeds in one program, each evaluated every 40,960 steps. What a run ends
    # with is noisy at this budget: single runs reach 1000 and then drop late (train_ppo
    # with seed 0: 1000 at 164k steps, 357 at the end; in this sweep the finals were
    # 1000, 780 and 410), so the test holds the recurrent path to the median of each
    # run's best evaluation, what the suite's "reaches 1000" measures.
    sweep = train_many(
        env,
        lambda rngs: make_lstm_actor_critic(2, base.action_size, 64, (32,), (64,), rngs=rngs),
        config,
        seeds=[0, 1, 2],
        eval_env=eval_env,
        progress=False,
    )
    best = [
        max(metrics["eval/episode_reward/mean"] for _, metrics in history)
        for history in sweep.eval_histories
    ]
    # In the suite (seeds 100-104, the same settings) the LSTM family's evaluation
    # return reaches the maximum of 1000 within 164k steps; a frame stack of 4
    # observations ends near 600 and a memoryless MLP far lower. 900 leaves room for
    # seed-to-seed spread while failing if the recurrent path stops learning.
    assert all(np.isfinite(b) for b in best), best
    assert float(np.median(best)) >= 900, best
