"""nnx_ppo.networks.analysis.lyapunov: the spectrum of linear maps (known analytically)
and, on a network, the identities every QR estimate obeys."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.analysis import CarryMap, lyapunov_exponents
from nnx_ppo.networks.containers import Sequential
from nnx_ppo.networks.delay import Delay
from nnx_ppo.networks.factories import make_lstm_actor_critic
from nnx_ppo.networks.feedforward import Dense
from nnx_ppo.networks.sampling_layers import NormalTanhSampler

# W = V diag(lambda) V^-1 with real eigenvalues of distinct moduli 1.25 > 0.8 > 0.5 > 0.2
# (one negative), V a random well-conditioned matrix, so W is not normal. The tangent
# product W^T Q0 converges to W's Schur basis at rate (0.8 / 1.25)^t: after the 50
# uncounted warm-up steps (2e-10) every counted step adds log |lambda_i| exactly, up to
# float32 rounding (~1e-7 a step), so the estimate equals log |lambda| to well below
# 1e-4 in float32.
EIGENVALUES = np.array([1.25, -0.8, 0.5, 0.2])
EXPECTED = np.log(np.abs(EIGENVALUES))  # already decreasing


def _linear_rnn() -> tuple[jax.Array, jax.Array]:
    rng = np.random.default_rng(0)
    v = np.eye(4) + 0.3 * rng.normal(size=(4, 4))
    w = v @ np.diag(EIGENVALUES) @ np.linalg.inv(v)
    u = rng.normal(size=(4, 1))
    return jnp.asarray(w, jnp.float32), jnp.asarray(u, jnp.float32)


def test_a_linear_rnn_has_the_log_moduli_of_its_eigenvalues() -> None:
    w, u = _linear_rnn()
    h0 = jnp.array([1.0, -0.5, 0.3, 2.0])
    # Autonomous h' = W h: 200 steps counted after 50 of warm-up.
    free = lyapunov_exponents(lambda h: w @ h, h0, steps=250, warmup=50)
    np.testing.assert_allclose(free.exponents, EXPECTED, atol=1e-4)
    assert free.steps == 200 and free.running.shape == (200, 4)
    np.testing.assert_allclose(free.largest, np.log(1.25), atol=1e-4)
    # Driven h' = W h + U x_t: the Jacobian is still W, so are the exponents; two
    # trajectories at once (inputs [T, B, 1]), and only the top 2.
    xs = jax.random.normal(jax.random.key(1), (250, 2, 1))
    driven = lyapunov_exponents(
        lambda h, x: w @ h + u @ x, jnp.stack([h0, -h0]), xs, n_exponents=2, warmup=50
    )
    assert driven.exponents.shape == (2, 2) and driven.running.shape == (200, 2, 2)
    np.testing.assert_allclose(driven.exponents, np.stack([EXPECTED[:2]] * 2), atol=1e-4)
    # Without warm-up the start-up transient is still in the average: O(1 / T).
    cold = lyapunov_exponents(lambda h: w @ h, h0, steps=250)
    assert 1e-4 < np.abs(cold.exponents - EXPECTED).max() < 0.05


def test_a_network_spectrum_obeys_the_determinant_identity() -> None:
    # With all N exponents and no warm-up, sum_i log |R_ii| over a step is
    # log |det(J_t Q)| = log |det J_t| (Q orthonormal), so the sum of the exponents is
    # the mean of log |det J_t| along the trajectory: exact, whatever the network.
    net = make_lstm_actor_critic(3, 1, lstm_size=4, rngs=nnx.Rngs(0))
    F = CarryMap(net, 3, obs=jnp.zeros(3))
    obs = 2.0 * jax.random.normal(jax.random.key(2), (30, 3))
    h0 = jax.random.normal(jax.random.key(3), (F.size,))
    driven = lyapunov_exponents(F.step, h0, obs)
    states = F.rollout(obs[:, None], h0[None])[:, 0]  # [T, N]: the states after each step
    before = jnp.concatenate([h0[None], states[:-1]])  # the states each step starts from
    jacobians = jax.jit(jax.vmap(jax.jacfwd(F.step)))(before, obs)
    log_det = np.linalg.slogdet(np.asarray(jacobians, np.float64))[1]
    np.testing.assert_allclose(driven.exponents.sum(), log_det.mean(), rtol=1e-4)
    # The same trajectory recorded: linearising at its states gives the same estimates.
    recorded = lyapunov_exponents(F.step, h0, obs, states=before)
    np.testing.assert_allclose(recorded.running, driven.running, rtol=1e-4, atol=1e-5)
    # CarryMap.step at the map's own observation is the map; one observation per state.
    step = jax.jit(F.step)  # jitted: an eager policy step dispatches op by op
    np.testing.assert_allclose(step(h0, jnp.zeros(3)), F(h0), atol=1e-6)
    pair = jnp.stack([h0, -h0])
    batched = step(pair, jnp.stack([obs[0], obs[0]]))
    np.testing.assert_allclose(batched[1], step(-h0, obs[0]), atol=1e-6)
    with pytest.raises(ValueError, match=r"an observation leaf has shape \(3, 3\)"):
        step(pair, jnp.zeros((3, 3)))


def test_a_delay_line_forgets_everything_in_its_length() -> None:
    # A Delay of 2 steps holds [x_{t-2}, x_{t-1}] (its canonical buffer, 6 units): a
    # step shifts the buffer and writes the observation, so the Jacobian is a shift,
    # J^2 = 0, and every perturbation is gone after two steps: all exponents are -inf.
    rngs = nnx.Rngs(1)
    line = Sequential([Delay(jnp.zeros(3), 2), Dense(3, 2, rngs=rngs), NormalTanhSampler(rngs)])
    F = CarryMap(PPOAdapter(action=line, value=Dense(3, 1, rngs=rngs)), 3, obs=jnp.ones(3))
    spectrum = lyapunov_exponents(F, F.initial_state(), steps=4)
    assert F.size == 6 and np.isneginf(spectrum.exponents).all()


@pytest.mark.parametrize(
    ("state", "options", "match"),
    [
        (np.zeros((1, 2, 3)), {"steps": 5}, r"state must be \[N\] or \[B, N\]"),
        (np.zeros(3), {}, "steps .* is required"),
        (np.zeros(3), {"steps": 5, "warmup": 5}, r"warmup=5 must be an int in \[0, 4\]"),
        (np.zeros(3), {"steps": 5, "n_exponents": 4}, r"n_exponents=4 .* \[1, 3\]"),
        (np.zeros(3), {"inputs": np.zeros((6, 1)), "steps": 5}, "inputs has 6 steps"),
        (np.zeros((2, 3)), {"inputs": np.zeros((6, 3, 1))}, r"\[T, B, \.\.\.\] .* \(6, 3, 1\)"),
        (np.zeros(3), {"states": np.zeros((6, 4))}, r"states must be \[T, \*state.shape\]"),
    ],
)
def test_bad_arguments(state: np.ndarray, options: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        lyapunov_exponents(lambda h, *x: h, state, **options)
