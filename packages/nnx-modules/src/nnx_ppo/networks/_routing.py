"""The routing every container shares (package-internal).

A container calls its children one after another and gathers, per child key (an int
position or a name), what each returned: the next carry, the output, the
``rollout_extras``, the regularization loss and the metrics. `Children` is that
gathering, written once; `NamedContainer` is the base of the containers whose children
are named (``Parallel``, ``Concat``, ``Map``, ``Merge`` and ``PPOAdapter``); the
``route_*`` functions split a container's carry or extras into one entry per child,
with the error that names the expected structure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from flax import nnx

from nnx_ppo.networks._helpers import describe, is_empty, leafless, named_arguments
from nnx_ppo.networks.types import Metrics, ModuleState, StatefulModule, StatefulModuleOutput

# NamedContainer, the abstract base of the named containers, is importable but not in
# __all__: the property suite (tests/test_properties.py) treats every StatefulModule
# class listed in an __all__ as a concrete module that needs a property case.
__all__ = [
    "Children",
    "check_child",
    "collect_named_children",
    "route_dict",
    "route_list",
]


@dataclasses.dataclass
class Children:
    """What a container's children returned in one call (or one sequence replay).

    Record each child's result with `called` (or `replayed`) in the children's order;
    the fields then hold the per-child values under the child's key.

    Attributes:
        states: ``{key: next carry}`` (after a replay: the final carry).
        outputs: ``{key: output}``.
        extras: ``{key: rollout_extras}`` (``()`` for each child after a replay).
        metrics: ``{key: metrics}`` of the children that report any.
        regularization: The sum of the children's regularization losses (per sample
            ``[B]``, ``[T, B]`` after a replay, or a scalar when no child returns a
            per-sample loss).
    """

    states: dict[Any, Any] = dataclasses.field(default_factory=dict)
    outputs: dict[Any, Any] = dataclasses.field(default_factory=dict)
    extras: dict[Any, Any] = dataclasses.field(default_factory=dict)
    metrics: Metrics = dataclasses.field(default_factory=dict)
    regularization: jax.Array = dataclasses.field(default_factory=lambda: jnp.zeros(()))

    def called(self, key: Hashable, out: StatefulModuleOutput) -> StatefulModuleOutput:
        """Record a child's call result under ``key``; returns ``out``."""
        return self._record(key, out.next_state, out)

    def replayed(
        self, key: Hashable, result: tuple[ModuleState, StatefulModuleOutput]
    ) -> StatefulModuleOutput:
        """Record a child's ``replay_sequence`` result ``(final_state, out)``; returns ``out``."""
        final, out = result
        return self._record(key, final, out)

    def _record(self, key: Hashable, state: Any, out: StatefulModuleOutput) -> StatefulModuleOutput:
        self.states[key] = state
        self.outputs[key] = out.output
        self.extras[key] = out.rollout_extras
        self.regularization = self.regularization + jnp.asarray(out.regularization_loss)
        if out.metrics:
            self.metrics[key] = out.metrics
        return out

    def named_states(self, state: ModuleState) -> Any:
        """The dict of the children's carries, or ``()`` if the carry passed in was
        ``()`` and every child stayed stateless."""
        return () if is_empty(state) and leafless(self.states) else self.states

    def layer_states(self, state: ModuleState) -> Any:
        """The list of the children's carries in position order, in the structure of
        ``state``: ``()`` if that was ``()`` and every child stayed stateless, a tuple
        for a tuple, else a list."""
        states = list(self.states.values())
        if is_empty(state) and leafless(states):
            return ()
        return tuple(states) if isinstance(state, tuple) else states


def check_child(owner: str, where: str, child: Any) -> None:
    """Raise a `TypeError` naming ``where`` unless ``child`` is a `StatefulModule`."""
    if not isinstance(child, StatefulModule):
        raise TypeError(
            f"{owner}: {where} is a {type(child).__name__}, not a StatefulModule. "
            "Every child of a container must subclass "
            "nnx_ppo.networks.types.StatefulModule (wrap plain functions or nnx layers "
            "in a StatelessModule, e.g. Dense instead of nnx.Linear)."
        )


