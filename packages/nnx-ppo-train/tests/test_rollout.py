"""Rollout collection: carry resets in lockstep, auto-reset modes, truncation bootstrap."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.algorithms.core.rollout import replay, reset_envs, unroll_env
from nnx_ppo.envs import PointMass, State
from nnx_ppo.networks.types import PPONetworkOutput, StatefulModule, StatefulModuleOutput
from nnx_ppo.wrappers import EpisodeWrapper


class CounterEnv:
    """obs = steps since the episode started; terminates after a random horizon in 2..5.

    The horizon is drawn at reset, so cached resets repeat it and fresh resets redraw it.
    Reward 1 per step, so an episode's return equals its length.
    """

    action_size = 1
    observation_size = 1

    def __init__(self):
        self.reset_traces = 0

    def reset(self, rng):
        self.reset_traces += 1  # counts traces (and eager calls), not executions
        horizon = jax.random.randint(rng, (), 2, 6)
        zero = jnp.zeros((), jnp.float32)
        return State(
            obs=jnp.zeros((1,), jnp.float32),
            reward=zero,
            done=zero,
            pipeline_state={"count": jnp.zeros((), jnp.int32), "horizon": horizon},
        )

    def step(self, state, action):
        del action
        count = state.pipeline_state["count"] + 1
        done = (count >= state.pipeline_state["horizon"]).astype(jnp.float32)
        return state.replace(
            obs=count.astype(jnp.float32)[None],
            reward=jnp.ones((), jnp.float32),
            done=done,
            pipeline_state={**state.pipeline_state, "count": count},
        )


class CounterNet(StatefulModule):
    """Carry = steps since the carry was last reset. Emits it as extras and log-likelihood.

    The value estimate is 10 * obs, so the value of an observation is known exactly.
    """

    def __init__(self, action_size=1):
        self.action_size = action_size

    def initialize_state(self, batch_size):
        return {"n": jnp.zeros((batch_size,), jnp.float32)}

    def __call__(self, state, x, rollout_extras=None):
        n = state["n"]
        return StatefulModuleOutput(
            next_state={"n": n + 1},
            output=PPONetworkOutput(
                actions=jnp.zeros((n.shape[0], self.action_size)),
                loglikelihoods=n,
                value_estimates=10.0 * x[:, 0],
            ),
            regularization_loss=jnp.zeros(()),
            metrics={},
            rollout_extras=n,
        )


def _rollout(env, n_envs=6, length=12, *, fresh=False, seed=0, **kwargs):
    net = CounterNet()
    first = reset_envs(env, jax.random.PRNGKey(seed), n_envs)
    kwargs = dict(kwargs)
    if fresh:
        kwargs["key"] = jax.random.PRNGKey(seed + 1)
    else:
        kwargs["reset_state"] = first
    return net, unroll_env(env, net, first, net.initialize_state(n_envs), length, **kwargs)


@pytest.mark.parametrize("fresh", [False, True])
def test_carry_resets_in_lockstep_with_env_resets(fresh):
    # Episodes end by termination (horizon 2..5) or by truncation (EpisodeWrapper at 4).
    env = EpisodeWrapper(CounterEnv(), episode_length=4)
    net, (_, _, rollout) = _rollout(env, fresh=fresh)
    tr = rollout.transitions
    assert bool(tr.done.any()) and bool(tr.truncation.any())
    assert bool((tr.done & ~tr.truncation).any())  # some terminations too
    # At every step the network's counter equals the env's step counter.
    np.testing.assert_array_equal(tr.rollout_extras, tr.obs[..., 0])
    # The replay (from the stored initial carry, resetting where done) agrees as well.
    graphdef, params, rest = nnx.split(net, nnx.Param, ...)
    out = replay(graphdef, params, rest, rollout.initial_carry, tr)
    np.testing.assert_array_equal(out.log_likelihood, tr.obs[..., 0])
    # Rewards are 1 per step, so the mean finished-episode return equals its length.
    assert float(rollout.metrics["rollout/episode_reward"]) == pytest.approx(
        float(rollout.metrics["rollout/episode_length"])
    )
    assert float(rollout.metrics["rollout/episodes"]) == float(tr.done.sum())


def test_truncation_bootstraps_from_the_pre_reset_observation():
    # Horizons are >= 2; truncating at 2 means every episode ends at step 2 with the
    # final observation count = 2 (value 10 * 2 = 20), while the stored next
    # observation is the reset one (count 0).
    env = EpisodeWrapper(CounterEnv(), episode_length=2)
    _, (_, _, rollout) = _rollout(env, length=5)
    tr = rollout.transitions
    # Every env's episodes end at steps 1 and 3 (0-based) by truncation or termination.
    np.testing.assert_array_equal(tr.done[:, 0], [False, True, False, True, False])
    trunc = np.asarray(tr.truncation)
    assert trunc.any()
    np.testing.assert_array_equal(np.asarray(tr.final_value)[trunc], 20.0)
    np.testing.assert_array_equal(np.asarray(tr.final_value)[~trunc], 0.0)
    # The bootstrap value is that of the observation after the last step (count 1).
    np.testing.assert_array_equal(rollout.bootstrap_value, 10.0)


def test_without_bootstrap_no_final_values_are_computed():
    env = EpisodeWrapper(CounterEnv(), episode_length=2)
    _, (_, _, rollout) = _rollout(env, length=3, bootstrap_on_truncation=False)
    assert rollout.transitions.final_value is None


def test_cached_resets_never_call_reset_in_the_loop_fresh_resets_do():
    inner = CounterEnv()
    env = EpisodeWrapper(inner, episode_length=3)
    first = reset_envs(env, jax.random.PRNGKey(0), 4)
    net = CounterNet()
    before = inner.reset_traces
    unroll_env(env, net, first, net.initialize_state(4), 7, reset_state=first)
    assert inner.reset_traces == before  # cached: not even traced
    unroll_env(env, net, first, net.initialize_state(4), 7, key=jax.random.PRNGKey(1))
    assert inner.reset_traces == before + 1  # fresh: one batched reset, traced once


def test_cached_resets_repeat_the_first_state_fresh_resets_redraw():
    env = EpisodeWrapper(PointMass(), episode_length=2)
    first = reset_envs(env, jax.random.PRNGKey(0), 3)

    def starts(**kwargs):
        net = CounterNet(action_size=2)
        _, _, rollout = unroll_env(env, net, first, net.initialize_state(3), 6, **kwargs)
        return np.asarray(rollout.transitions.obs[::2])  # episode starts: t = 0, 2, 4

    cached = starts(reset_state=first)
    np.testing.assert_array_equal(cached[1], cached[0])
    np.testing.assert_array_equal(cached[2], cached[0])
    fresh = starts(key=jax.random.PRNGKey(5))
    np.testing.assert_array_equal(fresh[0], cached[0])  # the first start is shared
    assert not np.allclose(fresh[1], fresh[0])
    assert not np.allclose(fresh[2], fresh[1])


def test_cached_resets_redraw_a_staggered_start_and_nothing_else():
    # Episodes of 6 steps starting at a draw in [0, 6): a finished environment restarts
    # from its cached state (its first observation) at a new start, so the lengths of
    # one environment's episodes vary (a repeated start would give one length).
    env = EpisodeWrapper(PointMass(), episode_length=6, stagger=6)
    n, length = 16, 40
    first = reset_envs(env, jax.random.PRNGKey(0), n)
    net = CounterNet(action_size=2)
    _, _, rollout = unroll_env(env, net, first, net.initialize_state(n), length, reset_state=first)
    done = np.asarray(rollout.transitions.done)
    obs = np.asarray(rollout.transitions.obs)
    varied = 0
    for i in range(n):
        ends = np.flatnonzero(done[:, i])
        lengths = np.diff(ends)
        assert ((lengths >= 1) & (lengths <= 6)).all()
        varied += len(set(lengths.tolist())) > 1
        for t in ends[ends + 1 < length] + 1:
            np.testing.assert_array_equal(obs[t, i], np.asarray(first.obs)[i])
    assert varied >= n - 1


def test_unroll_env_needs_a_reset_source():
    env = CounterEnv()
    first = reset_envs(env, jax.random.PRNGKey(0), 2)
    net = CounterNet()
    with pytest.raises(ValueError, match=r"reset_state=\.\.\. .* or key="):
        unroll_env(env, net, first, net.initialize_state(2), 3)


def test_non_ppo_output_is_a_clear_type_error():
    class Plain(StatefulModule):
        def __call__(self, state, x, rollout_extras=None):
            return StatefulModuleOutput(state, x, jnp.zeros(()), {}, ())

    env = CounterEnv()
    first = reset_envs(env, jax.random.PRNGKey(0), 2)
    with pytest.raises(TypeError, match="PPOAdapter"):
        unroll_env(env, Plain(), first, (), 2, reset_state=first)


def test_docstring_examples_run(docstring_examples):
    from nnx_ppo.algorithms.core import rollout

    docstring_examples(rollout)


def test_networks_without_a_carry_are_replayed_batched_and_exactly():
    from nnx_ppo.networks.factories import make_mlp_actor_critic

    env = PointMass()
    net = make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0))
    first = reset_envs(env, jax.random.PRNGKey(0), 4)
    _, _, rollout = unroll_env(env, net, first, net.initialize_state(4), 6, reset_state=first)
    tr = rollout.transitions
    # The Normalizer's extras are its raw input, the observation: the rollout stores it
    # once and hands the same array back as both.
    assert any(leaf is tr.obs for leaf in jax.tree.leaves(tr.rollout_extras))
    graphdef, params, rest = nnx.split(net, nnx.Param, ...)

    def run(p, carry, transitions):
        return replay(graphdef, p, rest, carry, transitions)

    out = run(params, rollout.initial_carry, tr)
    np.testing.assert_allclose(out.log_likelihood, tr.log_likelihood, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.value, tr.value, rtol=1e-5, atol=1e-5)
    assert out.regularization.shape == (6, 4)
    # One batched call over [T * b]: no loop over time in the replay's program ...
    assert "scan" not in str(jax.make_jaxpr(run)(params, rollout.initial_carry, tr))
    # ... while a network with a carry is scanned.
    counter = CounterNet()
    c_graphdef, c_params, c_rest = nnx.split(counter, nnx.Param, ...)
    c_tr = tr.replace(rollout_extras=jnp.zeros((6, 4)))
    jaxpr = jax.make_jaxpr(lambda c: replay(c_graphdef, c_params, c_rest, c, c_tr))(
        counter.initialize_state(4)
    )
    assert "scan" in str(jaxpr)
