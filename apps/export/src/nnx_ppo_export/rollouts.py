"""Record a real rollout of a network in ``eval()`` mode: the reference for exported policies.

`record_rollout` steps ``n_envs`` environments (auto-reset when an episode ends) with the
network's deterministic action, resetting each environment's carry with ``reset_where``
where its episode ended, and returns the observations, done flags and actions of every
step, so an exported policy can be stepped on the same observations and compared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from nnx_ppo.networks.types import reset_where
from nnx_ppo.wrappers import AutoResetWrapper, EpisodeWrapper

__all__ = ["Rollout", "record_rollout", "reference_arrays"]


@dataclass(frozen=True)
class Rollout:
    """What `record_rollout` returns (numpy, time axis first).

    Attributes:
        observations: The observation tree, leaves ``[T, B, ...]`` (the input of step t).
        done: ``[T, B]`` bool, whether step t ended the environment's episode (reset
            the carry after step t).
        actions: The network's actions, leaves ``[T, B, ...]``.
    """

    observations: Any
    done: np.ndarray
    actions: Any


def record_rollout(
    env: Any,
    network: Any,
    *,
    n_envs: int = 3,
    n_steps: int = 200,
    episode_length: int | None = 70,
    seed: int = 0,
) -> Rollout:
    """Roll ``network`` (switched to ``eval()``) out in ``env`` for ``n_steps`` steps.

    Args:
        env: An unbatched environment (ours, brax or Playground).
        network: A PPO network.
        n_envs: Number of parallel environments ``B``.
        n_steps: Number of steps ``T``.
        episode_length: Episodes are truncated after this many steps (and start afresh);
            ``None`` for an ``env`` that limits its episodes itself (the
            `wrap_for_training` of a run's evaluation environment, whose action repeat
            and observation history then stay as the run trained with them).
        seed: Seed of the resets.

    Returns:
        The `Rollout`.
    """
    network.eval()
    limited = env if episode_length is None else EpisodeWrapper(env, episode_length)
    wrapped = AutoResetWrapper(limited, full_reset=True)
    reset = jax.jit(jax.vmap(wrapped.reset))
    step = jax.jit(jax.vmap(wrapped.step))

    @jax.jit
    def act(carry: Any, obs: Any) -> tuple[Any, Any]:
        out = network(carry, obs)
        return out.next_state, out.output.actions

    reset_carry = jax.jit(lambda carry, done: reset_where(network, done, carry))
    state = reset(jax.random.split(jax.random.key(seed), n_envs))
    carry = network.initialize_state(n_envs)
    observations, dones, actions = [], [], []
    for _ in range(n_steps):
        observations.append(state.obs)
        carry, action = act(carry, state.obs)
        state = step(state, action)
        done = jnp.asarray(state.done) > 0
        carry = reset_carry(carry, done)
        dones.append(done)
        actions.append(action)

    def stack(*xs: Any) -> np.ndarray:
        return np.stack([np.asarray(x) for x in xs])

    return Rollout(
        observations=jax.tree.map(stack, *observations),
        done=stack(*dones),
        actions=jax.tree.map(stack, *actions),
    )


def reference_arrays(
    rollout: Rollout, observation_names: Any, action_names: Any
) -> dict[str, np.ndarray]:
    """``rollout`` as the flat ``{name: [T, B, ...]}`` arrays `export_policy`'s
    ``reference`` takes (and ships as ``obs.npz``): the observation tensors by name,
    ``done`` and ``expected/<action name>``.

    Args:
        rollout: A `record_rollout` result.
        observation_names: The policy's observation tensor names
            (`DeterministicPolicy.observation_names`): the observation entries the
            policy reads, which may be fewer than the environment emits (a key only a
            privileged critic reads is not one of them).
        action_names: Its action tensor names, in tree-leaf order.
    """
    leaves = jax.tree_util.tree_flatten_with_path(rollout.observations)[0]
    by_name = {
        "/".join(["obs", *(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)]): leaf
        for path, leaf in leaves
    }
    arrays = {name: by_name[name] for name in observation_names}
    arrays["done"] = rollout.done
    actions = jax.tree.leaves(rollout.actions)
    arrays.update({f"expected/{n}": a for n, a in zip(action_names, actions, strict=True)})
    return arrays
