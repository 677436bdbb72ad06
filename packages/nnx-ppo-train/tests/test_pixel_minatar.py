"""A conv policy trains on Breakout-MinAtar through the public gymnax adapter.

The user's path of the "Pixel observations" how-to at a short budget: `GymnaxEnv`
gives MinAtar's 10x10x4 grid as a flat vector, `ConvEncoder` reshapes it, a
`CategoricalSampler` picks one of the 3 actions. And bool image observations (kept
bool in the rollout storage) train exactly as float ones. Marked ``extended`` (a PPO compile and
a few thousand steps); the published-settings runs are in the benchmarks app.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

pytest.importorskip("gymnax")

from nnx_ppo.algorithms import EvalConfig, PPOConfig, TrainConfig, train_ppo
from nnx_ppo.envs import GymnaxEnv
from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.containers import Concat, Sequential
from nnx_ppo.networks.conv import ConvEncoder
from nnx_ppo.networks.feedforward import Dense
from nnx_ppo.networks.normalizer import Normalizer
from nnx_ppo.networks.recurrent import LSTM
from nnx_ppo.networks.sampling_layers import CategoricalSampler
from nnx_ppo.wrappers.base import Wrapper


@pytest.mark.extended
def test_conv_policy_learns_breakout_minatar() -> None:
    env = GymnaxEnv.make("Breakout-MinAtar")
    shape = env.env.observation_space(env.params).shape
    rngs = nnx.Rngs(0)
    encoder = ConvEncoder.minatar(shape, rngs, channels=(8,), dense=(32,))
    network = Sequential(
        [
            encoder,
            PPOAdapter(
                action=Sequential(
                    [Dense(32, env.action_size, rngs=rngs), CategoricalSampler(rngs)]
                ),
                value=Dense(32, 1, rngs=rngs),
            ),
        ]
    )
    config = TrainConfig(
        ppo=PPOConfig(
            n_envs=16,
            rollout_length=32,
            n_minibatches=4,
            total_steps=16 * 32 * 16,
            learning_rate=3e-3,
            max_grad_norm=0.5,
            iterations_per_call=8,
        ),
        # Stochastic evaluation over a 100-step window, before and after training.
        eval=EvalConfig(n_envs=32, max_episode_length=100, deterministic=False),
    )
    result = train_ppo(env, network, config, progress=False)
    params = jax.tree.leaves(nnx.state(network, nnx.Param))
    assert all(np.all(np.isfinite(np.asarray(p))) for p in params)
    assert all(np.isfinite(v) for v in result.metrics.values())
    (_, before), (_, after) = result.eval_history[0], result.eval_history[-1]
    start, end = before["eval/episode_reward/mean"], after["eval/episode_reward/mean"]
    # An untrained policy breaks about half a brick in 100 steps; 8192 steps of training
    # make it several times more (measured about 0.4 -> 2 on CPU).
    assert end > max(1.0, 2.0 * start), (start, end)


class _PixelDict(Wrapper):
    """Breakout-MinAtar as a dict observation: the grid as an image of ``dtype``
    ``[10, 10, 4]`` and a 2-vector (the last reward and done)."""

    def __init__(self, env: Any, dtype: Any) -> None:
        super().__init__(env)
        self.dtype = dtype

    @property
    def observation_size(self) -> dict[str, tuple[int, ...]]:
        return {"image": (10, 10, 4), "proprio": (2,)}

    def _dict(self, state: Any) -> Any:
        image = (state.obs.reshape(10, 10, 4) > 0.5).astype(self.dtype)
        proprio = jnp.stack([state.reward, state.done])
        return state.replace(obs={"image": image, "proprio": proprio})

    def reset(self, rng: jax.Array) -> Any:
        return self._dict(self.env.reset(rng))

    def step(self, state: Any, action: Any) -> Any:
        # GymnaxEnv.step reads only its pipeline state, never the observation.
        return self._dict(self.env.step(state.replace(obs=jnp.zeros(400)), action))


def _train_pixel_dict(dtype: Any) -> list[np.ndarray]:
    rngs = nnx.Rngs(1)
    encoder = ConvEncoder.minatar((10, 10, 4), rngs, channels=(4,), dense=(8,))
    network = Sequential(
        [
            Normalizer({"proprio": 2}),
            Concat(image=encoder, proprio=Dense(2, 4, rngs=rngs, activation=nnx.relu)),
            LSTM(12, 8, rngs=rngs),
            PPOAdapter(
                action=Sequential([Dense(8, 3, rngs=rngs), CategoricalSampler(rngs)]),
                value=Dense(8, 1, rngs=rngs),
            ),
        ]
    )
    config = TrainConfig(
        ppo=PPOConfig(n_envs=4, rollout_length=8, n_minibatches=2, total_steps=4 * 8 * 3),
        eval=EvalConfig(enabled=False),
    )
    train_ppo(
        _PixelDict(GymnaxEnv.make("Breakout-MinAtar"), dtype), network, config, progress=False
    )
    return [np.asarray(x) for x in jax.tree.leaves(nnx.state(network, nnx.Param))]


@pytest.mark.extended
def test_bool_images_train_exactly_like_float_images() -> None:
    # The trainer stores the observations in the env's dtype and the encoder casts them,
    # once: MinAtar's bool grid trains the dict-observation conv+LSTM policy to the same
    # parameters as the same grid in float32. (Other integer dtypes take the same cast:
    # nnx-modules' test_conv.py.)
    for got, want in zip(_train_pixel_dict(jnp.bool_), _train_pixel_dict(jnp.float32), strict=True):
        np.testing.assert_array_equal(got, want)
