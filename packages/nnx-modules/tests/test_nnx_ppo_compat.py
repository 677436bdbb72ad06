"""Network code written for nnx-ppo 0.3.0 runs unchanged on nnx-modules.

Each test is a piece of typical user code, written from nnx-ppo's documented public API
(signatures, argument orders, defaults), followed by checks that it builds what that
API promises. The deliberate differences are listed on the docs page "Coming from
nnx-ppo"; the tests of those differences check that the error says what to do.
"""

from __future__ import annotations

import math

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
from nnx_ppo.networks.recurrent import GRU, LSTM, SimpleRNN
from nnx_ppo.networks.sampling_layers import NormalTanhSampler
from nnx_ppo.networks.types import PPONetworkOutput, reset_where
from nnx_ppo.networks.utils import Filter, Flattener
from nnx_ppo.networks.variational import AR1VariationalBottleneck, VariationalBottleneck


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


def test_simple_rnn_takes_rngs_positionally_and_the_residual_option():
    # nnx-ppo's SimpleRNN(in, hidden, rngs, residual=True) adds the input back to the
    # new hidden state: h' = x + tanh(x W_in + h W_rec + b), with the same parameters
    # (drawn in the same order) as the plain cell.
    residual, plain = SimpleRNN(4, 4, nnx.Rngs(0), residual=True), SimpleRNN(4, 4, nnx.Rngs(0))
    x = jnp.asarray(np.random.default_rng(0).normal(size=(2, 4)), jnp.float32)
    state = {"h": jnp.full((2, 4), 0.5)}
    np.testing.assert_allclose(residual(state, x).output, plain(state, x).output + x, rtol=1e-6)
    with pytest.raises(ValueError, match="in_features must equal hidden_features"):
        SimpleRNN(3, 4, nnx.Rngs(0), residual=True)


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


# -- variational bottlenecks in nnx-ppo's encoder-less form ---------------------------------

# Input (mean, pre-std) for latent size 2: mean (1, -2), pre-std (0, log(e - 1)), so
# softplus(pre-std) = (log 2, log(1 + e - 1)) = (log 2, 1) and, with min_std = 1e-3,
# sigma = (log 2 + 1e-3, 1 + 1e-3).
_MEAN = np.array([1.0, -2.0])
_SIGMA = np.array([math.log(2.0) + 1e-3, 1.0 + 1e-3])
_X = jnp.tile(jnp.asarray([1.0, -2.0, 0.0, math.log(math.e - 1.0)], jnp.float32), (3, 1))
# KL(N(mu, sigma) || N(0, 1)) = 0.5 * sum(mu^2 + sigma^2 - 1 - 2 log sigma).
_KL = 0.5 * float(np.sum(_MEAN**2 + _SIGMA**2 - 1.0 - 2.0 * np.log(_SIGMA)))


def _eps(key_data: jax.Array, latent: int) -> tuple[np.ndarray, np.ndarray]:
    """The noise a bottleneck draws from its carried keys [B, 2], and the next keys."""

    def one(k):
        next_key, noise_key = jax.random.split(jax.random.wrap_key_data(k))
        return jax.random.key_data(next_key), jax.random.normal(noise_key, (latent,))

    next_keys, eps = jax.vmap(one)(key_data)
    return np.asarray(eps), np.asarray(next_keys)


def test_variational_bottleneck_nnx_ppo_form_matches_the_hand_computed_sample_and_kl():
    # nnx-ppo 0.3.0: VariationalBottleneck(latent_size, rng, kl_weight, min_std).
    vb = VariationalBottleneck(2, nnx.Rngs(0), 0.5, 1e-3)
    assert vb.encoder is None and not jax.tree.leaves(nnx.state(vb, nnx.Param))
    assert (vb.in_features, vb.latent_features, vb.kl_weight, vb.min_std) == (4, 2, 0.5, 1e-3)
    state = vb.initialize_state(3)
    out = vb(state, _X)
    eps, next_keys = _eps(state["key"], 2)
    np.testing.assert_allclose(out.output, _MEAN + _SIGMA * eps, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out.regularization_loss, np.full(3, 0.5 * _KL), rtol=1e-6)
    np.testing.assert_allclose(out.metrics["kl"], _KL, rtol=1e-6)
    np.testing.assert_allclose(out.metrics["posterior_std"], _SIGMA.mean(), rtol=1e-6)
    np.testing.assert_array_equal(out.next_state["key"], next_keys)
    assert out.next_state["key"].shape == state["key"].shape == (3, 2)
    assert out.next_state["key"].dtype == state["key"].dtype
    # nnx-ppo's keywords build the same module; its defaults are kl_weight=1, min_std=1e-6.
    same = VariationalBottleneck(latent_size=2, rng=nnx.Rngs(0), kl_weight=0.5, min_std=1e-3)
    np.testing.assert_array_equal(same(same.initialize_state(3), _X).output, out.output)
    default = VariationalBottleneck(2, rng=nnx.Rngs(noise=0).noise)
    assert (default.kl_weight, default.min_std) == (1.0, 1e-6)
    # eval(): the mean, no noise.
    vb.eval()
    np.testing.assert_allclose(vb(state, _X).output, np.tile(_MEAN, (3, 1)), rtol=1e-6)


