"""Value-target normalisation (``PPOConfig(normalize_values=True)``)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from _train_test_helpers import ONE_MINIBATCH, one_iteration
from flax import nnx

from nnx_ppo.algorithms.config import LogLevel, PPOConfig
from nnx_ppo.algorithms.ppo.value_normalization import (
    ValueStatistics,
    denormalize,
    initial_value_statistics,
    normalize,
    update,
)
from nnx_ppo.envs import PointMass, TwoAgentEnv
from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.containers import Sequential
from nnx_ppo.networks.factories import make_mlp_actor_critic
from nnx_ppo.networks.feedforward import MLP
from nnx_ppo.networks.sampling_layers import NormalTanhSampler
from nnx_ppo.networks.utils import Map
from nnx_ppo.wrappers import EpisodeWrapper


def test_update_merges_moments_like_the_pooled_data():
    # Head "a": [1, 2, 3, 4] then [10, 10]. After the first batch: n = 4, mean = 2.5,
    # variance = ((1.5^2 + 0.5^2) * 2) / 4 = 1.25. After both, the pooled data
    # {1, 2, 3, 4, 10, 10}: mean 30 / 6 = 5, squared deviations 16 + 9 + 4 + 1 + 25 + 25
    # = 80, variance 80 / 6. Head "b" gets constants: variance 0, std floored at 1e-4.
    stats = initial_value_statistics({"a": 0.0, "b": 0.0})
    stats = update(stats, {"a": jnp.array([[1.0, 2.0], [3.0, 4.0]]), "b": jnp.full((2, 2), 7.0)})
    np.testing.assert_allclose(
        [stats["a"].count, stats["a"].mean, stats["a"].variance], [4.0, 2.5, 1.25]
    )
    stats = update(stats, {"a": jnp.array([[10.0], [10.0]]), "b": jnp.full((2, 1), 7.0)})
    np.testing.assert_allclose(
        [stats["a"].count, stats["a"].mean, stats["a"].variance], [6.0, 5.0, 80.0 / 6.0], rtol=1e-6
    )
    np.testing.assert_allclose([stats["b"].mean, stats["b"].variance], [7.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(stats["b"].std, 1e-4, rtol=1e-6)


def test_statistics_start_as_the_identity_and_normalize_inverts_denormalize():
    stats = initial_value_statistics({"a": 0.0, "b": 0.0})
    x = {"a": jnp.array([[1.0, -2.0]]), "b": jnp.array([[3.0, 0.5]])}
    for name in ("a", "b"):
        np.testing.assert_array_equal(normalize(stats, x)[name], x[name])
    stats = update(stats, {"a": jnp.array([[1.0, 5.0]]), "b": jnp.array([[-4.0, 8.0]])})
    back = denormalize(stats, normalize(stats, x))
    for name in ("a", "b"):
        np.testing.assert_allclose(back[name], x[name], rtol=1e-6)
    # mean + std * v: head "a" has mean 3, std 2.
    np.testing.assert_allclose(denormalize(stats, {"a": 1.0, "b": 0.0})["a"], 5.0)
    assert denormalize(stats, None) is None


def test_mismatched_value_tree_is_a_clear_error():
    stats = initial_value_statistics({"a": 0.0, "b": 0.0})
    with pytest.raises(ValueError, match="2 value heads but the values have 1 leaves"):
        normalize(stats, jnp.zeros((3, 2)))


def test_config_checks_normalize_values():
    with pytest.raises(TypeError, match="normalize_values"):
        PPOConfig(normalize_values="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"normalize_values=True.*advantage_estimation='rollout'"):
        PPOConfig(normalize_values=True, advantage_estimation="minibatch")


def test_first_iteration_keeps_the_advantages_and_standardises_the_targets():
    # Before any update the statistics are the identity, so the advantages (from the
    # critic's outputs mapped back) are those of the plain run; the statistics then take
    # in this iteration's targets, so the standardised targets the critic fits have mean
    # 0, and the statistics' mean is the plain run's mean target (one minibatch of all
    # environments, one epoch: the metrics are over the whole rollout).
    env = EpisodeWrapper(PointMass(), episode_length=3)
    base = dict(ONE_MINIBATCH, log_level=LogLevel.ACTOR | LogLevel.CRITIC)
    runs = {
        flag: one_iteration(
            env,
            make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0)),
            PPOConfig(**base, normalize_values=flag),
        )
        for flag in (False, True)
    }
    (plain_state, plain), (state, normalized) = runs[False], runs[True]
    assert plain_state.value_stats is None
    for name in ("actor/advantage_mean", "actor/advantage_std"):
        np.testing.assert_allclose(normalized[name], plain[name], rtol=1e-6)
    np.testing.assert_allclose(normalized["critic/target_mean"], 0.0, atol=1e-6)
    stats = state.value_stats
    assert isinstance(stats, ValueStatistics)
    assert float(stats.count) == 4 * 8
    np.testing.assert_allclose(stats.mean, plain["critic/target_mean"], rtol=1e-5)


def test_one_set_of_statistics_per_value_head_of_a_dict_reward():
    agents = ("agent_a", "agent_b")
    rngs = nnx.Rngs(0)
    net = PPOAdapter(
        action=Map(
            {k: Sequential([MLP(4, (8,), 4, rngs=rngs), NormalTanhSampler(rngs)]) for k in agents}
        ),
        value=Map({k: MLP(4, (8,), 1, rngs=rngs) for k in agents}),
    )
    env = EpisodeWrapper(TwoAgentEnv(), episode_length=4)
    config = PPOConfig(n_envs=4, rollout_length=4, n_minibatches=2, normalize_values=True)
    state, metrics = one_iteration(env, net, config)
    assert set(state.value_stats) == set(agents)
    for name in agents:
        assert float(state.value_stats[name].count) == 16
        assert np.isfinite(float(state.value_stats[name].variance))
    assert np.isfinite(float(metrics["loss/total"]))
