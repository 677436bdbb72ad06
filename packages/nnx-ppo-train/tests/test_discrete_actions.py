"""Discrete actions (``CategoricalSampler``) through the check and the trainer."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from nnx_ppo.algorithms.config import EvalConfig, PPOConfig, TrainConfig
from nnx_ppo.algorithms.ppo.train import check_env_network, train_ppo
from nnx_ppo.envs.base import Env, State
from nnx_ppo.networks.factories import make_mlp_actor_critic
from nnx_ppo.wrappers import EpisodeWrapper


class _PickTheShownIndex(Env):
    """Observation: a one-hot target among 3; action: an index; reward 1 if it matches.
    A policy that reads the observation earns 1 per step, a uniform one 1/3."""

    def _shown(self, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        key, draw = jax.random.split(key)
        return key, jax.nn.one_hot(jax.random.randint(draw, (), 0, 3), 3)

    def reset(self, rng: jax.Array) -> State:
        key, obs = self._shown(rng)
        return State(obs=obs, reward=jnp.zeros(()), done=jnp.zeros(()), pipeline_state=key)

    def step(self, state: State, action: jax.Array) -> State:
        reward = (jnp.argmax(state.obs) == action).astype(jnp.float32)
        key, obs = self._shown(state.pipeline_state)
        return state.replace(obs=obs, reward=reward, pipeline_state=key)

    @property
    def action_size(self) -> int:
        return 3  # the number of choices


def _network(seed: int = 0):
    return make_mlp_actor_critic(
        3, 3, (16,), (16,), rngs=nnx.Rngs(seed), action_distribution="categorical"
    )


def test_integer_actions_fit_an_action_size_that_counts_the_choices():
    env = EpisodeWrapper(_PickTheShownIndex(), 10)
    check_env_network(env, _network())  # actions [B] int32 with action_size=3: no error


def test_float_actions_of_the_wrong_shape_are_still_rejected():
    env = EpisodeWrapper(_PickTheShownIndex(), 10)
    net = make_mlp_actor_critic(3, 2, (16,), (16,), rngs=nnx.Rngs(0))  # [B, 2] floats
    with pytest.raises(ValueError, match=r"actions \(.*\) do not match"):
        check_env_network(env, net)


def test_a_categorical_policy_learns_to_pick_the_shown_index():
    env = EpisodeWrapper(_PickTheShownIndex(), 10)
    net = _network()
    config = TrainConfig(
        ppo=PPOConfig(
            n_envs=32, rollout_length=10, n_minibatches=2, learning_rate=3e-3, total_steps=8_000
        ),
        eval=EvalConfig(n_envs=32, max_episode_length=10),
    )
    history = train_ppo(env, net, config, progress=False).eval_history
    first, last = (m["eval/episode_reward/mean"] for _, m in (history[0], history[-1]))
    # A random initial policy's argmax is right about a third of the time (~3 of 10);
    # 8,000 steps (25 iterations) are enough to read the one-hot observation.
    assert first < 7
    assert last >= 9.5
