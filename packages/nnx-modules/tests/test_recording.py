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


def test_recording_does_not_change_the_network_or_its_output():
    net, reference = _two_sampler_net(), _two_sampler_net()
    x = jnp.ones((2, 3))
    with record_sampler_calls():
        recorded = net(net.initialize_state(2), x).output.actions
    plain = reference(reference.initialize_state(2), x).output.actions
    for a, b in zip(jax.tree.leaves(recorded), jax.tree.leaves(plain), strict=True):
        np.testing.assert_array_equal(a, b)
    assert type(net.action.components["arm"].layers[1]) is NormalTanhSampler
