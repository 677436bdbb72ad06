"""record_activations_rollout: [T, B, ...] activations of one episode per environment."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.algorithms.observe.activations import record_activations_rollout
from nnx_ppo.algorithms.rollout import record_activations_rollout as reexported  # 0.3.0 path
from nnx_ppo.envs.base import Env, State
from nnx_ppo.networks.factories import make_lstm_actor_critic, make_mlp_actor_critic
from nnx_ppo.networks.recording import is_recording, with_recording


class _Countdown(Env):
    """Observation ``[t, limit]``; the episode ends at the step reaching ``t = limit``,
    with ``limit`` in 2..5 drawn at reset."""

    def reset(self, rng: jax.Array) -> State:
        limit = jax.random.randint(rng, (), 2, 6).astype(jnp.float32)
        return State(obs=jnp.stack([0.0, limit]), reward=jnp.zeros(()), done=jnp.zeros(()))

    def step(self, state: State, action: jax.Array) -> State:
        del action
        t = state.obs[0] + 1.0
        done = (t >= state.obs[1]).astype(jnp.float32)
        return State(obs=jnp.stack([t, state.obs[1]]), reward=jnp.zeros(()), done=done)

    @property
    def action_size(self) -> int:
        return 1


def test_same_function_under_the_nnx_ppo_import_path():
    assert reexported is record_activations_rollout


def test_dones_mark_the_steps_after_each_episode_ended():
    env = _Countdown()
    net = make_mlp_actor_critic(2, 1, (4,), (4,), rngs=nnx.Rngs(0))
    T, B = 7, 4
    acts, dones = record_activations_rollout(env, net, B, T, jax.random.key(3))
    limits = np.asarray(jax.vmap(env.reset)(jax.random.split(jax.random.key(3), B)).obs[:, 1])
    assert len(set(limits.tolist())) > 1  # the envs end at different steps
    # Step t's episode ended before it iff an earlier step reached the limit: t >= limit.
    expected = np.arange(T)[:, None] >= limits[None, :]
    np.testing.assert_array_equal(dones, expected)
    assert dones.dtype == bool
    # The normalizer's activation is its (identity-normalized) input: [t, limit].
    np.testing.assert_allclose(acts[0][:, :, 0], np.broadcast_to(np.arange(T)[:, None], (T, B)))
    np.testing.assert_allclose(acts[0][:, :, 1], np.broadcast_to(limits, (T, B)))


def test_lstm_activations_equal_a_step_by_step_eval_rollout():
    env = _Countdown()
    net = make_lstm_actor_critic(2, 1, 5, (4,), (4,), rngs=nnx.Rngs(0))
    T, B = 5, 3
    acts, _, obs = record_activations_rollout(env, net, B, T, jax.random.key(0),
                                              return_observations=True)  # fmt: skip
    assert acts[1]["action"][0].shape == (T, B, 5)
    assert obs.shape == (T, B, 2)
    assert acts[1]["action"][1][0].shape == (T, B, 4)  # the actor head's hidden layer
    assert acts[1]["value"][1][1].shape == (T, B, 1)

    reference = nnx.clone(net)
    reference.eval()
    env_state = jax.vmap(env.reset)(jax.random.split(jax.random.key(0), B))
    carry = reference.initialize_state(B)
    for t in range(T):
        np.testing.assert_array_equal(obs[t], env_state.obs)  # what the network was fed
        out = reference(carry, env_state.obs)
        carry = out.next_state
        np.testing.assert_allclose(acts[1]["action"][0][t], carry[1]["action"][0]["h"], atol=1e-6)
        np.testing.assert_allclose(acts[1]["value"][0][t], carry[1]["value"][0]["h"], atol=1e-6)
        env_state = jax.vmap(env.step)(env_state, out.output.actions)


def test_the_network_is_left_as_it_was():
    net = make_mlp_actor_critic(2, 1, (4,), (4,), rngs=nnx.Rngs(0))
    before = nnx.graphdef(net)
    record_activations_rollout(_Countdown(), net, 2, 3, jax.random.key(0))
    assert nnx.graphdef(net) == before  # still training mode, nothing wrapped
    assert not is_recording(net)
    # A network that is already recording is used as it is (no warning, no re-wrap).
    recording = with_recording(net)
    acts, _ = record_activations_rollout(_Countdown(), recording, 2, 3, jax.random.key(0))
    assert acts[1]["value"][0].shape == (3, 2, 4)
    assert not recording.layers[1].action.layers[1].wrapped.deterministic  # not put in eval()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"n_envs": 0}, ValueError, "n_envs must be >= 1, got 0"),
        ({"max_episode_length": 0}, ValueError, "max_episode_length must be >= 1, got 0"),
        ({"max_episode_length": -3}, ValueError, "max_episode_length must be >= 1"),
        ({"n_envs": 2.0}, TypeError, "n_envs must be an int"),
        ({"n_envs": True}, TypeError, "n_envs must be an int"),
        ({"return_observations": 1}, TypeError, "return_observations must be a bool"),
    ],
)
def test_bad_counts_are_rejected(kwargs, error, match):
    net = make_mlp_actor_critic(2, 1, (4,), (4,), rngs=nnx.Rngs(0))
    args = {"n_envs": 2, "max_episode_length": 3, **kwargs}
    with pytest.raises(error, match=match):
        record_activations_rollout(_Countdown(), net, key=jax.random.key(0), **args)
