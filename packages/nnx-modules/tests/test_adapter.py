"""Tests of nnx_ppo.networks.adapter.PPOAdapter, including the spec's examples verbatim."""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.networks.adapter import PPOAdapter, is_sampler_dict
from nnx_ppo.networks.containers import Parallel, Sequential
from nnx_ppo.networks.feedforward import MLP, Dense
from nnx_ppo.networks.normalizer import Normalizer
from nnx_ppo.networks.sampling_layers import (
    CategoricalSampler,
    NormalSampler,
    NormalTanhSampler,
)
from nnx_ppo.networks.types import PPONetworkOutput, StatelessModule, reset_where
from nnx_ppo.networks.utils import Filter, Map

B, OBS, A = 4, 5, 3


def _obs(seed: int = 0, batch: int = B) -> jax.Array:
    return jax.random.normal(jax.random.key(seed), (batch, OBS))


class _Const(StatelessModule):
    """Emits a fixed tree, whatever the input (to feed the adapter chosen outputs)."""

    def __init__(self, tree: object) -> None:
        self.tree = nnx.data(tree)

    def forward(self, x: object) -> object:
        return self.tree


# -- the spec's examples, verbatim ---------------------------------------------------------


def test_spec_minimal_one_actor_one_critic() -> None:
    rngs = nnx.Rngs(0)
    obs_size, action_size = OBS, A
    actor_mlp = MLP(obs_size, (16, 16), 2 * action_size, rngs=rngs)
    critic_mlp = MLP(obs_size, (16, 16), 1, rngs=rngs)

    # The spec's code, verbatim:
    # fmt: off
    network = Sequential([
        Normalizer(obs_size),
        PPOAdapter(
            action=Sequential([actor_mlp, NormalTanhSampler(rngs, entropy_weight=1e-2)]),
            value=critic_mlp,
        ),
    ])
    # fmt: on

    obs = _obs()
    state = network.initialize_state(B)
    out = network(state, obs)
    result = out.output
    assert isinstance(result, PPONetworkOutput)
    assert result.actions.shape == (B, A)
    assert result.loglikelihoods.shape == (B,)
    assert result.value_estimates.shape == (B,)
    # Both ports see the normalizer's output; the critic's [B, 1] is squeezed to [B].
    normalized = network.layers[0](state[0], obs).output
    np.testing.assert_allclose(
        result.value_estimates, critic_mlp((), normalized).output[:, 0], rtol=1e-6
    )
    # The carry is routed per port inside the adapter's slot of the Sequential.
    assert set(out.next_state[1]) == {"action", "value"}
    assert set(out.rollout_extras[1]) == {"action", "value"}
    # The sampler's raw action is the action port's extras (the sampler is layer 1).
    raw = out.rollout_extras[1]["action"][1]
    np.testing.assert_allclose(result.actions, jnp.tanh(raw), rtol=1e-6)
    # Entropy bonus, per sample: -1e-2 * sum_a [0.5 ln(2 pi e) + ln std_a + ln sech^2 u_a],
    # std = softplus(pre_std) + 1e-3 from the actor's second half.
    std = jax.nn.softplus(actor_mlp((), normalized).output[:, A:]) + 1e-3
    log_sech2 = 2.0 * (np.log(2.0) - raw - jax.nn.softplus(-2.0 * raw))
    entropy = jnp.sum(0.5 * np.log(2 * np.pi * np.e) + jnp.log(std) + log_sech2, axis=-1)
    np.testing.assert_allclose(out.regularization_loss, -1e-2 * entropy, rtol=1e-5)
    assert out.regularization_loss.shape == (B,)
    np.testing.assert_allclose(out.metrics[1]["action"][1]["entropy"], entropy.mean(), rtol=1e-5)


