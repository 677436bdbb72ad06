"""Checks run before anything is compiled: the environment against the network
(`check_env_network`) and the host-side arguments of a training run
(`check_run_arguments`).

Both trainers call them first, so a mistake fails in a second with a message that names
the argument, instead of after a compilation or, worse, after training.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from nnx_ppo.algorithms.core.hooks import CheckpointHook
from nnx_ppo.algorithms.core.rollout import network_step, ppo_output, reset_envs, split_network
from nnx_ppo.networks.types import PPONetworkOutput

__all__ = [
    "check_env_network",
    "check_reset_mode",
    "check_run_arguments",
    "describe_arrays",
]


def _describe_shapes(tree: Any) -> str:
    """The shapes of a tree's leaves, for error messages: ``{'a': (2, 3)}``."""
    return str(jax.tree.map(lambda x: tuple(x.shape), tree))


def describe_arrays(tree: Any) -> str:
    """The dtypes and shapes of a tree's leaves, for error messages: ``float32[2, 3]``."""
    return str(jax.tree.map(lambda x: f"{jnp.dtype(x.dtype).name}{list(x.shape)}", tree))


def check_reset_mode(env: Any, reset_mode: str) -> None:
    """Refuse a cached reset for an environment that draws each episode at reset.

    A cognitive task's reset draws the trial (its condition, epoch durations and noise
    key): with ``reset_mode="cached"`` or ``"refresh"`` an environment would replay the
    same trial after every episode, so such an environment declares
    ``draws_episode_at_reset = True`` and needs ``reset_mode="fresh"``.

    Raises:
        ValueError: Naming ``reset_mode`` and the fix.
    """
    if getattr(env, "draws_episode_at_reset", False) is True and reset_mode != "fresh":
        raise ValueError(
            f"reset_mode={reset_mode!r} restarts every finished environment from a stored "
            f"reset state, but {type(getattr(env, 'unwrapped', env)).__name__} draws each "
            "episode (a trial: its condition, durations and noise) at reset, so every "
            "environment would replay one trial. Set reset_mode='fresh' in the config "
            "(e.g. PPOConfig(reset_mode='fresh')).",
        )


def check_env_network(
    env: Any,
    network: nnx.Module,
    n_envs: int = 2,
    *,
    advantage_mode: str = "combined",
    env_name: str = "env",
) -> None:
    """Check that ``network`` can drive ``env``, without compiling anything.

    Traces (``jax.eval_shape``) one batched reset, one network call and one batched
    step, and compares the network's output with the environment's expectations.

    Args:
        env: The unbatched environment.
        network: The PPO network.
        n_envs: Batch size used for the check.
        advantage_mode: ``"per_key"`` also requires the action tree to match the reward
            tree.
        env_name: What the messages call ``env`` (``"eval_env"`` when `train_ppo`
            checks its evaluation environment).

    Raises:
        TypeError: If the network does not output a ``PPONetworkOutput``.
        ValueError: If the value tree does not match the reward tree, the actions do not
            match ``env.action_size``, or the network or ``env.step`` fails on the
            other's data; the message says which and shows the shapes.
    """
    owner = "the environment" if env_name == "env" else env_name
    graphdef, params, network_state = split_network(network)
    key = jax.random.PRNGKey(0)
    try:
        env_state = jax.eval_shape(lambda k: reset_envs(env, k, n_envs), key)
    except Exception as e:
        raise ValueError(f"{env_name}.reset failed under jax.vmap: {e}") from e
    try:
        carry = jax.eval_shape(lambda: network.initialize_state(n_envs))
    except Exception as e:
        raise ValueError(f"network.initialize_state({n_envs}) failed: {e}") from e

    def forward(p, s, c, obs):
        return network_step(graphdef, p, s, c, obs)[1]

    try:
        out = jax.eval_shape(forward, params, network_state, carry, env_state.obs)
    except Exception as e:
        raise ValueError(
            f"the network failed on {owner}'s observation (batched shapes "
            f"{_describe_shapes(env_state.obs)}): {e}"
        ) from e
    if not isinstance(out.output, PPONetworkOutput):
        ppo_output(out)  # raises the TypeError
    ppo: PPONetworkOutput = out.output

    reward, values = env_state.reward, ppo.value_estimates
    if jax.tree.structure(values) != jax.tree.structure(reward):  # type: ignore[operator]
        raise ValueError(
            f"the network's value estimates {_describe_shapes(values)} do not match "
            f"{owner}'s reward {_describe_shapes(reward)}: PPO needs one value estimate per "
            "reward leaf. Give the value port one head per reward key (e.g. "
            "Parallel({key: Dense(hidden, 1) for key in reward_keys})) or a single head "
            "for an array reward."
        )
    for v, r in zip(jax.tree.leaves(values), jax.tree.leaves(reward), strict=True):
        if v.shape != r.shape:
            raise ValueError(
                f"a value estimate has shape {v.shape} but {owner}'s reward has {r.shape} "
                f"(batched over n_envs={n_envs}); the value head must output one scalar "
                "per environment ([B] or [B, 1])."
            )
    for ll in jax.tree.leaves(ppo.loglikelihoods):
        if ll.shape != (n_envs,):
            raise ValueError(
                f"a log-likelihood has shape {ll.shape}, expected ({n_envs},): one per "
                "environment (samplers sum over the action's event axes)."
            )

    action_size = getattr(env, "action_size", None)
    actions = ppo.actions
    expected: Any = None
    if isinstance(action_size, int):
        expected = (n_envs, action_size)
        ok = not isinstance(actions, Mapping) and getattr(actions, "shape", None) == expected
        # Discrete actions (CategoricalSampler): one integer per environment, with
        # action_size the number of choices.
        ok = ok or _is_discrete(actions, n_envs)
    elif isinstance(action_size, Mapping):
        expected = {k: (n_envs, int(v)) for k, v in action_size.items()}
        ok = isinstance(actions, Mapping) and set(actions) == set(expected)
        ok = ok and all(tuple(actions[k].shape) == expected[k] for k in expected)
    else:
        ok = True
    if not ok:
        raise ValueError(
            f"the network's actions {_describe_shapes(actions)} do not match {owner}'s "
            f"action_size={action_size!r} (expected batched shapes {expected}). Size the "
            "action head as 2 * action_size for a NormalTanhSampler (mean and std), with "
            "one sampler per key for dict actions."
        )
    action_tree, reward_tree = jax.tree.structure(ppo.loglikelihoods), jax.tree.structure(reward)
    if advantage_mode == "per_key" and action_tree != reward_tree:  # type: ignore[operator]
        raise ValueError(
            "advantage_mode='per_key' pairs each reward key with the same action key, but "
            f"the actions {_describe_shapes(actions)} and {owner}'s reward "
            f"{_describe_shapes(reward)} have different trees; use "
            "advantage_mode='combined'."
        )
    try:
        jax.eval_shape(jax.vmap(env.step), env_state, actions)
    except Exception as e:
        raise ValueError(
            f"{env_name}.step failed on the network's actions {_describe_shapes(actions)}: {e}"
        ) from e


