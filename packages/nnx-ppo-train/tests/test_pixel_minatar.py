"""A conv policy trains on Breakout-MinAtar through the public gymnax adapter.

The user's path of the "Pixel observations" how-to at a short budget: `GymnaxEnv`
gives MinAtar's 10x10x4 grid as a flat vector, `ConvEncoder` reshapes it, a
`CategoricalSampler` picks one of the 3 actions. Marked ``extended`` (a PPO compile and
a few thousand steps); the published-settings runs are in the benchmarks app.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

pytest.importorskip("gymnax")

from nnx_ppo.algorithms import EvalConfig, PPOConfig, TrainConfig, train_ppo
from nnx_ppo.envs import GymnaxEnv
from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.containers import Sequential
from nnx_ppo.networks.conv import ConvEncoder
from nnx_ppo.networks.feedforward import Dense
from nnx_ppo.networks.sampling_layers import CategoricalSampler


@pytest.mark.extended
def test_conv_policy_learns_breakout_minatar() -> None:
    env = GymnaxEnv.make("Breakout-MinAtar")
    shape = env.env.observation_space(env.params).shape
    rngs = nnx.Rngs(0)
    encoder = ConvEncoder.minatar(shape, rngs, channels=(8,), dense=(32,))
    network = Sequential(
        [
            encoder,
            PPOAdapter(
                action=Sequential(
                    [Dense(32, env.action_size, rngs=rngs), CategoricalSampler(rngs)]
                ),
                value=Dense(32, 1, rngs=rngs),
            ),
        ]
    )
    config = TrainConfig(
        ppo=PPOConfig(
            n_envs=16,
            rollout_length=32,
            n_minibatches=4,
            total_steps=16 * 32 * 16,
            learning_rate=3e-3,
            max_grad_norm=0.5,
            iterations_per_call=8,
        ),
        # Stochastic evaluation over a 100-step window, before and after training.
        eval=EvalConfig(n_envs=32, max_episode_length=100, deterministic=False),
    )
    result = train_ppo(env, network, config, progress=False)
    params = jax.tree.leaves(nnx.state(network, nnx.Param))
    assert all(np.all(np.isfinite(np.asarray(p))) for p in params)
    assert all(np.isfinite(v) for v in result.metrics.values())
    (_, before), (_, after) = result.eval_history[0], result.eval_history[-1]
    start, end = before["eval/episode_reward/mean"], after["eval/episode_reward/mean"]
    # An untrained policy breaks about half a brick in 100 steps; 8192 steps of training
    # make it several times more (measured about 0.4 -> 2 on CPU).
    assert end > max(1.0, 2.0 * start), (start, end)
