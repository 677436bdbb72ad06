import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.networks.feedforward import MLP, Dense


def _const(value):
    """An initialiser that returns ``value`` (checked against the requested shape)."""

    def init(key, shape, dtype=jnp.float32):
        del key
        out = jnp.asarray(value, dtype)
        out = jnp.broadcast_to(out, shape) if out.ndim == 0 else out
        assert out.shape == tuple(shape), (out.shape, shape)
        return out

    return init


def test_dense_hand_derived():
    # kernel = [[1, 2], [3, 4], [5, 6]], bias = [1, -20], x = [1, 1, 1]:
    # x @ kernel = [1+3+5, 2+4+6] = [9, 12]; + bias = [10, -8]; relu -> [10, 0].
    kernel = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    kw = dict(kernel_init=_const(kernel), bias_init=_const([1.0, -20.0]))
    linear = Dense(3, 2, rngs=nnx.Rngs(0), **kw)
    relu = Dense(3, 2, rngs=nnx.Rngs(0), activation=jax.nn.relu, **kw)
    x = jnp.ones((1, 3))
    np.testing.assert_allclose(linear.forward(x), [[10.0, -8.0]])
    np.testing.assert_allclose(relu.forward(x), [[10.0, 0.0]])


def test_dense_is_stateless_module():
    layer = Dense(3, 2, rngs=nnx.Rngs(0))
    x = jnp.arange(6.0).reshape(2, 3)
    out = layer(layer.initialize_state(2), x)
    assert out.next_state == ()
    assert out.rollout_extras == ()
    assert out.metrics == {}
    np.testing.assert_array_equal(out.regularization_loss, 0.0)
    np.testing.assert_allclose(out.output, layer.forward(x))
    assert out.output.shape == (2, 2)


def test_dense_linear_kwargs_reach_nnx_linear():
    layer = Dense(3, 2, rngs=nnx.Rngs(0), use_bias=False, param_dtype=jnp.bfloat16)
    params = nnx.state(layer, nnx.Param)
    assert "bias" not in params["linear"]
    assert params["linear"]["kernel"][...].dtype == jnp.bfloat16


def test_mlp_activate_final_hand_derived():
    # 1 -> 1 -> 1 with kernels 1, biases -2, relu; x = 1:
    # hidden = relu(1*1 - 2) = 0; final = 0*1 - 2 = -2, and relu(-2) = 0 if activated.
    kw = dict(kernel_init=_const(1.0), bias_init=_const(-2.0), activation=jax.nn.relu)
    x = jnp.ones((1, 1))
    plain = MLP(1, (1,), 1, rngs=nnx.Rngs(0), **kw)
    final = MLP(1, (1,), 1, rngs=nnx.Rngs(0), activate_final=True, **kw)
    np.testing.assert_allclose(plain.forward(x), [[-2.0]])
    np.testing.assert_allclose(final.forward(x), [[0.0]])


def test_mlp_layer_sizes_and_default_activation():
    mlp = MLP(4, (8, 16), 2, rngs=nnx.Rngs(0))
    shapes = [tuple(layer.linear.kernel[...].shape) for layer in mlp.layers]
    assert shapes == [(4, 8), (8, 16), (16, 2)]
    assert [layer.activation for layer in mlp.layers] == [nnx.swish, nnx.swish, None]
    # No hidden layers: a single linear Dense.
    single = MLP(4, (), 3, rngs=nnx.Rngs(0))
    assert len(single.layers) == 1 and single.layers[0].activation is None


def test_mlp_equals_manual_composition():
    mlp = MLP(3, (5,), 2, rngs=nnx.Rngs(1))
    x = jax.random.normal(jax.random.key(0), (4, 3))
    k0, b0 = mlp.layers[0].linear.kernel[...], mlp.layers[0].linear.bias[...]
    k1, b1 = mlp.layers[1].linear.kernel[...], mlp.layers[1].linear.bias[...]
    expected = nnx.swish(x @ k0 + b0) @ k1 + b1
    np.testing.assert_allclose(mlp((), x).output, expected, rtol=1e-6, atol=1e-6)


def test_mlp_jit_matches_eager():
    mlp = MLP(3, (5,), 2, rngs=nnx.Rngs(2))
    x = jax.random.normal(jax.random.key(1), (4, 3))
    jitted = nnx.jit(lambda m, x: m((), x).output)(mlp, x)
    np.testing.assert_allclose(jitted, mlp((), x).output, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (lambda r: Dense(0, 3, rngs=r), ValueError, "in_features must be a positive int, got 0"),
        (lambda r: Dense(3, -1, rngs=r), ValueError, "out_features must be a positive int"),
        (lambda r: Dense(2.5, 3, rngs=r), TypeError, "in_features must be a positive int"),
        (lambda r: Dense(True, 3, rngs=r), TypeError, "got True of type bool"),
        (lambda r: Dense(2, 3, rngs=r, activation="relu"), TypeError, "activation must be"),
        (lambda r: MLP(2, 32, 1, rngs=r), TypeError, r"hidden_sizes=\(64,\)"),
        (lambda r: MLP(2, (32, 0), 1, rngs=r), ValueError, r"hidden_sizes\[1\]"),
        (lambda r: MLP(2, (32,), 0, rngs=r), ValueError, "out_features"),
    ],
)
def test_construction_errors_name_the_argument(build, error, match):
    with pytest.raises(error, match=match):
        build(nnx.Rngs(0))


def test_dense_rejects_wrong_input_size():
    layer = Dense(3, 2, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"in_features=3, got an input of shape \(2, 4\)"):
        layer.forward(jnp.ones((2, 4)))