def check_run_arguments(
    *,
    log_fn: Any,
    progress: Any,
    jsonl_path: Any,
    checkpoint: Any,
    stop: Any = None,
) -> None:
    """Check the host-side arguments of `train_ppo` / `train_distillation`.

    Args:
        log_fn: ``None`` or a callable ``log_fn(metrics, step)``.
        progress: ``None``, ``True`` or ``False``.
        jsonl_path: ``None`` or a path (``str`` / ``os.PathLike``).
        checkpoint: ``None`` or a `CheckpointHook` (e.g. a
            `Checkpointer`).
        stop: ``None`` or a callable without arguments (a stop request).

    Raises:
        TypeError: Naming the argument, its value and what to pass instead (a path
            given as ``checkpoint`` is answered with the ``Checkpointer(...)`` to build).

    Examples:
        >>> check_run_arguments(log_fn=None, progress=None, jsonl_path=None,
        ...                     checkpoint="runs/x")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
            ...
        TypeError: checkpoint='runs/x' is a path, not a checkpoint hook; pass ...
    """
    if log_fn is not None and not callable(log_fn):
        raise TypeError(
            f"log_fn={log_fn!r} is not callable; pass a function called as "
            "log_fn(metrics, step), e.g. a JSONLWriter, or None."
        )
    if progress is not None and not isinstance(progress, bool):
        raise TypeError(f"progress={progress!r} must be True, False or None (on a terminal).")
    if jsonl_path is not None and not isinstance(jsonl_path, str | os.PathLike):
        raise TypeError(f"jsonl_path={jsonl_path!r} must be a path (str or os.PathLike) or None.")
    if stop is not None and not callable(stop):
        raise TypeError(
            f"stop={stop!r} is not callable; pass a stop request asked as stop() after "
            "every device call, e.g. StopOnSignal() (nnx_ppo.algorithms.core.preemption), or None."
        )
    if checkpoint is None or isinstance(checkpoint, CheckpointHook):
        return
    if isinstance(checkpoint, str | os.PathLike):
        path = os.fspath(checkpoint)
        raise TypeError(
            f"checkpoint={checkpoint!r} is a path, not a checkpoint hook; pass "
            f"checkpoint=Checkpointer({path!r}, config=config, save_every_steps=...) "
            "(from nnx_ppo.algorithms.checkpointing), ideally in a with-block so it is "
            "closed."
        )
    raise TypeError(
        f"checkpoint={checkpoint!r} is not a checkpoint hook: it needs restore(template) "
        "and save(state, step, metrics, *, final) methods (see CheckpointHook); pass a "
        "Checkpointer(directory, ...) or None."
    )


def _is_discrete(actions: Any, n_envs: int) -> bool:
    """Whether ``actions`` are one integer index per environment, ``[n_envs]``."""
    dtype = getattr(actions, "dtype", None)
    return (
        dtype is not None
        and jnp.issubdtype(dtype, jnp.integer)
        and tuple(actions.shape) == (n_envs,)
    )
