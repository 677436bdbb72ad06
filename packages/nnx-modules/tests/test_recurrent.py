import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.networks.linear_recurrent import LRU, LinearRecurrentCell, MinGRU
from nnx_ppo.networks.recurrent import CTRNN, GRU, LSTM, SimpleRNN, TimeConstant
from nnx_ppo.networks.types import replay_scanned, reset_where


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


def _numpy_gate_norm(v, scale, shift, n_gates, eps=1e-5):
    """LayerNorm of each H-wide gate block of v [B, n * H] (Ba et al. 2016, per gate)."""
    blocks = v.reshape(v.shape[0], n_gates, -1)
    mean, var = blocks.mean(-1, keepdims=True), blocks.var(-1, keepdims=True)
    return ((blocks - mean) / np.sqrt(var + eps)).reshape(v.shape) * scale + shift


def _norm_params(norm, width):
    scale = np.asarray(norm.scale[...], np.float64)
    shift = np.zeros(width) if norm.bias is None else np.asarray(norm.bias[...], np.float64)
    return scale, shift


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_layer_norm_cells_match_numpy_reference(kind):
    # LSTM: [i, f, g, o] = LN_x(x W) + LN_h(h U), c' = f c + i g, h' = o tanh(LN_c(c')).
    # GRU: the PyTorch GRU with x W + b -> LN_x(x W) and h U + a -> LN_h(h U).
    # Random shifts and scales, so a norm left out or applied jointly cannot pass.
    cls, n = (LSTM, 4) if kind == "lstm" else (GRU, 3)
    cell = cls(3, 2, rngs=nnx.Rngs(0), layer_norm=True, bias_init=_random_bias)
    for norm in (cell.input_norm, cell.recurrent_norm, getattr(cell, "cell_norm", None)):
        if norm is not None:
            norm.scale[...] = 1.0 + 0.5 * jax.random.normal(jax.random.key(9), norm.scale.shape)
    assert cell.input_proj.bias is None and cell.recurrent_proj.bias is None
    W = np.asarray(cell.input_proj.kernel[...], np.float64)
    U = np.asarray(cell.recurrent_proj.kernel[...], np.float64)
    ln_x, ln_h = _norm_params(cell.input_norm, 2 * n), _norm_params(cell.recurrent_norm, 2 * n)
    state = cell.initialize_state(5)
    c, h = np.zeros((5, 2)), np.zeros((5, 2))
    for x in np.asarray(jax.random.normal(jax.random.key(3), (4, 5, 3))):
        xs = _numpy_gate_norm(x @ W, *ln_x, n)
        hs = _numpy_gate_norm(h @ U, *ln_h, n)
        if kind == "lstm":
            i, f, g, o = np.split(xs + hs, 4, axis=-1)
            c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
            h = _sigmoid(o) * np.tanh(_numpy_gate_norm(c, *_norm_params(cell.cell_norm, 2), 1))
        else:
            (xr, xz, xn), (hr, hz, hn) = np.split(xs, 3, -1), np.split(hs, 3, -1)
            r, z = _sigmoid(xr + hr), _sigmoid(xz + hz)
            h = (1.0 - z) * np.tanh(xn + r * hn) + z * h
        out = cell(state, jnp.asarray(x))
        state = out.next_state
        np.testing.assert_allclose(out.output, h, rtol=1e-5, atol=1e-5)
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
            param = cell.initial_state[name]
            param[...] = jnp.full(param.shape, value)


@pytest.mark.parametrize("make", CELLS)
def test_jit_scan_keeps_structure_and_matches_eager(make, testing_modules):
    cell = make()
    _set_initial_state(cell, 0.3)
    xs = jax.random.normal(jax.random.key(0), (3, 2, 3))
    state0 = cell.initialize_state(2)
    final, outs = testing_modules.jit_scan(cell, state0, xs)
    ys = outs.output
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


# ------------------------------------------------------------------ LSTM / GRU pinned


