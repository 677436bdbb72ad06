"""Helpers shared by the trainer's test modules and the scripts they start.

``conftest.py`` puts this folder on ``sys.path`` (test modules are imported with
``--import-mode=importlib``); a script started from this folder finds it as its own
sibling. Domain randomizers in the styles of brax and MuJoCo Playground, the network of
`nnx_ppo.envs.DictObsEnv`, the programs JAX lowers and compiles in a block, and the
bitwise comparison of state trees.
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

from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.containers import Concat, Sequential, Splitter
from nnx_ppo.networks.feedforward import MLP, Dense
from nnx_ppo.networks.normalizer import Normalizer
from nnx_ppo.networks.sampling_layers import NormalTanhSampler
from nnx_ppo.networks.utils import Map

__all__ = [
    "COMPILED",
    "LOWERED",
    "assert_trees_equal",
    "dict_obs_network",
    "host",
    "jax_programs",
    "randomize_cartpole",
    "randomize_pendulum",
    "subprocess_env",
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
