"""Helpers shared by the trainer's test modules and the scripts they start.

``conftest.py`` puts this folder on ``sys.path`` (test modules are imported with
``--import-mode=importlib``); a script started from this folder finds it as its own
sibling. Domain randomizers in the styles of brax and MuJoCo Playground, the networks
of `nnx_ppo.envs.DictObsEnv` and of a small population graph, the settings several
tests train with, one jitted training iteration, the programs JAX lowers and compiles
in a block, and the bitwise comparison of state trees.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nnx_ppo.algorithms.config import EvalConfig, LogLevel, PPOConfig, TrainConfig
from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.containers import Concat, Sequential, Splitter
from nnx_ppo.networks.feedforward import MLP, Dense
from nnx_ppo.networks.normalizer import Normalizer
from nnx_ppo.networks.sampling_layers import NormalTanhSampler
from nnx_ppo.networks.utils import Filter, Map

__all__ = [
    "COMPILED",
    "LOWERED",
    "ONE_MINIBATCH",
    "PENDULUM_PPO",
    "POINT_MASS_PPO",
    "TINY_LOG",
    "assert_trees_equal",
    "dict_obs_network",
    "graph_network",
    "host",
    "jax_programs",
    "one_iteration",
    "randomize_cartpole",
    "randomize_pendulum",
    "subprocess_env",
    "tiny_config",
    "two_agent_network",
]


def randomize_pendulum(sys: Any, rng: jax.Array) -> tuple[Any, Any]:
    """brax-style, for ``inverted_pendulum``: the pole's mass (link 1) x U(0.5, 2) and
    each joint's damping x U(0.5, 3), one draw per key of ``rng``."""

    @jax.vmap
    def draw(key: jax.Array) -> tuple[jax.Array, jax.Array]:
        mass_key, damping_key = jax.random.split(key)
        scale = jax.random.uniform(mass_key, minval=0.5, maxval=2.0)
        mass = sys.link.inertia.mass.at[1].multiply(scale)
        damping = sys.dof.damping * jax.random.uniform(
            damping_key, sys.dof.damping.shape, minval=0.5, maxval=3.0
        )
        return mass, damping

    mass, damping = draw(rng)
    in_axes = jax.tree.map(lambda _: None, sys).tree_replace(
        {"link.inertia.mass": 0, "dof.damping": 0}
    )
    return sys.tree_replace({"link.inertia.mass": mass, "dof.damping": damping}), in_axes


def randomize_cartpole(mjx_model: Any, rng: jax.Array) -> tuple[Any, Any]:
    """Playground-style, for ``CartpoleBalance``: the pole's mass (body 2) x U(0.5, 2)
    and every joint's damping + U(0, 0.5), one draw per key of ``rng``."""

    @jax.vmap
    def draw(key: jax.Array) -> tuple[jax.Array, jax.Array]:
        mass_key, damping_key = jax.random.split(key)
        scale = jax.random.uniform(mass_key, minval=0.5, maxval=2.0)
        mass = mjx_model.body_mass.at[2].multiply(scale)
        damping = mjx_model.dof_damping + jax.random.uniform(
            damping_key, mjx_model.dof_damping.shape, maxval=0.5
        )
        return mass, damping

    mass, damping = draw(rng)
    in_axes = jax.tree.map(lambda _: None, mjx_model).tree_replace(
        {"body_mass": 0, "dof_damping": 0}
    )
    return mjx_model.tree_replace({"body_mass": mass, "dof_damping": damping}), in_axes


def dict_obs_network(rngs: nnx.Rngs) -> nnx.Module:
    """`DictObsEnv`'s network: a normalizer per observation key, one Dense per key
    concatenated, an MLP actor split into one tanh-normal sampler per action key."""
    return Sequential(
        [
            Normalizer({"goal": 2, "proprio": 3}),
            Concat(goal=Dense(2, 8, rngs=rngs), proprio=Dense(3, 8, rngs=rngs)),
            PPOAdapter(
                action=Sequential(
                    [
                        MLP(16, (8,), 6, rngs=rngs),
                        Splitter(arm=4, gripper=2),
                        Map(arm=NormalTanhSampler(rngs), gripper=NormalTanhSampler(rngs)),
                    ]
                ),
                value=MLP(16, (8,), 1, rngs=rngs),
            ),
        ]
    )


