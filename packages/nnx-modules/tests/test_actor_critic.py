"""assemble_actor_critic: layout, draw order, the factories' checks, refusals."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.networks.actor_critic import ActorCriticPorts, assemble_actor_critic
from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.containers import Sequential
from nnx_ppo.networks.feedforward import Dense
from nnx_ppo.networks.normalizer import Normalizer
from nnx_ppo.networks.recurrent import GRU
from nnx_ppo.networks.sampling_layers import CategoricalSampler, NormalSampler
from nnx_ppo.networks.utils import Flattener


def _dense_ports(rngs: nnx.Rngs, seen: list[tuple[int, int]]):
    def ports(features: int, action_params: int) -> ActorCriticPorts:
        seen.append((features, action_params))
        return ActorCriticPorts(
            action=Dense(features, action_params, rngs=rngs),
            value=Dense(features, 1, rngs=rngs),
        )

    return ports


def test_the_sampler_is_forked_before_the_ports_draw() -> None:
    # Same Rngs, same order by hand: sampler, then the actor's Dense, then the critic's.
    rngs, seen = nnx.Rngs(7), []
    net = assemble_actor_critic(
        _dense_ports(rngs, seen), 5, 3, rngs=rngs, action_distribution="normal", std_scale=0.5
    )
    assert seen == [(5, 6)]  # F = 5, two parameters per action dimension
    by_hand_rngs = nnx.Rngs(7)
    sampler = NormalSampler(by_hand_rngs, 1e-2, 1e-3, 0.5)
    actor = Dense(5, 6, rngs=by_hand_rngs)
    critic = Dense(5, 1, rngs=by_hand_rngs)
    by_hand = Sequential(
        [Normalizer(5), PPOAdapter(action=Sequential([actor, sampler]), value=critic)]
    )
    got, want = nnx.state(net), nnx.state(by_hand)
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    adapter = net.layers[1]
    assert isinstance(adapter.action.layers[-1], NormalSampler)
    assert adapter.action.layers[-1].std_scale == 0.5
    assert isinstance(adapter.value, Dense)  # one module: the port itself, not wrapped


def test_trunk_lists_and_dict_observations_are_placed_as_documented() -> None:
    rngs, seen = nnx.Rngs(0), []

    def ports(features: int, action_params: int) -> ActorCriticPorts:
        seen.append((features, action_params))
        return ActorCriticPorts(
            action=[Dense(4, 4, rngs=rngs), Dense(4, action_params, rngs=rngs)],
            value=[Dense(4, 1, rngs=rngs)],
            trunk=[GRU(features, 4, rngs=rngs)],
        )

    net = assemble_actor_critic(
        ports, {"b": (2, 2), "a": 3}, 5, rngs=rngs, action_distribution="categorical"
    )
    assert seen == [(7, 5)]  # 3 + 2 * 2 features; one logit per discrete action
    names = [type(layer).__name__ for layer in net.layers]
    assert names == ["Normalizer", "Filter", "Flattener", "GRU", "PPOAdapter"]
    adapter = net.layers[-1]
    assert isinstance(adapter.value, Sequential) and len(adapter.value.layers) == 1
    assert isinstance(adapter.action.layers[-1], CategoricalSampler)
    obs = {"a": jnp.ones((2, 3)), "b": jnp.ones((2, 2, 2)), "ignored": jnp.ones((2, 9))}
    out = net(net.initialize_state(2), obs).output
    assert out.actions.shape == (2,) and out.actions.dtype == jnp.int32
    assert out.value_estimates.shape == (2,)


def test_without_normalizer_a_tuple_observation_is_only_flattened() -> None:
    rngs = nnx.Rngs(0)
    net = assemble_actor_critic(_dense_ports(rngs, []), (2, 3), 1, rngs=rngs, normalize_obs=False)
    assert isinstance(net.layers[0], Flattener) and not isinstance(net.layers[0], Normalizer)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"rngs": 0}, TypeError, r"^my_factory: rngs must be an nnx.Rngs, got int"),
        ({"action_distribution": "beta"}, ValueError, r"^my_factory: action_distribution="),
        ({"normalize_obs": 1}, TypeError, r"^my_factory: normalize_obs must be True or False"),
        ({"obs_size": {}}, ValueError, r"^my_factory: obs_size is an empty dict"),
        ({"action_size": 0}, ValueError, r"^my_factory: action_size must be a positive int"),
        ({"min_std": 0.0}, ValueError, r"min_std"),
    ],
)
def test_bad_arguments_are_named_with_the_caller(kwargs: dict, error: type, match: str) -> None:
    args = {"obs_size": 3, "action_size": 1, "rngs": nnx.Rngs(0), **kwargs}
    calls: list[tuple[int, int]] = []
    with pytest.raises(error, match=match):
        assemble_actor_critic(_dense_ports(nnx.Rngs(0), calls), caller="my_factory", **args)
    assert calls == []  # refused before any layer is built


def test_ports_must_return_actor_critic_ports() -> None:
    def ports(features: int, action_params: int) -> object:
        return (
            Dense(features, action_params, rngs=nnx.Rngs(0)),
            Dense(features, 1, rngs=nnx.Rngs(0)),
        )

    with pytest.raises(TypeError, match=r"must return an ActorCriticPorts, got tuple"):
        assemble_actor_critic(ports, 3, 1, rngs=nnx.Rngs(0))  # type: ignore[arg-type]