def test_ar1_bottleneck_nnx_ppo_form_adds_the_l2_penalty_on_consecutive_latents():
    # nnx-ppo 0.3.0: AR1VariationalBottleneck(latent_size, rng, kl_weight, min_std,
    # ar1_weight, backprop_through_time); the KL is to N(0, I) at every step.
    ar1 = AR1VariationalBottleneck(2, nnx.Rngs(0), 0.5, 1e-3, 2.0)
    assert ar1.encoder is None and ar1.phi is None and ar1.backprop_through_time
    state0 = ar1.initialize_state(3)
    first = ar1(state0, _X)
    # The first step of an episode has no previous latent: no L2 term.
    np.testing.assert_allclose(first.regularization_loss, np.full(3, 0.5 * _KL), rtol=1e-6)
    assert float(first.metrics["l2_diff"]) == 0.0
    second = ar1(first.next_state, _X)
    z1, z2 = np.asarray(first.output), np.asarray(second.output)
    eps2, _ = _eps(first.next_state["key"], 2)
    np.testing.assert_allclose(z2, _MEAN + _SIGMA * eps2, rtol=1e-6, atol=1e-6)
    # l2_diff = mean over the latent of (z_t - z_{t-1})^2, weighted by ar1_weight = 2.
    l2 = np.mean((z2 - z1) ** 2, axis=-1)
    np.testing.assert_allclose(second.regularization_loss, 0.5 * _KL + 2.0 * l2, rtol=1e-5)
    np.testing.assert_allclose(second.metrics["l2_diff"], l2.mean(), rtol=1e-5)
    np.testing.assert_array_equal(second.next_state["z"], z2)
    # Reset: the next episode starts without a previous latent, shapes and dtypes kept.
    reset = ar1.reset_state(second.next_state)
    assert jax.tree.map(lambda a: (a.shape, a.dtype), reset) == jax.tree.map(
        lambda a: (a.shape, a.dtype), state0
    )
    np.testing.assert_allclose(ar1(reset, _X).regularization_loss, np.full(3, 0.5 * _KL), rtol=1e-6)
    default = AR1VariationalBottleneck(latent_size=2, rng=nnx.Rngs(0))
    assert (default.kl_weight, default.min_std, default.ar1_weight) == (1.0, 1e-6, 1.0)


@pytest.mark.parametrize("bptt", [True, False])
def test_ar1_backprop_through_time_controls_the_gradient_into_the_previous_latent(bptt):
    ar1 = AR1VariationalBottleneck(2, nnx.Rngs(0), 0.0, 1e-3, 1.0, bptt)
    state0 = ar1.initialize_state(3)

    def second_penalty(x1):
        first = ar1(state0, x1)
        return jnp.sum(ar1(first.next_state, _X).regularization_loss)

    grad = np.asarray(jax.grad(second_penalty)(_X))
    # With kl_weight = 0 the second step's loss is the L2 term alone: it reaches x_1 only
    # through z_1 = mu_1 + sigma_1 * eps_1, and only if gradients flow back in time.
    assert (np.abs(grad).sum() > 0) == bptt


@pytest.mark.parametrize(
    "make",
    [
        lambda: VariationalBottleneck(2, nnx.Rngs(0), 0.5, 1e-3),
        lambda: AR1VariationalBottleneck(2, nnx.Rngs(0), 0.5, 1e-3, 2.0),
    ],
    ids=["vb", "ar1"],
)
def test_nnx_ppo_form_bottlenecks_replay_their_rollout(make):
    module = make()
    xs = jax.random.normal(jax.random.key(1), (5, 3, 4))
    dones = jnp.zeros((5, 3), bool).at[1, 0].set(True).at[2, 2].set(True)
    state0 = module.initialize_state(3)
    state, outputs, losses = state0, [], []
    for t in range(5):
        out = module(state, xs[t])
        outputs.append(out.output)
        losses.append(out.regularization_loss)
        state = reset_where(module, dones[t], out.next_state)
    final, replay = module.replay_sequence(state0, xs, (), dones)
    np.testing.assert_allclose(replay.output, np.stack(outputs), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(replay.regularization_loss, np.stack(losses), rtol=1e-6)
    assert replay.regularization_loss.shape == (5, 3)
    # The keys replay bit for bit; the carried latent up to XLA's rounding under scan.
    assert set(final) == set(state)
    np.testing.assert_array_equal(final["key"], state["key"])
    for name in set(state) - {"key"}:
        np.testing.assert_allclose(final[name], state[name], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (lambda: VariationalBottleneck(0, nnx.Rngs(0)), ValueError, "latent_size"),
        (lambda: VariationalBottleneck(2, nnx.Rngs(0), -1.0), ValueError, "kl_weight"),
        (lambda: VariationalBottleneck(2, nnx.Rngs(0), min_std=-1.0), ValueError, "min_std"),
        (lambda: VariationalBottleneck(2, nnx.Rngs(0), 1.0, 1e-6, 3), TypeError, "at most 4"),
        (
            lambda: VariationalBottleneck(2, nnx.Rngs(0), 0.5, kl_weight=0.5),
            TypeError,
            "kl_weight was given both",
        ),
        (lambda: VariationalBottleneck(latent_size=2, rng=0), TypeError, "rng must be"),
        (lambda: VariationalBottleneck(2, 4, nnx.Rngs(0), 1e-6), TypeError, "positional"),
        (lambda: VariationalBottleneck(2, 4, nnx.Rngs(0), min_std=0.1), TypeError, "min_std"),
        (lambda: AR1VariationalBottleneck(2, nnx.Rngs(0), phi=0.9), TypeError, "phi"),
        (
            lambda: AR1VariationalBottleneck(2, nnx.Rngs(0), backprop_through_time=1),
            TypeError,
            "backprop_through_time must be a bool",
        ),
        (lambda: AR1VariationalBottleneck(2, nnx.Rngs(0), ar1_weight=-2.0), ValueError, "ar1"),
    ],
)
def test_nnx_ppo_form_bottleneck_construction_errors(build, error, match):
    with pytest.raises(error, match=match):
        build()


