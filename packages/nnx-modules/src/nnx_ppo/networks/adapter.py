"""``PPOAdapter``: the leaf that turns a network's output into a `PPONetworkOutput`.

The adapter is a named container with two fixed ports. Both ports receive the same
upstream input; the *action* port must emit a tree of sampler dicts
``{"action", "log_likelihood"}`` (what every `ActionSampler` emits), the *value* port
the value estimates. Carry, ``rollout_extras``, `PPOAdapter.update_statistics`,
losses and metrics are routed per port under the keys ``"action"`` and ``"value"``,
by the same machinery as the other named containers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax

from nnx_ppo.networks._helpers import key_path
from nnx_ppo.networks._routing import NamedContainer
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
            where = key_path(path)
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
            where = key_path(path)
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


def _ppo_output(outputs: dict[str, Any], batch_axes: int) -> PPONetworkOutput:
    """The ports' outputs ``{"action": sampler tree, "value": value tree}`` as a
    `PPONetworkOutput` (value leaves ``[B]``, or ``[T, B]`` with ``batch_axes=2``)."""
    actions, loglikelihoods = _split_sampler_tree(outputs["action"])
    return PPONetworkOutput(
        actions=actions,
        loglikelihoods=loglikelihoods,
        value_estimates=_value_estimates(outputs["value"], batch_axes),
    )


class PPOAdapter(NamedContainer):
    """Two-port router producing a `PPONetworkOutput`.

    A named container with the fixed ports ``"action"`` and ``"value"`` (kept as the
    attributes `action` and `value`), routed as every named container is. Both ports
    get the same input ``x``. The action port's output is walked with
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

    _members = "ports"
    _names = _PORTS

    def __init__(self, action: StatefulModule, value: StatefulModule) -> None:
        for name, port in (("action", action), ("value", value)):
            if not isinstance(port, StatefulModule):
                raise TypeError(
                    f"PPOAdapter: {name} must be a StatefulModule, got "
                    f"{type(port).__name__}; wrap plain functions or nnx modules in a "
                    "StatefulModule (e.g. a StatelessModule subclass)."
                )
        # Attributes, not an nnx.Dict: the ports' parameters live at "action/..." and
        # "value/..." in the module's state (checkpoints and exports name them so).
        self.action = action
        self.value = value

    def _child(self, name: str) -> StatefulModule:
        return self.action if name == "action" else self.value

    def _combine(self, outputs: dict[str, Any]) -> PPONetworkOutput:
        return _ppo_output(outputs, batch_axes=1)

    def _combine_sequence(self, outputs: dict[str, Any]) -> PPONetworkOutput:
        return _ppo_output(outputs, batch_axes=2)  # [T, B] in a sequence replay

    @classmethod
    def _routes_calls(cls) -> bool:
        return cls.__call__ is PPOAdapter.__call__

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
        # Its own method (the same routing) so that it documents the PPO output.
        return super().__call__(state, x, rollout_extras)

    def replay_sequence(
        self, state: ModuleState, xs: Any, rollout_extras: Any, done: jax.Array
    ) -> tuple[ModuleState, StatefulModuleOutput]:
        """Replay both ports over the whole sequence (each with its own
        `StatefulModule.replay_sequence`); the output is a
        `PPONetworkOutput` with ``[T, B]`` log-likelihoods and value estimates."""
        return super().replay_sequence(state, xs, rollout_extras, done)

    def initialize_state(self, batch_size: int) -> dict[str, ModuleState]:
        """``{"action": action.initialize_state(B), "value": value.initialize_state(B)}``."""
        return super().initialize_state(batch_size)

    def reset_state(self, prev_state: ModuleState) -> ModuleState:
        """Reset each port's carry with its own `reset_state`."""
        return super().reset_state(prev_state)

    def update_statistics(self, rollout_extras: Any) -> None:
        """Route a rollout's extras ``{"action": [T, B, ...], "value": [T, B, ...]}``."""
        super().update_statistics(rollout_extras)
