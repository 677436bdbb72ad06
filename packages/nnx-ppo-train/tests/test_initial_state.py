"""`init_state`'s copies: a buffer of its own for every leaf, in one program."""

from __future__ import annotations

import jax
from flax import nnx

from nnx_ppo.algorithms.config import PPOConfig
from nnx_ppo.algorithms.ppo.iteration import init_train_state, make_optimizer
from nnx_ppo.envs import PointMass
from nnx_ppo.networks.factories import make_mlp_actor_critic
from nnx_ppo.wrappers import EpisodeWrapper


def test_the_initial_state_owns_every_buffer_and_copies_them_in_one_program():
    # The cached reset state starts as the first env state and the parameters are the
    # network's: after init every leaf has its own buffer (donating the state frees
    # neither the network's arrays nor a buffer twice), copied by one program, not by
    # one eager copy per leaf shape.
    env = EpisodeWrapper(PointMass(), episode_length=5)
    config = PPOConfig(n_envs=4, rollout_length=2, n_minibatches=2, total_steps=8)
    network = make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0))
    copies: list[str] = []
    listening = [True]

    def listen(event, _, **kwargs):  # JAX 0.7.1 cannot unregister it: it goes quiet
        if listening[0] and event == "/jax/core/compile/backend_compile_duration":
            copies.append(kwargs.get("fun_name"))

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        _, state = init_train_state(
            env, network, config, make_optimizer(config), jax.random.PRNGKey(0)
        )
    finally:
        listening[0] = False
    assert copies.count("jit(copy)") == 0 and copies.count("jit(copied)") <= 1
    pointers = [leaf.unsafe_buffer_pointer() for leaf in jax.tree.leaves(state)]
    network_arrays = jax.tree.leaves(nnx.state(network))
    pointers += [leaf.unsafe_buffer_pointer() for leaf in network_arrays]
    assert len(set(pointers)) == len(pointers)
    assert state.reset_state is not None  # the cached reset, a copy of the first state