def test_lstm_and_gru_parameters_and_outputs_are_pinned():
    # Computed with the LSTM and GRU of the commit before the RecurrentCell base (9f9d2d0),
    # which agreed bitwise with the refactored cells (parameters, outputs, replay,
    # gradients). Parameter names and values are what existing checkpoints hold.
    def random_bias(key, shape, dtype=jnp.float32):
        return jax.random.normal(key, shape, dtype)

    x = jnp.asarray([[1.0, -2.0, 0.5], [0.0, 0.3, -1.0]])
    lstm = LSTM(3, 4, rngs=nnx.Rngs(7), bias_init=random_bias)
    assert [k for k, _ in nnx.to_flat_state(nnx.state(lstm))] == [
        ("input_proj", "kernel"),
        ("recurrent_proj", "bias"),
        ("recurrent_proj", "kernel"),
    ]
    out = lstm(lstm.initialize_state(2), x)
    np.testing.assert_allclose(
        out.output[0], [-0.0657285824, 0.3061609566, -0.0511749089, -0.2706680596], rtol=1e-5
    )
    np.testing.assert_allclose(
        out.next_state["c"][1], [-0.1743658036, -0.1534763724, -0.0472741835, 0.3813136816],
        rtol=1e-5,
    )  # fmt: skip
    gru = GRU(3, 4, rngs=nnx.Rngs(7), bias_init=random_bias)
    assert [k for k, _ in nnx.to_flat_state(nnx.state(gru))] == [
        ("input_proj", "bias"),
        ("input_proj", "kernel"),
        ("recurrent_proj", "bias"),
        ("recurrent_proj", "kernel"),
    ]
    out = gru(gru.initialize_state(2), x)
    out = gru(out.next_state, x)
    np.testing.assert_allclose(
        out.output[0], [0.2241704315, -0.4074997306, -0.5260309577, -0.5682232380], rtol=1e-5
    )


# ------------------------------------------------------------------ SimpleRNN and CTRNN

# x = [1, -2], W_in = [[1, 2], [3, 4]]:  x W_in = [1 - 6, 2 - 8] = [-5, -6]
# h = [0.5, 1], W_rec = [[2, 0], [1, -1]]:  h W_rec = [1 + 1, 0 - 1] = [2, -1]
# b = [4, 3]:  pre-activation = [-5 + 2 + 4, -6 - 1 + 3] = [1, -4]
_X = [[1.0, -2.0]]
_H = [[0.5, 1.0]]
_PRE = np.array([[1.0, -4.0]])


def _set_weights(cell):
    cell.input_proj.kernel[...] = jnp.array([[1.0, 2.0], [3.0, 4.0]])
    cell.recurrent_proj.kernel[...] = jnp.array([[2.0, 0.0], [1.0, -1.0]])
    cell.recurrent_proj.bias[...] = jnp.array([4.0, 3.0])
    return cell


@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize(
    ("activation", "expected"),
    [("relu", [[1.0, 0.0]]), ("tanh", np.tanh(_PRE)), (jnp.sin, np.sin(_PRE))],
    ids=["relu", "tanh", "callable"],
)
def test_simple_rnn_one_step_by_hand(activation, expected, residual):
    # h' = f(pre-activation) = f([1, -4]) (see above): relu gives [1, 0]. With residual
    # the input x = [1, -2] is added back: relu gives [1 + 1, 0 - 2] = [2, -2].
    cell = SimpleRNN(2, 2, activation=activation, residual=residual, rngs=nnx.Rngs(0))
    out = _set_weights(cell)({"h": jnp.array(_H)}, jnp.array(_X))
    expected = np.asarray(expected) + (np.asarray(_X) if residual else 0.0)
    np.testing.assert_allclose(out.output, expected, rtol=1e-6)
    np.testing.assert_array_equal(out.output, out.next_state["h"])


def test_ctrnn_one_step_by_hand_per_unit_tau():
    # dt = 0.5, tau = [1, 2]: a = dt / tau = [0.5, 0.25]. With relu, f(pre) = [1, 0]:
    # h' = (1 - a) h + a f = [0.5 * 0.5 + 0.5 * 1, 0.75 * 1 + 0.25 * 0] = [0.75, 0.75].
    cell = _set_weights(CTRNN(2, 2, dt=0.5, tau=[1.0, 2.0], activation="relu", rngs=nnx.Rngs(0)))
    out = cell({"h": jnp.array(_H)}, jnp.array(_X))
    np.testing.assert_allclose(out.output, [[0.75, 0.75]], rtol=1e-6)
    np.testing.assert_allclose(cell.tau, [1.0, 2.0])


def test_ctrnn_with_dt_equal_tau_is_exactly_simple_rnn():
    # a = dt / tau = 1: h' = 0 * h + 1 * f(...), SimpleRNN's update, bit for bit.
    def random_bias(key, shape, dtype=jnp.float32):
        return jax.random.normal(key, shape, dtype)

    simple = SimpleRNN(3, 4, rngs=nnx.Rngs(0), bias_init=random_bias)
    ctrnn = CTRNN(3, 4, dt=0.1, tau=0.1, rngs=nnx.Rngs(0), bias_init=random_bias)
    slow = CTRNN(3, 4, dt=0.1, tau=0.2, rngs=nnx.Rngs(0), bias_init=random_bias)
    # The same parameter names and, from the same rngs, the same values.
    jax.tree.map(
        np.testing.assert_array_equal, nnx.state(ctrnn, nnx.Param), nnx.state(simple, nnx.Param)
    )
    xs = jax.random.normal(jax.random.key(0), (4, 2, 3))
    done = jnp.zeros((4, 2), bool).at[1, 1].set(True)
    state = {"h": jnp.full((2, 4), 0.5)}
    eager = ctrnn(state, xs[0]).output
    np.testing.assert_array_equal(eager, simple(state, xs[0]).output)
    assert not np.allclose(slow(state, xs[0]).output, eager, atol=1e-3)  # tau matters

    @nnx.jit  # compiled and scanned, with a reset
    def replay(cell):
        return cell.replay_sequence(cell.initialize_state(2), xs, None, done)[1].output

    replayed = replay(ctrnn)
    np.testing.assert_array_equal(replayed, replay(simple))
    assert np.abs(replayed).min() > 0


