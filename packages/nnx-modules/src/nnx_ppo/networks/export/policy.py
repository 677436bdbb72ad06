"""`DeterministicPolicy`: a trained network as a pure, named-tensor policy step.

A trained PPO network (e.g. from ``load_network`` or ``train_ppo``) computes far more
than a deployed controller needs: sampled actions, log-likelihoods, value estimates.
`DeterministicPolicy` freezes a copy of it in ``eval()`` mode and exposes only

- ``step(carry, obs) -> (next_carry, action)``: the sampler's deterministic action (the
  mean, squashed as in ``eval()``), with the normalizer's current statistics folded in
  as constants; ``(next_carry, action, value)`` with ``include_value=True``;
- ``initial_carry(batch_size)`` and ``reset(carry, done)``, so a runtime can start and
  reset episodes.
- ``canonical_carry(carry)``: the same carry in its time-invariant form (delay
  buffers rolled to write position 0), the state that `nnx_ppo.networks.analysis`
  analyses.

The carry is a flat ``dict`` of named arrays (names from the tree paths of the network's
carry, e.g. ``carry/1/c`` for the cell state of an LSTM that is layer 1 of a
`Sequential`); observations, actions and values are pytrees named the same way
(``obs/proprio``, ``action/arm``). Carry entries the requested outputs never depend on
(the carry of a value head's own LSTM when no value is asked for, the noise keys of a
variational layer, whose ``eval()`` output is its mean) are left out: they are found
by dependency analysis of the traced step, not by module type. Observation entries
they never depend on are left out the same way: with a privileged critic (the critic
reads ``obs/privileged_state``, the actor only ``obs/state``) the exported step takes
``obs/state`` alone, unless ``include_value=True`` asks for the critic too.

The flat forms ``flat_step`` / ``flat_reset`` (positional arrays in the order of
``signature``) are what the exporters in `nnx_ppo.networks.export` serialize.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nnx_ppo.networks.export import _jaxpr
from nnx_ppo.networks.types import PPONetworkOutput, StatefulModule, reset_where

__all__ = ["DeterministicPolicy", "TensorSpec", "observation_spec_from_sizes"]

BATCH = "B"
"""The name of the symbolic batch dimension in exported signatures."""


@dataclass(frozen=True)
class TensorSpec:
    """One named tensor of an exported function.

    Attributes:
        name: The tensor's name in the artefact (``obs/proprio``, ``carry/1/c``).
        shape: The shape with the batch dimension first, as the string ``"B"``.
        dtype: The numpy dtype name (``"float32"``, ``"int32"``, ``"bool"``).
    """

    name: str
    shape: tuple[int | str, ...]
    dtype: str

    def to_json(self) -> dict[str, Any]:
        """``{"name", "shape", "dtype"}`` as plain JSON data."""
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}


def _key_name(key: Any) -> str:
    for attr in ("key", "idx", "name"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def _names(prefix: str, tree: Any) -> list[str]:
    """``prefix/<path>`` for every leaf of ``tree`` (``prefix`` alone for a bare leaf)."""
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    names = ["/".join([prefix, *(_key_name(k) for k in path)]) for path, _ in leaves]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(
            f"DeterministicPolicy: the {prefix} tree gives the tensor names {duplicates} "
            "more than once (a dict key contains '/'); rename the keys so that the "
            "'/'-joined paths are unique."
        )
    return names


def _parse_leaf_spec(value: Any, where: str) -> jax.ShapeDtypeStruct | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        dims: tuple[Any, ...] = (int(value),)
    elif isinstance(value, tuple | list) and all(
        isinstance(d, numbers.Integral) and not isinstance(d, bool) for d in value
    ):
        dims = tuple(int(d) for d in value)
    elif hasattr(value, "shape") and hasattr(value, "dtype"):
        return jax.ShapeDtypeStruct(tuple(value.shape), value.dtype)
    else:
        return None
    if any(d <= 0 for d in dims):
        raise ValueError(
            f"observation_spec{where} has a non-positive size {value!r}; give the "
            "per-environment observation shape, e.g. 8 or (3, 4)."
        )
    return jax.ShapeDtypeStruct(dims, jnp.float32)


def observation_spec_from_sizes(spec: Any, _where: str = "") -> Any:
    """Turn an environment's ``observation_size`` into a pytree of `jax.ShapeDtypeStruct`.

    Args:
        spec: One environment's (unbatched) observation: an int ``n`` (a float32 vector
            ``[n]``), a tuple of ints (a float32 array of that shape), anything with
            ``shape`` and ``dtype`` (an array, a `jax.ShapeDtypeStruct`), or a (nested)
            dict of those, as brax and Playground report ``observation_size``.

    Returns:
        The same tree with a `jax.ShapeDtypeStruct` per leaf (no batch axis).

    Raises:
        TypeError: If a leaf is none of the above.
        ValueError: If a size is not positive or a dict is empty.

    Examples:
        >>> observation_spec_from_sizes({"goal": (2,), "proprio": 3})["proprio"]
        ShapeDtypeStruct(shape=(3,), dtype=float32)
    """
    leaf = _parse_leaf_spec(spec, _where)
    if leaf is not None:
        return leaf
    if isinstance(spec, Mapping):
        if not spec:
            raise ValueError(
                f"observation_spec{_where} is an empty dict; give the observation's keys "
                "and shapes, e.g. {'proprio': 3, 'goal': (2,)}."
            )
        return {k: observation_spec_from_sizes(v, f"{_where}[{k!r}]") for k, v in spec.items()}
    raise TypeError(
        f"observation_spec{_where} is {spec!r} of type {type(spec).__name__}; pass one "
        "environment's observation shape: an int, a tuple of ints, an array or "
        "jax.ShapeDtypeStruct, or a dict of those (the env's observation_size works)."
    )


def _batched(spec: jax.ShapeDtypeStruct, batch: Any) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct((batch, *spec.shape), spec.dtype)


def _spec_list(names: Sequence[str], avals: Sequence[Any]) -> tuple[TensorSpec, ...]:
    return tuple(
        TensorSpec(n, (BATCH, *(int(d) for d in a.shape[1:])), np.dtype(a.dtype).name)
        for n, a in zip(names, avals, strict=True)
    )


class DeterministicPolicy:
    """A frozen, deterministic copy of a trained network, ready to export.

    Args:
        network: The trained network, a `StatefulModule` whose output is a
            `PPONetworkOutput` (what ``train_ppo`` trains). It is copied: later changes
            to it (training, statistics updates, ``train()``) do not affect the policy.
        observation_spec: One environment's observation, without the batch axis: an int,
            a tuple of ints, an array / `jax.ShapeDtypeStruct`, or a dict of those (see
            `observation_spec_from_sizes`; an env's ``observation_size`` works).
        include_value: Also return the value estimates (``value`` tensors). The value
            head, and any carry only it uses, is dropped otherwise.

    Raises:
        TypeError: If ``network`` is not a `StatefulModule`, its output is not a
            `PPONetworkOutput`, or ``observation_spec`` is malformed.
        ValueError: If the network cannot run on observations of ``observation_spec``
            (the message carries the network's own error), or its initial carry is not
            what ``reset`` of any carry gives (see the class notes).

    Attributes:
        observation_spec: The parsed observation spec (`jax.ShapeDtypeStruct` leaves).
        include_value: Whether ``step`` returns values.
        observation_names: The names of the observation tensors the step takes, in
            signature order: the entries of ``observation_spec`` that the requested
            outputs depend on (all of them if they depend on none).
        unused_observation_names: The entries of ``observation_spec`` left out of the
            step's inputs (e.g. a key only the critic reads).
        carry_names: The names of the exported carry tensors, in signature order.

    The policy's initial carry for ``B`` environments is ``reset(c, done=all true)`` for
    any carry ``c`` of the right shapes (e.g. zeros); the constructor checks that this
    equals the network's ``initialize_state(B)``, so a runtime only needs ``step`` and
    ``reset``.

    Examples:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from nnx_ppo.networks.factories import make_lstm_actor_critic
        >>> net = make_lstm_actor_critic(3, 2, lstm_size=4, rngs=nnx.Rngs(0))
        >>> policy = DeterministicPolicy(net, observation_spec=3)
        >>> policy.carry_names      # the critic's own LSTM is not needed for actions
        ('carry/1/action/0/c', 'carry/1/action/0/h')
        >>> carry = policy.initial_carry(5)
        >>> carry, action = policy.step(carry, jnp.ones((5, 3)))
        >>> action.shape
        (5, 2)
        >>> carry = policy.reset(carry, jnp.array([True, False, False, False, True]))
    """

    def __init__(
        self, network: StatefulModule, observation_spec: Any, *, include_value: bool = False
    ) -> None:
        if not isinstance(network, StatefulModule):
            raise TypeError(
                f"DeterministicPolicy: network must be a StatefulModule, got "
                f"{type(network).__name__}; pass the trained PPO network (e.g. from "
                "load_network or train_ppo)."
            )
        if not isinstance(include_value, bool):
            raise TypeError(f"include_value must be a bool, got {include_value!r}.")
        self.include_value = include_value
        self.observation_spec = observation_spec_from_sizes(observation_spec)
        self._network = nnx.clone(network)
        self._network.eval()  # samplers return their mode; variational layers their mean
        self.network_name = type(network).__name__

        obs_leaves, self._obs_def = jax.tree.flatten(self.observation_spec)
        self._obs_leaves = obs_leaves
        self._obs_paths = [
            p for p, _ in jax.tree_util.tree_flatten_with_path(self.observation_spec)[0]
        ]
        all_obs_names = _names("obs", self.observation_spec)
        full0 = self._network.initialize_state(1)
        full_leaves, self._carry_def = jax.tree.flatten(full0)
        self._full_specs = [jax.ShapeDtypeStruct(tuple(x.shape[1:]), x.dtype) for x in full_leaves]
        self._full_names = _names("carry", full0)

        out = self._trace_output(network)
        self._action_def = jax.tree.structure(out.actions)
        self.action_names = tuple(_names("action", out.actions))
        self._value_def = jax.tree.structure(out.value_estimates)
        self.value_names = tuple(_names("value", out.value_estimates)) if include_value else ()
        self._keep_obs, self._keep = self._kept_inputs()
        self.observation_names = tuple(
            n for n, k in zip(all_obs_names, self._keep_obs, strict=True) if k
        )
        self.unused_observation_names = tuple(
            n for n, k in zip(all_obs_names, self._keep_obs, strict=True) if not k
        )
        self.carry_names = tuple(n for n, k in zip(self._full_names, self._keep, strict=True) if k)
        self._check_initial_carry()

    # -- tracing ----------------------------------------------------------------------

    def _full_step(self, *flat: Any) -> list[Any]:
        """obs leaves + all carry leaves -> actions + next carry + values (all leaves)."""
        n_obs = len(self._obs_leaves)
        obs = jax.tree.unflatten(self._obs_def, flat[:n_obs])
        carry = jax.tree.unflatten(self._carry_def, flat[n_obs:])
        out = self._network(carry, obs)
        result = out.output
        return [
            *jax.tree.leaves(result.actions),
            *jax.tree.leaves(out.next_state),
            *jax.tree.leaves(result.value_estimates),
        ]

    def _example_inputs(self, batch: Any) -> list[jax.ShapeDtypeStruct]:
        return [_batched(s, batch) for s in (*self._obs_leaves, *self._full_specs)]

    def _trace_output(self, network: StatefulModule) -> PPONetworkOutput:
        obs = jax.tree.map(lambda s: _batched(s, 2), self.observation_spec)
        carry = jax.tree.map(
            lambda s: _batched(s, 2), jax.tree.unflatten(self._carry_def, self._full_specs)
        )
        try:
            out = jax.eval_shape(lambda c, o: self._network(c, o), carry, obs)
        except (ValueError, TypeError, KeyError, IndexError) as error:
            raise ValueError(
                f"DeterministicPolicy: {type(network).__name__} cannot run on observations "
                f"of observation_spec={self.observation_spec!r} (batched [B, ...]): "
                f"{error} -- pass the spec of the observations the network was trained on "
                "(the env's observation_size)."
            ) from error
        output = out.output
        if not isinstance(output, PPONetworkOutput):
            raise TypeError(
                f"DeterministicPolicy: {type(network).__name__}'s output is a "
                f"{type(output).__name__}, not a PPONetworkOutput; export a PPO network "
                "(one ending in a PPOAdapter, as train_ppo requires)."
            )
        return output

    def _kept_inputs(self) -> tuple[list[bool], list[bool]]:
        """The observation and carry leaves the requested outputs depend on, over any
        number of steps (all observation leaves if they depend on none: the batch size
        of a step comes from its observations)."""
        n_obs, n_carry = len(self._obs_leaves), len(self._full_specs)
        n_act = self._action_def.num_leaves
        closed = jax.make_jaxpr(self._full_step)(*self._example_inputs(2))
        n_out = len(closed.jaxpr.outvars)
        wanted_direct = [
            i < n_act or (self.include_value and i >= n_act + n_carry) for i in range(n_out)
        ]
        keep = _jaxpr.needed_inputs(closed, wanted_direct)[n_obs:]
        while True:  # a kept carry leaf's update may read other carry leaves
            used = [
                *wanted_direct[:n_act],
                *keep,
                *wanted_direct[n_act + n_carry :],
            ]
            needed_all = _jaxpr.needed_inputs(closed, used)
            needed = needed_all[n_obs:]
            if needed == keep:
                obs = list(needed_all[:n_obs])
                return (obs if any(obs) else [True] * n_obs), keep
            keep = [a or b for a, b in zip(keep, needed, strict=True)]

    def _fill_obs(self, kept: Sequence[Any], batch: Any) -> list[Any]:
        """All observation leaves: the kept ones, zeros for those no output reads."""
        it = iter(kept)
        return [
            next(it) if k else jnp.zeros((batch, *s.shape), s.dtype)
            for k, s in zip(self._keep_obs, self._obs_leaves, strict=True)
        ]

    def _fill_carry(self, kept: Sequence[Any], batch: Any) -> list[Any]:
        """All carry leaves: the kept ones, zeros for those no output depends on."""
        it = iter(kept)
        return [
            next(it) if k else jnp.zeros((batch, *s.shape), s.dtype)
            for k, s in zip(self._keep, self._full_specs, strict=True)
        ]

    # -- flat functions (what the exporters serialize) ---------------------------------

    def flat_step(self, *flat: Any, rewrite_rem: bool = False) -> tuple[Any, ...]:
        """The step on positional arrays, in the order of ``signature()["step"]``.

        Args:
            *flat: The observation tensors ``[B, ...]`` then the carry tensors.

        Returns:
            The action tensors, the next carry tensors, then (``include_value``) the
            value tensors ``[B]``.

        ``rewrite_rem=True`` computes integer remainders with ``div``, ``mul`` and ``sub``
        (for the ONNX converter, whose ``rem`` fails on a symbolic batch dimension).
        """
        n_obs = len(self.observation_names)
        batch = flat[0].shape[0]
        full = [*self._fill_obs(flat[:n_obs], batch), *self._fill_carry(flat[n_obs:], batch)]
        n_act, n_value = self._action_def.num_leaves, self._value_def.num_leaves
        used = [True] * n_act + list(self._keep) + [self.include_value] * n_value
        return _jaxpr.pruned(self._full_step, used, rewrite_rem=rewrite_rem)(*full)

    def _obs_list(self, obs: Any) -> list[Any]:
        """The leaves of ``obs`` the step takes: from the full observation tree or, for
        a dict, from one holding only the entries in `observation_names`."""
        try:
            leaves = self._obs_def.flatten_up_to(obs)
            return [x for x, k in zip(leaves, self._keep_obs, strict=True) if k]
        except (ValueError, TypeError):
            if not isinstance(obs, Mapping):
                raise
        kept = [p for p, k in zip(self._obs_paths, self._keep_obs, strict=True) if k]
        out = []
        for path, name in zip(kept, self.observation_names, strict=True):
            node = obs
            for key in path:
                index = getattr(key, "key", getattr(key, "idx", key))
                try:
                    node = node[index]
                except (KeyError, IndexError, TypeError):
                    raise ValueError(
                        f"DeterministicPolicy.step: the observation has no {name!r}; it "
                        f"needs the entries {list(self.observation_names)} (or the whole "
                        f"observation of observation_spec), got keys {sorted(obs)}."
                    ) from None
            out.append(node)
        return out

    def _full_reset(self, *flat: Any) -> list[Any]:
        carry = jax.tree.unflatten(self._carry_def, flat[:-1])
        return jax.tree.leaves(reset_where(self._network, flat[-1], carry))

    def flat_reset(self, *flat: Any, rewrite_rem: bool = False) -> tuple[Any, ...]:
        """``reset`` on positional arrays: the carry tensors then ``done`` ``[B]`` bool;
        returns the carry tensors (reset where ``done``). ``rewrite_rem`` as in
        `flat_step`."""
        batch = flat[-1].shape[0]
        full = [*self._fill_carry(flat[:-1], batch), flat[-1]]
        return _jaxpr.pruned(self._full_reset, self._keep, rewrite_rem=rewrite_rem)(*full)

    def primitive_sites(self, function: str = "step") -> dict[str, str]:
        """The JAX primitives of ``"step"`` or ``"reset"`` (before dead-code removal),
        each with the source line of the module that emitted it (for error messages)."""
        if function == "step":
            return _jaxpr.primitive_sites(self._full_step, self._example_inputs(2))
        avals = [
            *self._example_inputs(2)[len(self._obs_leaves) :],
            jax.ShapeDtypeStruct((2,), bool),
        ]
        return _jaxpr.primitive_sites(self._full_reset, avals)

    def check_no_host_callbacks(self, function: str, error_type: type[Exception]) -> None:
        """Raise ``error_type`` if ``function`` calls back into Python (no artefact can)."""
        sites = self.primitive_sites(function)
        found = [p for p in _jaxpr.HOST_CALLBACKS if p in sites]
        if found:
            where = "; ".join(f"operation {p!r} at {sites[p]}" for p in found)
            raise error_type(
                f"the {function} function of this {self.network_name} calls back into "
                f"Python ({where}), which no exported artefact can do; replace the module "
                "that emits it with JAX operations (or remove jax.debug calls)."
            )

    # -- tree API ---------------------------------------------------------------------

    def initial_carry(self, batch_size: int) -> dict[str, jax.Array]:
        """The carry at the start of an episode: ``{name: [B, ...]}``."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral):
            raise TypeError(f"batch_size must be an int >= 1, got {batch_size!r}.")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
        leaves = jax.tree.leaves(self._network.initialize_state(int(batch_size)))
        return {
            n: leaf for n, leaf, k in zip(self._full_names, leaves, self._keep, strict=True) if k
        }

    def _carry_list(self, carry: Mapping[str, Any]) -> list[Any]:
        if not isinstance(carry, Mapping) or set(carry) != set(self.carry_names):
            got = sorted(carry) if isinstance(carry, Mapping) else type(carry).__name__
            raise ValueError(
                f"DeterministicPolicy: carry must be a dict with the keys "
                f"{list(self.carry_names)}, got {got}; start from initial_carry(batch_size) "
                "and pass back the carry step returned."
            )
        return [jnp.asarray(carry[n]) for n in self.carry_names]

    def step(self, carry: Mapping[str, Any], obs: Any) -> tuple[Any, ...]:
        """One deterministic policy step.

        Args:
            carry: ``{name: [B, ...]}`` from `initial_carry`, a previous ``step`` or
                ``reset``.
            obs: The observation tree with leaves ``[B, *shape]`` (as the env emits),
                or a dict holding only the entries of `observation_names`.

        Returns:
            ``(next_carry, action)`` (and ``value`` with ``include_value``): the carry
            dict with the same keys, the action tree with leaves ``[B, ...]``, the value
            tree with leaves ``[B]``.
        """
        obs_leaves = self._obs_list(obs)
        outs = self.flat_step(*(jnp.asarray(x) for x in obs_leaves), *self._carry_list(carry))
        n_act, n_carry = self._action_def.num_leaves, len(self.carry_names)
        action = jax.tree.unflatten(self._action_def, outs[:n_act])
        next_carry = dict(zip(self.carry_names, outs[n_act : n_act + n_carry], strict=True))
        if not self.include_value:
            return next_carry, action
        return next_carry, action, jax.tree.unflatten(self._value_def, outs[n_act + n_carry :])

    def reset(self, carry: Mapping[str, Any], done: Any) -> dict[str, jax.Array]:
        """The carry with the environments where ``done`` (``[B]`` bool) reset."""
        outs = self.flat_reset(*self._carry_list(carry), jnp.asarray(done, bool))
        return dict(zip(self.carry_names, outs, strict=True))

    def canonical_carry(self, carry: Mapping[str, Any]) -> dict[str, jax.Array]:
        """The carry in its time-invariant form (the network's ``canonical_state``).

        A carry can hold its history with a bookkeeping index (a population graph's
        delay buffers and their integer write positions). The canonical carry holds the
        same state without it (every buffer rolled to write position 0), so that ``step``
        is one function of the canonical carry alone: the actions are the same, and
        ``canonical_carry(step(c)) == canonical_carry(step(canonical_carry(c)))``. This
        is the state that `nnx_ppo.networks.analysis` analyses. Pure and jit-able.

        Args:
            carry: ``{name: [B, ...]}`` with the keys of `carry_names`.

        Returns:
            The canonical carry, a dict with the same keys, shapes and dtypes (the
            identity for carries without such an index: LSTM, GRU, CTRNN, ``Delay``).

        Examples:
            >>> import jax.numpy as jnp
            >>> from flax import nnx
            >>> from nnx_ppo.networks.factories import make_lstm_actor_critic
            >>> net = make_lstm_actor_critic(3, 2, lstm_size=4, rngs=nnx.Rngs(0))
            >>> policy = DeterministicPolicy(net, observation_spec=3)
            >>> carry, _ = policy.step(policy.initial_carry(2), jnp.ones((2, 3)))
            >>> canonical = policy.canonical_carry(carry)
            >>> bool(jnp.all(canonical["carry/1/action/0/h"] == carry["carry/1/action/0/h"]))
            True
        """
        kept = self._carry_list(carry)
        batch = kept[0].shape[0] if kept else 1
        full = jax.tree.unflatten(self._carry_def, self._fill_carry(kept, batch))
        leaves = jax.tree.leaves(self._network.canonical_state(full))
        return {
            n: leaf for n, leaf, k in zip(self._full_names, leaves, self._keep, strict=True) if k
        }

    # -- signature --------------------------------------------------------------------

    def step_avals(self, batch: Any) -> list[jax.ShapeDtypeStruct]:
        """Input shapes of `flat_step` for batch size (or symbolic dimension) ``batch``."""
        obs = [s for s, k in zip(self._obs_leaves, self._keep_obs, strict=True) if k]
        carry = [s for s, k in zip(self._full_specs, self._keep, strict=True) if k]
        return [_batched(s, batch) for s in (*obs, *carry)]

    def reset_avals(self, batch: Any) -> list[jax.ShapeDtypeStruct]:
        """Input shapes of `flat_reset` for batch size (or symbolic dimension) ``batch``."""
        return [
            *self.step_avals(batch)[len(self.observation_names) :],
            jax.ShapeDtypeStruct((batch,), bool),
        ]

    def signature(self) -> dict[str, Any]:
        """The named tensors of ``step`` and ``reset`` (``reset`` is ``None`` without carry).

        Returns:
            ``{"step": {"inputs": [TensorSpec], "outputs": [...]}, "reset": ...}``; the
            ``step`` outputs are ``action...``, ``next_carry/...``, then ``value...``.
        """
        step_in = self.step_avals(2)
        step_out = jax.eval_shape(self.flat_step, *step_in)
        next_names = ["next_" + n for n in self.carry_names]
        signature: dict[str, Any] = {
            "step": {
                "inputs": _spec_list([*self.observation_names, *self.carry_names], step_in),
                "outputs": _spec_list(
                    [*self.action_names, *next_names, *self.value_names], step_out
                ),
            },
            "reset": None,
        }
        if self.carry_names:
            reset_in = self.reset_avals(2)
            signature["reset"] = {
                "inputs": _spec_list([*self.carry_names, "done"], reset_in),
                "outputs": _spec_list(next_names, jax.eval_shape(self.flat_reset, *reset_in)),
            }
        return signature

    def _check_initial_carry(self) -> None:
        if not self.carry_names:
            return
        batch = 2
        initial = self.initial_carry(batch)
        zeros = {n: jnp.zeros_like(v) for n, v in initial.items()}
        fresh = self.reset(zeros, jnp.ones((batch,), bool))
        for name in self.carry_names:
            a, b = np.asarray(initial[name]), np.asarray(fresh[name])
            if a.shape != b.shape or a.dtype != b.dtype or not np.array_equal(a, b):
                raise ValueError(
                    f"DeterministicPolicy: the network's initial carry {name!r} is not what "
                    "reset_state gives for a zero carry, so an exported runtime could not "
                    "start an episode with reset(zeros, done=True); make the module's "
                    "reset_state independent of the previous carry (the default) or "
                    "keep this carry out of the policy's outputs."
                )

    def __repr__(self) -> str:
        return (
            f"DeterministicPolicy({self.network_name}, "
            f"observations={list(self.observation_names)}, "
            f"actions={list(self.action_names)}, carry={list(self.carry_names)}, "
            f"include_value={self.include_value})"
        )
