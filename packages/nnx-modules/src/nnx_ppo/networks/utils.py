"""Small routing and reshaping modules for pytree (dict) inputs and outputs.

- `Filter` selects and renames entries of a dict (nested paths allowed) or
  applies a pure function.
- `Map` dispatches a dict input per key to named children; unconsumed keys are
  dropped.
- `Merge` feeds the same input to named children that each emit a dict and
  merges those dicts.
- `Flattener` flattens a pytree into one ``[B, N]`` feature vector (optionally
  keeping the top levels of a dict).
- `Scale` multiplies by a constant or a per-feature array.

`Map` and `Merge` are containers: their carry, ``rollout_extras``,
statistics, losses and metrics are routed per child exactly as in
`Parallel`. The others are stateless (carry and
extras ``()``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nnx_ppo.networks._helpers import describe, key_path
from nnx_ppo.networks._routing import NamedContainer
from nnx_ppo.networks.types import StatelessModule

__all__ = ["Filter", "Flattener", "KeyPath", "Map", "Merge", "Scale", "ScaleFactor"]

KeyPath = str | tuple[str | int, ...]
"""A key path into a nested dict: ``"obs/proprio"`` or ``("obs", "proprio")``."""


# --------------------------------------------------------------------------------------
# Filter
# --------------------------------------------------------------------------------------


def _parse_path(path: Any, where: str) -> tuple[str | int, ...]:
    if isinstance(path, str):
        if not path or any(not part for part in path.split("/")):
            raise ValueError(
                f"Filter: {where} path {path!r} is empty or has an empty segment; "
                "write keys separated by single slashes, e.g. 'obs/proprio'."
            )
        return tuple(path.split("/"))
    if isinstance(path, tuple):
        if not path:
            raise ValueError(f"Filter: {where} path () is empty; name at least one key.")
        for part in path:
            if isinstance(part, bool) or not isinstance(part, (str, int)):
                raise TypeError(
                    f"Filter: {where} path {path!r} contains {part!r}; tuple paths hold "
                    "str keys (dicts) or int indices (lists/tuples)."
                )
        return path
    raise TypeError(
        f"Filter: {where} path {path!r} must be a str ('obs/proprio') or a tuple of "
        f"keys (('obs', 'proprio')), got {type(path).__name__}."
    )


_Entry = tuple[str | int, ...] | Callable[[Any], Any]
"""A parsed entry of a dict spec: a key path, or a function of the whole input."""


def _parse_entry(entry: Any, key: str) -> _Entry:
    """A dict spec's entry: a path (parsed) or a callable (kept); NNX modules rejected."""
    if isinstance(entry, (str, tuple)):
        return _parse_path(entry, f"output {key!r}:")
    if isinstance(entry, nnx.Module):
        raise TypeError(
            f"Filter: output {key!r} is a {type(entry).__name__} module; Filter only "
            "selects, renames or computes data with pure functions. Put the module in the "
            "Sequential (or Map) and keep a path or a function here."
        )
    if callable(entry):
        return entry
    raise TypeError(
        f"Filter: output {key!r}: path {entry!r} must be a str ('obs/proprio'), a tuple "
        "of keys (('obs', 'proprio')) or a callable "
        f"computing the value from the whole input, got {type(entry).__name__}."
    )


def _lookup(x: Any, path: tuple[str | int, ...]) -> Any:
    node = x
    for depth, key in enumerate(path):
        here = "/".join(str(p) for p in path[:depth]) or "<input>"
        if isinstance(node, Mapping):
            if key not in node:
                raise KeyError(
                    f"Filter path {'/'.join(map(str, path))!r}: key {key!r} not found at "
                    f"{here}; keys present: {list(node.keys())}."
                )
            node = node[key]
        elif isinstance(node, (list, tuple)) and isinstance(key, int):
            if not -len(node) <= key < len(node):
                raise KeyError(
                    f"Filter path {path!r}: index {key} out of range at {here}, which "
                    f"has {len(node)} entries."
                )
            node = node[key]
        else:
            raise KeyError(
                f"Filter path {'/'.join(map(str, path))!r}: cannot look up {key!r} in "
                f"{describe(node)} at {here}; only dicts (and lists, by int index in a "
                "tuple path) can be indexed."
            )
    return node


