"""Tests of nnx_ppo.networks.factories and of the recurrent factories it re-exports
(nnx_ppo.networks.recurrent_actor_critic): structure, dict observations, validation."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.networks import factories, recurrent_actor_critic
from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.containers import Sequential
from nnx_ppo.networks.factories import make_mlp_actor_critic
from nnx_ppo.networks.feedforward import MLP
from nnx_ppo.networks.linear_recurrent import LRU, MinGRU
from nnx_ppo.networks.normalizer import Normalizer
from nnx_ppo.networks.recurrent import GRU, LSTM
from nnx_ppo.networks.recurrent_actor_critic import (
    make_lstm_actor_critic,
    make_recurrent_actor_critic,
)
from nnx_ppo.networks.residual import ResidualMLP
from nnx_ppo.networks.sampling_layers import (
    CategoricalSampler,
    NormalSampler,
    NormalTanhSampler,
)
from nnx_ppo.networks.types import PPONetworkOutput, reset_where
from nnx_ppo.networks.utils import Flattener

B = 3


def _kernel_shapes(module: nnx.Module) -> list[tuple[int, ...]]:
    """Shapes of the 2-d parameters (Linear kernels), in layer order."""
    return [
        leaf.shape
        for _, leaf in sorted(
            nnx.to_flat_state(nnx.state(module, nnx.Param)),
            key=lambda item: tuple(str(p).zfill(4) for p in item[0]),
        )
        if leaf.ndim == 2
    ]


def test_mlp_default_structure_is_the_spec_minimal_network() -> None:
    net = make_mlp_actor_critic(7, 2, rngs=nnx.Rngs(0))
    assert isinstance(net, Sequential) and len(net.layers) == 2
    normalizer, adapter = net.layers
    assert isinstance(normalizer, Normalizer) and isinstance(adapter, PPOAdapter)
    actor, sampler = adapter.action.layers
    assert isinstance(actor, MLP) and isinstance(adapter.value, MLP)
    assert isinstance(sampler, NormalTanhSampler)
    assert sampler.entropy_weight == 1e-2 and sampler.min_std == 1e-3
    # actor (32,) * 4 -> 2A = 4 outputs; critic (256,) * 5 -> 1.
    assert _kernel_shapes(actor) == [(7, 32), (32, 32), (32, 32), (32, 32), (32, 4)]
    assert _kernel_shapes(adapter.value) == [(7, 256)] + [(256, 256)] * 4 + [(256, 1)]

    out = net(net.initialize_state(B), jnp.ones((B, 7)))
    assert isinstance(out.output, PPONetworkOutput)
    assert out.output.actions.shape == (B, 2)
    assert out.output.loglikelihoods.shape == (B,)
    assert out.output.value_estimates.shape == (B,)
    assert np.all(np.abs(out.output.actions) < 1.0)


@pytest.mark.parametrize(
    ("distribution", "sampler_cls", "action_shape", "actor_out"),
    [
        ("normal", NormalSampler, (B, 3), 6),
        ("categorical", CategoricalSampler, (B,), 3),
    ],
)
def test_mlp_action_distributions(
    distribution: Any, sampler_cls: type, action_shape: tuple, actor_out: int
) -> None:
    net = make_mlp_actor_critic(
        4,
        3,
        (8,),
        (8,),
        rngs=nnx.Rngs(0),
        action_distribution=distribution,
        entropy_weight=0.5,
        normalize_obs=False,
    )
    assert len(net.layers) == 1  # no normalizer
    actor, sampler = net.layers[0].action.layers
    assert type(sampler) is sampler_cls and sampler.entropy_weight == 0.5
    assert _kernel_shapes(actor)[-1] == (8, actor_out)
    out = net(net.initialize_state(B), jnp.ones((B, 4)))
    assert out.output.actions.shape == action_shape


def test_dict_observations_are_selected_normalized_and_flattened_in_sorted_order() -> None:
    obs_size = {"pos": 3, "vel": {"lin": 2, "ang": (2, 2)}}
    net = make_mlp_actor_critic(obs_size, 2, (8,), (8,), rngs=nnx.Rngs(0))
    assert isinstance(net.layers[0], Normalizer)
    assert isinstance(net.layers[2], Flattener)
    # Features: pos 3 + vel/ang 4 + vel/lin 2 = 9.
    assert _kernel_shapes(net.layers[-1].value)[0] == (9, 8)

    keys = jax.random.split(jax.random.key(0), 4)
    obs = {
        "pos": jax.random.normal(keys[0], (B, 3)),
        "vel": {
            "lin": jax.random.normal(keys[1], (B, 2)),
            "ang": jax.random.normal(keys[2], (B, 2, 2)),
        },
        "privileged": jax.random.normal(keys[3], (B, 5)),  # not in obs_size: dropped
    }
    # Non-trivial statistics so normalization is visible: mean 1, var 4 for every leaf
    # ([T=2, B=1] data 1 - 2 and 1 + 2 per feature).
    spec_obs = {"pos": obs["pos"], "vel": obs["vel"]}
    stats = jax.tree.map(lambda x: jnp.stack([x[:1] * 0 - 1.0, x[:1] * 0 + 3.0]), spec_obs)
    net.layers[0].update_statistics(stats)
    net.eval()
    out = net(net.initialize_state(B), obs)
    # Same numbers by hand: (x - 1) / 2 per leaf, concatenated pos | vel/ang | vel/lin.
    flat = jnp.concatenate(
        [obs["pos"], obs["vel"]["ang"].reshape(B, 4), obs["vel"]["lin"]], axis=-1
    )
    critic = net.layers[-1].value
    expected = critic((), (flat - 1.0) / 2.0).output[:, 0]
    np.testing.assert_allclose(out.output.value_estimates, expected, rtol=1e-4, atol=1e-5)


def test_tuple_observation_is_flattened() -> None:
    net = make_mlp_actor_critic((2, 3), 1, (4,), (4,), rngs=nnx.Rngs(0), normalize_obs=False)
    assert isinstance(net.layers[0], Flattener)
    out = net(net.initialize_state(B), jnp.ones((B, 2, 3)))
    assert out.output.actions.shape == (B, 1)


@pytest.mark.parametrize("name", recurrent_actor_critic.__all__)
def test_factories_re_exports_the_recurrent_factories(name: str) -> None:
    # `from nnx_ppo.networks.factories import make_lstm_actor_critic` keeps working.
    assert name in factories.__all__
    assert getattr(factories, name) is getattr(recurrent_actor_critic, name)


@pytest.mark.parametrize("shared", [False, True])
def test_lstm_actor_critic_structure_and_memory(shared: bool) -> None:
    net = make_lstm_actor_critic(5, 2, 8, (16,), (16,), rngs=nnx.Rngs(0), shared_lstm=shared)
    lstms = [m for _, m in nnx.iter_graph(net) if isinstance(m, LSTM)]
    assert len(lstms) == (1 if shared else 2)
    state = net.initialize_state(B)
    if shared:
        assert isinstance(net.layers[1], LSTM)
        assert state[1]["h"].shape == (B, 8)
    else:
        assert isinstance(net.layers[1].action.layers[0], LSTM)
        assert isinstance(net.layers[1].value.layers[0], LSTM)
        assert state[1]["action"][0]["c"].shape == (B, 8)
        assert state[1]["value"][0]["h"].shape == (B, 8)
    _check_memory_and_reset(net, state)


def _check_memory_and_reset(net: Sequential, state: Any) -> None:
    """The network remembers its input, and a reset of env 0 forgets it there only."""
    net.eval()
    x0 = jnp.ones((B, 5))
    x1 = jnp.zeros((B, 5))
    first = net(state, x0)
    # The memory of x0 changes the response to x1 ...
    with_memory = net(first.next_state, x1).output
    fresh = net(state, x1).output
    assert not np.allclose(with_memory.value_estimates, fresh.value_estimates)
    assert not np.allclose(with_memory.actions, fresh.actions)
    # ... and resetting environment 0 forgets it there only.
    reset = reset_where(net, jnp.array([True, False, False]), first.next_state)
    after = net(reset, x1).output
    np.testing.assert_allclose(after.value_estimates[0], fresh.value_estimates[0], rtol=1e-6)
    np.testing.assert_allclose(
        after.value_estimates[1:], with_memory.value_estimates[1:], rtol=1e-6
    )


@pytest.mark.parametrize(
    ("cell", "layer_norm", "shared", "cls"),
    [
        ("lstm", True, False, LSTM),
        ("gru", False, True, GRU),
        ("mingru", False, False, MinGRU),
        ("lru", False, True, LRU),
    ],
)
def test_recurrent_actor_critic_structure_and_memory(
    cell: Any, layer_norm: bool, shared: bool, cls: type
) -> None:
    sizes = {"torso_size": 6, "torso_blocks": 2}
    kwargs = {"cell": cell, "layer_norm": layer_norm, "shared": shared, **sizes}
    net = make_recurrent_actor_critic(5, 2, 8, (16,), (16,), rngs=nnx.Rngs(0), **kwargs)
    ports = (
        [net.layers[1:3]] if shared else [net.layers[1].action.layers, net.layers[1].value.layers]
    )
    for torso, memory in (layers[:2] for layers in ports):
        assert isinstance(torso, ResidualMLP) and isinstance(memory, cls)
        assert (torso.in_features, torso.out_features, len(torso.blocks)) == (5, 6, 2)
        assert (memory.in_features, memory.hidden_features) == (6, 8)
        assert getattr(memory, "layer_norm", False) == layer_norm
    _check_memory_and_reset(net, net.initialize_state(B))


def test_lstm_trainable_initial_state_and_categorical() -> None:
    net = make_lstm_actor_critic(
        3,
        4,
        6,
        (),
        (),
        rngs=nnx.Rngs(1),
        trainable_initial_state=True,
        action_distribution="categorical",
    )
    lstm = net.layers[1].action.layers[0]
    assert lstm.trainable_initial_state
    out = net(net.initialize_state(B), jnp.ones((B, 3)))
    assert out.output.actions.shape == (B,) and out.output.actions.dtype == jnp.int32


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"obs_size": 0}, ValueError, r"obs_size=0 has a non-positive size"),
        ({"obs_size": {}}, ValueError, r"obs_size is an empty dict"),
        ({"obs_size": {"a": -2}}, ValueError, r"obs_size\['a'\]=-2"),
        ({"obs_size": {"a": {"b": "x"}}}, TypeError, r"obs_size\['a'\]\['b'\]='x'"),
        ({"obs_size": 3.0}, TypeError, r"obs_size=3.0 \(float\)"),
        ({"obs_size": {1: 3}}, TypeError, r"non-string key 1"),
        ({"action_size": 0}, ValueError, r"action_size must be a positive int, got 0"),
        ({"action_size": True}, ValueError, r"action_size"),
        ({"actor_hidden_sizes": "32"}, ValueError, r"actor_hidden_sizes.*'32'"),
        ({"critic_hidden_sizes": (32, 0)}, ValueError, r"critic_hidden_sizes.*\(32, 0\)"),
        ({"rngs": 0}, TypeError, r"rngs must be an nnx.Rngs, got int"),
        ({"action_distribution": "beta"}, ValueError, r"action_distribution='beta'"),
        ({"normalize_obs": "yes"}, TypeError, r"normalize_obs"),
        ({"entropy_weight": -1.0}, ValueError, r"entropy_weight"),
        ({"min_std": 0.0}, ValueError, r"min_std"),
    ],
)
@pytest.mark.parametrize(
    "factory", [make_mlp_actor_critic, make_lstm_actor_critic, make_recurrent_actor_critic]
)
def test_bad_arguments_raise(factory: Any, kwargs: dict, error: type, match: str) -> None:
    args: dict[str, Any] = {"obs_size": 4, "action_size": 2, "rngs": nnx.Rngs(0)}
    args.update(kwargs)
    with pytest.raises(error, match=match):
        factory(**args)


def test_lstm_specific_bad_arguments_raise() -> None:
    with pytest.raises(ValueError, match=r"make_lstm_actor_critic: lstm_size.*got 0"):
        make_lstm_actor_critic(4, 2, 0, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match=r"shared_lstm must be True or False"):
        make_lstm_actor_critic(4, 2, rngs=nnx.Rngs(0), shared_lstm=1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"cell": "transformer"}, ValueError, r"cell='transformer' is not one of \['lstm', 'gru'"),
        ({"cell": "lru", "layer_norm": True}, ValueError, r"layer_norm=True .*cell='lru' has no"),
        ({"layer_norm": 1}, TypeError, r"layer_norm must be True or False, got 1"),
        ({"hidden_size": 0}, ValueError, r"hidden_size must be a positive int, got 0"),
        ({"torso_size": -3}, ValueError, r"torso_size must be a positive int, got -3"),
        ({"torso_blocks": -1}, ValueError, r"torso_blocks must be an int >= 0, got -1"),
        ({"torso_blocks": 1.5}, TypeError, r"torso_blocks must be an int, got float 1.5"),
        ({"shared": "no"}, TypeError, r"shared must be True or False, got 'no'"),
        ({"shared": True, "critic_obs": "x"}, ValueError, r"shared=True feeds one memory"),
    ],
)
def test_recurrent_specific_bad_arguments_raise(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        make_recurrent_actor_critic(4, 2, rngs=nnx.Rngs(0), **kwargs)