def test_spec_multi_head_with_filter_and_map() -> None:
    rngs = nnx.Rngs(1)
    obs_size = OBS
    # A stand-in for a graph that emits named action parameters and values:
    # "a" is a 2-d tanh-Gaussian action ([B, 4] params), "b" a 3-way discrete one.
    graph = Parallel(
        action_a=Dense(obs_size, 4, rngs=rngs),
        action_b=Dense(obs_size, 3, rngs=rngs),
        value_a=Dense(obs_size, 1, rngs=rngs),
        value_b=Dense(obs_size, 1, rngs=rngs),
    )
    sampler_a = NormalTanhSampler(rngs)
    sampler_b = CategoricalSampler(rngs)

    # The spec's code, verbatim:
    # fmt: off
    network = Sequential([
        Normalizer(obs_size),
        graph,                                   # emits {"action_a": ..., "action_b": ...,
                                                 #         "value_a": ...,  "value_b": ...}
        PPOAdapter(
            action=Sequential([
                Filter({"a": "action_a", "b": "action_b"}),   # rename
                Map({"a": sampler_a, "b": sampler_b}),         # per-key dispatch
            ]),
            value=Filter({"a": "value_a", "b": "value_b"}),
        ),
    ])
    # fmt: on

    state = network.initialize_state(B)
    out = network(state, _obs(1))
    result = out.output
    assert set(result.actions) == {"a", "b"}
    assert result.actions["a"].shape == (B, 2)
    assert result.actions["b"].shape == (B,) and result.actions["b"].dtype == jnp.int32
    assert jax.tree.structure(result.loglikelihoods) == jax.tree.structure(result.actions)
    assert {k: v.shape for k, v in result.loglikelihoods.items()} == {"a": (B,), "b": (B,)}
    assert {k: v.shape for k, v in result.value_estimates.items()} == {"a": (B,), "b": (B,)}
    # The values are the graph's value heads, squeezed.
    trunk = network.layers[1](state[1], network.layers[0](state[0], _obs(1)).output).output
    np.testing.assert_allclose(result.value_estimates["b"], trunk["value_b"][:, 0], rtol=1e-6)

    # Replay with the emitted extras reproduces the log-likelihoods of both heads.
    replay = network(state, _obs(1), out.rollout_extras)
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6),
        replay.output.loglikelihoods,
        result.loglikelihoods,
    )


def test_spec_shared_trunk() -> None:
    rngs = nnx.Rngs(2)
    obs_size, hidden = OBS, 8
    shared_trunk = MLP(obs_size, (16,), hidden, rngs=rngs, activate_final=True)
    actor_head = Dense(hidden, 2 * A, rngs=rngs)
    critic_head = Dense(hidden, 1, rngs=rngs)
    sampler = NormalTanhSampler(rngs)

    # The spec's code, verbatim:
    # fmt: off
    network = Sequential([
        Normalizer(obs_size),
        shared_trunk,                            # heavy computation
        PPOAdapter(
            action=Sequential([actor_head, sampler]),
            value=critic_head,
        ),
    ])
    # fmt: on

    network.eval()  # deterministic: the action is tanh of the actor head's mean
    state = network.initialize_state(B)
    obs = _obs(2)
    out = network(state, obs)
    features = shared_trunk((), network.layers[0](state[0], obs).output).output
    mean = actor_head((), features).output[:, :A]
    np.testing.assert_allclose(out.output.actions, jnp.tanh(mean), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        out.output.value_estimates, critic_head((), features).output[:, 0], rtol=1e-6
    )


# -- routing, with hand-derived numbers ----------------------------------------------------


def _routing_network(tm: types.SimpleNamespace) -> PPOAdapter:
    # Action port: Counter(start=10) adds its count to x, then a Normal sampler.
    # Value port: Counter(start=100, reg 0.5), StatsRecorder (doubles), first column.
    return PPOAdapter(
        action=Sequential([tm.Counter(start=10, reg_weight=1.0), NormalSampler(nnx.Rngs(0))]),
        value=Sequential(
            [
                tm.Counter(start=100, reg_weight=0.5),
                tm.StatsRecorder(),
                Filter(lambda x: x[:, :1]),
            ]
        ),
    )