def test_nnx_ppo_form_bottleneck_rejects_an_input_that_is_not_mean_and_pre_std():
    vb = VariationalBottleneck(2, nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"2 \* latent_size = 4 \(mean and pre-std\)"):
        vb(vb.initialize_state(3), jnp.ones((3, 2)))


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


# -- nnx-ppo 0.3.0's error types and names ------------------------------------------------


@pytest.mark.parametrize("owner", [Parallel, "Map"])
def test_both_construction_forms_raise_what_either_library_catches(owner):
    from nnx_ppo.networks.utils import Map

    cls = Map if owner == "Map" else owner
    a, b = Dense(2, 2, nnx.Rngs(0)), Dense(2, 2, nnx.Rngs(1))
    # nnx-ppo 0.3.0 raises ValueError here, Python (and nnx-modules 0.1) TypeError.
    for error in (ValueError, TypeError):
        with pytest.raises(error, match=r"not both .*keywords \['b'\]"):
            cls({"a": a}, b=b)


def test_flattener_keeps_tuple_and_list_levels():
    x = (jnp.ones((2, 2, 3)), [jnp.zeros((2, 1)), {"q": jnp.ones((2, 2))}])
    out = Flattener(preserve_levels=1)((), x).output
    # level 1 kept: a tuple of two [B, N]; the list below it is flattened: 1 + 2 features
    assert isinstance(out, tuple) and [o.shape for o in out] == [(2, 6), (2, 3)]
    np.testing.assert_array_equal(out[1][0], [0.0, 1.0, 1.0])
    two = Flattener(preserve_levels=2)((), x).output
    assert isinstance(two[1], list) and two[1][1].shape == (2, 2) and two[0].shape == (2, 6)


@pytest.mark.parametrize(
    ("levels", "x", "depth"),
    [
        (1, jnp.ones((2, 3)), 0),
        (2, {"a": jnp.ones((2, 3))}, 1),
        (4, ({"a": (jnp.ones((2, 1)),)},), 3),
    ],
)
def test_flattener_rejects_more_levels_than_the_input_has(levels, x, depth):
    with pytest.raises(TypeError, match=rf"only {depth} level\(s\).*preserve_levels={depth}\)"):
        Flattener(preserve_levels=levels)((), x)
    # exactly as deep as the input: every level kept, no error
    kept = Flattener(preserve_levels=depth)((), x).output
    assert jax.tree.structure(kept) == jax.tree.structure(x)


def test_variational_bottleneck_latent_size_is_latent_features():
    plain = VariationalBottleneck(latent_size=8, rng=nnx.Rngs(0), kl_weight=0.01)
    ours = AR1VariationalBottleneck(6, 3, rngs=nnx.Rngs(0))
    assert (plain.latent_size, plain.latent_features, plain.kl_weight) == (8, 8, 0.01)
    assert ours.latent_size == ours.latent_features == 3


def test_recording_leaf_classification_has_nnx_ppo_name():
    from nnx_ppo.networks.recording import _is_leaf, with_recording

    rngs = nnx.Rngs(0)
    net = Sequential([Dense(4, 8, rngs), Parallel(rnn=LSTM(8, 6, rngs), ff=Dense(8, 3, rngs))])
    leaves = [net.layers[0], net.layers[1].components["rnn"], net.layers[1].components["ff"]]
    assert all(_is_leaf(m) for m in leaves)
    assert not _is_leaf(net) and not _is_leaf(net.layers[1]) and not _is_leaf(jnp.ones(3))
    rec = with_recording(net)  # exactly the leaves are wrapped
    assert type(rec.layers[0]).__name__ == "Recorder" and type(rec.layers[1]).__name__ == "Parallel"