def collect_named_children(
    owner: str, modules: Any, kwargs: dict[str, Any]
) -> dict[str, StatefulModule]:
    """Validate the ``Container(dict)`` / ``Container(**kw)`` construction forms."""
    modules = named_arguments(
        owner,
        modules,
        kwargs,
        items="children",
        one="child",
        mapping="a dict mapping child names to modules",
        example=f"{owner}(a=module_a, b=module_b) or {owner}({{'a': module_a, 'b': module_b}})",
    )
    children: dict[str, StatefulModule] = {}
    for name, child in modules.items():
        if not isinstance(name, str):
            raise TypeError(
                f"{owner}: child names must be strings, got {name!r} "
                f"({type(name).__name__}). Use e.g. str({name!r}) as the key."
            )
        check_child(owner, f"child {name!r}", child)
        children[name] = child
    return children


_PASS_PRODUCED = (
    "(initialize_state(batch_size), a previous call's next_state, or the rollout_extras it emitted)"
)


def route_list(owner: str, value: Any, n: int, what: str) -> list[Any]:
    """Split a list-structured carry/extras into one entry per layer (``()`` gives
    ``()`` to each)."""
    if is_empty(value):
        return [()] * n
    if not isinstance(value, (list, tuple)) or len(value) != n:
        raise ValueError(
            f"{owner} has {n} layers, so its {what} must be a list of {n} per-layer "
            f"entries (or () when every layer is stateless), got {describe(value)}. "
            f"Pass the {what} this module produced {_PASS_PRODUCED}."
        )
    return list(value)


def route_dict(
    owner: str, value: Any, names: Sequence[str], what: str, members: str = "children"
) -> dict[str, Any]:
    """Split a dict-structured carry/extras into one entry per named child (``()``
    gives ``()`` to each); ``members`` names the children in the message."""
    if is_empty(value):
        return dict.fromkeys(names, ())
    if not isinstance(value, Mapping) or set(value.keys()) != set(names):
        raise ValueError(
            f"{owner} has {members} {list(names)}, so its {what} must be a dict with "
            f"keys {list(names)} exactly (or () when every one is stateless), got "
            f"{describe(value)}. Pass the {what} this module produced {_PASS_PRODUCED}."
        )
    return {name: value[name] for name in names}


