"""Small helpers shared by the network modules (package-internal).

Argument checks, descriptions of values for error messages, and pytree predicates,
written once for the whole distribution. Nothing here is public API: import the public
modules instead.
"""

from __future__ import annotations

import numbers
import operator
from collections.abc import Callable, Mapping
from importlib import metadata
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "BothFormsError",
    "cell_activation",
    "check_features",
    "check_int",
    "describe",
    "installed_version",
    "is_empty",
    "key_path",
    "leafless",
    "named_arguments",
]


def is_empty(value: Any) -> bool:
    """Whether ``value`` is the empty carry/extras ``()``."""
    return isinstance(value, tuple) and len(value) == 0


def leafless(tree: Any) -> bool:
    """Whether ``tree`` has no array leaves (e.g. the carry of stateless children)."""
    return not jax.tree.leaves(tree)


def describe(value: Any) -> str:
    """A short description of a carry/extras/input value for error messages:
    ``"a dict with keys ['a']"``, ``"a list of length 2"``, ``"an array of shape (2, 3)"``."""
    if isinstance(value, Mapping):
        return f"a {type(value).__name__} with keys {list(value.keys())}"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of length {len(value)}"
    shape = getattr(value, "shape", None)
    if shape is not None:
        return f"an array of shape {tuple(shape)}"
    return f"a {type(value).__name__} ({value!r})"


def key_path(path: tuple[Any, ...], root: str = "<root>") -> str:
    """A pytree key path as `jax.tree_util.keystr` writes it (``"['arm'][0]"``), or
    ``root`` for the empty path (the tree itself)."""
    return jax.tree_util.keystr(path) or root


def check_features(owner: str, name: str, value: Any, example: str) -> int:
    """Validate a layer size (a positive Python or numpy integer, not a bool).

    Returns:
        ``value`` as an ``int``.

    Raises:
        TypeError: If ``value`` is not an integer.
        ValueError: If ``value < 1`` (a layer needs at least one feature).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{owner}: {name} must be a positive int, got {value!r} of type "
            f"{type(value).__name__}; pass a whole number, e.g. {example}."
        )
    if value <= 0:
        raise ValueError(
            f"{owner}: {name} must be a positive int, got {value!r}; a layer needs at "
            f"least one feature, e.g. {example}."
        )
    return int(value)


def check_int(owner: str, argument: str, value: Any, *, minimum: int, example: str) -> int:
    """Validate an integer argument ``>= minimum``: anything `operator.index` accepts
    (Python and numpy integers, integer 0-d arrays), except bools.

    Args:
        owner: Who checks, the start of the message (e.g. ``"Splitter"``).
        argument: How the argument is named in the message (e.g. ``"size a"``).
        value: The value to check.
        minimum: The smallest allowed value (``1`` for a positive int).
        example: A corrected call for the message (e.g. ``"a=2"``).

    Returns:
        ``value`` as a Python ``int``.

    Raises:
        TypeError: If ``value`` is not an integer.
        ValueError: If ``value < minimum``.
    """
    kind = "a positive int" if minimum == 1 else f"an int >= {minimum}"
    number: int | None = None
    if not isinstance(value, (bool, np.bool_)) and hasattr(value, "__index__"):
        try:  # int, numpy and 0-d integer arrays; not floats, bools or float arrays
            number = operator.index(value)
        except TypeError:
            number = None
    if number is None:
        raise TypeError(
            f"{owner}: {argument} must be an int, got {type(value).__name__} {value!r}; "
            f"e.g. {example}."
        )
    if number < minimum:
        raise ValueError(f"{owner}: {argument} must be {kind}, got {number!r}; e.g. {example}.")
    return int(number)


_CELL_ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "relu": jax.nn.relu,
    "tanh": jnp.tanh,
}


def cell_activation(owner: str, value: Any) -> Callable[[jax.Array], jax.Array]:
    """A recurrent cell's ``activation``: a name (``"relu"``, ``"tanh"``) or an
    elementwise callable, as a function.

    Raises:
        ValueError: If ``value`` is an unknown name.
        TypeError: If ``value`` is neither a name nor a callable.
    """
    if isinstance(value, str):
        if value not in _CELL_ACTIVATIONS:
            raise ValueError(
                f"{owner}: activation must be one of {sorted(_CELL_ACTIVATIONS)} or an "
                f"elementwise callable, got {value!r}; e.g. activation='tanh' or "
                "activation=jax.nn.softplus."
            )
        return _CELL_ACTIVATIONS[value]
    if not callable(value):
        raise TypeError(
            f"{owner}: activation must be one of {sorted(_CELL_ACTIVATIONS)} or an "
            f"elementwise callable, got {value!r} of type {type(value).__name__}; e.g. "
            "activation='relu' or activation=jax.nn.softplus."
        )
    return value  # type: ignore[no-any-return]


class BothFormsError(TypeError, ValueError):
    """A container given its entries both as a positional dict and as keywords.

    A ``TypeError``, as Python raises for a call with conflicting arguments, and a
    ``ValueError``, as nnx-ppo 0.3.0 raises for it: code catching either sees it.
    """


def named_arguments(
    owner: str,
    positional: Any,
    kwargs: dict[str, Any],
    *,
    items: str,
    one: str,
    mapping: str,
    example: str,
) -> Mapping[Any, Any]:
    """The ``Owner({name: item})`` / ``Owner(name=item)`` construction forms, checked.

    Args:
        owner: The class being built, e.g. ``"Parallel"``.
        positional: The positional dict, or ``None``.
        kwargs: The keyword arguments.
        items: What the entries are, plural, e.g. ``"children"``.
        one: One entry, for the empty-dict message, e.g. ``"child"``.
        mapping: What the positional argument must be, e.g. ``"a dict {name: size}"``.
        example: A correct call for the messages.

    Returns:
        The dict of entries (``kwargs`` when no positional dict was given).

    Raises:
        BothFormsError: If both forms are used (a ``TypeError`` and a ``ValueError``).
        TypeError: If the positional argument is not a dict.
        ValueError: If there are no entries.
    """
    if positional is not None and kwargs:
        raise BothFormsError(
            f"{owner} takes its {items} either as one positional dict or as keyword "
            f"arguments, not both (got a positional {type(positional).__name__} and "
            f"keywords {list(kwargs)}). Put every entry in the dict, e.g. {example}."
        )
    entries = kwargs if positional is None else positional
    if not isinstance(entries, Mapping):
        raise TypeError(
            f"{owner}'s positional argument must be {mapping}, got {describe(entries)}. "
            f"Use e.g. {example}."
        )
    if not entries:
        raise ValueError(f"{owner} needs at least one {one}, got none. Write e.g. {example}.")
    return entries


def installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution`` (e.g. ``"jax"``), or ``None``."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None
