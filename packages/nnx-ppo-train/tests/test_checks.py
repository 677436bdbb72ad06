"""The checks run before compiling: the network against the environment."""

from __future__ import annotations

import pytest
from flax import nnx

from nnx_ppo.algorithms.config import PPOConfig
from nnx_ppo.algorithms.ppo import iteration as iteration_module
from nnx_ppo.algorithms.ppo.train import train_ppo
from nnx_ppo.envs import MemoryTask, PointMass, TwoAgentEnv
from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.containers import Sequential
from nnx_ppo.networks.factories import make_mlp_actor_critic
from nnx_ppo.networks.feedforward import MLP
from nnx_ppo.networks.normalizer import Normalizer
from nnx_ppo.networks.sampling_layers import NormalTanhSampler
from nnx_ppo.networks.utils import Map
from nnx_ppo.wrappers import EpisodeWrapper


def test_value_tree_must_match_reward_tree_before_tracing(monkeypatch):
    monkeypatch.setattr(iteration_module, "make_training_iteration", None)  # never reached
    env = EpisodeWrapper(TwoAgentEnv(), episode_length=3)
    rngs = nnx.Rngs(0)
    net = Sequential(
        [
            Normalizer({"agent_a": 4, "agent_b": 4}),
            PPOAdapter(
                action=Map(
                    {
                        k: Sequential([MLP(4, (8,), 4, rngs=rngs), NormalTanhSampler(rngs)])
                        for k in ("agent_a", "agent_b")
                    }
                ),
                value=Map(agent_a=MLP(4, (8,), 1, rngs=rngs)),  # one head for two rewards
            ),
        ]
    )
    with pytest.raises(ValueError, match=r"value estimates .* do not match .* reward") as info:
        train_ppo(env, net, PPOConfig(n_envs=2, n_minibatches=1), progress=False)
    assert "agent_b" in str(info.value)


def test_action_size_mismatch_is_a_clear_error():
    env = EpisodeWrapper(PointMass(), episode_length=3)
    net = make_mlp_actor_critic(2, 3, (8,), (8,), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"action_size=2 \(expected batched shapes \(2, 2\)\)"):
        train_ppo(env, net, PPOConfig(n_envs=2, n_minibatches=1), progress=False)


def test_observation_mismatch_names_the_shapes():
    env = EpisodeWrapper(MemoryTask(cue_size=3), episode_length=3)
    net = make_mlp_actor_critic(2, 3, (8,), (8,), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"failed on the environment's observation .*\(2, 3\)"):
        train_ppo(env, net, PPOConfig(n_envs=2, n_minibatches=1), progress=False)
