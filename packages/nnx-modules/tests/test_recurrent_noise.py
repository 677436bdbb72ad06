"""Recurrent noise (`CTRNN`/`LowRankRNN` with ``sigma_rec``): the published scaling,
exact replay and the noise-free paths.

The carry properties, export (noise-free, keys left out), recording and the carry map
of the noisy cells are checked with the other cells (test_properties.py,
test_recurrent_cell.py, test_analysis.py).
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
from nnx_ppo.networks.feedforward import Dense
from nnx_ppo.networks.low_rank import LowRankRNN
from nnx_ppo.networks.recurrent import CTRNN
from nnx_ppo.networks.recurrent_noise import split_keys
from nnx_ppo.networks.sampling_layers import NormalTanhSampler
from nnx_ppo.networks.types import reset_where

_TAU = [1.0, 2.0, 4.0, 8.0]
_DT = 0.5


def test_the_noise_has_the_published_variance() -> None:
    # With no input, W = 0 and b = 0, f(0) = 0 and each unit is the discrete OU process
    #   h' = (1 - a) h + sqrt(2 a) sigma xi,     a = dt / tau = [0.5, 0.25, 0.125, 0.0625].
    # From h = 0 one step has variance 2 a sigma^2 (Song, Yang & Wang 2016's increment);
    # the stationary variance solves v = (1 - a)^2 v + 2 a sigma^2: v = sigma^2 / (1 - a/2).
    sigma, n_envs, steps = 0.3, 4000, 160
    zeros = nnx.initializers.zeros_init()
    cell = CTRNN(
        2, 4, dt=_DT, tau=_TAU, sigma_rec=sigma, rngs=nnx.Rngs(0),
        kernel_init=zeros, recurrent_kernel_init=zeros,
    )  # fmt: skip
    a = _DT / np.asarray(_TAU)
    xs = jnp.zeros((steps, n_envs, 2))
    _, out = jax.jit(lambda s: cell.replay_sequence(s, xs, None, jnp.zeros((steps, n_envs), bool)))(
        cell.initialize_state(n_envs)
    )
    h = np.asarray(out.output, np.float64)  # [T, B, 4]
    # The sampling error of a variance over n draws is sqrt(2 / n) ~ 2.2 % here.
    np.testing.assert_allclose(h[0].var(0), 2 * a * sigma**2, rtol=0.08)
    np.testing.assert_allclose(h[-1].var(0), sigma**2 / (1 - a / 2), rtol=0.08)
    np.testing.assert_allclose(h[-1].mean(0), 0.0, atol=4 * sigma / np.sqrt(n_envs))
    # Environments and units draw independently: no correlation between two of them.
    assert abs(np.corrcoef(h[-1, :, 0], h[-1, :, 1])[0, 1]) < 0.06
    assert abs(np.corrcoef(h[-1, :-1, 2], h[-1, 1:, 2])[0, 1]) < 0.06


def test_noise_is_added_to_the_noise_free_step_and_off_in_eval() -> None:
    # The key is drawn after the parameters, so the noisy cell has the noise-free one's
    # weights; its step is that step plus sqrt(2 dt / tau) sigma xi, xi from the carried
    # key; eval() switches the noise off (the key is not advanced), bit for bit.
    clean = LowRankRNN(3, 4, rank=2, tau=_TAU, dt=_DT, g=0.7, rngs=nnx.Rngs(0))
    noisy = LowRankRNN(3, 4, rank=2, tau=_TAU, dt=_DT, g=0.7, sigma_rec=0.2, rngs=nnx.Rngs(0))
    assert set(clean.initialize_state(2)) == {"h"}  # no noise: no key in the carry
    state = noisy.initialize_state(2)
    assert set(state) == {"h", "key"} and state["key"].dtype == jnp.uint32
    x = jax.random.normal(jax.random.key(1), (2, 3))
    want = clean({"h": state["h"]}, x).output
    out = noisy(state, x)
    next_keys, xi = split_keys(state["key"], (4,))
    std = 0.2 * np.sqrt(2 * _DT / np.asarray(_TAU))
    np.testing.assert_allclose(out.output, want + std * xi, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(out.next_state["key"], next_keys)
    noisy.eval()
    evaluated = noisy(state, x)
    np.testing.assert_array_equal(evaluated.output, want)
    np.testing.assert_array_equal(evaluated.next_state["key"], state["key"])


def _network(sigma_rec: float) -> Sequential:
    rngs = nnx.Rngs(0)
    return Sequential(
        [
            CTRNN(3, 6, dt=_DT, tau=2.0, learn_tau=True, sigma_rec=sigma_rec, rngs=rngs),
            LowRankRNN(6, 6, rank=1, tau=1.0, dt=_DT, g=0.5, sigma_rec=sigma_rec, rngs=rngs),
            PPOAdapter(
                action=Sequential([Dense(6, 4, rngs=rngs), NormalTanhSampler(rngs)]),
                value=Dense(6, 1, rngs=rngs),
            ),
        ]
    )


def test_noisy_rollout_replays_exactly(testing_modules: Any) -> None:
    # A rollout with resets, replayed step by step (the PPO ratio) and as a sequence
    # (replay_sequence) from the stored carry: the same noise, so ratio == 1 and the
    # same log-likelihoods, values and final carry (the noise itself: the test above).
    # A reset gives an environment a fresh stream.
    T, B = 8, 3
    net = _network(sigma_rec=0.5)
    graphdef, params = nnx.split(net)
    carry0 = net.initialize_state(B)
    obs = jax.random.normal(jax.random.key(2), (T, B, 3))
    done = np.zeros((T, B), bool)
    done[2, 0] = done[5, 1] = True
    done = jnp.asarray(done)
    _, outputs = jax.jit(testing_modules.collect, static_argnums=0)(
        graphdef, params, carry0, obs, done
    )
    extras, loglik = outputs.rollout_extras, outputs.output.loglikelihoods

    def replays(params: Any) -> Any:
        model = nnx.merge(graphdef, params)

        def step(carry: Any, inputs: Any) -> Any:
            obs_t, done_t, extras_t = inputs
            out = model(carry, obs_t, extras_t)
            record = (out.output.loglikelihoods, out.output.value_estimates)
            return reset_where(model, done_t, out.next_state), record

        final, stepwise = jax.lax.scan(step, carry0, (obs, done, extras))
        seq_final, seq = model.replay_sequence(carry0, obs, extras, done)
        return (final, stepwise), (seq_final, seq.output)

    (final, (ll, values)), (seq_final, seq) = jax.jit(replays)(params)
    np.testing.assert_allclose(jnp.exp(ll - loglik), 1.0, rtol=1e-5)
    np.testing.assert_allclose(seq.loglikelihoods, ll, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(seq.value_estimates, values, rtol=1e-5, atol=1e-6)
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), seq_final, final
    )
    np.testing.assert_allclose(outputs.output.value_estimates, values, rtol=1e-5, atol=1e-6)
    reset_keys = net.reset_state(final)[0]["key"]
    assert not np.array_equal(reset_keys, final[0]["key"])


@pytest.mark.parametrize(
    ("sigma", "error", "match"),
    [(-0.1, ValueError, "sigma_rec must be finite and >= 0"), ("0.1", TypeError, "a number")],
)
def test_a_bad_noise_level_is_named(sigma: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        CTRNN(3, 4, tau=2.0, sigma_rec=sigma, rngs=nnx.Rngs(0))
