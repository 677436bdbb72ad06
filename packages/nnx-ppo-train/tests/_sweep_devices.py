"""A sweep on 4 forced host devices and on 1, in one subprocess of ``test_sweeps.py``
(JAX fixes the device count at start-up). Prints the facts as one JSON line."""

from __future__ import annotations

import json

import jax
import numpy as np
from flax import nnx

from nnx_ppo.algorithms.config import EvalConfig, LogLevel, PPOConfig, TrainConfig
from nnx_ppo.algorithms.sweeps import train_many
from nnx_ppo.envs import PointMass
from nnx_ppo.networks.factories import make_lstm_actor_critic
from nnx_ppo.wrappers import EpisodeWrapper


def make(rngs):
    return make_lstm_actor_critic(2, 2, 8, (8,), (8,), rngs=rngs)


def leaves(tree):
    def host(x):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        return np.asarray(x)

    return [host(x) for x in jax.tree.leaves(tree)]


def main() -> None:
    assert jax.device_count() == 4, jax.devices()
    env = EpisodeWrapper(PointMass(), episode_length=6)
    config = TrainConfig(
        ppo=PPOConfig(
            n_envs=8,
            rollout_length=5,
            n_minibatches=2,
            n_epochs=2,
            total_steps=120,
            learning_rate=1e-2,
            log_level=LogLevel.LOSSES | LogLevel.ROLLOUT,
        ),
        eval=EvalConfig(n_envs=4, max_episode_length=6, at_start=False),
    )
    runs = dict(seeds=[0, 1], overrides={"learning_rate": [1e-2, 3e-3]}, progress=False)
    four = train_many(env, make, config, devices=4, **runs)
    one = train_many(env, make, config, devices=1, **runs)
    pairs = zip(leaves(four.state), leaves(one.state), strict=True)
    diff = max(float(np.max(np.abs(a - b))) for a, b in pairs)
    sharding = four.state.env_state.obs.sharding
    params = jax.tree.leaves(four.state.params)[0]
    network_leaf = jax.tree.leaves(nnx.state(four.network(1)))[0]
    facts = {
        "max_state_difference": diff,
        "env_sharding": str(sharding.spec),
        "params_replicated": bool(params.sharding.is_fully_replicated),
        "network_devices": [str(d) for d in network_leaf.devices()],
        "metrics": [four.metrics, one.metrics],
    }
    print(json.dumps(facts))


if __name__ == "__main__":  # not at import: pytest's --doctest-modules imports this file
    main()
