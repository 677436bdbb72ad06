"""Evaluation: one episode per environment, deterministic mode, dict rewards."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from nnx_ppo.envs import PointMass
from nnx_ppo.networks.factories import make_mlp_actor_critic
from nnx_ppo.wrappers import EpisodeWrapper


class _ConstantReward(PointMass):
    """PointMass with reward 1 per step: an episode's return is its length."""

    def step(self, state, action):
        return super().step(state, action).replace(reward=jnp.ones((), jnp.float32))


@pytest.mark.parametrize(("max_length", "expected"), [(10, 7.0), (5, 5.0)])
def test_evaluation_counts_one_episode_per_env(max_length, expected):
    from nnx_ppo.algorithms.observe.evaluation import evaluate

    # Episodes end after 7 steps; rewards after the end are masked, and an episode still
    # running at max_length is cut there.
    env = EpisodeWrapper(_ConstantReward(), episode_length=7)
    net = make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0))
    metrics = evaluate(env, net, jax.random.PRNGKey(0), n_envs=3, max_episode_length=max_length)
    assert metrics["eval/episode_reward/mean"] == expected
    assert metrics["eval/episode_reward/std"] == 0.0
    assert metrics["eval/episode_length/mean"] == expected


def test_evaluation_is_deterministic_in_eval_mode_and_restores_train_mode():
    from nnx_ppo.algorithms.observe.evaluation import evaluate

    env = EpisodeWrapper(PointMass(), episode_length=10)
    net = make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0))
    sampler = net.layers[-1].action.layers[-1]
    key = jax.random.PRNGKey(3)
    kwargs = dict(n_envs=4, max_episode_length=10)
    mean_policy = evaluate(env, net, key, **kwargs)
    assert sampler.deterministic is False  # back in train mode
    # Advancing the sampler's RNG stream changes sampled actions, not the mean action.
    net(net.initialize_state(1), jnp.zeros((1, 2)))
    assert evaluate(env, net, key, **kwargs) == mean_policy
    sampled = evaluate(env, net, key, deterministic=False, **kwargs)
    assert sampled["eval/episode_reward/mean"] != mean_policy["eval/episode_reward/mean"]


def test_evaluation_compiles_once_per_env_structure_and_sizes(monkeypatch):
    from nnx_ppo.algorithms.observe import evaluation

    built = []
    make = evaluation.make_evaluator

    def counting(*args, **kwargs):
        built.append(kwargs["n_envs"])
        return make(*args, **kwargs)

    monkeypatch.setattr(evaluation, "make_evaluator", counting)
    monkeypatch.setattr(evaluation, "_EVALUATORS", type(evaluation._EVALUATORS)())
    env = EpisodeWrapper(PointMass(), episode_length=10)
    nets = [make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(i)) for i in range(2)]
    key = jax.random.PRNGKey(3)
    first, second = (
        evaluation.evaluate(env, net, key, n_envs=4, max_episode_length=10) for net in nets
    )
    assert built == [4]  # two networks of one structure: one evaluator
    assert first != second  # ... that reads each network's own parameters
    evaluation.evaluate(env, nets[0], key, n_envs=3, max_episode_length=10)
    evaluation.evaluate(
        EpisodeWrapper(PointMass(), episode_length=10),
        nets[0],
        key,
        n_envs=4,
        max_episode_length=10,
    )
    assert built == [4, 3, 4]  # another size, another environment object: new ones
    # A cached evaluation equals a freshly built one.
    evaluation._EVALUATORS.clear()
    assert evaluation.evaluate(env, nets[1], key, n_envs=4, max_episode_length=10) == second
