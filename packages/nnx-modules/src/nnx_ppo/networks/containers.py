"""Containers that compose `StatefulModule` s.

- `Sequential` chains layers; its carry is a list, one entry per layer.
- `Parallel` runs named children on the same input; output and carry are dicts.
- `Concat` feeds each named child its own entry of a dict input and concatenates
  the outputs along the last axis.
- `Splitter` is the inverse of `Concat`: it slices a flat ``[B, N]``
  input into a dict of named pieces.

Every container is itself a `StatefulModule`, so they
nest freely. Each routes, per child:

- the carry ``state`` (list for `Sequential`, dict keyed by child name for the
  named containers) in `__call__`,
  `initialize_state` and `reset_state`;
- ``rollout_extras``, structured exactly like the carry, in ``__call__`` and in
  `update_statistics`;
- ``regularization_loss``: the sum of the children's (per sample ``[B]``, or a scalar
  when no child returns a per-sample loss);
- ``metrics``: ``{position: child_metrics}`` with **integer** positions for
  `Sequential`, ``{child_name: child_metrics}`` for the named containers.
  Children that report no metrics (an empty dict) are left out.

A carry or ``rollout_extras`` of ``()`` is accepted everywhere and routed as ``()`` to
every child; this is how stateless networks are called (``branches((), obs)``). It is
only valid when every child is stateless.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nnx_ppo.networks.types import (
    ModuleState,
    StatefulModule,
    StatefulModuleOutput,
    StatelessModule,
)

__all__ = ["Concat", "Parallel", "Sequential", "Splitter"]


# --------------------------------------------------------------------------------------
# Shared helpers (also used by nnx_ppo.networks.utils).
# --------------------------------------------------------------------------------------


def _is_empty(value: Any) -> bool:
    """Whether ``value`` is the empty carry/extras ``()``."""
    return isinstance(value, tuple) and len(value) == 0


def _describe(value: Any) -> str:
    """A short description of a carry/extras/input value for error messages."""
    if isinstance(value, Mapping):
        return f"a {type(value).__name__} with keys {list(value.keys())}"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of length {len(value)}"
    shape = getattr(value, "shape", None)
    if shape is not None:
        return f"an array of shape {tuple(shape)}"
    return f"a {type(value).__name__} ({value!r})"


def _add_losses(total: jax.Array, loss: Any) -> jax.Array:
    """Sum two regularization losses (``[B]`` or scalar, broadcasting)."""
    return total + jnp.asarray(loss)


def _check_child(owner: str, where: str, child: Any) -> None:
    if not isinstance(child, StatefulModule):
        raise TypeError(
            f"{owner}: {where} is a {type(child).__name__}, not a StatefulModule. "
            "Every child of a container must subclass "
            "nnx_ppo.networks.types.StatefulModule (wrap plain functions or nnx layers "
            "in a StatelessModule, e.g. Dense instead of nnx.Linear)."
        )


def _collect_named_children(
    owner: str, modules: Any, kwargs: dict[str, Any]
) -> dict[str, StatefulModule]:
    """Validate the ``Container(dict)`` / ``Container(**kw)`` construction forms."""
    if modules is not None and kwargs:
        raise TypeError(
            f"{owner} takes its children either as one positional dict or as keyword "
            f"arguments, not both (got a positional {type(modules).__name__} and "
            f"keywords {list(kwargs)}). Put every child in the dict, e.g. "
            f"{owner}({{'a': module_a, 'b': module_b}})."
        )
    if modules is None:
        modules = kwargs
    if not isinstance(modules, Mapping):
        raise TypeError(
            f"{owner}'s positional argument must be a dict mapping child names to "
            f"modules, got {_describe(modules)}. Use {owner}({{'name': module, ...}}) "
            f"or {owner}(name=module, ...)."
        )
    if not modules:
        raise ValueError(
            f"{owner} needs at least one child, got none. Pass children as keywords "
            f"({owner}(a=module_a)) or as a dict ({owner}({{'a': module_a}}))."
        )
    children: dict[str, StatefulModule] = {}
    for name, child in modules.items():
        if not isinstance(name, str):
            raise TypeError(
                f"{owner}: child names must be strings, got {name!r} "
                f"({type(name).__name__}). Use e.g. str({name!r}) as the key."
            )
        _check_child(owner, f"child {name!r}", child)
        children[name] = child
    return children


def _route_list(owner: str, value: Any, n: int, what: str) -> list[Any]:
    """Split a list-structured carry/extras into one entry per layer."""
    if _is_empty(value):
        return [()] * n
    if not isinstance(value, (list, tuple)) or len(value) != n:
        raise ValueError(
            f"{owner} has {n} layers, so its {what} must be a list of {n} per-layer "
            f"entries (or () when every layer is stateless), got {_describe(value)}. "
            f"Pass the {what} this module produced (initialize_state(batch_size), a "
            "previous call's next_state, or the rollout_extras it emitted)."
        )
    return list(value)


def _route_dict(owner: str, value: Any, names: Sequence[str], what: str) -> dict[str, Any]:
    """Split a dict-structured carry/extras into one entry per named child."""
    if _is_empty(value):
        return dict.fromkeys(names, ())
    if not isinstance(value, Mapping) or set(value.keys()) != set(names):
        raise ValueError(
            f"{owner} has children {list(names)}, so its {what} must be a dict with "
            f"exactly those keys (or () when every child is stateless), got "
            f"{_describe(value)}. Pass the {what} this module produced "
            "(initialize_state(batch_size), a previous call's next_state, or the "
            "rollout_extras it emitted)."
        )
    return {name: value[name] for name in names}


def _leafless(values: Any) -> bool:
    return not jax.tree.leaves(values)


def _layer_states(state: ModuleState, layer_states: list[Any]) -> Any:
    """A `Sequential` carry from per-layer carries, in the structure of ``state``: ``()``
    if that was ``()`` and every layer stayed stateless, a tuple for a tuple, else a list."""
    if _is_empty(state) and _leafless(layer_states):
        return ()
    return tuple(layer_states) if isinstance(state, tuple) else layer_states


# --------------------------------------------------------------------------------------
# Sequential
# --------------------------------------------------------------------------------------


class Sequential(StatefulModule):
    """Chain of layers: ``Sequential([a, b, c])`` runs ``a -> b -> c``.

    The carry and ``rollout_extras`` are lists with one entry per layer (a tuple carry
    is returned as a tuple). Metrics are ``{i: layer_i_metrics}`` keyed by the
    **integer** position ``i`` of each layer that reports any; the regularization loss
    is the sum of the layers' (per sample ``[B]``).

    Args:
        layers: The layers, a non-empty list or tuple of ``StatefulModule`` s. Layer
            ``i`` receives layer ``i - 1``'s ``output``; layer 0 receives the input.

    Raises:
        TypeError: If ``layers`` is not a list/tuple or an entry is not a
            ``StatefulModule`` (the message names the index).
        ValueError: If ``layers`` is empty.

    Examples:
        >>> import jax.numpy as jnp
        >>> from nnx_ppo.networks.containers import Sequential, Splitter
        >>> from nnx_ppo.networks.utils import Scale
        >>> stack = Sequential([Scale(2.0), Splitter(a=1, b=2)])
        >>> state = stack.initialize_state(4)
        >>> state
        [(), ()]
        >>> out = stack(state, jnp.ones((4, 3)))
        >>> out.output["b"].shape
        (4, 2)
        >>> float(out.output["a"][0, 0])
        2.0
    """

    def __init__(self, layers: Sequence[StatefulModule]):
        if isinstance(layers, (StatefulModule, Mapping, str)) or not isinstance(layers, Sequence):
            raise TypeError(
                f"Sequential takes a list of layers, got {_describe(layers)}. "
                "Write Sequential([layer_a, layer_b]); use Parallel/Concat for named "
                "children."
            )
        if len(layers) == 0:
            raise ValueError(
                "Sequential needs at least one layer, got an empty list. Pass the "
                "layers to chain, e.g. Sequential([encoder, head])."
            )
        for i, layer in enumerate(layers):
            _check_child("Sequential", f"layers[{i}]", layer)
        self.layers = nnx.List(list(layers))

    def __call__(
        self, state: ModuleState, x: Any, rollout_extras: Any = None
    ) -> StatefulModuleOutput:
        """Run the layers in order.

        Args:
            state: A list with one carry per layer, or ``()`` if every layer is
                stateless.
            x: The first layer's input, leaves ``[B, ...]``.
            rollout_extras: ``None`` during rollout; during replay, the list this
                container emitted (or ``()``).

        Returns:
            The last layer's output; ``next_state`` and ``rollout_extras`` are lists
            with one entry per layer (``next_state`` is ``()`` if ``state`` was ``()``
            and every layer stayed stateless).

        Raises:
            ValueError: If ``state`` or ``rollout_extras`` is not a list of one entry
                per layer (or ``()``).
        """
        n = len(self.layers)
        states = _route_list("Sequential", state, n, "state")
        extras = (
            [None] * n
            if rollout_extras is None
            else _route_list("Sequential", rollout_extras, n, "rollout_extras")
        )
        next_states: list[Any] = []
        new_extras: list[Any] = []
        metrics: dict[Any, Any] = {}
        reg = jnp.zeros(())
        for i, layer in enumerate(self.layers):
            out = layer(states[i], x, extras[i])
            x = out.output
            next_states.append(out.next_state)
            new_extras.append(out.rollout_extras)
            reg = _add_losses(reg, out.regularization_loss)
            if out.metrics:
                metrics[i] = out.metrics
        return StatefulModuleOutput(
            next_state=_layer_states(state, next_states),
            output=x,
            regularization_loss=reg,
            metrics=metrics,
            rollout_extras=new_extras,
        )

    def replay_sequence(
        self, state: ModuleState, xs: Any, rollout_extras: Any, done: jax.Array
    ) -> tuple[ModuleState, StatefulModuleOutput]:
        """Replay each layer over the whole sequence in turn (its own
        `StatefulModule.replay_sequence`): stateless layers
        run once on all ``T * B`` samples, only layers with a carry are scanned."""
        if type(self).__call__ is not Sequential.__call__:  # a subclass changed the routing
            return super().replay_sequence(state, xs, rollout_extras, done)
        n = len(self.layers)
        states = _route_list("Sequential", state, n, "state")
        extras = _route_list("Sequential", rollout_extras, n, "rollout_extras")
        finals: list[Any] = []
        metrics: dict[Any, Any] = {}
        reg = jnp.zeros(())
        for i, layer in enumerate(self.layers):
            final, out = layer.replay_sequence(states[i], xs, extras[i], done)
            xs = out.output
            finals.append(final)
            reg = _add_losses(reg, out.regularization_loss)
            if out.metrics:
                metrics[i] = out.metrics
        return _layer_states(state, finals), StatefulModuleOutput(
            next_state=(), output=xs, regularization_loss=reg, metrics=metrics, rollout_extras=()
        )

    def initialize_state(self, batch_size: int) -> list[Any]:
        """A list of each layer's initial carry for ``batch_size`` environments."""
        return [layer.initialize_state(batch_size) for layer in self.layers]

    def reset_state(self, prev_state: ModuleState) -> ModuleState:
        """Each layer's reset carry, in the same list (or tuple, or ``()``) structure."""
        if _is_empty(prev_state):
            return ()
        states = _route_list("Sequential", prev_state, len(self.layers), "state")
        fresh = [layer.reset_state(s) for layer, s in zip(self.layers, states, strict=True)]
        return tuple(fresh) if isinstance(prev_state, tuple) else fresh

    def update_statistics(self, rollout_extras: Any) -> None:
        """Route each layer's stacked extras (leaves ``[T, B, ...]``) to that layer."""
        extras = _route_list("Sequential", rollout_extras, len(self.layers), "rollout_extras")
        for layer, e in zip(self.layers, extras, strict=True):
            layer.update_statistics(e)