def two_agent_network(
    rngs: nnx.Rngs,
    *,
    agents: tuple[str, ...] = ("agent_a", "agent_b"),
    critic_hidden: tuple[int, ...] | None = (8,),
) -> nnx.Module:
    """`TwoAgentEnv`'s network: a normalizer, then per agent an MLP into a tanh-normal
    sampler and an MLP critic (a Dense one where ``critic_hidden`` is ``None``)."""
    return Sequential(
        [
            Normalizer({agent: 4 for agent in agents}),
            PPOAdapter(
                action=Map(
                    {
                        agent: Sequential([MLP(4, (8,), 4, rngs=rngs), NormalTanhSampler(rngs)])
                        for agent in agents
                    }
                ),
                value=Map(
                    {
                        agent: Dense(4, 1, rngs=rngs)
                        if critic_hidden is None
                        else MLP(4, critic_hidden, 1, rngs=rngs)
                        for agent in agents
                    }
                ),
            ),
        ]
    )


def graph_network(rngs: nnx.Rngs, *, normalize: bool = False) -> nnx.Module:
    """A `PopulationGraph` (nnx-graph) as a PPO network: the observation ``[2]`` into 8
    tanh units that also read themselves 2 steps late, action parameters ``[4]`` from
    them and the value from them 1 step late; a `Normalizer` first with ``normalize``."""
    from nnx_ppo.networks.graph import PopulationGraph

    g = PopulationGraph(rngs)
    g.add_input("obs", size=2, input_from="obs")
    g.add_population("hidden", size=8, activation=nnx.tanh)
    g.connect("obs", "hidden")
    g.connect("hidden", "hidden", delay=2)
    g.add_output("action_params", size=4)
    g.connect("hidden", "action_params")
    g.add_output("value", size=1)
    g.connect("hidden", "value", delay=1)
    g.finalize()
    layers = [
        Filter(lambda x: {"obs": x}),
        g,
        PPOAdapter(
            action=Sequential([Filter("action_params"), NormalTanhSampler(rngs, 1e-2)]),
            value=Filter("value"),
        ),
    ]
    return Sequential([Normalizer(2), *layers] if normalize else layers)


# --------------------------------------------------------------------------- settings

ONE_MINIBATCH: dict[str, Any] = dict(n_envs=4, rollout_length=8, n_epochs=1, n_minibatches=1)
"""`PPOConfig` fields for 4 envs x 8 steps trained in one epoch of one minibatch: the
only minibatch is replayed with the rollout's parameters and statistics, so the first
update sees the rollout exactly."""

POINT_MASS_PPO = PPOConfig(
    n_envs=64,
    rollout_length=16,
    n_minibatches=4,
    learning_rate=3e-3,
    discounting_factor=0.95,
    total_steps=30_000,
)
"""PPO that trains an MLP actor-critic ((32, 32) actor, (64, 64) critic) to near the
optimum of PointMass with 30-step episodes: the learning test's, and the teacher of the
distillation test."""

PENDULUM_PPO: dict[str, Any] = {
    "n_envs": 256,
    "rollout_length": 20,
    "n_minibatches": 8,
    "n_epochs": 4,
    "learning_rate": 1e-3,
    "discounting_factor": 0.995,
}
"""`PPOConfig` fields the learning tests on brax ``inverted_pendulum`` (1000-step
episodes, rewards scaled by 10) share with the learning-quality suite."""

TINY_LOG = LogLevel.LOSSES | LogLevel.ACTOR | LogLevel.CRITIC | LogLevel.ROLLOUT
"""Every metric group but wall time, so that runs compare bit for bit."""


