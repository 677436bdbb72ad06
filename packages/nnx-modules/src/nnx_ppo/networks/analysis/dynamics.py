"""`CarryMap`: a trained policy's recurrent dynamics as a pure map on flat vectors.

Dynamical-systems analysis of a recurrent network (fixed points, linearisations, PCA
of its trajectories) works on one function: the map ``F: h -> h'`` that advances the
network's memory by one step for a given input. `CarryMap` builds it from the same
deterministic policy step that export serializes (`DeterministicPolicy`: the
normalizer folded in, samplers at their mode, the critic's own carry dropped) and
flattens the carry, a dict of ``[B, ...]`` tensors, into one vector of ``N`` units.
The carry is taken in its canonical (time-invariant) form: a delay buffer's ring
position is bookkeeping, not state the dynamics depend on.
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

    ``state`` vectors hold the floating-point tensors of the deterministic policy's
    *canonical* carry (`DeterministicPolicy.canonical_carry`), flattened and
    concatenated in `names` order (`slices` says which units belong to which). The
    map is ``F(h) = flat(canonical(step(unflat(h))))``: one policy step, then the
    canonical form. A population graph's delay buffers are circular, with an integer
    write position per population; the canonical carry rolls every buffer to position
    0, so the state is the buffered history alone (oldest entry first) and ``F`` is the
    same function of it at every step. Integer carry tensors are not part of the state:
    each is held at its value in the canonical initial carry (`held`), and the
    constructor checks that a step leaves it there after canonicalising.

    Every stateful family is supported: `LSTM`, `GRU`, `SimpleRNN`, `CTRNN`, `Delay`,
    and `PopulationGraph` networks, delayed connections, leaky and sign-constrained
    (Dale's law) populations included. A feedforward network (an MLP actor-critic)
    has no carry and is refused.

    Args:
        network: The trained network (what ``train_ppo`` trains; a `StatefulModule`
            whose output is a `PPONetworkOutput`). It is copied.
        observation_spec: One environment's observation without the batch axis (an
            env's ``observation_size`` works).
        obs: The fixed observation: leaves ``[*shape]`` (no batch axis), e.g. a cue
            value, or zeros for the network's autonomous dynamics.

    Raises:
        ValueError: If the policy has no carry (a feedforward network), no
            floating-point carry, or an integer carry that a step changes even in the
            canonical form (a custom module with a time index and no
            ``canonical_state``: the message names the tensors), or ``obs`` does not
            match ``observation_spec``.

    Attributes:
        policy: The `DeterministicPolicy` whose step is analysed.
        names: The floating-point carry tensors in the state, in order.
        shapes: Their per-environment shapes.
        slices: ``{name: slice}`` of each tensor's units in a state vector.
        size: ``N``, the number of units.
        held: ``{name: [*shape]}``, the integer carry tensors and the (canonical
            initial) value each is held at.

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
                "SimpleRNN, CTRNN, Delay, a graph with recurrent or delayed connections)."
            )
        initial = self.policy.canonical_carry(self.policy.initial_carry(1))
        floating = [n for n in self.policy.carry_names if _is_float(initial[n])]
        if not floating:
            raise ValueError(
                f"CarryMap: the policy's carry tensors {list(self.policy.carry_names)} are "
                "all integers, so there is no continuous state to analyse."
            )
        self.names: tuple[str, ...] = tuple(floating)
        self.held: dict[str, jax.Array] = {
            n: initial[n][0] for n in self.policy.carry_names if n not in floating
        }
        self.shapes: tuple[tuple[int, ...], ...] = tuple(
            tuple(initial[n].shape[1:]) for n in self.names
        )
        self.dtype = jnp.result_type(*(initial[n] for n in self.names))
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
        self._check_held(initial)

    def _check_held(self, initial: Mapping[str, jax.Array]) -> None:
        """Raise unless two canonicalised steps leave every integer tensor at its value."""
        if not self.held:
            return

        @jax.jit
        def canonical_step(carry: dict[str, jax.Array]) -> dict[str, jax.Array]:
            return self.policy.canonical_carry(self.policy.step(carry, self.obs)[0])

        carry = dict(initial)
        moved: list[str] = []
        for _ in range(2):
            carry = canonical_step(carry)
            moved += [
                n
                for n, value in self.held.items()
                if n not in moved and not np.array_equal(carry[n][0], value)
            ]
        if moved:
            raise ValueError(
                f"CarryMap: the integer carry tensors {moved} change from step to step even "
                "in the canonical carry, so one step depends on more than the "
                "floating-point state. If such a tensor is a time index the dynamics do "
                "not depend on (a ring-buffer position, a step counter), implement "
                "canonical_state on the module that owns it (StatefulModule."
                "canonical_state: return the carry with that index at a fixed value and "
                "the rest rearranged to match), or analyse a network without it."
            )

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
        """``{name: [B, ...]}`` -> ``[B, N]`` (the floating-point tensors of `names`;
        pass a canonical carry, e.g. from `canonical`)."""
        return jnp.concatenate(
            [jnp.reshape(carry[n], (jnp.shape(carry[n])[0], -1)) for n in self.names], axis=-1
        ).astype(self.dtype)

    def unflatten(self, states: jax.Array) -> dict[str, jax.Array]:
        """``[B, N]`` -> ``{name: [B, ...]}`` (the tensors of `names`)."""
        states = jnp.asarray(states)
        return {
            n: states[:, self.slices[n]].reshape((states.shape[0], *shape))
            for n, shape in zip(self.names, self.shapes, strict=True)
        }

    def carry(self, states: jax.Array) -> dict[str, jax.Array]:
        """``[B, N]`` -> the policy's whole (canonical) carry: `unflatten` plus the
        `held` integer tensors, in `DeterministicPolicy.carry_names` order."""
        states = jnp.asarray(states)
        full = self.unflatten(states)
        for n, value in self.held.items():
            full[n] = jnp.broadcast_to(value, (states.shape[0], *value.shape))
        return {n: full[n] for n in self.policy.carry_names}

    def canonical(self, carry: Mapping[str, Any]) -> dict[str, jax.Array]:
        """The canonical form of a policy carry ``{name: [B, ...]}`` (from
        `DeterministicPolicy.initial_carry` or ``step``): ``flatten(canonical(c))`` is
        the state of carry ``c``."""
        return self.policy.canonical_carry(carry)

    def initial_state(self) -> jax.Array:
        """The state at the start of an episode, ``[N]``."""
        return self.flatten(self.canonical(self.policy.initial_carry(1)))[0]

    # ------------------------------------------------------------------ the map

    def __call__(self, state: jax.Array) -> jax.Array:
        """One step: ``[N] -> [N]`` (or ``[B, N] -> [B, N]``); pure and jit-able."""
        state = jnp.asarray(state, self.dtype)
        if state.shape[-1:] != (self.size,):
            raise ValueError(
                f"CarryMap: a state has {self.size} units (the last axis), got shape {state.shape}."
            )
        return self._apply(state)  # type: ignore[no-any-return]

    def step(self, state: jax.Array, obs: Any) -> jax.Array:
        """One step at observation ``obs`` instead of the fixed one: the input-driven
        map ``(h, x) -> h'`` (what `lyapunov_exponents` takes with per-step inputs).

        Pure, jit-able and differentiable in both arguments.

        Args:
            state: ``[N]`` (or ``[B, N]``).
            obs: One observation, leaves ``[*shape]`` (or ``[B, *shape]`` with a batch
                of states).

        Returns:
            The next state, shaped like ``state``.
        """
        state = jnp.asarray(state, self.dtype)
        if state.shape[-1:] != (self.size,) or state.ndim > 2:
            raise ValueError(
                f"CarryMap.step: state must be [N] or [B, N] with N = {self.size} units, "
                f"got shape {state.shape}."
            )
        batch = state.reshape(-1, self.size)
        structure = jax.tree.structure(self.policy.observation_spec)
        leaves = [
            _batch_leaf(jnp.asarray(leaf, want.dtype), want.shape, batch.shape[0])
            for leaf, want in zip(
                structure.flatten_up_to(obs),
                jax.tree.leaves(self.policy.observation_spec),
                strict=True,
            )
        ]
        obs = jax.tree.unflatten(structure, leaves)
        return self._canonical_step(batch, obs).reshape(state.shape)

    def _canonical_step(self, states: jax.Array, obs: Any) -> jax.Array:
        """``[B, N]`` states and ``[B, ...]`` observations -> the next ``[B, N]``."""
        next_carry, _ = self.policy.step(self.carry(states), obs)
        return self.flatten(self.canonical(next_carry))

    def _step(self, state: jax.Array) -> jax.Array:
        batch = state.reshape(-1, self.size)
        obs = jax.tree.map(lambda x: jnp.broadcast_to(x, (batch.shape[0], *x.shape[1:])), self.obs)
        return self._canonical_step(batch, obs).reshape(state.shape)

    def jacobian(self, state: jax.Array) -> jax.Array:
        """``dF/dh`` at ``state`` (``[N]``): ``[N, N]``, row ``i`` the derivative of
        ``F(h)[i]``."""
        return self._jacobian(jnp.asarray(state, self.dtype))  # type: ignore[no-any-return]

    def rollout(self, observations: Any, state: jax.Array | None = None) -> jax.Array:
        """The states visited while the policy reads ``observations``.

        Each state is that of the carry stepping the policy gives (its canonical form),
        so this equals stepping `policy` from the carry of ``state`` and flattening
        `canonical` of each carry.

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
            h = self._canonical_step(h, obs)
            return h, h

        return jax.jit(lambda h, o: jax.lax.scan(one, h, o)[1])(
            jnp.asarray(state, self.dtype), observations
        )


def _batch_leaf(leaf: jax.Array, shape: tuple[int, ...], batch: int) -> jax.Array:
    """One observation leaf ``[*shape]`` broadcast to ``[batch, *shape]``, or a batched
    ``[batch, *shape]`` one as it is."""
    if leaf.shape == shape:
        return jnp.broadcast_to(leaf, (batch, *shape))
    if leaf.shape != (batch, *shape):
        raise ValueError(
            f"CarryMap.step: an observation leaf has shape {leaf.shape}; expected "
            f"{shape} (one observation) or {(batch, *shape)} (one per state)."
        )
    return leaf


def _is_float(x: Any) -> bool:
    return bool(jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating))
