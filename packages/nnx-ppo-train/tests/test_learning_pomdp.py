"""A partially observable learning task for the recurrent path (marked ``slow``).

brax ``inverted_pendulum`` with the velocities removed from the observation (cart
position and pole angle only): a memoryless policy cannot tell which way the pole is
moving, a recurrent one can infer it from successive angles. The settings are the
learning-quality suite's (``apps/benchmarks``, task ``pendulum_novel``, family
``lstm``), where the LSTM family's median final return over 5 seeds is given in the
threshold's comment.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from nnx_ppo.algorithms.config import EvalConfig, PPOConfig, TrainConfig
from nnx_ppo.algorithms.evaluation import evaluate
from nnx_ppo.algorithms.ppo import train_ppo
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
    net = make_lstm_actor_critic(
        2, base.action_size, 64, (32,), (64,), rngs=nnx.Rngs(0), min_std=1e-3
    )
    config = TrainConfig(
        ppo=PPOConfig(
            n_envs=256,
            rollout_length=20,
            n_minibatches=8,
            n_epochs=4,
            learning_rate=1e-3,
            discounting_factor=0.995,
            clip_range=0.3,
            bootstrap_on_truncation=False,
            total_steps=204_800,
        ),
        eval=EvalConfig(enabled=False),
        seed=0,
    )
    train_ppo(env, net, config, progress=False)
    final = evaluate(eval_env, net, jax.random.PRNGKey(10_000), n_envs=64)
    reward = final["eval/episode_reward/mean"]
    # In the suite (seeds 100-104, the same settings) the LSTM family's evaluation
    # return reaches the maximum of 1000 within 164k steps; a frame stack of 4
    # observations ends near 600 and a memoryless MLP far lower. 900 leaves room for
    # seed-to-seed spread while failing if the recurrent path stops learning.
    assert jnp.isfinite(reward)
    assert reward >= 900, final