class Filter(StatelessModule):
    """Select, rename or transform parts of a pytree input.

    The ``spec`` takes one of three forms:

    - a dict ``{output_key: entry}``: the output is the dict ``{output_key: value}``
      with one value per entry, in the dict's order; input keys that no entry names
      are dropped. An entry that is a path gives ``x[path]``, e.g.
      ``Filter({"a": "action_a", "b": "action_b"})`` renames ``action_a`` to ``a`` and
      ``action_b`` to ``b``; an entry that is a callable ``f`` gives ``f(x)``,
      computed from the **whole** input. Paths and callables mix freely, as in
      nnx-ppo 0.3.0: ``Filter({"sum": lambda x: x["a"] + x["b"], "a": "a"})``;
    - a single path: the output is ``x[path]`` itself (not wrapped in a dict);
    - a callable ``f``: the output is ``f(x)``.

    A callable must be a pure function of the batched input (leaves ``[B, ...]``): it
    runs at every call, in rollouts and in loss replay alike, and must not close over
    NNX modules or variables (an NNX module is rejected as a spec or an entry; put a
    module in the ``Sequential`` or ``Map`` instead).

    A path is a key, a nested path ``"obs/proprio"`` (keys separated by ``/``), or a
    tuple of keys ``("obs", "proprio")`` (use a tuple when a key contains ``/``; tuple
    paths may also hold int indices into lists/tuples).

    Stateless: the carry and extras are ``()``.

    Args:
        spec: The dict, path or callable described above.

    Raises:
        TypeError: If ``spec`` (or an entry in it) has the wrong type, or is an NNX
            module.
        ValueError: If the dict is empty or a path is empty.
        KeyError: At call time, if a path is missing from the input (the message
            names the path and the keys present).

    Examples:
        >>> import jax.numpy as jnp
        >>> from nnx_ppo.networks.utils import Filter
        >>> x = {"obs": {"proprio": jnp.ones((2, 3))}, "value_a": jnp.zeros((2, 1))}
        >>> out = Filter({"p": "obs/proprio", "v": "value_a"})((), x)
        >>> {k: v.shape for k, v in out.output.items()}
        {'p': (2, 3), 'v': (2, 1)}
        >>> both = Filter({"sum": lambda x: x["a"] + x["b"], "a": "a"})
        >>> out = both((), {"a": jnp.ones((2, 1)), "b": jnp.ones((2, 1))})
        >>> float(out.output["sum"][0, 0]), sorted(out.output)
        (2.0, ['a', 'sum'])
    """

    def __init__(
        self, spec: Mapping[str, KeyPath | Callable[[Any], Any]] | KeyPath | Callable[[Any], Any]
    ):
        self._fn: Callable[[Any], Any] | None = None
        self._entries: tuple[tuple[str, _Entry], ...] | None = None
        self._path: tuple[str | int, ...] | None = None
        if isinstance(spec, Mapping):
            if not spec:
                raise ValueError(
                    "Filter got an empty dict, which would output nothing. Map output "
                    "keys to input paths, e.g. Filter({'a': 'action_a'})."
                )
            entries = []
            for key, entry in spec.items():
                if not isinstance(key, str):
                    raise TypeError(
                        f"Filter: output keys must be strings, got {key!r} ({type(key).__name__})."
                    )
                entries.append((key, _parse_entry(entry, key)))
            self._entries = tuple(entries)
        elif isinstance(spec, (str, tuple)):
            self._path = _parse_path(spec, "the")
        elif isinstance(spec, nnx.Module):
            raise TypeError(
                f"Filter got a {type(spec).__name__} module as spec; Filter only "
                "selects/renames data. Put the module itself in the Sequential (or Map)."
            )
        elif callable(spec):
            self._fn = spec
        else:
            raise TypeError(
                f"Filter spec must be a dict {{output_key: path or callable}}, a path "
                f"('obs/proprio' or ('obs', 'proprio')) or a callable, got "
                f"{type(spec).__name__} {spec!r}. To select several keys unchanged, write "
                "Filter({'k1': 'k1', 'k2': 'k2'})."
            )

    def forward(self, x: Any) -> Any:
        """Apply the spec to ``x`` (a pytree with leaves ``[B, ...]``)."""
        if self._fn is not None:
            return self._fn(x)
        if self._path is not None:
            return _lookup(x, self._path)
        return {
            key: _lookup(x, entry) if isinstance(entry, tuple) else entry(x)
            for key, entry in self._entries or ()
        }


