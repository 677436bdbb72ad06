"""Shared fixtures for the trainer tests: builders of small PPO networks.

Test modules are imported with ``--import-mode=importlib``, so they cannot import this
file; they get the builders through the ``nets`` fixture.
"""

from __future__ import annotations

import jax.numpy as jnp
import pytest
from flax import nnx

from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.containers import Sequential
from nnx_ppo.networks.delay import Delay
from nnx_ppo.networks.feedforward import MLP, Dense
from nnx_ppo.networks.normalizer import Normalizer
from nnx_ppo.networks.recurrent import LSTM
from nnx_ppo.networks.sampling_layers import NormalTanhSampler


def mlp_net(obs_size, action_size, *, seed=0, hidden=(16, 16), normalize=True, entropy=1e-2):
    """Normalizer -> PPOAdapter(MLP + tanh-normal sampler, MLP critic)."""
    rngs = nnx.Rngs(seed)
    adapter = PPOAdapter(
        action=Sequential(
            [
                MLP(obs_size, hidden, 2 * action_size, rngs=rngs),
                NormalTanhSampler(rngs, entropy_weight=entropy),
            ]
        ),
        value=MLP(obs_size, hidden, 1, rngs=rngs),
    )
    layers = [Normalizer(obs_size), adapter] if normalize else [adapter]
    return Sequential(layers)


def lstm_net(obs_size, action_size, *, seed=0, hidden=16, entropy=1e-2):
    """LSTM trunk -> PPOAdapter(Dense + sampler, Dense critic)."""
    rngs = nnx.Rngs(seed)
    return Sequential(
        [
            LSTM(obs_size, hidden, rngs=rngs),
            PPOAdapter(
                action=Sequential(
                    [Dense(hidden, 2 * action_size, rngs=rngs), NormalTanhSampler(rngs, entropy)]
                ),
                value=MLP(hidden, (hidden,), 1, rngs=rngs),
            ),
        ]
    )


def delay_net(obs_size, action_size, k_steps, *, seed=0, hidden=(16,), entropy=1e-2):
    """Delay(k) on the observation -> PPOAdapter(MLP + sampler, MLP critic)."""
    rngs = nnx.Rngs(seed)
    return Sequential(
        [
            Delay(jnp.zeros(obs_size), k_steps),
            PPOAdapter(
                action=Sequential(
                    [
                        MLP(obs_size, hidden, 2 * action_size, rngs=rngs),
                        NormalTanhSampler(rngs, entropy),
                    ]
                ),
                value=MLP(obs_size, hidden, 1, rngs=rngs),
            ),
        ]
    )


def vb_net(obs_size, action_size, *, seed=0, latent=4, entropy=1e-2):
    """VariationalBottleneck (per-env noise keys in the carry) -> PPOAdapter."""
    from nnx_ppo.networks.variational import VariationalBottleneck

    rngs = nnx.Rngs(seed)
    return Sequential(
        [
            Normalizer(obs_size),
            VariationalBottleneck(obs_size, latent, rngs=rngs, kl_weight=1e-3),
            PPOAdapter(
                action=Sequential(
                    [
                        MLP(latent, (16,), 2 * action_size, rngs=rngs),
                        NormalTanhSampler(rngs, entropy),
                    ]
                ),
                value=MLP(latent, (16,), 1, rngs=rngs),
            ),
        ]
    )


@pytest.fixture
def nets():
    """Builders of small networks: ``nets.mlp``, ``nets.lstm``, ``nets.delay``, ``nets.vb``."""
    import types

    return types.SimpleNamespace(mlp=mlp_net, lstm=lstm_net, delay=delay_net, vb=vb_net)