def test_learned_tau_starts_at_tau_and_stays_above_dt_after_a_huge_step():
    dt, tau0 = 0.1, np.array([0.2, 1.0, 5.0, 20.0])
    cell = CTRNN(3, 4, dt=dt, tau=tau0, learn_tau=True, rngs=nnx.Rngs(0))
    np.testing.assert_allclose(cell.tau, tau0, rtol=1e-6)
    assert set(nnx.state(cell, nnx.Param)) == {"input_proj", "recurrent_proj", "raw_tau"}
    x = jnp.ones((2, 3))

    def loss(cell):
        # |h'| = a |f(...)| from h = 0 grows with a = dt / tau: the step shrinks tau.
        return -jnp.sum(jnp.abs(cell(cell.initialize_state(2), x).output))

    grads = nnx.grad(loss)(cell)
    assert np.all(np.asarray(grads["raw_tau"][...]) > 0)
    params = nnx.state(cell, nnx.Param)
    nnx.update(cell, jax.tree.map(lambda p, g: p - 1e6 * g, params, grads))
    tau = np.asarray(cell.tau)
    assert np.all(np.isfinite(tau)) and np.all(tau >= np.float32(dt)) and np.all(tau > 0)
    assert np.all(tau < tau0)  # the step did move it down, as far as dt
    # a = dt / tau <= 1: with tanh, h' stays in [-1, 1] (a convex combination of h, f).
    h = cell({"h": jnp.ones((2, 4))}, 3.0 * x).output
    assert np.all(np.isfinite(h)) and np.all(np.abs(np.asarray(h)) <= 1.0)


def test_fixed_tau_is_a_time_constant_not_a_param():
    cell = CTRNN(3, 4, dt=1.0, tau=[1.0, 2.0, 3.0, 4.0], rngs=nnx.Rngs(0))
    assert set(nnx.state(cell, nnx.Param)) == {"input_proj", "recurrent_proj"}
    np.testing.assert_array_equal(nnx.state(cell, TimeConstant)["fixed_tau"][...], [1, 2, 3, 4])


def _ctrnn(**kwargs):
    return CTRNN(3, 4, rngs=nnx.Rngs(0), **{"tau": 2.0, **kwargs})


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (lambda: SimpleRNN(0, 4, rngs=nnx.Rngs(0)), ValueError, "SimpleRNN: in_features"),
        (
            lambda: SimpleRNN(3, 4, residual=True, rngs=nnx.Rngs(0)),
            ValueError,
            r"residual=True .* in_features must equal hidden_features; got in_features=3 "
            r"and hidden_features=4.*Dense\(3, 4\)",
        ),
        (lambda: SimpleRNN(3, 3, residual=1, rngs=nnx.Rngs(0)), TypeError, "residual must be"),
        (
            lambda: LSTM(3, 4, rngs=nnx.Rngs(0), layer_norm="yes"),
            TypeError,
            "LSTM: layer_norm must be True or False, got 'yes'",
        ),
        (lambda: GRU(3, 4, rngs=nnx.Rngs(0), layer_norm=1), TypeError, "GRU: layer_norm must"),
        (
            lambda: SimpleRNN(3, 4, activation="gelu", rngs=nnx.Rngs(0)),
            ValueError,
            r"activation must be one of \['relu', 'tanh'\].*got 'gelu'",
        ),
        (lambda: _ctrnn(activation=3), TypeError, "activation must be .* got 3 of type int"),
        (
            lambda: _ctrnn(tau=0.5),
            ValueError,
            r"dt / tau must be <= 1 .*dt=1.0 and tau=0.5.*tau >=",
        ),
        (lambda: _ctrnn(tau=[1.0, 1.0, 0.5, 1.0]), ValueError, r"tau=0.5 \(unit 2\)"),
        (lambda: _ctrnn(tau=[2.0] * 3), ValueError, r"\(4,\), got an array of shape \(3,\)"),
        (lambda: _ctrnn(tau=-1.0), ValueError, "tau must be positive and finite, got tau=-1.0"),
        (lambda: _ctrnn(tau=float("nan")), ValueError, "tau must be positive and finite"),
        (lambda: _ctrnn(tau="slow"), TypeError, "tau must be a positive number .* str 'slow'"),
        (lambda: _ctrnn(tau=True), TypeError, "tau must be a positive number"),
        (lambda: _ctrnn(dt=0.0), ValueError, "dt must be a positive finite number.*dt=0.0"),
        (lambda: _ctrnn(dt="0.1"), TypeError, "dt must be a positive number.*str '0.1'"),
        (lambda: _ctrnn(learn_tau=1), TypeError, "learn_tau must be True or False, got 1"),
        (
            lambda: _ctrnn(tau=1.0, learn_tau=True),
            ValueError,
            r"learn_tau=True, tau must be > dt .*tau=1.0 and dt=1.0",
        ),
    ],
)
def test_new_cells_construction_errors(build, error, match):
    with pytest.raises(error, match=match):
        build()