# --------------------------------------------------------------------------------------
# Map and Merge
# --------------------------------------------------------------------------------------


class Map(NamedContainer):
    """Per-key dispatch: child ``k`` gets ``x[k]``; the output is ``{k: child_k(x[k])}``.

    Input keys without a child are dropped, so ``Map({"action_params": sampler})`` can
    sit on a dict that also holds ``"value"``. Carry, extras, statistics, metrics and
    losses are routed per child exactly as in
    `Parallel`.

    Args:
        modules: A dict ``{key: module}``; positional only. Mutually exclusive with
            ``**kwargs``.
        **kwargs: The children as ``key=module``.

    Raises:
        TypeError: If both forms are given (the error is also a ``ValueError``, as
            in nnx-ppo 0.3.0), a key is not a string, or a
            child is not a ``StatefulModule`` (the message names the key); at call
            time, if the input is not a dict.
        ValueError: If there are no children.
        KeyError: At call time, if the input lacks a child's key (the message names
            the key and the keys present).

    Examples:
        >>> import jax.numpy as jnp
        >>> from nnx_ppo.networks.utils import Map, Scale
        >>> m = Map({"a": Scale(2.0), "b": Scale(-1.0)})
        >>> x = {"a": jnp.ones((2, 1)), "b": jnp.ones((2, 1)), "unused": jnp.ones((2, 1))}
        >>> out = m((), x)
        >>> sorted(out.output), float(out.output["b"][0, 0])
        (['a', 'b'], -1.0)
    """

    _dispatch = True


class Merge(NamedContainer):
    """Feed the same input to named children that each emit a dict; merge the dicts.

    ``Merge(pos=enc_a, vel=enc_b)`` returns ``{**enc_a(x), **enc_b(x)}`` as one flat
    dict. A key emitted by two children is an error rather than a silent overwrite.
    Carry, extras, statistics, metrics and losses are routed per child exactly as in
    `Parallel` (keyed by the child names, not by
    the output keys).

    Args:
        modules: A dict ``{name: module}``; positional only. Mutually exclusive with
            ``**kwargs``.
        **kwargs: The children as ``name=module``.

    Raises:
        TypeError: If both forms are given (the error is also a ``ValueError``, as
            in nnx-ppo 0.3.0), a name is not a string, or a
            child is not a ``StatefulModule``; at call time, if a child's output is not
            a dict.
        ValueError: If there are no children; at call time, if two children emit the
            same key (the message names the key and both children).

    Examples:
        >>> import jax.numpy as jnp
        >>> from nnx_ppo.networks.containers import Splitter
        >>> from nnx_ppo.networks.utils import Filter, Merge
        >>> m = Merge(head=Splitter(mean=2), raw=Filter(lambda x: {"raw": x}))
        >>> out = m((), jnp.ones((4, 3)))
        >>> {k: v.shape for k, v in out.output.items()}
        {'mean': (4, 2), 'raw': (4, 3)}
    """

    def _combine(self, outputs: dict[str, Any]) -> dict[Any, Any]:
        merged: dict[Any, Any] = {}
        owner_of: dict[Any, str] = {}
        for name, value in outputs.items():
            if not isinstance(value, Mapping):
                raise TypeError(
                    f"Merge child {name!r} returned {describe(value)}, not a dict; Merge "
                    "combines dict outputs. Wrap that child's output in a dict (e.g. end "
                    "it with Splitter or Filter), or use Parallel."
                )
            for key, leaf in value.items():
                if key in merged:
                    raise ValueError(
                        f"Merge: output key {key!r} is emitted by both child "
                        f"{owner_of[key]!r} ({type(self.components[owner_of[key]]).__name__}) "
                        f"and child {name!r} ({type(self.components[name]).__name__}). "
                        "Rename one of them (e.g. with Filter) so every key is unique."
                    )
                merged[key] = leaf
                owner_of[key] = name
        return merged


# --------------------------------------------------------------------------------------
# Flattener
# --------------------------------------------------------------------------------------


def _is_level(node: Any) -> bool:
    """Whether ``node`` is a container level `Flattener` can keep: a dict, list or tuple
    (a named tuple is a tuple too)."""
    return isinstance(node, Mapping | list | tuple)