class NamedContainer(StatefulModule):
    """Shared routing for containers whose children are named.

    A subclass chooses what each child sees with ``_dispatch`` (``False``: the whole
    input; ``True``: the input's entry under the child's name) and how the children's
    outputs are combined with `_combine` (and `_combine_sequence` after a sequence
    replay, by default the same). Children live in the ``nnx.Dict`` ``components``;
    a container with fixed ports may keep them as attributes instead and override
    `_child` and ``_names``.
    """

    _dispatch: ClassVar[bool] = False
    _members: ClassVar[str] = "children"
    _names: tuple[str, ...]

    def __init__(self, modules: Mapping[str, StatefulModule] | None = None, /, **kwargs: Any):
        owner = type(self).__name__
        children = collect_named_children(owner, modules, kwargs)
        self.components = nnx.Dict(children)
        # nnx.Dict iterates in sorted key order after nnx.split/merge (i.e. under
        # nnx.jit); this static tuple keeps the user's insertion order everywhere.
        self._names = tuple(children)

    # ------------------------------------------------------------------------ hooks

    def _child(self, name: str) -> StatefulModule:
        """The child called ``name``."""
        return self.components[name]

    def _combine(self, outputs: dict[str, Any]) -> Any:
        """Combine the children's outputs (in insertion order) into this output."""
        return outputs

    def _combine_sequence(self, outputs: dict[str, Any]) -> Any:
        """`_combine` for the children's ``[T, B, ...]`` outputs of a sequence replay."""
        return self._combine(outputs)

    @classmethod
    def _routes_calls(cls) -> bool:
        """Whether ``__call__`` is this routing's (a subclass that replaces it may
        route differently, so its replay falls back to the step-by-step scan)."""
        return cls.__call__ is NamedContainer.__call__

    def _child_input(self, name: str, x: Any) -> Any:
        if not self._dispatch:
            return x
        owner = type(self).__name__
        if not isinstance(x, Mapping):
            raise TypeError(
                f"{owner} dispatches a dict input by key to its children "
                f"{list(self._names)}, but got {describe(x)}. Feed it a dict (e.g. "
                "from a Splitter or Filter), or use Parallel to give every child the "
                "same input."
            )
        if name not in x:
            raise KeyError(
                f"{owner} child {name!r} reads input key {name!r}, but the input has "
                f"keys {list(x.keys())}. Provide that key upstream (e.g. rename with "
                "Filter) or rename the child."
            )
        return x[name]

    def _route(self, value: Any, what: str) -> dict[str, Any]:
        return route_dict(type(self).__name__, value, self._names, what, self._members)

    # ---------------------------------------------------------- StatefulModule API

    def __call__(
        self, state: ModuleState, x: Any, rollout_extras: Any = None
    ) -> StatefulModuleOutput:
        """Run every child and combine their outputs.

        Args:
            state: A dict with one carry per child name, or ``()`` if every child is
                stateless.
            x: The input pytree, leaves ``[B, ...]``.
            rollout_extras: ``None`` during rollout; during replay, the dict this
                container emitted (or ``()``).

        Returns:
            The combined output; ``next_state`` and ``rollout_extras`` are dicts keyed
            by child name (``next_state`` is ``()`` if ``state`` was ``()`` and every
            child stayed stateless).

        Raises:
            ValueError: If ``state`` or ``rollout_extras`` does not have one entry per
                child (the message names the expected keys).
        """
        states = self._route(state, "state")
        extras = (
            dict.fromkeys(self._names)
            if rollout_extras is None
            else self._route(rollout_extras, "rollout_extras")
        )
        children = Children()
        for name in self._names:
            child_x = self._child_input(name, x)
            children.called(name, self._child(name)(states[name], child_x, extras[name]))
        return StatefulModuleOutput(
            next_state=children.named_states(state),
            output=self._combine(children.outputs),
            regularization_loss=children.regularization,
            metrics=children.metrics,
            rollout_extras=children.extras,
        )

    def replay_sequence(
        self, state: ModuleState, xs: Any, rollout_extras: Any, done: jax.Array
    ) -> tuple[ModuleState, StatefulModuleOutput]:
        """Replay each child over the whole sequence (its own
        `StatefulModule.replay_sequence`) and combine the outputs, as ``__call__``
        does per step."""
        if not self._routes_calls():
            return super().replay_sequence(state, xs, rollout_extras, done)
        states = self._route(state, "state")
        extras = self._route(rollout_extras, "rollout_extras")
        children = Children()
        for name in self._names:
            child_xs = self._child_input(name, xs)
            children.replayed(
                name, self._child(name).replay_sequence(states[name], child_xs, extras[name], done)
            )
        return children.named_states(state), StatefulModuleOutput(
            next_state=(),
            output=self._combine_sequence(children.outputs),
            regularization_loss=children.regularization,
            metrics=children.metrics,
            rollout_extras=(),
        )

    def initialize_state(self, batch_size: int) -> dict[str, Any]:
        """A dict of each child's initial carry for ``batch_size`` environments."""
        return {name: self._child(name).initialize_state(batch_size) for name in self._names}

    def reset_state(self, prev_state: ModuleState) -> ModuleState:
        """Each child's reset carry, in the same dict (or ``()``) structure."""
        if is_empty(prev_state):
            return ()
        states = self._route(prev_state, "state")
        return {name: self._child(name).reset_state(states[name]) for name in self._names}

    def canonical_state(self, state: ModuleState) -> ModuleState:
        """Each child's canonical carry, in the same dict (or ``()``) structure."""
        if is_empty(state):
            return ()
        states = self._route(state, "state")
        return {name: self._child(name).canonical_state(states[name]) for name in self._names}

    def update_statistics(self, rollout_extras: Any) -> None:
        """Route each child's stacked extras (leaves ``[T, B, ...]``) to that child."""
        extras = self._route(rollout_extras, "rollout_extras")
        for name in self._names:
            self._child(name).update_statistics(extras[name])
