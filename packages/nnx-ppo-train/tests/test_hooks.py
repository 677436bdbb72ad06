"""The checkpoint hook protocol: a state saved through any hook resumes exactly."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nnx_ppo.algorithms.config import EvalConfig, PPOConfig, TrainConfig
from nnx_ppo.algorithms.ppo import train_ppo
from nnx_ppo.envs import PointMass
from nnx_ppo.networks.factories import make_mlp_actor_critic
from nnx_ppo.wrappers import EpisodeWrapper

NO_EVAL = EvalConfig(enabled=False)


class _MemoryCheckpoint:
    """A CheckpointHook keeping device copies (the trainer donates the state it saves)."""

    def __init__(self, resume_from=None):
        self.saved = {}
        self.resume_from = resume_from

    def restore(self, template):
        if self.resume_from is None:
            return None
        assert jax.tree.structure(self.resume_from) == jax.tree.structure(template)
        return jax.tree.map(jnp.copy, self.resume_from)

    def save(self, state, step, metrics, *, final=False):
        self.saved[step] = jax.tree.map(jnp.copy, state)


def test_resuming_from_a_saved_train_state_continues_exactly():
    # The TrainState is all of a run's state: resuming from the state saved after 2 of 3
    # iterations ends with the same parameters as the uninterrupted run.
    def run(hook):
        env = EpisodeWrapper(PointMass(), episode_length=4)
        net = make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0))
        config = TrainConfig(
            ppo=PPOConfig(
                n_envs=4, rollout_length=5, n_minibatches=2, total_steps=60, reset_mode="refresh"
            ),
            eval=NO_EVAL,
        )
        return train_ppo(env, net, config, progress=False, checkpoint=hook)

    full_hook = _MemoryCheckpoint()
    full = run(full_hook)
    assert sorted(full_hook.saved) == [20, 40, 60]
    resumed = run(_MemoryCheckpoint(resume_from=full_hook.saved[40]))
    assert resumed.total_steps == 60
    for a, b in zip(jax.tree.leaves(full.state), jax.tree.leaves(resumed.state), strict=True):
        if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_array_equal(a, b)