REPLAY_CELLS = [
    pytest.param(lambda: LSTM(3, 4, rngs=nnx.Rngs(0), trainable_initial_state=True), id="lstm"),
    pytest.param(lambda: GRU(3, 4, rngs=nnx.Rngs(0)), id="gru"),
    pytest.param(
        lambda: SimpleRNN(3, 4, activation="relu", rngs=nnx.Rngs(0), trainable_initial_state=True),
        id="simple_rnn",
    ),
    pytest.param(
        lambda: CTRNN(
            3, 4, dt=0.5, tau=[0.5, 1.0, 2.0, 4.0], rngs=nnx.Rngs(0), trainable_initial_state=True
        ),
        id="ctrnn",
    ),
    pytest.param(
        lambda: CTRNN(
            3, 4, tau=3.0, learn_tau=True, rngs=nnx.Rngs(0), trainable_initial_state=True
        ),
        id="ctrnn_learned_tau",
    ),
    pytest.param(
        lambda: LSTM(3, 4, rngs=nnx.Rngs(0), layer_norm=True, trainable_initial_state=True),
        id="lstm_layer_norm",
    ),
    pytest.param(lambda: GRU(3, 4, rngs=nnx.Rngs(0), layer_norm=True), id="gru_layer_norm"),
    pytest.param(
        lambda: SimpleRNN(3, 3, residual=True, rngs=nnx.Rngs(0), trainable_initial_state=True),
        id="simple_rnn_residual",
    ),
    pytest.param(lambda: MinGRU(3, 4, rngs=nnx.Rngs(0), trainable_initial_state=True), id="mingru"),
    pytest.param(
        lambda: LRU(
            3, 4, rngs=nnx.Rngs(0), state_features=4, r_min=0.9, trainable_initial_state=True
        ),
        id="lru",
    ),
]


@pytest.mark.parametrize("make", REPLAY_CELLS)
def test_replay_sequence_equals_step_by_step_with_resets(make):
    # A random done mask (and env 0 done after step 1, for the check at the end). The
    # reference is the step-by-step replay (replay_scanned: one call per step, then
    # reset_where), compared in outputs, final carry and parameter gradients. The
    # linear-recurrence cells replay with an associative scan, not a sequential one.
    cell = make()
    _set_initial_state(cell, 0.5)  # so that a reset is visible (GRU: from zeros)
    T, B = 12, 3
    xs = jax.random.normal(jax.random.key(0), (T, B, 3))
    done = jax.random.bernoulli(jax.random.key(1), 0.25, (T, B)).at[:2, 0].set([False, True])
    assert 2 < int(done.sum()) < T * B - 2
    state0 = cell.initialize_state(B)

    def loss(cell, done, replay):
        final, out = replay(cell, state0, xs, None, done)
        weights = jnp.cos(jnp.arange(out.output.size)).reshape(out.output.shape)
        return jnp.sum(weights * out.output), (final, out)

    @nnx.jit
    def both(cell, done):
        sequence = type(cell).replay_sequence
        grads, seq = nnx.grad(loss, has_aux=True)(cell, done, sequence)
        ref_grads, ref = nnx.grad(loss, has_aux=True)(cell, done, replay_scanned)
        return seq, ref, grads, ref_grads

    (final, out), (ref_final, ref), grads, ref_grads = both(cell, done)
    close = lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    close(out.output, ref.output)
    jax.tree.map(close, final, ref_final)
    jax.tree.map(close, grads, ref_grads)
    assert all(np.abs(g).max() > 0 for g in jax.tree.leaves(grads))
    assert out.regularization_loss.shape == (T, B)
    jaxpr = str(jax.make_jaxpr(lambda s: cell.replay_sequence(s, xs, None, done))(state0))
    assert ("scan[" in jaxpr) != isinstance(cell, LinearRecurrentCell)
    # The resets mattered: without them the replay differs after the first one.
    (_, no_reset), *_ = both(cell, jnp.zeros_like(done))  # compiled above
    assert not np.allclose(no_reset.output[2:, 0], out.output[2:, 0], atol=1e-4)