# --------------------------------------------------------------------------------------
# Named (dict) containers
# --------------------------------------------------------------------------------------


class _NamedContainer(StatefulModule):
    """Shared routing for containers whose children are named (a dict).

    Subclasses choose what each child sees with ``_dispatch`` (``False``: the whole
    input; ``True``: the input's entry under the child's name) and how the children's
    outputs are combined with `_combine`.
    """

    _dispatch: ClassVar[bool] = False

    def __init__(self, modules: Mapping[str, StatefulModule] | None = None, /, **kwargs: Any):
        owner = type(self).__name__
        children = _collect_named_children(owner, modules, kwargs)
        self.components = nnx.Dict(children)
        # nnx.Dict iterates in sorted key order after nnx.split/merge (i.e. under
        # nnx.jit); this static tuple keeps the user's insertion order everywhere.
        self._names = tuple(children)

    def _combine(self, outputs: dict[str, Any]) -> Any:
        """Combine the children's outputs (in insertion order) into this output."""
        return outputs

    def _child_input(self, name: str, x: Any) -> Any:
        if not self._dispatch:
            return x
        owner = type(self).__name__
        if not isinstance(x, Mapping):
            raise TypeError(
                f"{owner} dispatches a dict input by key to its children "
                f"{list(self._names)}, but got {_describe(x)}. Feed it a dict (e.g. "
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
        owner = type(self).__name__
        names = self._names
        states = _route_dict(owner, state, names, "state")
        extras = (
            dict.fromkeys(names)
            if rollout_extras is None
            else _route_dict(owner, rollout_extras, names, "rollout_extras")
        )
        outputs: dict[str, Any] = {}
        next_states: dict[str, Any] = {}
        new_extras: dict[str, Any] = {}
        metrics: dict[str, Any] = {}
        reg = jnp.zeros(())
        for name in names:
            out = self.components[name](states[name], self._child_input(name, x), extras[name])
            outputs[name] = out.output
            next_states[name] = out.next_state
            new_extras[name] = out.rollout_extras
            reg = _add_losses(reg, out.regularization_loss)
            if out.metrics:
                metrics[name] = out.metrics
        next_state: Any = next_states
        if _is_empty(state) and _leafless(next_states):
            next_state = ()
        return StatefulModuleOutput(
            next_state=next_state,
            output=self._combine(outputs),
            regularization_loss=reg,
            metrics=metrics,
            rollout_extras=new_extras,
        )

    def replay_sequence(
        self, state: ModuleState, xs: Any, rollout_extras: Any, done: jax.Array
    ) -> tuple[ModuleState, StatefulModuleOutput]:
        """Replay each child over the whole sequence (its own
        `StatefulModule.replay_sequence`) and combine the
        outputs, as `__call__` does per step."""
        if type(self).__call__ is not _NamedContainer.__call__:  # the routing was changed
            return super().replay_sequence(state, xs, rollout_extras, done)
        owner = type(self).__name__
        names = self._names
        states = _route_dict(owner, state, names, "state")
        extras = _route_dict(owner, rollout_extras, names, "rollout_extras")
        outputs: dict[str, Any] = {}
        finals: dict[str, Any] = {}
        metrics: dict[str, Any] = {}
        reg = jnp.zeros(())
        for name in names:
            finals[name], out = self.components[name].replay_sequence(
                states[name], self._child_input(name, xs), extras[name], done
            )
            outputs[name] = out.output
            reg = _add_losses(reg, out.regularization_loss)
            if out.metrics:
                metrics[name] = out.metrics
        final_state: Any = finals
        if _is_empty(state) and _leafless(finals):
            final_state = ()
        return final_state, StatefulModuleOutput(
            next_state=(),
            output=self._combine(outputs),
            regularization_loss=reg,
            metrics=metrics,
            rollout_extras=(),
        )

    def initialize_state(self, batch_size: int) -> dict[str, Any]:
        """A dict of each child's initial carry for ``batch_size`` environments."""
        return {name: self.components[name].initialize_state(batch_size) for name in self._names}

    def reset_state(self, prev_state: ModuleState) -> ModuleState:
        """Each child's reset carry, in the same dict (or ``()``) structure."""
        if _is_empty(prev_state):
            return ()
        states = _route_dict(type(self).__name__, prev_state, self._names, "state")
        return {name: self.components[name].reset_state(states[name]) for name in self._names}

    def update_statistics(self, rollout_extras: Any) -> None:
        """Route each child's stacked extras (leaves ``[T, B, ...]``) to that child."""
        extras = _route_dict(type(self).__name__, rollout_extras, self._names, "rollout_extras")
        for name in self._names:
            self.components[name].update_statistics(extras[name])


class Parallel(_NamedContainer):
    """Run named children on the **same** input; the output is a dict by child name.

    ``Parallel(action_params=actor, value=critic)`` (or the positional form
    ``Parallel({"action_params": actor, "value": critic})``, for names that are not
    Python identifiers or built in a comprehension) returns
    ``{"action_params": actor_out, "value": critic_out}``. Carry and extras are dicts
    keyed by child name; metrics are ``{name: child_metrics}``; the regularization loss
    is the sum of the children's (per sample ``[B]``).

    Args:
        modules: A dict ``{name: module}``; positional only. Mutually exclusive with
            ``**kwargs``.
        **kwargs: The children as ``name=module``.

    Raises:
        TypeError: If both or neither forms are mixed, a name is not a string, or a
            child is not a ``StatefulModule`` (the message names the key).
        ValueError: If there are no children.

    Examples:
        >>> import jax.numpy as jnp
        >>> from nnx_ppo.networks.containers import Parallel
        >>> from nnx_ppo.networks.utils import Scale
        >>> branches = Parallel(double=Scale(2.0), half=Scale(0.5))
        >>> out = branches((), jnp.ones((3, 2)))
        >>> sorted(out.output)
        ['double', 'half']
        >>> float(out.output["half"][0, 0])
        0.5
    """


class Concat(_NamedContainer):
    """Per-key dispatch, then concatenation: dict input ``->`` one ``[B, H]`` array.

    Child ``name`` receives ``x[name]``; the children's outputs (each ``[B, ..., H_k]``
    with the same leading axes) are concatenated along the last axis in the children's
    insertion order, giving ``[B, ..., sum_k H_k]``. Input keys without a child are
    ignored. Carry, extras, metrics and losses are routed as in `Parallel`.

    Args:
        modules: A dict ``{name: module}``; positional only. Mutually exclusive with
            ``**kwargs``.
        **kwargs: The children as ``name=module``.

    Raises:
        TypeError: As for `Parallel`; at call time, if the input is not a dict
            or a child returns a non-array.
        KeyError: At call time, if the input lacks a child's key (the message names
            the key and the keys present).
        ValueError: If there are no children; at call time, if the children's outputs
            disagree on their leading axes.

    Examples:
        >>> import jax.numpy as jnp
        >>> from nnx_ppo.networks.containers import Concat
        >>> from nnx_ppo.networks.utils import Scale
        >>> encoders = Concat(proprio=Scale(1.0), goal=Scale(10.0))
        >>> out = encoders((), {"proprio": jnp.ones((2, 3)), "goal": jnp.ones((2, 1))})
        >>> out.output.shape
        (2, 4)
        >>> out.output[0].tolist()
        [1.0, 1.0, 1.0, 10.0]
    """

    _dispatch = True

    def _combine(self, outputs: dict[str, Any]) -> jax.Array:
        arrays = []
        for name, value in outputs.items():
            if not hasattr(value, "shape") or not hasattr(value, "dtype"):
                raise TypeError(
                    f"Concat child {name!r} returned {_describe(value)}, not an array; "
                    "Concat joins arrays along the last axis. End that child with a "
                    "Flattener (nnx_ppo.networks.utils) or use Parallel to keep the "
                    "outputs as a dict."
                )
            if value.ndim < 1:
                raise ValueError(
                    f"Concat child {name!r} returned a scalar; outputs must be batched "
                    "arrays [B, ..., H] to concatenate along the last axis."
                )
            arrays.append(value)
        lead = {name: tuple(v.shape[:-1]) for name, v in outputs.items()}
        if len(set(lead.values())) > 1:
            raise ValueError(
                "Concat children must return arrays that agree on every axis but the "
                f"last; got output shapes "
                f"{ {name: tuple(v.shape) for name, v in outputs.items()} }. "
                "Make every child emit [B, H_k]."
            )
        return jnp.concatenate(arrays, axis=-1)


# --------------------------------------------------------------------------------------
# Splitter
# --------------------------------------------------------------------------------------


class Splitter(StatelessModule):
    """Slice a flat ``[B, ..., N]`` input into named pieces along the last axis.

    ``Splitter(action_params=2 * A, value=1)`` maps ``x`` of shape ``[B, 2A + 1]`` to
    ``{"action_params": x[..., :2A], "value": x[..., 2A:2A + 1]}``. Slices are taken in
    keyword (insertion) order. Input features beyond the sum of the sizes are ignored,
    as in plain slicing, so ``Splitter(action_params=N)`` relabels the first ``N``
    features as a dict. Sizes that sum to **more** than the input width are an error,
    never a silent truncation.

    Stateless: the carry and extras are ``()``.

    Args:
        sizes: A dict ``{name: size}``; positional only, for names that are not Python
            identifiers. Mutually exclusive with ``**kwargs``.
        **kwargs: The slices as ``name=size``; sizes are positive integers.

    Raises:
        TypeError: If both or neither forms are mixed, a name is not a string or a
            size is not an integer.
        ValueError: If there are no sizes or a size is not positive; at call time, if
            the sizes sum to more than the input's last axis.

    Examples:
        >>> import jax.numpy as jnp
        >>> from nnx_ppo.networks.containers import Splitter
        >>> s = Splitter(action_params=4, value=1)
        >>> out = s((), jnp.arange(10.0).reshape(2, 5))
        >>> out.output["value"].tolist()
        [[4.0], [9.0]]
    """

    def __init__(self, sizes: Mapping[str, int] | None = None, /, **kwargs: int):
        if sizes is not None and kwargs:
            raise TypeError(
                "Splitter takes its sizes either as one positional dict or as keyword "
                f"arguments, not both (got a positional {type(sizes).__name__} and "
                f"keywords {list(kwargs)}). Put every size in the dict."
            )
        if sizes is None:
            sizes = kwargs
        if not isinstance(sizes, Mapping):
            raise TypeError(
                f"Splitter's positional argument must be a dict {{name: size}}, got "
                f"{_describe(sizes)}. Use Splitter(a=2, b=1) or Splitter({{'a': 2}})."
            )
        if not sizes:
            raise ValueError(
                "Splitter needs at least one named size, got none. Write e.g. "
                "Splitter(action_params=2 * action_size, value=1)."
            )
        pairs = []
        for name, size in sizes.items():
            if not isinstance(name, str):
                raise TypeError(f"Splitter: slice names must be strings, got {name!r}.")
            # operator.index accepts int and numpy integers, rejects floats/arrays.
            if isinstance(size, (bool, np.bool_)) or not hasattr(size, "__index__"):
                raise TypeError(
                    f"Splitter: size {name}={size!r} must be an int, got {type(size).__name__}."
                )
            size = operator.index(size)
            if size <= 0:
                raise ValueError(
                    f"Splitter: size {name}={size} must be a positive number of "
                    "features; drop the entry if that slice is not needed."
                )
            pairs.append((name, int(size)))
        self._sizes = tuple(pairs)

    @property
    def sizes(self) -> dict[str, int]:
        """The slice sizes ``{name: size}`` in slicing order."""
        return dict(self._sizes)

    def forward(self, x: jax.Array) -> dict[str, jax.Array]:
        """Split ``x`` of shape ``[B, ..., N]`` into ``{name: [B, ..., size]}``.

        Raises:
            ValueError: If the sizes sum to more than ``N``.
        """
        x = jnp.asarray(x)
        if x.ndim < 1:
            raise ValueError(f"Splitter input must be an array [B, ..., N], got a scalar {x!r}.")
        width = x.shape[-1]
        total = sum(size for _, size in self._sizes)
        if total > width:
            raise ValueError(
                f"Splitter sizes {self.sizes} sum to {total}, but the input's last "
                f"axis has only {width} features (input shape {tuple(x.shape)}). The "
                "sizes must not exceed the input width: fix the sizes or the upstream "
                "layer's output size."
            )
        out = {}
        start = 0
        for name, size in self._sizes:
            out[name] = x[..., start : start + size]
            start += size
        return out