def test_state_extras_losses_metrics_and_statistics_are_routed_per_port(
    testing_modules: types.SimpleNamespace,
) -> None:
    tm = testing_modules
    adapter = _routing_network(tm)
    x = jnp.array([[0.0, 0.0], [1.0, 1.0]])  # A = 1: column 0 mean, column 1 pre-std
    state = adapter.initialize_state(2)
    assert jax.tree.map(lambda a: a.tolist(), state) == {
        "action": [{"count": [10, 10]}, ()],
        "value": [{"count": [100, 100]}, (), ()],
    }

    out = adapter(state, x)
    # value = 2 * (x[:, 0] + 100) = (200, 202); mean of the sampler = x[:, 0] + 10.
    np.testing.assert_allclose(out.output.value_estimates, [200.0, 202.0])
    # regularization: action Counter 1 * 10, sampler 0 * entropy, value Counter 0.5 * 100.
    np.testing.assert_allclose(out.regularization_loss, [60.0, 60.0])
    np.testing.assert_array_equal(out.next_state["action"][0]["count"], [11, 11])
    np.testing.assert_array_equal(out.next_state["value"][0]["count"], [101, 101])
    assert set(out.metrics) == {"action", "value"}
    assert float(out.metrics["action"][0]["count"]) == 10.0
    assert float(out.metrics["value"][0]["count"]) == 100.0
    extras = out.rollout_extras
    np.testing.assert_array_equal(extras["action"][0], [10, 10])
    np.testing.assert_array_equal(extras["value"][0], [100, 100])
    np.testing.assert_allclose(extras["value"][1], x + 100.0)

    # Replay from the same carry reproduces the rollout exactly.
    replay = adapter(state, x, extras)
    np.testing.assert_array_equal(replay.output.loglikelihoods, out.output.loglikelihoods)
    np.testing.assert_array_equal(replay.output.actions, out.output.actions)

    # update_statistics reaches the StatsRecorder inside the value port:
    # its inputs are x + count, count 100 then 101 (the carry advances):
    # step 1: 100 + 100 + 101 + 101 = 402; step 2: 101 + 101 + 102 + 102 = 406; total 808.
    _, stacked = tm.rollout(adapter, state, [x, x])
    adapter.update_statistics(stacked)
    recorder = adapter.value.layers[1]
    assert int(recorder.calls[...]) == 1
    assert int(recorder.samples[...]) == 4
    np.testing.assert_allclose(recorder.total[...], 808.0)


def test_reset_state_routes_per_port(testing_modules: types.SimpleNamespace) -> None:
    adapter = _routing_network(testing_modules)
    x = jnp.zeros((3, 2))
    state = adapter.initialize_state(3)
    for _ in range(2):
        state = adapter(state, x).next_state
    reset = reset_where(adapter, jnp.array([True, False, True]), state)
    np.testing.assert_array_equal(reset["action"][0]["count"], [10, 12, 10])
    np.testing.assert_array_equal(reset["value"][0]["count"], [100, 102, 100])
    fresh = adapter.reset_state(state)
    as_lists = lambda tree: jax.tree.map(lambda a: a.tolist(), tree)
    assert as_lists(fresh) == as_lists(adapter.initialize_state(3))


def test_stateless_ports_accept_empty_carry() -> None:
    rngs = nnx.Rngs(0)
    adapter = PPOAdapter(
        action=Sequential([Dense(OBS, 2, rngs=rngs), CategoricalSampler(rngs)]),
        value=Dense(OBS, 1, rngs=rngs),
    )
    out = adapter((), _obs())
    assert out.next_state == ()
    assert adapter.reset_state(()) == ()
    assert out.output.actions.shape == (B,)
    # Replay with extras routed per port.
    replay = adapter((), _obs(), out.rollout_extras)
    np.testing.assert_array_equal(replay.output.actions, out.output.actions)


# -- the action-port walk and the value squeeze --------------------------------------------


def _sampler_dict(batch: int = B) -> dict[str, jax.Array]:
    return {"action": jnp.zeros((batch, 2)), "log_likelihood": jnp.zeros((batch,))}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (jnp.ones((B, 1)), (B,)),
        (jnp.ones((B,)), (B,)),
        (jnp.ones((1, 1)), (1,)),
        (jnp.ones((1,)), (1,)),  # a batch of one is not squeezed to a scalar
        ({"x": jnp.ones((B, 1)), "y": {"z": jnp.ones((B,))}}, {"x": (B,), "y": {"z": (B,)}}),
    ],
)
def test_value_leaves_are_squeezed_to_batch(value: object, expected: object) -> None:
    batch = jax.tree.leaves(value)[0].shape[0]
    adapter = PPOAdapter(action=_Const(_sampler_dict(batch)), value=_Const(value))
    out = adapter((), jnp.zeros((batch, 1))).output
    shapes = jax.tree.map(lambda v: v.shape, out.value_estimates)
    assert shapes == expected


def test_nested_sampler_dicts_split_into_matching_trees() -> None:
    tree = {"arm": {"left": _sampler_dict(), "right": _sampler_dict()}, "leg": _sampler_dict()}
    tree["leg"] = {"action": jnp.ones((B, 3)), "log_likelihood": jnp.full((B,), -2.0)}
    adapter = PPOAdapter(action=_Const(tree), value=_Const(jnp.zeros((B, 1))))
    out = adapter((), jnp.zeros((B, 1))).output
    assert jax.tree.map(jnp.shape, out.actions) == {
        "arm": {"left": (B, 2), "right": (B, 2)},
        "leg": (B, 3),
    }
    np.testing.assert_array_equal(out.loglikelihoods["leg"], np.full(B, -2.0))
    assert is_sampler_dict(tree["leg"]) and not is_sampler_dict(tree["arm"])
    assert not is_sampler_dict({"action": 1, "log_likelihood": 2, "extra": 3})


