"""make_graph_actor_critic and control_graph: structure, draws, outputs, refusals."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.graph import PopulationGraph, control_graph, make_graph_actor_critic
from nnx_ppo.networks.normalizer import Normalizer
from nnx_ppo.networks.sampling_layers import CategoricalSampler, NormalTanhSampler


def _adapter(net: nnx.Module) -> PPOAdapter:
    adapter = net.layers[-1]
    assert isinstance(adapter, PPOAdapter)
    return adapter


def test_each_port_owns_a_chain_with_an_orthogonal_self_loop() -> None:
    net = make_graph_actor_critic(3, 2, 16, (8, 8), (12,), rngs=nnx.Rngs(0))
    assert isinstance(net.layers[0], Normalizer)
    adapter = _adapter(net)
    actor, critic = adapter.action.layers[0], adapter.value.layers[0]
    assert isinstance(actor, PopulationGraph) and isinstance(critic, PopulationGraph)
    chain = ["obs->r", "r->r@1", "r->h0", "h0->h1", "h1->action_params"]
    assert sorted(actor.transforms) == sorted(chain)
    assert sorted(critic.transforms) == sorted(["obs->r", "r->r@1", "r->h0", "h0->value"])
    assert isinstance(adapter.action.layers[-1], NormalTanhSampler)
    for graph in (actor, critic):
        w = np.asarray(graph.transforms["r->r@1"].linear.kernel[...])
        np.testing.assert_allclose(w.T @ w, np.eye(16), atol=1e-5)
    # The ports share no parameters: the value's gradients never reach the actor's graph.
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 3))
    grads = nnx.grad(lambda n: n(n.initialize_state(2), x).output.value_estimates.sum())(net)
    flat = jax.tree_util.tree_flatten_with_path(grads)[0]
    by_port = {"action": [], "value": []}
    for path, g in flat:
        keys = [str(getattr(k, "key", getattr(k, "name", k))) for k in path]
        port = "action" if "action" in keys else "value" if "value" in keys else None
        if port:
            by_port[port].append(float(jnp.abs(g).max()))
    assert by_port["action"] and max(by_port["action"]) == 0.0
    assert by_port["value"] and max(by_port["value"]) > 0.0


def test_it_is_the_hand_built_composition_drawn_in_the_same_order() -> None:
    # Sampler, then the actor's graph, then the critic's, as documented: the same Rngs
    # give the same parameters, and the same outputs step after step.
    net = make_graph_actor_critic(4, 1, 8, (6,), (5, 5), rngs=nnx.Rngs(3))
    rngs = nnx.Rngs(3)
    sampler = NormalTanhSampler(rngs, 1e-2, 1e-3)
    actor = control_graph(rngs, 4, "action_params", 2, (6,), 8)
    critic = control_graph(rngs, 4, "value", 1, (5, 5), 8)
    adapter = _adapter(net)
    for built, by_hand in ((adapter.action.layers[0], actor), (adapter.value.layers[0], critic)):
        got, want = nnx.state(built, nnx.Param), nnx.state(by_hand, nnx.Param)
        assert jax.tree.structure(got) == jax.tree.structure(want)
        for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert type(sampler) is type(adapter.action.layers[-1])
    state = net.initialize_state(3)
    xs = jax.random.normal(jax.random.PRNGKey(1), (2, 3, 4))
    a_state, c_state = actor.initialize_state(3), critic.initialize_state(3)
    for x in xs:
        out = net(state, x)
        state = out.next_state
        # With the Normalizer's initial statistics the graphs see the raw observation.
        a_out = actor(a_state, {"obs": x})
        c_out = critic(c_state, {"obs": x})
        a_state, c_state = a_out.next_state, c_out.next_state
        value = c_out.output["value"][:, 0]
        np.testing.assert_allclose(out.output.value_estimates, value, atol=1e-6)
        assert out.output.actions.shape == (3, 1)


def test_categorical_actions_and_no_normalizer() -> None:
    net = make_graph_actor_critic(
        5, 4, 8, (), (), rngs=nnx.Rngs(0), action_distribution="categorical", normalize_obs=False
    )
    assert not isinstance(net.layers[0], Normalizer)
    adapter = _adapter(net)
    assert isinstance(adapter.action.layers[-1], CategoricalSampler)
    transforms = adapter.action.layers[0].transforms
    assert sorted(transforms) == sorted(["obs->r", "r->r@1", "r->action_params"])
    out = net(net.initialize_state(2), jnp.ones((2, 5))).output
    assert out.actions.shape == (2,) and out.value_estimates.shape == (2,)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"rngs": 0}, TypeError, "rngs must be an nnx.Rngs"),
        ({"normalize_obs": 1}, TypeError, "normalize_obs must be True or False"),
        ({"action_distribution": "beta"}, ValueError, "action_distribution='beta'"),
        ({"obs_size": (3,)}, ValueError, r"obs_size must be a positive int, got \(3,\)"),
        ({"memory_size": 0}, ValueError, "memory_size must be a positive int, got 0"),
        ({"actor_hidden_sizes": (8, -1)}, ValueError, r"actor_hidden_sizes\[1\] must be"),
        ({"critic_hidden_sizes": 64}, ValueError, "critic_hidden_sizes must be a sequence"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict, error: type, match: str) -> None:
    args = {"obs_size": 3, "action_size": 1, "rngs": nnx.Rngs(0), **kwargs}
    with pytest.raises(error, match=match):
        make_graph_actor_critic(**args)
