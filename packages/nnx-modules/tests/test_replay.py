"""Loss replay reproduces the rollout: the property PPO's likelihood ratio relies on.

A rollout of ``T`` steps (``rollout_extras=None``) with random done masks resetting the
carry is replayed from the stored initial carry with the stored extras and the same
resets: every log-likelihood must come back to float precision, for all environments
and for a minibatch slice of them. The network holds every kind of state the library
has: normalizer statistics (extras), LSTM carries at two levels, a delay line, per-env
noise keys (variational bottleneck) and a sampler that draws from its own RNG stream.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.containers import Sequential
from nnx_ppo.networks.delay import Delay
from nnx_ppo.networks.feedforward import MLP
from nnx_ppo.networks.normalizer import Normalizer
from nnx_ppo.networks.recurrent import LSTM
from nnx_ppo.networks.sampling_layers import CategoricalSampler, NormalTanhSampler
from nnx_ppo.networks.types import reset_where
from nnx_ppo.networks.variational import VariationalBottleneck

T, B, OBS, H, L, A, N = 8, 5, 3, 6, 4, 2, 3
MINIBATCH = np.array([1, 4])


def _network(categorical: bool) -> Sequential:
    rngs = nnx.Rngs(0)
    if categorical:
        head, n_params = CategoricalSampler(rngs, entropy_weight=1e-2), N
    else:
        head, n_params = NormalTanhSampler(rngs, entropy_weight=1e-2), 2 * A
    net = Sequential(
        [
            Normalizer(OBS),
            LSTM(OBS, H, rngs=rngs),
            Delay(jnp.zeros(H), 2),
            VariationalBottleneck(H, L, rngs=rngs, kl_weight=1e-2),
            PPOAdapter(
                action=Sequential([LSTM(L, H, rngs=rngs), MLP(H, (8,), n_params, rngs=rngs), head]),
                value=MLP(L, (8,), 1, rngs=rngs),
            ),
        ]
    )
    # Non-trivial normalizer statistics (mean ~2, std ~3), set before the rollout.
    data = 2.0 + 3.0 * jax.random.normal(jax.random.key(1), (4, B, OBS))
    net.layers[0].update_statistics(data)
    return net


def _data(seed: int) -> tuple[jax.Array, jax.Array]:
    k_obs, k_done = jax.random.split(jax.random.key(seed))
    obs = jax.random.normal(k_obs, (T, B, OBS))
    done = jax.random.bernoulli(k_done, 0.25, (T, B))
    return obs, done


def _rollout(graphdef: Any, params: Any, carry0: Any, obs: jax.Array, done: jax.Array) -> Any:
    """Collect T steps; the module state (the sampler's RNG stream) is threaded through."""

    def step(loop: Any, inputs: Any) -> Any:
        params, carry = loop
        obs_t, done_t = inputs
        model = nnx.merge(graphdef, params)
        out = model(carry, obs_t)
        carry = reset_where(model, done_t, out.next_state)
        record = (out.rollout_extras, out.output.loglikelihoods, out.output.actions)
        return (nnx.state(model), carry), record

    (params, _), (extras, loglik, actions) = jax.lax.scan(step, (params, carry0), (obs, done))
    return params, extras, loglik, actions


def _replay(
    graphdef: Any, params: Any, carry0: Any, obs: jax.Array, done: jax.Array, extras: Any
) -> tuple[jax.Array, Any]:
    """Recompute the log-likelihoods from the stored carry and extras, resetting on done."""
    model = nnx.merge(graphdef, params)

    def step(carry: Any, inputs: Any) -> Any:
        obs_t, done_t, extras_t = inputs
        out = model(carry, obs_t, extras_t)
        return reset_where(model, done_t, out.next_state), (
            out.output.loglikelihoods,
            out.output.actions,
        )

    _, (loglik, actions) = jax.lax.scan(step, carry0, (obs, done, extras))
    return loglik, actions


@pytest.mark.parametrize("categorical", [False, True], ids=["normal_tanh", "categorical"])
def test_replay_reproduces_rollout_log_likelihoods(categorical: bool) -> None:
    net = _network(categorical)
    graphdef, params = nnx.split(net)
    carry0 = net.initialize_state(B)
    obs, done = _data(seed=2)
    assert 0 < int(done.sum()) < T * B  # some, not all, episodes end

    rollout = jax.jit(_rollout, static_argnums=0)
    replay = jax.jit(_replay, static_argnums=0)
    new_params, extras, loglik, actions = rollout(graphdef, params, carry0, obs, done)
    assert loglik.shape == (T, B)
    assert np.all(np.isfinite(loglik))

    # Replay over every environment, from the stored initial carry (the parameters are
    # those of the rollout: the stream count is irrelevant to replay).
    replayed, replayed_actions = replay(graphdef, params, carry0, obs, done, extras)
    np.testing.assert_allclose(replayed, loglik, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(replayed_actions, actions)
    replayed_later, _ = replay(graphdef, new_params, carry0, obs, done, extras)
    np.testing.assert_allclose(replayed_later, loglik, rtol=1e-6, atol=1e-6)

    # A minibatch of whole environment sequences: slice the batch axis of everything.
    take = lambda tree, axis: jax.tree.map(lambda x: jnp.take(x, MINIBATCH, axis=axis), tree)
    mini, _ = replay(
        graphdef, params, take(carry0, 0), take(obs, 1), take(done, 1), take(extras, 1)
    )
    np.testing.assert_allclose(mini, loglik[:, MINIBATCH], rtol=1e-6, atol=1e-6)

    # The comparison can fail: forgetting the resets changes the replayed likelihoods
    # after the first done (memory, delay line and noise keys all carry over) ...
    no_resets, _ = replay(graphdef, params, carry0, obs, jnp.zeros_like(done), extras)
    first_done = int(np.argmax(np.asarray(done).any(axis=1)))
    assert first_done + 1 < T
    assert not np.allclose(no_resets[first_done + 1 :], loglik[first_done + 1 :], atol=1e-4)
    np.testing.assert_allclose(
        no_resets[: first_done + 1], loglik[: first_done + 1], rtol=1e-6, atol=1e-6
    )
    # ... and a second rollout (fresh sampler draws) takes different actions.
    _, _, _, actions2 = rollout(graphdef, new_params, carry0, obs, done)
    assert not np.array_equal(actions2, actions)


def test_replayed_log_likelihood_is_differentiable_and_ratio_is_one() -> None:
    # The PPO ratio exp(replayed - stored) is exactly 1 before any update and its
    # gradient with respect to the parameters is finite and non-zero.
    net = _network(categorical=False)
    graphdef, params = nnx.split(net)
    carry0 = net.initialize_state(B)
    obs, done = _data(seed=3)
    _, extras, loglik, _ = jax.jit(_rollout, static_argnums=0)(graphdef, params, carry0, obs, done)
    trainable, rest = nnx.split_state(params, nnx.Param, ...)

    def ratio_sum(trainable: Any) -> jax.Array:
        merged = nnx.merge_state(trainable, rest)
        replayed, _ = _replay(graphdef, merged, carry0, obs, done, extras)
        return jnp.sum(jnp.exp(replayed - loglik))

    value, grads = jax.jit(jax.value_and_grad(ratio_sum))(trainable)
    np.testing.assert_allclose(value, T * B, rtol=1e-5)
    leaves = jax.tree.leaves(grads)
    assert all(np.all(np.isfinite(g)) for g in leaves)
    assert any(np.any(g != 0) for g in leaves)