def test_bad_value_shape_raises_naming_the_path() -> None:
    adapter = PPOAdapter(
        action=_Const(_sampler_dict()), value=_Const({"critic": jnp.zeros((B, 3))})
    )
    with pytest.raises(ValueError, match=r"\['critic'\].*\(4, 3\).*\[B\] or \[B, 1\]"):
        adapter((), jnp.zeros((B, 1)))


def test_action_port_must_emit_sampler_dicts() -> None:
    bare = PPOAdapter(action=_Const(jnp.zeros((B, 2))), value=_Const(jnp.zeros((B,))))
    with pytest.raises(ValueError, match=r"<root>.*not a sampler dict.*ActionSampler"):
        bare((), jnp.zeros((B, 1)))
    mixed = PPOAdapter(
        action=_Const({"ok": _sampler_dict(), "raw": jnp.zeros((B, 2))}),
        value=_Const(jnp.zeros((B,))),
    )
    with pytest.raises(ValueError, match=r"\['raw'\].*not a sampler dict"):
        mixed((), jnp.zeros((B, 1)))
    empty = PPOAdapter(action=_Const({}), value=_Const(jnp.zeros((B,))))
    with pytest.raises(ValueError, match="no sampler dict"):
        empty((), jnp.zeros((B, 1)))


def test_construction_and_routing_errors() -> None:
    rngs = nnx.Rngs(0)
    with pytest.raises(TypeError, match=r"action must be a StatefulModule, got Linear"):
        PPOAdapter(action=nnx.Linear(2, 2, rngs=rngs), value=Dense(2, 1, rngs=rngs))
    with pytest.raises(TypeError, match=r"value must be a StatefulModule"):
        PPOAdapter(action=NormalTanhSampler(rngs), value=lambda x: x)  # type: ignore[arg-type]
    adapter = PPOAdapter(action=_Const(_sampler_dict()), value=_Const(jnp.zeros((B,))))
    with pytest.raises(ValueError, match=r"state must be a dict with keys \['action', 'value'\]"):
        adapter({"action": ()}, jnp.zeros((B, 1)))
    with pytest.raises(ValueError, match=r"rollout_extras must be a dict.*got a list"):
        adapter((), jnp.zeros((B, 1)), [(), ()])
    with pytest.raises(ValueError, match="rollout_extras must be a dict"):
        adapter.update_statistics({"value": ()})


def test_ports_keep_their_parameter_paths() -> None:
    # The ports are attributes, so checkpoints and exports name their parameters
    # "action/..." and "value/..." (not under a container dict).
    rngs = nnx.Rngs(0)
    adapter = PPOAdapter(
        action=Sequential([Dense(3, 4, rngs=rngs), NormalTanhSampler(rngs)]),
        value=Dense(3, 1, rngs=rngs),
    )
    paths = {
        "/".join(str(getattr(k, "key", k)) for k in path)
        for path, _ in jax.tree_util.tree_leaves_with_path(
            nnx.state(adapter, nnx.Param), is_leaf=lambda v: isinstance(v, nnx.Variable)
        )
    }
    assert paths == {
        "action/layers/0/linear/kernel",
        "action/layers/0/linear/bias",
        "value/linear/kernel",
        "value/linear/bias",
    }, paths


def test_eval_makes_the_whole_network_deterministic_and_train_restores_sampling() -> None:
    rngs = nnx.Rngs(3)
    network = Sequential(
        [
            Dense(OBS, 8, rngs=rngs, activation=nnx.tanh),
            PPOAdapter(
                action=Sequential([Dense(8, 2 * A, rngs=rngs), NormalTanhSampler(rngs)]),
                value=Dense(8, 1, rngs=rngs),
            ),
        ]
    )
    state = network.initialize_state(B)
    obs = _obs(3)
    network.eval()
    first, second = network(state, obs), network(state, obs)
    np.testing.assert_array_equal(first.output.actions, second.output.actions)
    network.train()
    third, fourth = network(state, obs), network(state, obs)
    assert not np.allclose(third.output.actions, fourth.output.actions)
    assert not np.allclose(third.output.actions, first.output.actions)
