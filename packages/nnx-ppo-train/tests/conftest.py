"""Shared fixtures for the trainer tests: builders of small PPO networks.

Test modules are imported with ``--import-mode=importlib``, so they cannot import this
file; they get the builders through the ``nets`` fixture. This folder is put on
``sys.path`` for the helpers the test modules share with the scripts they start
(``_train_test_helpers.py``).
"""

from __future__ import annotations

import doctest
import sys
from pathlib import Path
from types import ModuleType

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
from nnx_ppo.networks.utils import Map

if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))

from _train_test_helpers import two_agent_network


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


def constant_dense(in_features, bias, rngs):
    """Dense with a zero kernel: outputs ``bias`` whatever the input."""
    bias = jnp.asarray(bias, jnp.float32)
    return Dense(
        in_features,
        bias.shape[0],
        rngs=rngs,
        kernel_init=nnx.initializers.zeros,
        bias_init=lambda key, shape, dtype=jnp.float32: bias.astype(dtype),
    )


def constant_two_agent_net(action_params, values, *, seed=0):
    """TwoAgentEnv network whose per-agent action parameters ``[mean, pre_std]`` and
    values are constants: ``action_params = {agent: [m1, m2, p1, p2]}``."""
    rngs = nnx.Rngs(seed)
    return PPOAdapter(
        action=Map(
            {
                agent: Sequential(
                    [constant_dense(4, params, rngs), NormalTanhSampler(rngs, entropy_weight=0.0)]
                )
                for agent, params in action_params.items()
            }
        ),
        value=Map({agent: constant_dense(4, [v], rngs) for agent, v in values.items()}),
    )


def two_agent_student(seed=0):
    """`two_agent_network` (TwoAgentEnv) with a Dense critic, its agents' insertion order
    differing from their sorted order."""
    return two_agent_network(nnx.Rngs(seed), agents=("agent_b", "agent_a"), critic_hidden=None)


@pytest.fixture
def nets():
    """Builders of small networks: ``nets.mlp``, ``nets.lstm``, ``nets.delay``, ``nets.vb``,
    ``nets.constant_two_agent`` and ``nets.two_agent_student`` (TwoAgentEnv)."""
    import types

    return types.SimpleNamespace(
        mlp=mlp_net,
        lstm=lstm_net,
        delay=delay_net,
        vb=vb_net,
        constant_two_agent=constant_two_agent_net,
        two_agent_student=two_agent_student,
    )


@pytest.fixture
def docstring_examples(request: pytest.FixtureRequest):
    """``docstring_examples(*modules)`` runs the modules' docstring examples (all must
    pass, and there must be some), or skips when this pytest run already collects them
    (``--doctest-modules`` over a folder that holds the modules, as ``nox -s tests``
    runs it), so the examples are not run twice."""
    config = request.config

    def collected(module: ModuleType) -> bool:
        path = Path(module.__file__ or "").resolve()
        folders = [Path(arg.split("::")[0]).resolve() for arg in config.args]
        return bool(config.getoption("doctestmodules")) and any(
            path.is_relative_to(folder) for folder in folders
        )

    def run(*modules: ModuleType) -> None:
        if all(collected(m) for m in modules):
            pytest.skip("this run's --doctest-modules collects these docstring examples")
        attempted = 0
        for module in modules:
            result = doctest.testmod(module, raise_on_error=True)
            assert result.failed == 0, module.__name__
            attempted += result.attempted
        assert attempted > 0, [m.__name__ for m in modules]

    return run
