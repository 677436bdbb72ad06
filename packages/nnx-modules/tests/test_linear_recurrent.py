"""`MinGRU` and `LRU` against numpy references, the LRU's initialisation, and errors.

The contract every cell passes (replay == step with random resets, carry properties,
export parity, recording, fixed points) is checked with the other cells, in
test_recurrent.py, test_properties.py, test_replay.py, test_export.py,
test_recording.py and test_analysis.py.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.networks.linear_recurrent import LRU, LinearRecurrentCell, MinGRU


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-v))


def _random_bias(key: jax.Array, shape: tuple[int, ...], dtype: Any = jnp.float32) -> jax.Array:
    return jax.random.normal(key, shape, dtype)


def _inputs(steps: int = 4, batch: int = 3, features: int = 3) -> np.ndarray:
    return np.asarray(jax.random.normal(jax.random.key(1), (steps, batch, features)))


@pytest.mark.parametrize("activation", [None, "tanh"])
def test_mingru_matches_numpy_reference(activation: str | None) -> None:
    # z = sigmoid(x W_z + b_z), h~ = [tanh](x W_h + b_h), h' = (1 - z) h + z h~.
    cell = MinGRU(3, 2, rngs=nnx.Rngs(0), bias_init=_random_bias, activation=activation)
    kernel = np.asarray(cell.input_proj.kernel[...], np.float64)
    bias = np.asarray(cell.input_proj.bias[...], np.float64)
    state, h = cell.initialize_state(3), np.zeros((3, 2))
    for x in _inputs():
        pre = x @ kernel + bias
        z, candidate = _sigmoid(pre[:, :2]), pre[:, 2:]
        candidate = np.tanh(candidate) if activation else candidate
        h = (1.0 - z) * h + z * candidate
        out = cell(state, jnp.asarray(x))
        state = out.next_state
        np.testing.assert_allclose(out.output, h, rtol=1e-5, atol=1e-6)
    assert np.abs(h).min() > 0


def test_lru_matches_numpy_complex_reference() -> None:
    # lambda = exp(-exp(nu_log) + i exp(theta_log)), h' = lambda h + exp(gamma_log) (x B),
    # y = Re(h' C) + x D, with B = B_re + i B_im and C = C_re + i C_im (complex128 here).
    cell = LRU(3, 2, rngs=nnx.Rngs(0), state_features=4, r_min=0.5, r_max=0.95)
    p = {k: np.asarray(v[...], np.float64) for k, v in nnx.to_flat_state(nnx.state(cell))}
    p = {k[0]: v for k, v in p.items()}
    lam = np.exp(-np.exp(p["nu_log"]) + 1j * np.exp(p["theta_log"]))
    b_matrix, c_matrix = p["B_re"] + 1j * p["B_im"], p["C_re"] + 1j * p["C_im"]
    np.testing.assert_allclose(cell.eigenvalues, lam, rtol=1e-6)
    state, h = cell.initialize_state(3), np.zeros((3, 4), complex)
    for x in _inputs():
        h = lam * h + np.exp(p["gamma_log"]) * (x @ b_matrix)
        y = (h @ c_matrix).real + x @ p["D"]
        out = cell(state, jnp.asarray(x))
        state = out.next_state
        np.testing.assert_allclose(out.output, y, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(state["h_re"], h.real, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(state["h_im"], h.imag, rtol=1e-5, atol=1e-6)
    assert np.abs(h.imag).min() > 0  # the phases rotated the state


def test_lru_starts_on_its_ring_with_gamma_normalisation() -> None:
    # Eigenvalues on the ring r_min <= |lambda| <= r_max, phases in [0, max_phase],
    # and gamma = sqrt(1 - |lambda|^2), which makes the stationary variance of h for a
    # white unit input gamma^2 / (1 - |lambda|^2) = 1 whatever the decay.
    cell = LRU(2, 3, rngs=nnx.Rngs(4), state_features=64, r_min=0.8, r_max=0.99, max_phase=0.5)
    modulus, phase = np.abs(cell.eigenvalues), np.angle(cell.eigenvalues)
    assert modulus.min() >= 0.8 - 1e-6 and modulus.max() <= 0.99 + 1e-6
    assert modulus.max() - modulus.min() > 0.1  # spread over the ring, not one value
    assert phase.min() >= 0.0 and phase.max() <= 0.5 + 1e-6
    gamma = np.exp(np.asarray(cell.gamma_log[...]))
    np.testing.assert_allclose(gamma**2 / (1.0 - modulus**2), 1.0, rtol=1e-4)


def test_mingru_forwards_its_keywords() -> None:
    cell = MinGRU(
        3,
        4,
        nnx.Rngs(0),
        kernel_init=nnx.initializers.constant(1.0),
        bias_init=nnx.initializers.constant(3.0),
        param_dtype=jnp.float16,
        trainable_initial_state=True,
    )
    assert bool(jnp.all(cell.input_proj.kernel[...] == 1.0))
    assert bool(jnp.all(cell.input_proj.bias[...] == 3.0))
    assert cell.input_proj.kernel[...].dtype == jnp.float16
    assert cell.initialize_state(2)["h"].dtype == jnp.float16
    assert cell.initial_state is not None and set(cell.initial_state) == {"h"}
    lru = LRU(3, 4, nnx.Rngs(0), trainable_initial_state=True, param_dtype=jnp.float16)
    assert lru.initial_state is not None and set(lru.initial_state) == {"h_re", "h_im"}
    assert lru.initialize_state(2)["h_im"].dtype == jnp.float16


class _NoCoefficients(LinearRecurrentCell):
    pass


class _BadCarry(LinearRecurrentCell):
    carry_names = ()


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (lambda: MinGRU(3, 0, nnx.Rngs(0)), ValueError, "MinGRU: hidden_features must be"),
        (lambda: MinGRU(0, 4, nnx.Rngs(0)), ValueError, "MinGRU: in_features must be"),
        (
            lambda: MinGRU(3, 4, nnx.Rngs(0), activation="gelu"),
            ValueError,
            r"activation must be one of \['relu', 'tanh'\].*got 'gelu'",
        ),
        (lambda: MinGRU(3, 4, nnx.Rngs(0), trainable_initial_state=1), TypeError, "trainable"),
        (lambda: LRU(3, 4.0, nnx.Rngs(0)), TypeError, "LRU: hidden_features must be .* float"),
        (lambda: LRU(3, 4, nnx.Rngs(0), state_features=0), ValueError, "state_features"),
        (
            lambda: LRU(3, 4, nnx.Rngs(0), r_min=0.9, r_max=0.5),
            ValueError,
            r"0 <= r_min < r_max <= 1.*r_min=0.9, r_max=0.5",
        ),
        (lambda: LRU(3, 4, nnx.Rngs(0), r_max=1.5), ValueError, "r_max=1.5"),
        (lambda: LRU(3, 4, nnx.Rngs(0), r_min="0.9"), TypeError, "r_min must be a number"),
        (lambda: LRU(3, 4, nnx.Rngs(0), max_phase=0.0), ValueError, "max_phase must be positive"),
        (lambda: LRU(3, 4, nnx.Rngs(0), max_phase=np.inf), ValueError, "max_phase must be finite"),
        (lambda: _BadCarry(3, 4), TypeError, r"_BadCarry.carry_names must be .* got \(\)"),
    ],
)
def test_construction_errors_name_the_argument(build: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        build()


def test_call_errors_name_the_problem() -> None:
    cell = LRU(3, 4, nnx.Rngs(0))
    state = cell.initialize_state(2)
    with pytest.raises(ValueError, match=r"keys \['h_im', 'h_re'\], got \['h'\]"):
        cell({"h": state["h_re"]}, jnp.ones((2, 3)))
    with pytest.raises(ValueError, match=r"in_features=3, got an input of shape \(5, 2, 4\)"):
        cell.replay_sequence(state, jnp.ones((5, 2, 4)), None, jnp.zeros((5, 2), bool))
    with pytest.raises(NotImplementedError, match="_NoCoefficients must implement"):
        bare = _NoCoefficients(3, 4)
        bare(bare.initialize_state(2), jnp.ones((2, 3)))
