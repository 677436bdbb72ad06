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

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from nnx_ppo.networks._helpers import check_int, describe, is_empty, named_arguments
from nnx_ppo.networks._routing import Children, NamedContainer, check_child, route_list
from nnx_ppo.networks.types import (
    ModuleState,
    StatefulModule,
    StatefulModuleOutput,
    StatelessModule,
)

__all__ = ["Concat", "Parallel", "Sequential", "Splitter"]


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
                f"Sequential takes a list of layers, got {describe(layers)}. "
                "Write Sequential([layer_a, layer_b]); use Parallel/Concat for named "
                "children."
            )
        if len(layers) == 0:
            raise ValueError(
                "Sequential needs at least one layer, got an empty list. Pass the "
                "layers to chain, e.g. Sequential([encoder, head])."
            )
        for i, layer in enumerate(layers):
            check_child("Sequential", f"layers[{i}]", layer)
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
        states = route_list("Sequential", state, n, "state")
        extras = (
            [None] * n
            if rollout_extras is None
            else route_list("Sequential", rollout_extras, n, "rollout_extras")
        )
        children = Children()
        for i, layer in enumerate(self.layers):
            x = children.called(i, layer(states[i], x, extras[i])).output
        return StatefulModuleOutput(
            next_state=children.layer_states(state),
            output=x,
            regularization_loss=children.regularization,
            metrics=children.metrics,
            rollout_extras=list(children.extras.values()),
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
        states = route_list("Sequential", state, n, "state")
        extras = route_list("Sequential", rollout_extras, n, "rollout_extras")
        children = Children()
        for i, layer in enumerate(self.layers):
            xs = children.replayed(i, layer.replay_sequence(states[i], xs, extras[i], done)).output
        return children.layer_states(state), StatefulModuleOutput(
            next_state=(),
            output=xs,
            regularization_loss=children.regularization,
            metrics=children.metrics,
            rollout_extras=(),
        )

    def initialize_state(self, batch_size: int) -> list[Any]:
        """A list of each layer's initial carry for ``batch_size`` environments."""
        return [layer.initialize_state(batch_size) for layer in self.layers]

    def reset_state(self, prev_state: ModuleState) -> ModuleState:
        """Each layer's reset carry, in the same list (or tuple, or ``()``) structure."""
        return self._per_layer("reset_state", prev_state)

    def canonical_state(self, state: ModuleState) -> ModuleState:
        """Each layer's canonical carry, in the same list (or tuple, or ``()``) structure."""
        return self._per_layer("canonical_state", state)

    def _per_layer(self, method: str, state: ModuleState) -> ModuleState:
        """Each layer's ``method`` of its carry, in ``state``'s structure."""
        if is_empty(state):
            return ()
        states = route_list("Sequential", state, len(self.layers), "state")
        mapped = [getattr(layer, method)(s) for layer, s in zip(self.layers, states, strict=True)]
        return tuple(mapped) if isinstance(state, tuple) else mapped

    def update_statistics(self, rollout_extras: Any) -> None:
        """Route each layer's stacked extras (leaves ``[T, B, ...]``) to that layer."""
        extras = route_list("Sequential", rollout_extras, len(self.layers), "rollout_extras")
        for layer, e in zip(self.layers, extras, strict=True):
            layer.update_statistics(e)


# --------------------------------------------------------------------------------------
# Named (dict) containers
# --------------------------------------------------------------------------------------

# Parallel and Concat share the routing of every named container
# (nnx_ppo.networks._routing.NamedContainer); they differ only in what each child sees
# and how the outputs combine.


class Parallel(NamedContainer):
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
        TypeError: If both forms are given (the error is also a ``ValueError``, as
            in nnx-ppo 0.3.0), a name is not a string, or a
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


class Concat(NamedContainer):
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
                    f"Concat child {name!r} returned {describe(value)}, not an array; "
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
        TypeError: If both forms are given (the error is also a ``ValueError``, as
            in nnx-ppo 0.3.0), a name is not a string or a
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
        sizes = named_arguments(
            "Splitter",
            sizes,
            kwargs,
            items="sizes",
            one="named size",
            mapping="a dict {name: size}",
            example="Splitter(action_params=2 * action_size, value=1) or Splitter({'a': 2})",
        )
        pairs = []
        for name, size in sizes.items():
            if not isinstance(name, str):
                raise TypeError(f"Splitter: slice names must be strings, got {name!r}.")
            size = check_int(
                "Splitter",
                f"size {name}={size!r}",
                size,
                minimum=1,
                example=f"{name}=2 (drop the entry if that slice is not needed)",
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