def _depth(tree: Any, limit: int) -> int:
    """How many levels of dicts / lists / tuples ``tree`` nests, counted up to ``limit``."""
    if limit == 0 or not _is_level(tree):
        return 0
    children = tree.values() if isinstance(tree, Mapping) else tree
    return 1 + max((_depth(child, limit - 1) for child in children), default=0)


def _keep_levels(tree: Any, levels: int) -> Any:
    if levels == 0 or not _is_level(tree):
        return _flatten(tree)
    if isinstance(tree, Mapping):
        return {key: _keep_levels(value, levels - 1) for key, value in tree.items()}
    kept = [_keep_levels(value, levels - 1) for value in tree]
    if isinstance(tree, list):
        return kept
    return type(tree)(*kept) if hasattr(tree, "_fields") else tuple(kept)


def _flatten(tree: Any) -> Any:
    leaves = jax.tree_util.tree_leaves_with_path(tree)
    if not leaves:
        raise ValueError(
            f"Flattener got {describe(tree)} with no array leaves; there is nothing to flatten."
        )
    arrays = []
    batch = None
    for path, leaf in leaves:
        leaf = jnp.asarray(leaf)
        name = key_path(path, root="<input>")
        if leaf.ndim < 1:
            raise ValueError(
                f"Flattener: leaf {name} is a scalar; every leaf needs a leading batch "
                "axis [B, ...]."
            )
        if batch is None:
            batch = leaf.shape[0]
        elif leaf.shape[0] != batch:
            raise ValueError(
                f"Flattener: leaf {name} has batch size {leaf.shape[0]} but earlier "
                f"leaves have {batch}; all leaves must share the leading axis [B, ...]."
            )
        arrays.append(leaf.reshape(leaf.shape[0], -1))
    return jnp.concatenate(arrays, axis=-1)


class Flattener(StatelessModule):
    """Flatten a pytree of ``[B, ...]`` leaves into one ``[B, N]`` feature vector.

    Leaves are reshaped to ``[B, -1]`` and concatenated in `jax.tree.leaves`
    order, i.e. dict keys in **sorted** order at every level, which does not depend on
    dict insertion order. With ``preserve_levels=k`` the top ``k`` levels of nested
    dicts are kept and everything below each kept entry is flattened:
    ``{"a": {"x": [B, 2], "y": [B, 3]}, "b": [B, 1]}`` becomes ``[B, 6]`` with
    ``preserve_levels=0`` and ``{"a": [B, 5], "b": [B, 1]}`` with
    ``preserve_levels=1``. Lists and tuples are levels too, as in nnx-ppo 0.3.0 (a
    tuple observation ``(a, b)`` becomes ``(a_flat, b_flat)`` with
    ``preserve_levels=1``). A branch that ends in an array above the kept depth is
    flattened where it stands (``b`` above, with ``preserve_levels=2``), so the levels
    of an observation may differ in depth; but the input must nest ``preserve_levels``
    levels somewhere.

    Stateless: the carry and extras are ``()``.

    Args:
        preserve_levels: How many top levels of dicts to keep, ``>= 0``.

    Raises:
        TypeError: If ``preserve_levels`` is not an int; at call time, if no branch of
            the input nests ``preserve_levels`` levels (e.g. an array, or
            ``{"a": [B, 3]}`` with ``preserve_levels=2``), as nnx-ppo 0.3.0 does.
        ValueError: If ``preserve_levels`` is negative; at call time, if a subtree has
            no leaves, a leaf is a scalar, or the leaves disagree on ``B``.

    Examples:
        >>> import jax.numpy as jnp
        >>> from nnx_ppo.networks.utils import Flattener
        >>> x = {"b": jnp.ones((2, 1)), "a": jnp.zeros((2, 2, 2))}
        >>> Flattener()((), x).output[0].tolist()  # a (4 features) before b (1)
        [0.0, 0.0, 0.0, 0.0, 1.0]
    """

    def __init__(self, preserve_levels: int = 0):
        if isinstance(preserve_levels, bool) or not isinstance(preserve_levels, int):
            raise TypeError(
                f"Flattener: preserve_levels must be an int >= 0, got "
                f"{type(preserve_levels).__name__} {preserve_levels!r}."
            )
        if preserve_levels < 0:
            raise ValueError(
                f"Flattener: preserve_levels={preserve_levels} is negative; use 0 to "
                "flatten everything or k > 0 to keep the top k dict levels."
            )
        self.preserve_levels = preserve_levels

    def forward(self, x: Any) -> Any:
        """Flatten ``x`` (leaves ``[B, ...]``) to ``[B, N]`` or a dict of those."""
        depth = _depth(x, self.preserve_levels)
        if depth < self.preserve_levels:
            raise TypeError(
                f"Flattener(preserve_levels={self.preserve_levels}) got {describe(x)}, "
                f"which nests dicts / lists / tuples only {depth} level(s) deep: it has no "
                f"level {depth + 1} to keep. Use Flattener(preserve_levels={depth}) (0 "
                "flattens everything), or check the observation's structure."
            )
        return _keep_levels(x, self.preserve_levels)


