import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.networks.recurrent import GRU, LSTM
from nnx_ppo.networks.types import reset_where


def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def _numpy_lstm_step(W, U, b, c, h, x):
    """Reference LSTM step, gates stacked [i, f, g, o] (Hochreiter & Schmidhuber)."""
    H = h.shape[-1]
    z = x @ W + h @ U + b
    i, f, g, o = (z[:, k * H : (k + 1) * H] for k in range(4))
    c_new = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
    h_new = _sigmoid(o) * np.tanh(c_new)
    return c_new, h_new


def _numpy_gru_step(W, b, U, a, h, x):
    """Reference GRU step, gates stacked [r, z, n] (the PyTorch formulation)."""
    H = h.shape[-1]
    xs = x @ W + b
    hs = h @ U + a
    xr, xz, xn = (xs[:, k * H : (k + 1) * H] for k in range(3))
    hr, hz, hn = (hs[:, k * H : (k + 1) * H] for k in range(3))
    r = _sigmoid(xr + hr)
    z = _sigmoid(xz + hz)
    n = np.tanh(xn + r * hn)
    return (1.0 - z) * n + z * h


def _random_bias(key, shape, dtype=jnp.float32):
    # Non-zero biases so a wrong gate order cannot go unnoticed.
    return jax.random.normal(key, shape, dtype)


def test_lstm_hand_derived_zero_weights():
    # All weights and biases 0: every gate pre-activation is 0, so i = f = o = 0.5 and
    # g = tanh(0) = 0. From c = 2: c' = 0.5 * 2 + 0.5 * 0 = 1, h' = 0.5 * tanh(1).
    zeros = nnx.initializers.zeros_init()
    cell = LSTM(1, 1, rngs=nnx.Rngs(0), kernel_init=zeros, recurrent_kernel_init=zeros)
    state = {"c": jnp.full((1, 1), 2.0), "h": jnp.full((1, 1), 7.0)}
    out = cell(state, jnp.full((1, 1), 3.0))
    np.testing.assert_allclose(out.next_state["c"], [[1.0]], rtol=1e-6)
    np.testing.assert_allclose(out.output, [[0.5 * np.tanh(1.0)]], rtol=1e-6)
    np.testing.assert_array_equal(out.output, out.next_state["h"])


