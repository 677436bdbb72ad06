"""The checks of a `PopulationGraph`'s build calls (package-internal).

Each ``add_*`` and ``connect`` call validates its arguments against the graph declared
so far, and ``finalize()`` checks that every connection's transform maps its source's
size to its destination's; `check_call_output` repeats that check while a step is
traced (never at run time), for a transform whose output depends on its input. Every
error names the call, the argument, its value and the fix.
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from nnx_ppo.networks.feedforward import Dense
from nnx_ppo.networks.graph.signed_dense import SignedDense
from nnx_ppo.networks.graph.topology import Activation, Connection, Population, connection_name
from nnx_ppo.networks.types import StatefulModule

__all__ = [
    "check_activation",
    "check_call_output",
    "check_connection",
    "check_delay",
    "check_key",
    "check_name",
    "check_new_population",
    "check_size",
    "check_transform",
]

_FORBIDDEN_IN_NAMES = ("->", "@", '"', "'", "`")


def check_name(call: str, value: Any) -> str:
    """Validate a population name (a non-empty string usable as a dict key)."""
    if not isinstance(value, str):
        raise TypeError(
            f"{call}: name must be a str, got {value!r} of type {type(value).__name__}; "
            "name populations with strings, e.g. 'hidden'."
        )
    bad = [s for s in _FORBIDDEN_IN_NAMES if s in value]
    if not value or value != value.strip() or bad or re.search(r"\s", value):
        raise ValueError(
            f"{call}: invalid population name {value!r}; a name must be non-empty, without "
            "whitespace, and must not contain '->', '@' or quotes (they are used in "
            "connection names and diagrams). Use e.g. 'arm_L'."
        )
    return value


def _check_int(call: str, argument: str, value: Any, minimum: int, fix: str) -> int:
    """Validate an int argument ``>= minimum`` (``minimum`` is 0 or 1; bools rejected)."""
    kind = "a positive int" if minimum == 1 else "a non-negative int"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{call}: {argument} must be {kind}, got {value!r} of type "
            f"{type(value).__name__}; {fix}."
        )
    if value < minimum:
        raise ValueError(f"{call}: {argument} must be {kind}, got {value!r}; {fix}.")
    return int(value)


def check_size(call: str, value: Any) -> int:
    """Validate a population size (a positive int)."""
    return _check_int(
        call, "size", value, 1, "a population's width is at least one unit, e.g. size=32"
    )


def check_activation(call: str, value: Any) -> Activation | None:
    """Validate an activation (a callable or ``None``)."""
    if value is not None and not callable(value):
        raise TypeError(
            f"{call}: activation must be a callable such as nnx.swish, or None for a "
            f"linear population, got {value!r} of type {type(value).__name__}."
        )
    return value


def check_key(call: str, argument: str, value: Any) -> str:
    """Validate an observation / output key (a non-empty string)."""
    if not isinstance(value, str) or not value:
        raise TypeError(
            f"{call}: {argument} must be a non-empty str naming a dict entry, got "
            f"{value!r} of type {type(value).__name__}, e.g. {argument}='x'."
        )
    return value


def check_delay(call: str, value: Any) -> int:
    """Validate a connection delay (a non-negative int)."""
    return _check_int(
        call,
        "delay",
        value,
        0,
        "a delay is a number of steps and a connection cannot read the future: use "
        "delay=0 to read the same step or delay=k to read k steps ago",
    )


def check_new_population(
    call: str, populations: Sequence[Population], name: str, output_to: str | None
) -> None:
    """Check that ``name`` (and ``output_to``, if given) is not taken yet.

    Raises:
        ValueError: On a duplicate population name or output key.
    """
    for p in populations:
        if p.name == name:
            raise ValueError(
                f"{call}({name!r}): a population named {name!r} already exists "
                f"(size {p.size}); population names must be unique, pick another one."
            )
        if output_to is not None and p.output_to == output_to:
            raise ValueError(
                f"{call}({name!r}): output key {output_to!r} is already used by "
                f"population {p.name!r}; pass a different output_to=."
            )


def check_connection(
    populations: Sequence[Population],
    connections: Sequence[Connection],
    src: Any,
    dst: Any,
    transform: Any,
    delay: Any,
    reciprocal: Any,
) -> tuple[int, list[tuple[str, str]]]:
    """Validate the arguments of ``PopulationGraph.connect`` against the declared graph.

    Args:
        populations: The populations declared so far.
        connections: The connections declared so far.
        src: Source population name.
        dst: Destination population name.
        transform: ``None`` or a `StatefulModule`.
        delay: A non-negative int.
        reciprocal: A bool; ``True`` also connects ``dst -> src``.

    Returns:
        ``(delay, pairs)``: the validated delay and the ``(src, dst)`` pairs to connect
        (two for ``reciprocal=True``).

    Raises:
        TypeError: On a wrongly typed argument.
        ValueError: On an unknown population, a negative delay, a ``delay=0``
            self-loop, a duplicate connection, or ``reciprocal=True`` together with a
            custom transform, a self-loop or ``delay=0``.
    """
    known = [p.name for p in populations]
    for argument, value in (("src", src), ("dst", dst)):
        if value not in known:
            declared = ", ".join(repr(n) for n in known) or "none yet"
            raise ValueError(
                f"connect({src!r}, {dst!r}): unknown {argument} population {value!r} "
                f"(declared: {declared}). Declare it first with add_input(), "
                "add_population() or add_output()."
            )
    delay = check_delay(f"connect({src!r}, {dst!r})", delay)
    call = f"connect({src!r}, {dst!r}, delay={delay})"
    if not isinstance(reciprocal, bool):
        raise TypeError(f"{call}: reciprocal must be a bool, got {reciprocal!r}.")
    if transform is not None and not isinstance(transform, StatefulModule):
        raise TypeError(
            f"{call}: transform must be a StatefulModule (e.g. "
            f"nnx_ppo.networks.feedforward.Dense), got {type(transform).__name__}. "
            "Wrap plain NNX layers such as nnx.Linear in a StatefulModule."
        )
    sign = next(p.sign for p in populations if p.name == src)
    signed_ok = isinstance(transform, SignedDense) and transform.sign == sign
    if sign is not None and transform is not None and not signed_ok:
        got = (
            f"a SignedDense with sign={transform.sign!r}"
            if isinstance(transform, SignedDense)
            else f"a {type(transform).__name__}, whose weights the graph cannot constrain"
        )
        raise ValueError(
            f"{call}: population {src!r} is {sign} (declared with sign={sign!r}), so "
            f"every weight it sends must keep that sign, but the transform is {got}. "
            "Omit transform= for the default SignedDense, or pass "
            f"SignedDense(in_features, out_features, sign={sign!r}, rngs=rngs)."
        )
    if src == dst and delay == 0:
        raise ValueError(
            f"{call}: a delay=0 self-loop would make {src!r} read its own output of "
            f"the same step. Use delay=1 for a recurrent self-connection: "
            f"connect({src!r}, {src!r}, delay=1)."
        )
    if reciprocal:
        if transform is not None:
            raise ValueError(
                f"{call}: transform= cannot be combined with reciprocal=True (one "
                "module cannot map both directions). Call connect() twice, once per "
                "direction, each with its own transform."
            )
        if src == dst:
            raise ValueError(f"{call}: a self-loop is its own reverse; drop reciprocal=True.")
        if delay == 0:
            raise ValueError(
                f"{call}: reciprocal=True with delay=0 makes the delay=0 cycle "
                f"{src!r} -> {dst!r} -> {src!r}. Use delay=1 (or more), or connect "
                "the two directions separately with different delays."
            )
    pairs = [(src, dst), (dst, src)] if reciprocal else [(src, dst)]
    existing = {c.name for c in connections}
    for a, b in pairs:
        name = connection_name(a, b, delay)
        if name in existing:
            raise ValueError(
                f"{call}: connection {name!r} ({a!r} -> {b!r} with delay {delay}) "
                "already exists. Parallel connections with the same delay would just "
                "add up; use one connection (with a custom transform if needed) or a "
                "different delay."
            )
    return delay, pairs


def check_transform(c: Connection, module: StatefulModule, src_size: int, dst_size: int) -> None:
    """Check, without side effects, that ``module`` maps ``[B, src_size]`` to
    ``[B, dst_size]`` (a ``Dense`` by its sizes, any other module by tracing a call
    with `jax.eval_shape`).

    Raises:
        ValueError: If the module fails on that input or returns another shape.
    """
    if type(module) in (Dense, SignedDense):
        if (module.in_features, module.out_features) == (src_size, dst_size):  # type: ignore[attr-defined]
            return
        got = f"a {type(module).__name__}({module.in_features}, {module.out_features})"  # type: ignore[attr-defined]
    else:
        graphdef, module_state = nnx.split(module)

        def probe(module_state: Any) -> Any:
            copy = nnx.merge(graphdef, module_state)
            return copy(copy.initialize_state(2), jnp.zeros((2, src_size))).output

        try:
            shape = jax.eval_shape(probe, module_state)
        except Exception as error:
            raise ValueError(
                f"finalize(): the transform of connection {c.name!r} "
                f"({type(module).__name__}) failed on a [B, {src_size}] input (the "
                f"output of {c.src!r}): {error}"
            ) from error
        if isinstance(shape, jax.ShapeDtypeStruct) and shape.shape == (2, dst_size):
            return
        got = f"{type(module).__name__} with output {_describe_shape(shape)}"
    raise ValueError(
        f"finalize(): connection {c.name!r} must map [B, {src_size}] ({c.src!r}) to "
        f"[B, {dst_size}] ({c.dst!r}), but its transform is {got}. Pass a transform "
        f"with that output size, e.g. Dense({src_size}, {dst_size}, rngs=rngs), or "
        "omit transform= for the default."
    )


def check_call_output(c: Connection, output: Any, batch: int, size: int) -> None:
    """Check, while tracing a step, that connection ``c``'s transform returned
    ``[batch, size]`` (the size of ``c.dst``).

    Raises:
        ValueError: Naming the connection, the shape it returned and the one needed.
    """
    shape = getattr(output, "shape", None)
    if shape != (batch, size):
        raise ValueError(
            f"PopulationGraph: the transform of connection {c.name!r} returned "
            f"{f'shape {tuple(shape)}' if shape is not None else type(output).__name__}, "
            f"but population {c.dst!r} needs [B, {size}] with B={batch}."
        )


def _describe_shape(tree: Any) -> str:
    if isinstance(tree, jax.ShapeDtypeStruct):
        return "[" + ", ".join(["B", *map(str, tree.shape[1:])]) + "]"
    return f"of structure {jax.tree.structure(tree)}"
