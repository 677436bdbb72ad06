"""`CarryMap`: a trained policy's recurrent dynamics as a pure map on flat vectors.

Dynamical-systems analysis of a recurrent network (fixed points, linearisations, PCA
of its trajectories) works on one function: the map ``F: h -> h'`` that advances the
network's memory by one step for a given input. `CarryMap` builds it from the same
deterministic policy step that export serializes (`DeterministicPolicy`: the
normalizer folded in, samplers at their mode, the critic's own carry dropped) and
flattens the carry, a dict of ``[B, ...]`` tensors, into one vector of ``N`` units.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from nnx_ppo.networks.export.policy import DeterministicPolicy
from nnx_ppo.networks.types import StatefulModule

__all__ = ["CarryMap"]


class CarryMap:
    """The map ``h -> h'`` of a network's carry under a fixed observation.

    ``state`` vectors hold every carry tensor of the deterministic policy, flattened
    and concatenated in `names` order (`slices` says which units belong to which).
    Only floating-point carries are supported: integer carry (the write positions of
    delay buffers) makes the step depend on time, not on the state alone.

    Args:
        network: The trained network (what ``train_ppo`` trains; a `StatefulModule`
            whose output is a `PPONetworkOutput`). It is copied.
        observation_spec: One environment's observation without the batch axis (an
            env's ``observation_size`` works).
        obs: The fixed observation: leaves ``[*shape]`` (no batch axis), e.g. a cue
            value, or zeros for the network's autonomous dynamics.

    Raises:
        ValueError: If the policy has no carry (a feedforward network) or an integer
            carry, or ``obs`` does not match ``observation_spec``.

    Examples:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from nnx_ppo.networks.factories import make_lstm_actor_critic
        >>> net = make_lstm_actor_critic(3, 1, lstm_size=4, rngs=nnx.Rngs(0))
        >>> F = CarryMap(net, 3, obs=jnp.zeros(3))
        >>> F.names, F.size        # the actor's LSTM: c and h, 4 units each
        (('carry/1/action/0/c', 'carry/1/action/0/h'), 8)
        >>> h = F.initial_state()
        >>> F(h).shape, F.jacobian(h).shape
        ((8,), (8, 8))
    """

    def __init__(self, network: StatefulModule, observation_spec: Any, obs: Any) -> None:
        self.policy = DeterministicPolicy(network, observation_spec)
        if not self.policy.carry_names:
            raise ValueError(
                "CarryMap: the network's policy has no carry (a feedforward network); "
                "fixed points and trajectories need a recurrent network (LSTM, GRU, "
                "SimpleRNN, CTRNN, a graph with recurrent populations)."
            )
        initial = self.policy.initial_carry(1)
        integer = [n for n, x in initial.items() if not jnp.issubdtype(x.dtype, jnp.floating)]
        if integer:
            raise ValueError(
                f"CarryMap: the carry tensors {integer} are integers (delay-buffer write "
                "positions), so one step depends on the time, not on the state alone. "
                "Analyse a network without delay buffers, or its delay-free part."
            )
        self.names: tuple[str, ...] = tuple(self.policy.carry_names)
        self.shapes: tuple[tuple[int, ...], ...] = tuple(
            tuple(initial[n].shape[1:]) for n in self.names
        )
        self.dtype = jnp.result_type(*initial.values())
        sizes = [math.prod(s) for s in self.shapes]
        offsets = np.cumsum([0, *sizes])
        self.slices: dict[str, slice] = {
            n: slice(int(a), int(b))
            for n, a, b in zip(self.names, offsets, offsets[1:], strict=False)
        }
        self.size = int(offsets[-1])
        self.obs = self._batched_obs(obs)
        self._apply = jax.jit(self._step)
        self._jacobian = jax.jit(jax.jacfwd(self._step))

    def _batched_obs(self, obs: Any) -> Any:
        spec = self.policy.observation_spec
        try:
            leaves = jax.tree.structure(spec).flatten_up_to(obs)
        except (ValueError, TypeError) as error:
            raise ValueError(
                f"CarryMap: obs does not have the structure of observation_spec {spec}: {error}"
            ) from None
        batched = []
        for leaf, want in zip(leaves, jax.tree.leaves(spec), strict=True):
            leaf = jnp.asarray(leaf, want.dtype)
            if leaf.shape != want.shape:
                raise ValueError(
                    f"CarryMap: obs has a leaf of shape {leaf.shape} where observation_spec "
                    f"has {want.shape}; pass one observation without the batch axis."
                )
            batched.append(leaf[None])
        return jax.tree.unflatten(jax.tree.structure(spec), batched)

    # ------------------------------------------------------------------ flat <-> carry

    def flatten(self, carry: Mapping[str, Any]) -> jax.Array:
        """``{name: [B, ...]}`` -> ``[B, N]``."""
        return jnp.concatenate(
            [jnp.reshape(carry[n], (jnp.shape(carry[n])[0], -1)) for n in self.names], axis=-1
        ).astype(self.dtype)

    def unflatten(self, states: jax.Array) -> dict[str, jax.Array]:
        """``[B, N]`` -> ``{name: [B, ...]}``."""
        states = jnp.asarray(states)
        return {
            n: states[:, self.slices[n]].reshape((states.shape[0], *shape))
            for n, shape in zip(self.names, self.shapes, strict=True)
        }

    def initial_state(self) -> jax.Array:
        """The state at the start of an episode, ``[N]``."""
        return self.flatten(self.policy.initial_carry(1))[0]

    # ------------------------------------------------------------------ the map

    def __call__(self, state: jax.Array) -> jax.Array:
        """One step: ``[N] -> [N]`` (or ``[B, N] -> [B, N]``); pure and jit-able."""
        state = jnp.asarray(state, self.dtype)
        if state.shape[-1:] != (self.size,):
            raise ValueError(
                f"CarryMap: a state has {self.size} units (the last axis), got shape {state.shape}."
            )
        return self._apply(state)  # type: ignore[no-any-return]

    def _step(self, state: jax.Array) -> jax.Array:
        batch = state.reshape(-1, self.size)
        obs = jax.tree.map(lambda x: jnp.broadcast_to(x, (batch.shape[0], *x.shape[1:])), self.obs)
        next_carry, _ = self.policy.step(self.unflatten(batch), obs)
        return self.flatten(next_carry).reshape(state.shape)

    def jacobian(self, state: jax.Array) -> jax.Array:
        """``dF/dh`` at ``state`` (``[N]``): ``[N, N]``, row ``i`` the derivative of
        ``F(h)[i]``."""
        return self._jacobian(jnp.asarray(state, self.dtype))  # type: ignore[no-any-return]

    def rollout(self, observations: Any, state: jax.Array | None = None) -> jax.Array:
        """The states visited while the policy reads ``observations``.

        Args:
            observations: The observation tree with leaves ``[T, B, *shape]``.
            state: The first state, ``[B, N]`` (default: the episode start).

        Returns:
            ``[T, B, N]``: the state after each step.
        """
        leaves = jax.tree.leaves(observations)
        batch = jnp.shape(leaves[0])[1]
        if state is None:
            state = jnp.broadcast_to(self.initial_state(), (batch, self.size))

        def one(h: jax.Array, obs: Any) -> tuple[jax.Array, jax.Array]:
            carry, _ = self.policy.step(self.unflatten(h), obs)
            h = self.flatten(carry)
            return h, h

        return jax.jit(lambda h, o: jax.lax.scan(one, h, o)[1])(
            jnp.asarray(state, self.dtype), observations
        )