# --------------------------------------------------------------------------------------
# Scale
# --------------------------------------------------------------------------------------


class ScaleFactor(nnx.Variable):
    """The constant multiplier of a `Scale` (not a ``Param``: never trained)."""


class Scale(StatelessModule):
    """Multiply the input by a constant: ``y = x * scale``.

    ``scale`` is a number or a per-feature array that broadcasts against the trailing
    axes of each input leaf without changing the leaf's shape (e.g. ``[N]`` for inputs
    ``[B, N]``). For a pytree input every leaf is scaled by the same ``scale``. The
    factor is stored as a `ScaleFactor` variable, which optimizers over
    ``nnx.Param`` leave alone.

    Stateless: the carry and extras are ``()``.

    Args:
        scale: A finite number or array-like of finite numbers.
        factor: nnx-ppo 0.3.0's keyword name for ``scale`` (``Scale(factor=2.0)``);
            give one of the two.

    Raises:
        TypeError: If ``scale`` is not numeric, or both or neither of ``scale`` and
            ``factor`` are given.
        ValueError: If ``scale`` has non-finite entries; at call time, if it does not
            broadcast onto an input leaf's trailing axes.

    Examples:
        >>> import jax.numpy as jnp
        >>> from nnx_ppo.networks.utils import Scale
        >>> Scale(jnp.array([1.0, 10.0]))((), jnp.ones((3, 2))).output[0].tolist()
        [1.0, 10.0]
    """

    def __init__(
        self,
        scale: float | jax.Array | np.ndarray | Sequence[float] | None = None,
        *,
        factor: float | jax.Array | np.ndarray | Sequence[float] | None = None,
    ):
        if (scale is None) == (factor is None):
            raise TypeError(
                "Scale: give exactly one of scale and factor (nnx-ppo's name for it), "
                f"got scale={scale!r}, factor={factor!r}; e.g. Scale(2.0)."
            )
        scale = scale if scale is not None else factor
        try:
            array = np.asarray(scale)
        except (TypeError, ValueError) as err:
            raise TypeError(
                f"Scale: scale must be a number or an array of numbers, got "
                f"{type(scale).__name__} {scale!r}."
            ) from err
        if not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_):
            raise TypeError(
                f"Scale: scale must be a number or an array of numbers, got dtype "
                f"{array.dtype} from {scale!r}."
            )
        if not np.all(np.isfinite(array)):
            raise ValueError(
                f"Scale: scale {scale!r} has non-finite entries; every factor must be a "
                "finite number."
            )
        if not np.issubdtype(array.dtype, np.floating):
            array = array.astype(float)
        # float64 becomes the default JAX float (float32 unless x64 is enabled).
        self.scale = ScaleFactor(jnp.asarray(array))

    def forward(self, x: Any) -> Any:
        """Return ``x * scale`` for every leaf of ``x`` (shapes unchanged)."""
        factor = self.scale[...]

        def scale_leaf(leaf: Any) -> jax.Array:
            leaf = jnp.asarray(leaf)
            if factor.ndim > 0:
                try:
                    ok = np.broadcast_shapes(leaf.shape, factor.shape) == leaf.shape
                except ValueError:
                    ok = False
                if not ok:
                    raise ValueError(
                        f"Scale: a factor of shape {tuple(factor.shape)} does not "
                        f"broadcast onto an input leaf of shape {tuple(leaf.shape)}; "
                        "use a per-feature factor matching the input's trailing axes."
                    )
            return leaf * factor

        return jax.tree.map(scale_leaf, x)
