"""Recording a network's activations over whole episodes: `record_activations_rollout`.

The network feature (`nnx_ppo.networks.recording`) records what every module computes
in one call; this trainer feature runs a recording copy of a network in ``eval()`` mode
(deterministic actions) through ``B`` environments for ``T`` steps, inside one jitted
``lax.scan``, and stacks the activations over time::

    activations, dones = record_activations_rollout(env, network, n_envs=8,
                                                    max_episode_length=200, key=key)
    # activations: the network's container tree, leaves [T, B, ...]
    # dones:       [T, B] bool, True where the episode had already ended before step t

With ``return_observations=True`` it also returns the observations the network was fed
(``[T, B, ...]``, the observation tree), e.g. to analyse the dynamics on the inputs of
real episodes (`nnx_ppo.networks.analysis.CarryMap` at a visited observation).

Each environment runs **one** episode: nothing is reset, so a row's activations after
its episode ended (``dones[t, b]``) belong to a finished episode and should be masked
out (the environment may keep stepping from its terminal state). This is nnx-ppo
0.3.0's ``record_activations_rollout``, with the same arguments and results.

**Memory.** The result lives on the device: ``T * B * U`` numbers, where ``U`` is the
number of recorded units per environment (the sum of every leaf module's output size,
the hidden and output layers of each MLP, and every population of a graph), 4 bytes
each in float32. An LSTM actor-critic with two 128-unit LSTMs and heads of 64 + 64 + 2
and 256 + 256 + 1 units records ``U`` of about 1,000, so ``T = 1000`` steps of
``B = 16`` environments take about 64 MB. The scan's environment states add ``B``
copies of one state, not ``T``.
"""

from __future__ import annotations

import numbers
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from nnx_ppo.networks.recording import extract_activations, is_recording, with_recording
from nnx_ppo.networks.types import PPONetworkOutput, StatefulModule

__all__ = ["record_activations_rollout"]


def _check_count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"record_activations_rollout: {name} must be an int >= 1, got {value!r} of type "
            f"{type(value).__name__}."
        )
    if value < 1:
        raise ValueError(
            f"record_activations_rollout: {name} must be >= 1, got {value}; record at least "
            f"one step of one environment (e.g. {name}=1)."
        )
    return int(value)


def record_activations_rollout(
    env: Any,
    networks: StatefulModule,
    n_envs: int,
    max_episode_length: int,
    key: jax.Array,
    *,
    return_observations: bool = False,
) -> tuple[Any, jax.Array] | tuple[Any, jax.Array, Any]:
    """Run one deterministic episode per environment and return every activation.

    ``networks`` itself is not changed: a `nnx_ppo.networks.recording.with_recording`
    copy of it (same parameters) is put in ``eval()`` mode and stepped. The
    environments start from ``jax.vmap(env.reset)(jax.random.split(key, n_envs))``.
    Everything runs in one jitted ``lax.scan`` (compiled per call).

    Args:
        env: A single, unbatched environment with ``reset(key)`` and
            ``step(state, action)``, whose state has ``obs`` and ``done`` (brax /
            MuJoCo Playground style; the trainer's environments).
        networks: The PPO network (ending in a ``PPOAdapter``); a network that is
            already recording is used as it is.
        n_envs: ``B``, the number of environments (episodes), ``>= 1``.
        max_episode_length: ``T``, the number of steps, ``>= 1``.
        key: A PRNG key for the environments' resets.
        return_observations: Also return the observations fed to the network.

    Returns:
        ``(activations, dones)``: ``activations`` is the nested dict of
        `nnx_ppo.networks.recording.extract_activations` (keyed by module path in the
        container tree; a graph contributes one entry per population) with leaves
        ``[T, B, ...]``; ``dones`` is ``[T, B]`` bool, true at step ``t`` if the
        environment's episode ended at an earlier step (mask those activations out).
        With ``return_observations``, ``(activations, dones, observations)``:
        ``observations`` is the environment's observation tree with leaves
        ``[T, B, ...]``, step ``t``'s the one the network saw at step ``t``.

    Raises:
        TypeError: If ``n_envs`` or ``max_episode_length`` is not an int,
            ``return_observations`` is not a bool, or the network's output is not a
            ``PPONetworkOutput``.
        ValueError: If ``n_envs`` or ``max_episode_length`` is below 1.
    """
    n_envs = _check_count("n_envs", n_envs)
    steps = _check_count("max_episode_length", max_episode_length)
    if not isinstance(return_observations, bool):
        raise TypeError(
            f"record_activations_rollout: return_observations must be a bool, got "
            f"{return_observations!r}."
        )
    if not isinstance(networks, StatefulModule):
        raise TypeError(
            f"record_activations_rollout: networks must be a StatefulModule, got "
            f"{type(networks).__name__}."
        )
    recording = networks if is_recording(networks) else with_recording(networks)
    recording = nnx.clone(recording, variables=False)  # eval() must not touch the caller's
    recording.eval()
    graphdef, variables = nnx.split(recording)

    @jax.jit
    def run(variables: nnx.State, key: jax.Array) -> tuple[Any, jax.Array, Any]:
        network = nnx.merge(graphdef, variables)
        env_state = jax.vmap(env.reset)(jax.random.split(key, n_envs))
        carry = network.initialize_state(n_envs)
        finished = jnp.zeros((n_envs,), bool)

        def step(loop: Any, _: None) -> tuple[Any, tuple[Any, jax.Array, Any]]:
            variables, env_state, carry, finished = loop
            network = nnx.merge(graphdef, variables)
            out = network(carry, env_state.obs)
            if not isinstance(out.output, PPONetworkOutput):
                raise TypeError(
                    f"record_activations_rollout: the network's output is a "
                    f"{type(out.output).__name__}, not a PPONetworkOutput; end the "
                    "network with a PPOAdapter(action=..., value=...)."
                )
            next_env_state = jax.vmap(env.step)(env_state, out.output.actions)
            done_now = jnp.asarray(next_env_state.done).astype(bool)
            fed = env_state.obs if return_observations else None
            ys = (extract_activations(out.metrics), finished, fed)
            loop = (nnx.state(network), next_env_state, out.next_state, finished | done_now)
            return loop, ys

        _, recorded = jax.lax.scan(
            step, (variables, env_state, carry, finished), None, length=steps
        )
        return recorded

    activations, dones, observations = run(variables, key)
    if return_observations:
        return activations, dones, observations
    return activations, dones
