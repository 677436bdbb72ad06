"""Recording sampler calls: what is recorded, nesting, and that nothing changes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.containers import Parallel, Sequential
from nnx_ppo.networks.feedforward import Dense
from nnx_ppo.networks.recording import record_sampler_calls
from nnx_ppo.networks.sampling_layers import CategoricalSampler, NormalTanhSampler


def _two_sampler_net():
    rngs = nnx.Rngs(0)
    return PPOAdapter(
        action=Parallel(
            {
                "arm": Sequential([Dense(3, 4, rngs=rngs), NormalTanhSampler(rngs)]),
                "grip": Sequential([Dense(3, 5, rngs=rngs), CategoricalSampler(rngs)]),
            }
        ),
        value=Dense(3, 1, rngs=rngs),
    )


def test_every_sampler_call_is_recorded_with_its_action_and_raw_action():
    net = _two_sampler_net()
    with record_sampler_calls() as calls:
        out = net(net.initialize_state(2), jnp.ones((2, 3)))
    assert sorted(type(c.sampler).__name__ for c in calls) == [
        "CategoricalSampler",
        "NormalTanhSampler",
    ]
    actions = out.output.actions
    for call in calls:
        key = "arm" if isinstance(call.sampler, NormalTanhSampler) else "grip"
        assert call.output.output["action"] is actions[key]
        # The raw action is passed through the containers unchanged (the same array).
        assert any(
            call.output.rollout_extras is leaf for leaf in jax.tree.leaves(out.rollout_extras)
        )
    assert calls[0].sampler is not calls[1].sampler


def test_recording_works_under_tracing_and_nests():
    net = _two_sampler_net()
    graphdef, state = nnx.split(net)

    def forward(state, x):
        model = nnx.merge(graphdef, state)
        return model(model.initialize_state(2), x).output.actions

    with record_sampler_calls() as outer:
        with record_sampler_calls() as inner:
            jax.eval_shape(forward, state, jnp.ones((2, 3)))
        assert len(inner) == 2 and len(outer) == 2  # the outer block gets them too
    # Outside a block nothing is recorded.
    forward(state, jnp.ones((2, 3)))
    assert len(outer) == 2


def test_a_recorded_call_carries_its_distribution_and_a_differentiable_mode():
    # A NormalTanhSampler fed [mean | pre_std]: its params are (mean, std) and its mode
    # is the mean, a function of the input with gradient 1 per entry (the sampled and
    # the eval-mode actions themselves are fixed values, with gradient 0).
    sampler = NormalTanhSampler(nnx.Rngs(0), deterministic=True)  # draws nothing
    x = jnp.array([[0.5, -2.0, 0.0, 0.0]])  # B=1, A=2

    def mode_sum(inputs):
        with record_sampler_calls() as calls:
            sampler((), inputs)
        (call,) = calls
        return jnp.sum(call.mode), call.params

    grad, (mean, std) = jax.grad(mode_sum, has_aux=True)(x)
    np.testing.assert_allclose(grad, [[1.0, 1.0, 0.0, 0.0]])
    np.testing.assert_allclose(mean, x[:, :2])
    assert std.shape == (1, 2) and bool(jnp.all(std > 0))
    action = jax.grad(lambda inputs: jnp.sum(sampler((), inputs).output["action"]))(x)
    np.testing.assert_array_equal(action, jnp.zeros_like(x))


def test_recording_does_not_change_the_network_or_its_output():
    net, reference = _two_sampler_net(), _two_sampler_net()
    x = jnp.ones((2, 3))
    with record_sampler_calls():
        recorded = net(net.initialize_state(2), x).output.actions
    plain = reference(reference.initialize_state(2), x).output.actions
    for a, b in zip(jax.tree.leaves(recorded), jax.tree.leaves(plain), strict=True):
        np.testing.assert_array_equal(a, b)
    assert type(net.action.components["arm"].layers[1]) is NormalTanhSampler


# -- activations ---------------------------------------------------------------------------

import warnings  # noqa: E402

import pytest  # noqa: E402

from nnx_ppo.networks.factories import (  # noqa: E402
    make_lstm_actor_critic,
    make_mlp,
    make_mlp_actor_critic,
)
from nnx_ppo.networks.feedforward import MLP  # noqa: E402
from nnx_ppo.networks.linear_recurrent import LRU, MinGRU  # noqa: E402
from nnx_ppo.networks.recording import (  # noqa: E402
    ACTIVATION_KEY,
    Recorder,
    extract_activations,
    flatten_activations,
    is_recording,
    with_recording,
)
from nnx_ppo.networks.recurrent import LSTM  # noqa: E402
from nnx_ppo.networks.types import reset_where  # noqa: E402


def _assert_trees_equal(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)


def _without_activations(metrics):
    if not isinstance(metrics, dict):
        return metrics
    out = {k: _without_activations(v) for k, v in metrics.items() if k != ACTIVATION_KEY}
    return {k: v for k, v in out.items() if not (isinstance(v, dict) and not v)}


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_recording_copy_is_bitwise_the_original(jit):
    net = make_lstm_actor_critic(3, 2, 6, (8,), (8,), rngs=nnx.Rngs(0))
    recording = with_recording(net)
    state = net.initialize_state(4)
    x = jax.random.normal(jax.random.key(1), (4, 3))
    # The copy shares the sampler's RNG stream: snapshot it, so both calls draw the same.
    snapshot = nnx.clone(nnx.state(net))

    def call(module, state, x):
        return module(state, x)

    call = nnx.jit(call) if jit else call
    plain = call(net, state, x)
    nnx.update(net, snapshot)
    recorded = call(recording, state, x)
    for field in ("next_state", "output", "regularization_loss", "rollout_extras"):
        if jit:
            # The same operations, but the activations are extra outputs of the compiled
            # program, around which XLA may fuse differently (seen at the JAX floor:
            # the value head, 1e-8 apart); eagerly the results are bitwise equal.
            for a, b in zip(
                jax.tree.leaves(getattr(recorded, field)),
                jax.tree.leaves(getattr(plain, field)),
                strict=True,
            ):
                np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
        else:
            _assert_trees_equal(getattr(recorded, field), getattr(plain, field))
    _assert_trees_equal(
        jax.tree.structure(_without_activations(recorded.metrics)),
        jax.tree.structure(plain.metrics),
    )
    assert not is_recording(net) and is_recording(recording)


def test_recording_copy_shares_parameters():
    net = make_mlp([3, 4, 2], nnx.Rngs(0))
    recording = with_recording(net)
    x = jnp.ones((2, 3))
    net.layers[1].linear.bias[...] = jnp.full((2,), 7.0)  # "training" the original
    np.testing.assert_array_equal(recording((), x).output, net((), x).output)
    assert recording.layers[1].wrapped.linear.bias is net.layers[1].linear.bias


def test_two_layer_mlp_activations_equal_hand_computed_layers():
    x = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    for net in (make_mlp([3, 4, 2], nnx.Rngs(0)), MLP(3, (4,), 2, rngs=nnx.Rngs(0))):
        layers = net.layers
        (k0, b0), (k1, b1) = (
            (np.asarray(layer.linear.kernel[...]), np.asarray(layer.linear.bias[...]))
            for layer in layers
        )
        act = (lambda v: np.maximum(v, 0.0)) if isinstance(net, Sequential) else None
        h = x @ k0 + b0
        h = act(h) if act else h / (1.0 + np.exp(-h))  # make_mlp: ReLU; MLP: swish
        y = h @ k1 + b1
        y = act(y) if act else y  # make_mlp activates the last layer, MLP does not
        recording = with_recording(net)
        acts = extract_activations(recording(net.initialize_state(5), x).metrics)
        assert set(acts) == {0, 1}
        np.testing.assert_allclose(acts[0], h, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(acts[1], y, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(acts[1], net(net.initialize_state(5), x).output)


@pytest.mark.parametrize(
    "make",
    [
        lambda: LSTM(3, 5, rngs=nnx.Rngs(0)),
        lambda: LSTM(3, 5, rngs=nnx.Rngs(0), layer_norm=True),
        lambda: MinGRU(3, 5, rngs=nnx.Rngs(0)),
        lambda: LRU(3, 5, rngs=nnx.Rngs(0), state_features=4),
    ],
    ids=["lstm", "lstm_layer_norm", "mingru", "lru"],
)
def test_cell_recorded_activation_equals_its_output_inside_a_scan(make):
    # A cell's activation is its output: the new hidden state h (LSTM, MinGRU), or the
    # LRU's read-out y = Re(h C) + x D. Loss replay (an associative scan for MinGRU
    # and LRU) records the same [T, B, 5].
    cell = make()
    recording = with_recording(Sequential([cell]))
    graphdef, variables = nnx.split(recording)
    T, B = 6, 2
    xs = jax.random.normal(jax.random.key(0), (T, B, 3))
    done = jnp.zeros((T, B), bool).at[3, 1].set(True)

    @jax.jit
    def run(variables, xs, done):
        def step(carry, inputs):
            x, d = inputs
            module = nnx.merge(graphdef, variables)
            out = module(carry, x)
            next_carry = reset_where(module, d, out.next_state)
            return next_carry, (extract_activations(out.metrics), out.next_state, out.output)

        model = nnx.merge(graphdef, variables)
        return jax.lax.scan(step, model.initialize_state(B), (xs, done))[1]

    acts, carries, outputs = run(variables, xs, done)
    assert acts[0].shape == (T, B, 5)
    np.testing.assert_array_equal(acts[0], outputs)
    if "h" in carries[0]:
        np.testing.assert_array_equal(acts[0], carries[0]["h"])
    # And the replay of the whole sequence records the same [T, B, 5], to float32
    # rounding: the replay's program fuses differently (the LayerNorm's statistics
    # moved by 1.3e-6 at XLA's optimization level 0 on a CI clone).
    _, replayed = recording.replay_sequence(recording.initialize_state(B), xs, [()], done)
    np.testing.assert_allclose(extract_activations(replayed.metrics)[0], acts[0], atol=1e-5)


def test_activations_are_keyed_by_container_path():
    net = make_mlp_actor_critic(3, 2, (8,), (6,), rngs=nnx.Rngs(0))
    recording = with_recording(net)
    acts = extract_activations(recording(net.initialize_state(4), jnp.zeros((4, 3))).metrics)
    shapes = {path: np.shape(a) for path, a in flatten_activations(acts).items()}
    assert shapes == {
        "0": (4, 3),  # Normalizer
        "1/action/0/0": (4, 8),  # actor MLP, hidden layer
        "1/action/0/1": (4, 4),  # actor MLP, output (mean, pre-std)
        "1/action/1/action": (4, 2),  # sampler
        "1/action/1/log_likelihood": (4,),
        "1/value/0": (4, 6),  # critic MLP, hidden layer
        "1/value/1": (4, 1),
    }


def test_recording_copy_still_reports_sampler_calls_once():
    recording = with_recording(_two_sampler_net())
    with record_sampler_calls() as calls:
        recording(recording.initialize_state(2), jnp.ones((2, 3)))
    assert sorted(type(c.sampler).__name__ for c in calls) == [
        "CategoricalSampler",
        "NormalTanhSampler",
    ]


def test_recording_twice_warns_and_returns_the_same_network():
    recording = with_recording(make_mlp([3, 2], nnx.Rngs(0)))
    with pytest.warns(UserWarning, match="already recording"):
        again = with_recording(recording)
    assert again is recording
    assert not isinstance(recording.layers[0].wrapped, Recorder)
    with pytest.raises(ValueError, match="already a Recorder"):
        Recorder(recording.layers[0])
    with pytest.raises(TypeError, match="must be a StatefulModule"):
        with_recording(nnx.Linear(2, 2, rngs=nnx.Rngs(0)))


def test_extract_activations_without_activations_is_an_error():
    net = make_mlp([3, 2], nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"hold no activations.*with_recording"):
        extract_activations(net((), jnp.ones((1, 3))).metrics)
    with pytest.raises(ValueError, match="hold no activations"):
        extract_activations({"entropy": jnp.ones(())})
    with pytest.raises(TypeError, match="metrics must be the metrics dict"):
        extract_activations(jnp.ones(3))


def test_original_network_is_untouched_and_uses_no_recorder():
    net = make_lstm_actor_critic(3, 2, 6, (8,), (8,), rngs=nnx.Rngs(0))
    before = nnx.graphdef(net)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with_recording(net)
    assert nnx.graphdef(net) == before
    assert "Recorder" not in repr(before)