def tiny_config(
    total_steps: int, learning_rate: Any = 3e-3, max_grad_norm: float | None = None, **train: Any
) -> TrainConfig:
    """The checkpoint and resume tests' tiny run: 4 envs x 4 steps = 16 env steps per
    iteration, 2 epochs of 2 minibatches, `TINY_LOG`, no evaluation; ``train`` sets other
    `TrainConfig` fields."""
    ppo = PPOConfig(
        n_envs=4,
        rollout_length=4,
        n_minibatches=2,
        n_epochs=2,
        total_steps=total_steps,
        learning_rate=learning_rate,
        max_grad_norm=max_grad_norm,
        log_level=TINY_LOG,
    )
    return TrainConfig(ppo=ppo, eval=EvalConfig(enabled=False), **train)


def one_iteration(env: Any, net: nnx.Module, config: PPOConfig, **variant: Any) -> tuple[Any, dict]:
    """One jitted PPO training iteration from ``PRNGKey(0)``: ``(state, metrics)``;
    ``variant`` goes to `make_training_iteration` (``advantage_fn``, ...)."""
    from nnx_ppo.algorithms.ppo.iteration import (
        init_train_state,
        make_optimizer,
        make_training_iteration,
    )

    optimizer = make_optimizer(config)
    graphdef, state = init_train_state(env, net, config, optimizer, jax.random.PRNGKey(0))
    return jax.jit(make_training_iteration(env, graphdef, optimizer, config, **variant))(state)


# --------------------------------------------------------------------------- compile logs

LOWERED = "Finished jaxpr to MLIR module conversion "
"""JAX's compile-log message for a program lowered (before compiling it or looking it
up in the persistent cache; ``jax.eval_shape`` and tracing lower nothing)."""
COMPILED = "Finished XLA compilation of "
"""JAX's compile-log message for an executable built (compiled, or loaded from the
persistent compilation cache)."""


@contextlib.contextmanager
def jax_programs(stage: str) -> Iterator[list[str]]:
    """The names (``"jit(f)"``) of the programs JAX lowers (``stage=LOWERED``) or
    compiles (`COMPILED`) inside the block, from its own compile log
    (``jax.log_compiles``; the floor JAX has no way to remove a ``jax.monitoring``
    listener)."""
    names: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            if message.startswith(stage):
                names.append(message[len(stage) :].rsplit(" in ", 1)[0])

    handler, logger = Collect(), logging.getLogger("jax")
    logger.addHandler(handler)
    try:
        with jax.log_compiles(True):
            yield names
    finally:
        logger.removeHandler(handler)


def host(tree: Any) -> Any:
    """Host copies of a tree's arrays, PRNG keys as their raw data (so that they compare
    with ``np.testing.assert_array_equal``)."""

    def leaf(x: Any) -> np.ndarray:
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        return np.array(x)

    return jax.tree.map(leaf, tree)


def assert_trees_equal(a: Any, b: Any) -> None:
    """Bitwise equality of two trees (structure, then every leaf, named on failure)."""
    a, b = host(a), host(b)
    assert jax.tree.structure(a) == jax.tree.structure(b)
    leaves = zip(jax.tree_util.tree_flatten_with_path(a)[0], jax.tree.leaves(b), strict=True)
    for (path, x), y in leaves:
        np.testing.assert_array_equal(x, y, err_msg=jax.tree_util.keystr(path))


def subprocess_env(device_count: int | None = None) -> dict[str, str]:
    """The environment of a test's JAX subprocess: this one's, on the CPU, with
    ``device_count`` forced host devices (``None``: the one CPU device). Other
    ``XLA_FLAGS`` (the test sessions' compile options) are kept."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    flag = "--xla_force_host_platform_device_count"
    flags = [f for f in env.pop("XLA_FLAGS", "").split() if not f.startswith(flag)]
    if device_count is not None:
        flags.append(f"{flag}={device_count}")
    if flags:
        env["XLA_FLAGS"] = " ".join(flags)
    return env
