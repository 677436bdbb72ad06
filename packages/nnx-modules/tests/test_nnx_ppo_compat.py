"""Network code written for nnx-ppo 0.3.0 runs unchanged on nnx-modules.

Each test is a piece of typical user code, written from nnx-ppo's documented public API
(signatures, argument orders, defaults), followed by checks that it builds what that
API promises. The deliberate differences are listed on the docs page "Coming from
nnx-ppo"; the tests of those differences check that the error says what to do.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.containers import Parallel, Sequential
from nnx_ppo.networks.delay import Delay
from nnx_ppo.networks.factories import make_mlp, make_mlp_actor_critic, make_mlp_layers
from nnx_ppo.networks.feedforward import Dense
from nnx_ppo.networks.normalizer import Normalizer, NormalizerStatistic, NormalizerStatistics
from nnx_ppo.networks.recurrent import GRU, LSTM
from nnx_ppo.networks.sampling_layers import NormalTanhSampler
from nnx_ppo.networks.types import PPONetworkOutput
from nnx_ppo.networks.utils import Filter, Flattener
from nnx_ppo.networks.variational import VariationalBottleneck


def _params(layer: Dense) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(layer.linear.kernel[...]), np.asarray(layer.linear.bias[...])


# -- rngs passed positionally ---------------------------------------------------------------


def test_dense_takes_rngs_and_activation_positionally():
    rngs = nnx.Rngs(0)
    layer = Dense(3, 4, rngs, nnx.relu)
    x = jnp.asarray(np.random.default_rng(0).normal(size=(5, 3)), jnp.float32)
    kernel, bias = _params(layer)
    np.testing.assert_allclose(
        layer((), x).output, np.maximum(np.asarray(x) @ kernel + bias, 0.0), rtol=1e-6
    )
    # The same seed by keyword gives the same parameters.
    np.testing.assert_array_equal(_params(Dense(3, 4, rngs=nnx.Rngs(0)))[0], kernel)


def test_recurrent_cells_take_rngs_positionally():
    lstm, gru = LSTM(3, 5, nnx.Rngs(0)), GRU(3, 5, nnx.Rngs(0))
    np.testing.assert_array_equal(
        lstm.input_proj.kernel[...], LSTM(3, 5, rngs=nnx.Rngs(0)).input_proj.kernel[...]
    )
    assert lstm(lstm.initialize_state(2), jnp.ones((2, 3))).output.shape == (2, 5)
    assert gru(gru.initialize_state(2), jnp.ones((2, 3))).output.shape == (2, 5)


def test_lstm_accepts_nnx_ppo_keywords():
    # nnx-ppo's LSTM keywords: None initialisers mean the defaults, use_optimized is a
    # choice of implementation, and gate_fn / activation_fn replace sigmoid / tanh.
    rngs = nnx.Rngs(0)
    default = LSTM(3, 4, nnx.Rngs(0))
    same = LSTM(3, 4, rngs, kernel_init=None, bias_init=None, use_optimized=False)
    x, state = jnp.ones((2, 3)), default.initialize_state(2)
    np.testing.assert_array_equal(default(state, x).output, same(state, x).output)

    custom = LSTM(3, 4, nnx.Rngs(0), gate_fn=nnx.hard_sigmoid, activation_fn=nnx.relu)
    state = {"c": jnp.full((2, 4), 0.5), "h": jnp.full((2, 4), -0.25)}
    gates = np.asarray(x @ custom.input_proj.kernel[...]) + np.asarray(
        custom.recurrent_proj(state["h"])
    )
    i, f, g, o = np.split(gates, 4, axis=-1)
    hard_sigmoid = lambda v: np.clip(v / 6.0 + 0.5, 0.0, 1.0)
    c = hard_sigmoid(f) * 0.5 + hard_sigmoid(i) * np.maximum(g, 0.0)
    h = hard_sigmoid(o) * np.maximum(c, 0.0)
    out = custom(state, x)
    np.testing.assert_allclose(out.next_state["c"], c, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(out.output, h, rtol=1e-6, atol=1e-7)
    with pytest.raises(TypeError, match="gate_fn must be an elementwise callable"):
        LSTM(3, 4, rngs, gate_fn="sigmoid")


def test_samplers_take_nnx_ppo_arguments():
    rngs = nnx.Rngs(0)
    positional = NormalTanhSampler(
        rngs, 1e-2, 1e-3, 2.0
    )  # (rng, entropy_weight, min_std, std_scale)
    keyword = NormalTanhSampler(rng=nnx.Rngs(0), entropy_weight=1e-2, min_std=1e-3, std_scale=2.0)
    assert (positional.entropy_weight, positional.min_std, positional.std_scale) == (
        0.01,
        0.001,
        2.0,
    )
    x = jnp.zeros((3, 4))
    np.testing.assert_array_equal(
        positional((), x).output["action"], keyword((), x).output["action"]
    )
    # std = (softplus(0) + min_std) * std_scale: the eval-mode log-likelihood shows it.
    positional.eval()
    std = (np.log(2.0) + 1e-3) * 2.0
    expected = 2 * (-np.log(std) - 0.5 * np.log(2 * np.pi))  # two action dims, action 0
    np.testing.assert_allclose(positional((), x).output["log_likelihood"], expected, rtol=1e-6)
    with pytest.raises(TypeError, match="both rngs and rng"):
        NormalTanhSampler(rngs, rng=rngs)
    with pytest.raises(TypeError, match="rngs is required"):
        NormalTanhSampler(entropy_weight=0.1)


# -- factories ------------------------------------------------------------------------------


def test_make_mlp_matches_hand_computed_layers():
    # nnx-ppo's make_mlp: ReLU after every layer, the last one included by default.
    mlp = make_mlp([3, 4, 2], nnx.Rngs(0))
    assert isinstance(mlp, Sequential) and [type(m) for m in mlp.layers] == [Dense, Dense]
    x = np.random.default_rng(1).normal(size=(5, 3)).astype(np.float32)
    (k0, b0), (k1, b1) = _params(mlp.layers[0]), _params(mlp.layers[1])
    h = np.maximum(x @ k0 + b0, 0.0)
    y = np.maximum(h @ k1 + b1, 0.0)
    np.testing.assert_allclose(mlp(mlp.initialize_state(5), x).output, y, rtol=1e-5, atol=1e-6)

    linear_head = make_mlp([3, 4, 2], nnx.Rngs(0), activation="tanh", activation_last_layer=False)
    h = np.tanh(x @ k0 + b0)
    np.testing.assert_allclose(
        linear_head(linear_head.initialize_state(5), x).output, h @ k1 + b1, rtol=1e-5, atol=1e-6
    )


def test_make_mlp_layers_splice_into_a_sequential():
    rngs = nnx.Rngs(0)
    net = Sequential([Flattener(), *make_mlp_layers([6, 8, 2], rngs, nnx.swish, False)])
    out = net(net.initialize_state(4), jnp.ones((4, 2, 3)))
    assert out.output.shape == (4, 2)
    assert net.layers[2].activation is None and net.layers[1].activation is nnx.swish


@pytest.mark.parametrize(
    ("sizes", "error", "match"),
    [
        ([4], ValueError, "at least two ints"),
        ([4, 0, 2], ValueError, "positive ints"),
        ("42", ValueError, "positive ints"),
    ],
)
def test_make_mlp_rejects_bad_sizes(sizes, error, match):
    with pytest.raises(error, match=match):
        make_mlp(sizes, nnx.Rngs(0))


def test_make_mlp_rejects_unknown_activation_names():
    with pytest.raises(ValueError, match="not a known name"):
        make_mlp([2, 2], nnx.Rngs(0), activation="sigmoidish")


def test_make_mlp_actor_critic_nnx_ppo_call():
    # make_mlp_actor_critic(obs_size, action_size, actor_sizes, critic_sizes, rngs, ...).
    net = make_mlp_actor_critic(
        4, 2, [16, 16], [32], nnx.Rngs(0), "tanh", initializer_scale=1.0, std_scale=0.5
    )
    actor = net.layers[1].action.layers[0]
    assert [layer.activation for layer in actor.layers] == [nnx.tanh, nnx.tanh, None]
    assert net.layers[1].action.layers[1].std_scale == 0.5
    out = net(net.initialize_state(3), jnp.ones((3, 4)))
    assert isinstance(out.output, PPONetworkOutput)
    assert out.output.actions.shape == (3, 2) and out.output.value_estimates.shape == (3,)
    # initializer_scale=s: kernels ~ U(-sqrt(3 s / fan_in), +sqrt(3 s / fan_in)).
    kernel = np.asarray(net.layers[1].value.layers[0].linear.kernel[...])
    assert np.abs(kernel).max() <= np.sqrt(3.0 / 4) and kernel.std() > 0.3
    with pytest.raises(TypeError, match=r"rngs must be an nnx\.Rngs"):
        make_mlp_actor_critic(4, 2, [16], [16])
    with pytest.raises(ValueError, match="initializer_scale must be positive"):
        make_mlp_actor_critic(4, 2, [16], [16], nnx.Rngs(0), initializer_scale=0.0)


# -- other names ---------------------------------------------------------------------------


def test_normalizer_statistics_name_selects_the_statistics():
    assert NormalizerStatistics is NormalizerStatistic
    net = Sequential([Normalizer(3), Dense(3, 1, nnx.Rngs(0))])
    stats = nnx.state(net, NormalizerStatistics)
    assert len(jax.tree.leaves(stats)) == 3  # mean, var and the exact count


def test_filter_accepts_callables_mixed_with_paths():
    filt = Filter({"sum": lambda x: x["a"] + x["b"], "a": "a"})
    x = {"a": jnp.ones((2, 3)), "b": 2 * jnp.ones((2, 3))}
    out = filt((), x).output
    np.testing.assert_array_equal(out["sum"], 3 * np.ones((2, 3)))
    np.testing.assert_array_equal(out["a"], np.ones((2, 3)))


def test_variational_bottleneck_in_nnx_ppo_form_says_how_to_port():
    with pytest.raises(TypeError, match="owns its encoder"):
        VariationalBottleneck(8, nnx.Rngs(0))


def test_a_typical_nnx_ppo_network_script():
    """A dict-observation actor-critic as an nnx-ppo user builds it, run jitted."""
    rngs = nnx.Rngs(0)
    obs_size, action_size = 5, 2
    network = Sequential(
        [
            Normalizer(obs_size),
            Delay(jnp.zeros(obs_size), 2),
            PPOAdapter(
                action=Sequential(
                    [
                        LSTM(obs_size, 8, rngs),
                        *make_mlp_layers(
                            [8, 16, 2 * action_size], rngs, activation_last_layer=False
                        ),
                        NormalTanhSampler(rngs, entropy_weight=1e-2),
                    ]
                ),
                value=Parallel(critic=make_mlp([obs_size, 16, 1], rngs, nnx.relu, False)),
            ),
        ]
    )
    state = network.initialize_state(4)

    @nnx.jit
    def step(net, state, obs):
        out = net(state, obs)
        return out.next_state, out.output

    for t in range(3):
        state, output = step(network, state, jnp.full((4, obs_size), float(t)))
    assert output.actions.shape == (4, action_size)
    assert np.all(np.abs(np.asarray(output.actions)) < 1.0)
    assert output.value_estimates["critic"].shape == (4,)
    assert state[2]["action"][0]["h"].shape == (4, 8)


def test_output_record_scale_and_activation_key_in_nnx_ppo_form():
    from nnx_ppo.networks import recording, types
    from nnx_ppo.networks.types import StatefulModuleOutput
    from nnx_ppo.networks.utils import Scale

    # nnx-ppo 0.3.0 modules build their output without rollout_extras.
    out = StatefulModuleOutput(
        next_state=(), output=jnp.ones(2), regularization_loss=0.0, metrics={}
    )
    assert out.rollout_extras is None
    assert types.ACTIVATION_KEY == recording.ACTIVATION_KEY == "__activation__"
    x = jnp.array([[1.0, -2.0]])
    np.testing.assert_array_equal(Scale(factor=3.0)((), x).output, Scale(3.0)((), x).output)
    with pytest.raises(TypeError, match="exactly one of scale and factor"):
        Scale(2.0, factor=3.0)
    with pytest.raises(TypeError, match="exactly one of scale and factor"):
        Scale()
