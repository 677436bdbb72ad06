"""The trainer's developer benchmarks (`nnx_ppo_benchmarks.trainer`), tiny."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx
from nnx_ppo_benchmarks.settings import PPOSettings, RunSpec
from nnx_ppo_benchmarks.trainer.ab import ScannedReplay, compare

from nnx_ppo.algorithms.core.rollout import replay, reset_envs, unroll_env
from nnx_ppo.envs import PointMass
from nnx_ppo.networks.factories import make_lstm_actor_critic
from nnx_ppo.wrappers import EpisodeWrapper


@pytest.mark.parametrize(
    ("comparison", "network"),
    [
        ("advantages", "mlp_small"),
        pytest.param("replay", "encoder_lstm", marks=pytest.mark.extended),
    ],
)
def test_ab_compares_two_variants_of_our_trainer(comparison, network):
    spec = RunSpec(
        implementation="ours",
        network=network,
        total_steps=160,
        n_chunks=1,
        ppo=PPOSettings(n_envs=8, rollout_length=4, n_minibatches=2, n_epochs=1),
    )
    result = compare(comparison, spec, reps=2, warmup=1)
    assert len(result["variants"]) == 2
    assert all(v["median_ms"] > 0 for v in result["variants"].values())
    ratio = result["ratio_a_over_b"]
    assert 0 < ratio["min"] <= ratio["median"] <= ratio["max"]


def test_scanned_replay_replays_as_the_network_does():
    # ab.py's variant A: the same network replayed as one scan over time. Episodes of 3
    # steps in a rollout of 7 exercise the carry resets; the replay reproduces the
    # rollout's log-likelihoods and values either way.
    env = EpisodeWrapper(PointMass(), episode_length=3)
    net = make_lstm_actor_critic(2, 2, 8, (8,), (8,), rngs=nnx.Rngs(0))
    first = reset_envs(env, jax.random.PRNGKey(0), 4)
    _, _, rollout = unroll_env(env, net, first, net.initialize_state(4), 7, reset_state=first)
    tr = rollout.transitions
    for network in (net, ScannedReplay(net)):
        graphdef, params, rest = nnx.split(network, nnx.Param, ...)
        out = replay(graphdef, params, rest, rollout.initial_carry, tr)
        np.testing.assert_allclose(out.log_likelihood, tr.log_likelihood, atol=1e-5)
        np.testing.assert_allclose(out.value, tr.value, atol=1e-5)
