"""``PPOAdapter``: the leaf that turns a network's output into a `PPONetworkOutput`.

The adapter is a two-port router. Both ports receive the same upstream input; the
*action* port must emit a tree of sampler dicts ``{"action", "log_likelihood"}`` (what
every `ActionSampler` emits), the *value* port
the value estimates. Carry, ``rollout_extras`` and `PPOAdapter.update_statistics`
are routed per port under the keys ``"action"`` and ``"value"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from nnx_ppo.networks.types import (
    ModuleState,
    PPONetworkOutput,
    StatefulModule,
    StatefulModuleOutput,
)

__all__ = ["PPOAdapter", "is_sampler_dict"]

_PORTS = ("action", "value")


def is_sampler_dict(node: Any) -> bool:
    """Whether ``node`` is a sampler dict: a mapping with exactly the keys
    ``"action"`` and ``"log_likelihood"``.

    Use it as ``is_leaf`` to walk a tree of sampler outputs with `jax.tree.map`.
    """
    return isinstance(node, Mapping) and set(node.keys()) == {"action", "log_likelihood"}


def _split_sampler_tree(tree: Any) -> tuple[Any, Any]:
    """``tree`` of sampler dicts -> (tree of actions, tree of log-likelihoods)."""
    leaves, treedef = jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_sampler_dict)
    if not leaves:
        raise ValueError(
            "PPOAdapter: the action port emitted no sampler dict (its output is "
            f"{tree!r}); end the action port with an ActionSampler, e.g. "
            "Sequential([actor_mlp, NormalTanhSampler(rngs)])."
        )
    for path, leaf in leaves:
        if not is_sampler_dict(leaf):
            where = jax.tree_util.keystr(path) or "<root>"
            raise ValueError(
                f"PPOAdapter: the action port's output at {where} is "
                f"{type(leaf).__name__} {getattr(leaf, 'shape', '')}, not a sampler dict "
                '{"action", "log_likelihood"}; every leaf of the action port must come '
                "from an ActionSampler (use Map({key: sampler}) for several actions)."
            )
    actions = treedef.unflatten([leaf["action"] for _, leaf in leaves])
    loglikelihoods = treedef.unflatten([leaf["log_likelihood"] for _, leaf in leaves])
    return actions, loglikelihoods


def _value_estimates(tree: Any, batch_axes: int = 1) -> Any:
    """Squeeze a trailing length-1 axis off every leaf; each result must be ``[B]``
    (``[T, B]`` with ``batch_axes=2``, in a sequence replay)."""

    def squeeze(path: Any, leaf: Any) -> Any:
        if getattr(leaf, "ndim", 0) > batch_axes and leaf.shape[-1] == 1:
            leaf = leaf[..., 0]
        if getattr(leaf, "ndim", None) != batch_axes:
            where = jax.tree_util.keystr(path) or "<root>"
            shape = getattr(leaf, "shape", type(leaf).__name__)
            if batch_axes == 2:
                shape = f"{shape} in a sequence replay (time axis first)"
            raise ValueError(
                f"PPOAdapter: the value port's output at {where} has shape "
                f"{shape}; each value leaf must be "
                "[B] or [B, 1] (give the critic's last layer 1 output per value)."
            )
        return leaf

    return jax.tree_util.tree_map_with_path(squeeze, tree)


def _route(what: str, tree: Any) -> dict[str, Any]:
    """Split a port-routed carry/extras; ``()`` (all stateless) goes to both ports."""
    if isinstance(tree, tuple) and not tree:
        return {"action": (), "value": ()}
    if not (isinstance(tree, Mapping) and set(tree.keys()) == set(_PORTS)):
        got = (
            f"a dict with keys {sorted(tree.keys())}"
            if isinstance(tree, Mapping)
            else f"a {type(tree).__name__}"
        )
        raise ValueError(
            f"PPOAdapter: {what} must be a dict with keys ['action', 'value'] (or () "
            f"when both ports are stateless), got {got}; pass the {what} this module "
            "produced (initialize_state(batch_size), a previous call's next_state, or "
            "the rollout_extras it emitted)."
        )
    return {"action": tree["action"], "value": tree["value"]}


class PPOAdapter(StatefulModule):
    """Two-port router producing a `PPONetworkOutput`.

    Both ports get the same input ``x``. The action port's output is walked with
    `is_sampler_dict` as ``is_leaf``: a bare sampler dict gives bare
    ``actions`` / ``loglikelihoods`` arrays, ``{k: sampler_dict}`` gives ``{k: array}``
    for both. The value port's output becomes ``value_estimates``, each leaf squeezed
    of a trailing length-1 axis (``[B, 1] -> [B]``; ``[B]`` is kept as is).

    Carry and ``rollout_extras`` are ``{"action": ..., "value": ...}`` (a carry of
    ``()`` is accepted when both ports are stateless, as in the containers);
    `update_statistics` routes its extras the same way. ``metrics`` is
    ``{"action": ..., "value": ...}`` without the ports that report none;
    ``regularization_loss`` is the sum of the ports' (per sample ``[B]``).

    Args:
        action: The action port, ending in one or more samplers.
        value: The value port (the critic).

    Raises:
        TypeError: If a port is not a `StatefulModule`.

    Examples:
        >>> from flax import nnx
        >>> import jax.numpy as jnp
        >>> from nnx_ppo.networks.containers import Sequential
        >>> from nnx_ppo.networks.feedforward import Dense
        >>> from nnx_ppo.networks.sampling_layers import NormalTanhSampler
        >>> rngs = nnx.Rngs(0)
        >>> adapter = PPOAdapter(
        ...     action=Sequential([Dense(5, 2 * 3, rngs=rngs), NormalTanhSampler(rngs)]),
        ...     value=Dense(5, 1, rngs=rngs),
        ... )
        >>> out = adapter(adapter.initialize_state(4), jnp.ones((4, 5))).output
        >>> out.actions.shape, out.loglikelihoods.shape, out.value_estimates.shape
        ((4, 3), (4,), (4,))
    """

    def __init__(self, action: StatefulModule, value: StatefulModule) -> None:
        for name, port in (("action", action), ("value", value)):
            if not isinstance(port, StatefulModule):
                raise TypeError(
                    f"PPOAdapter: {name} must be a StatefulModule, got "
                    f"{type(port).__name__}; wrap plain functions or nnx modules in a "
                    "StatefulModule (e.g. a StatelessModule subclass)."
                )
        self.action = action
        self.value = value

    def initialize_state(self, batch_size: int) -> dict[str, ModuleState]:
        """``{"action": action.initialize_state(B), "value": value.initialize_state(B)}``."""
        return {
            "action": self.action.initialize_state(batch_size),
            "value": self.value.initialize_state(batch_size),
        }

    def reset_state(self, prev_state: ModuleState) -> ModuleState:
        """Reset each port's carry with its own `reset_state`."""
        if isinstance(prev_state, tuple) and not prev_state:
            return ()
        states = _route("state", prev_state)
        return {
            "action": self.action.reset_state(states["action"]),
            "value": self.value.reset_state(states["value"]),
        }

    def __call__(
        self, state: ModuleState, x: Any, rollout_extras: Any = None
    ) -> StatefulModuleOutput:
        """Run both ports on ``x``.

        Args:
            state: ``{"action": ..., "value": ...}``, the ports' carries (or ``()``).
            x: The input both ports receive, leaves ``[B, ...]``.
            rollout_extras: ``None`` (rollout), or ``{"action": ..., "value": ...}``
                as emitted by the rollout call (replay).

        Returns:
            A `StatefulModuleOutput` whose ``output`` is a
            `PPONetworkOutput` (actions ``[B, ...]``, log-likelihoods ``[B]``,
            value estimates ``[B]``, each possibly a tree).

        Raises:
            ValueError: If ``state`` / ``rollout_extras`` is not routed per port, a leaf
                of the action port's output is not a sampler dict, or a value leaf is
                not ``[B]`` / ``[B, 1]`` (checked while tracing, at no runtime cost).
        """
        states = _route("state", state)
        extras: dict[str, Any] = (
            {"action": None, "value": None}
            if rollout_extras is None
            else _route("rollout_extras", rollout_extras)
        )
        action_out = self.action(states["action"], x, extras["action"])
        value_out = self.value(states["value"], x, extras["value"])
        actions, loglikelihoods = _split_sampler_tree(action_out.output)
        next_state: Any = {"action": action_out.next_state, "value": value_out.next_state}
        if isinstance(state, tuple) and not jax.tree.leaves(next_state):
            next_state = ()
        metrics = {
            port: out.metrics
            for port, out in (("action", action_out), ("value", value_out))
            if out.metrics
        }
        return StatefulModuleOutput(
            next_state=next_state,
            output=PPONetworkOutput(
                actions=actions,
                loglikelihoods=loglikelihoods,
                value_estimates=_value_estimates(value_out.output),
            ),
            regularization_loss=jnp.asarray(action_out.regularization_loss)
            + jnp.asarray(value_out.regularization_loss),
            metrics=metrics,
            rollout_extras={
                "action": action_out.rollout_extras,
                "value": value_out.rollout_extras,
            },
        )

    def replay_sequence(
        self, state: ModuleState, xs: Any, rollout_extras: Any, done: jax.Array
    ) -> tuple[ModuleState, StatefulModuleOutput]:
        """Replay both ports over the whole sequence (each with its own
        `StatefulModule.replay_sequence`); the output is a
        `PPONetworkOutput` with ``[T, B]`` log-likelihoods and value estimates."""
        if type(self).__call__ is not PPOAdapter.__call__:  # a subclass changed the routing
            return super().replay_sequence(state, xs, rollout_extras, done)
        states = _route("state", state)
        extras = _route("rollout_extras", rollout_extras)
        action_final, action_out = self.action.replay_sequence(
            states["action"], xs, extras["action"], done
        )
        value_final, value_out = self.value.replay_sequence(
            states["value"], xs, extras["value"], done
        )
        actions, loglikelihoods = _split_sampler_tree(action_out.output)
        final: Any = {"action": action_final, "value": value_final}
        if isinstance(state, tuple) and not jax.tree.leaves(final):
            final = ()
        metrics = {
            port: out.metrics
            for port, out in (("action", action_out), ("value", value_out))
            if out.metrics
        }
        return final, StatefulModuleOutput(
            next_state=(),
            output=PPONetworkOutput(
                actions=actions,
                loglikelihoods=loglikelihoods,
                value_estimates=_value_estimates(value_out.output, batch_axes=2),
            ),
            regularization_loss=jnp.asarray(action_out.regularization_loss)
            + jnp.asarray(value_out.regularization_loss),
            metrics=metrics,
            rollout_extras=(),
        )

    def update_statistics(self, rollout_extras: Any) -> None:
        """Route a rollout's extras ``{"action": [T, B, ...], "value": [T, B, ...]}``."""
        extras = _route("rollout_extras", rollout_extras)
        self.action.update_statistics(extras["action"])
        self.value.update_statistics(extras["value"])