def test_lstm_matches_numpy_reference_over_steps():
    cell = LSTM(3, 2, rngs=nnx.Rngs(0), bias_init=_random_bias)
    W = np.asarray(cell.input_proj.kernel[...], np.float64)
    U = np.asarray(cell.recurrent_proj.kernel[...], np.float64)
    b = np.asarray(cell.recurrent_proj.bias[...], np.float64)
    xs = np.asarray(jax.random.normal(jax.random.key(1), (4, 5, 3)))  # [T, B, in]
    state = cell.initialize_state(5)
    c, h = np.zeros((5, 2)), np.zeros((5, 2))
    for x in xs:
        out = cell(state, jnp.asarray(x))
        state = out.next_state
        c, h = _numpy_lstm_step(W, U, b, c, h, x)
        np.testing.assert_allclose(out.output, h, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(state["c"], c, rtol=1e-5, atol=1e-6)
    assert np.abs(h).min() > 0  # the reference did not trivially stay at zero


def test_gru_matches_numpy_reference_over_steps():
    cell = GRU(3, 2, rngs=nnx.Rngs(0), bias_init=_random_bias)
    W = np.asarray(cell.input_proj.kernel[...], np.float64)
    b = np.asarray(cell.input_proj.bias[...], np.float64)
    U = np.asarray(cell.recurrent_proj.kernel[...], np.float64)
    a = np.asarray(cell.recurrent_proj.bias[...], np.float64)
    xs = np.asarray(jax.random.normal(jax.random.key(2), (4, 5, 3)))
    state = cell.initialize_state(5)
    h = np.zeros((5, 2))
    for x in xs:
        out = cell(state, jnp.asarray(x))
        state = out.next_state
        h = _numpy_gru_step(W, b, U, a, h, x)
        np.testing.assert_allclose(out.output, h, rtol=1e-5, atol=1e-6)
    assert np.abs(h).min() > 0


def test_recurrent_kernel_is_orthogonal_per_gate():
    cell = LSTM(3, 4, rngs=nnx.Rngs(0))
    U = np.asarray(cell.recurrent_proj.kernel[...])
    for k in range(4):
        block = U[:, 4 * k : 4 * (k + 1)]
        np.testing.assert_allclose(block.T @ block, np.eye(4), atol=1e-5)


CELLS = [
    pytest.param(lambda: LSTM(3, 4, rngs=nnx.Rngs(0)), id="lstm"),
    pytest.param(lambda: GRU(3, 4, rngs=nnx.Rngs(0)), id="gru"),
    pytest.param(lambda: LSTM(3, 4, rngs=nnx.Rngs(0), trainable_initial_state=True), id="lstm0"),
    pytest.param(lambda: GRU(3, 4, rngs=nnx.Rngs(0), trainable_initial_state=True), id="gru0"),
]


def _set_initial_state(cell, value):
    if cell.initial_state is not None:
        for name in cell.initial_state:
            cell.initial_state[name][...] = jnp.full((4,), value)


@pytest.mark.parametrize("make", CELLS)
def test_jit_scan_keeps_structure_and_matches_eager(make):
    cell = make()
    _set_initial_state(cell, 0.3)
    xs = jax.random.normal(jax.random.key(0), (3, 2, 3))
    state0 = cell.initialize_state(2)

    @nnx.jit
    def rollout(cell, state, xs):
        def step(state, x):
            out = cell(state, x)
            return out.next_state, out.output

        return jax.lax.scan(step, state, xs)

    final, ys = rollout(cell, state0, xs)
    assert jax.tree.structure(final) == jax.tree.structure(state0)
    for a, b in zip(jax.tree.leaves(final), jax.tree.leaves(state0), strict=True):
        assert a.shape == b.shape == (2, 4) and a.dtype == b.dtype == jnp.float32
    state = state0
    for t in range(3):
        out = cell(state, xs[t])
        state = out.next_state
        np.testing.assert_allclose(ys[t], out.output, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make", CELLS)
def test_reset_restores_initial_state(make):
    cell = make()
    _set_initial_state(cell, -0.7)
    state0 = cell.initialize_state(3)
    expected = 0.0 if cell.initial_state is None else -0.7
    for leaf in jax.tree.leaves(state0):
        np.testing.assert_array_equal(leaf, np.full((3, 4), expected, np.float32))
    state = cell(state0, jnp.ones((3, 3))).next_state
    state = cell(state, jnp.ones((3, 3))).next_state
    jax.tree.map(np.testing.assert_array_equal, cell.reset_state(state), state0)
    # Only env 1 is done: its row returns to the initial state, the others keep theirs.
    partial = reset_where(cell, jnp.array([False, True, False]), state)
    for new, old, init in zip(*map(jax.tree.leaves, (partial, state, state0)), strict=True):
        new, old, init = np.asarray(new), np.asarray(old), np.asarray(init)
        np.testing.assert_array_equal(new[[0, 2]], old[[0, 2]])
        np.testing.assert_array_equal(new[1], init[1])
        assert not np.allclose(old[1], init[1])


def test_trainable_initial_state_gets_gradients():
    cell = LSTM(3, 4, rngs=nnx.Rngs(0), trainable_initial_state=True)

    def loss(cell):
        out = cell(cell.initialize_state(2), jnp.ones((2, 3)))
        return jnp.sum(out.output**2 + out.next_state["c"])

    grads = nnx.grad(loss)(cell)
    assert float(jnp.abs(grads["initial_state"]["c"][...]).sum()) > 0
    assert float(jnp.abs(grads["initial_state"]["h"][...]).sum()) > 0
    # Without the flag there is nothing to train besides the projections.
    plain = nnx.state(LSTM(3, 4, rngs=nnx.Rngs(0)), nnx.Param)
    assert set(plain) == {"input_proj", "recurrent_proj"}


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (lambda: LSTM(0, 4, rngs=nnx.Rngs(0)), ValueError, "LSTM: in_features must be"),
        (lambda: GRU(3, -2, rngs=nnx.Rngs(0)), ValueError, "GRU: hidden_features must be"),
        (lambda: LSTM(3, 4.0, rngs=nnx.Rngs(0)), TypeError, "hidden_features"),
        (
            lambda: LSTM(3, 4, rngs=nnx.Rngs(0), trainable_initial_state=1),
            TypeError,
            "trainable_initial_state",
        ),
    ],
)
def test_construction_errors(build, error, match):
    with pytest.raises(error, match=match):
        build()


def test_call_errors_name_the_problem():
    cell = LSTM(3, 4, rngs=nnx.Rngs(0))
    state = cell.initialize_state(2)
    with pytest.raises(ValueError, match=r"keys \['c', 'h'\], got \['h'\]"):
        cell({"h": state["h"]}, jnp.ones((2, 3)))
    with pytest.raises(ValueError, match="got tuple"):
        cell((state["c"], state["h"]), jnp.ones((2, 3)))
    with pytest.raises(ValueError, match=r"in_features=3, got an input of shape \(2, 5\)"):
        cell(state, jnp.ones((2, 5)))
