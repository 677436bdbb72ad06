"""Build-time bookkeeping of a `PopulationGraph`.

Everything here runs while a graph is declared and finalized (the one exception,
`check_call_output`, runs while a step is traced, never at run time): the records of
populations and connections, the checks of every build call (names, sizes, delays,
duplicates, connections, and at ``finalize()`` each transform's input and output size),
the topological order over ``delay=0`` connections (with the cycle diagnosis), the
per-step execution plan, and the text / mermaid renderings of the topology.
"""

from __future__ import annotations

import dataclasses
import heapq
import numbers
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from nnx_ppo.networks.feedforward import Dense
from nnx_ppo.networks.graph.signed_dense import SignedDense
from nnx_ppo.networks.types import StatefulModule

__all__ = [
    "Connection",
    "ExecutionPlan",
    "Population",
    "build_plan",
    "connection_name",
    "describe",
    "to_mermaid",
    "topological_order",
]

Activation = Callable[[Any], Any]

_FORBIDDEN_IN_NAMES = ("->", "@", '"', "'", "`")


@dataclasses.dataclass(frozen=True)
class Population:
    """A declared population (node).

    Attributes:
        name: Unique population name.
        size: Width of the population's output, ``[B, size]``.
        activation: Applied once to the integrated input, or ``None`` (identity).
        input_from: The observation key whose ``obs[input_from]`` (``[B, size]``) is
            added to the integrated input, or ``None``.
        output_to: The key of the graph's output dict under which the population's
            output is emitted, or ``None`` if it is not an output.
        index: Insertion index, the tie-break of the topological order.
        tau: The time constant of a leaky population (its initial value if
            ``learn_tau``), in the units of the graph's ``dt``; ``None`` for a
            non-leaky one.
        learn_tau: Whether the time constant is a parameter, one per unit.
        sign: ``"excitatory"`` or ``"inhibitory"`` if the weights of its outgoing
            connections keep that sign (Dale's law), else ``None``.
    """

    name: str
    size: int
    activation: Activation | None
    input_from: str | None
    output_to: str | None
    index: int
    tau: float | None = None
    learn_tau: bool = False
    sign: str | None = None


@dataclasses.dataclass(frozen=True)
class Connection:
    """A declared connection (edge).

    Attributes:
        name: The connection's key in ``graph.transforms``, the carry, the extras and
            the metrics: ``"src->dst"`` for ``delay=0``, ``"src->dst@k"`` for
            ``delay=k > 0``.
        src: Source population.
        dst: Destination population.
        delay: Number of steps between the source writing and the destination reading.
    """

    name: str
    src: str
    dst: str
    delay: int


@dataclasses.dataclass(frozen=True)
class ExecutionPlan:
    """What a finalized graph does each step, precomputed once at ``finalize()``.

    Attributes:
        order: Populations in execution order (topological over ``delay=0``
            connections, ties broken by insertion order).
        incoming: For each population of ``order``, its incoming connections in
            insertion order.
        buffers: ``(population, length, size)`` for every population read through a
            delayed connection; ``length`` is its longest outgoing delay.
        outputs: ``(output key, population)`` pairs in insertion order.
        leaky: ``(population, size)`` for every leaky population, in insertion order:
            their previous output is carried from step to step.
    """

    order: tuple[Population, ...]
    incoming: tuple[tuple[Connection, ...], ...]
    buffers: tuple[tuple[str, int, int], ...]
    outputs: tuple[tuple[str, str], ...]
    leaky: tuple[tuple[str, int], ...] = ()


def connection_name(src: str, dst: str, delay: int) -> str:
    """The key of a connection: ``"src->dst"`` (``delay=0``) or ``"src->dst@k"``."""
    return f"{src}->{dst}" if delay == 0 else f"{src}->{dst}@{delay}"


# --------------------------------------------------------------------------- validation


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


# ----------------------------------------------------------------------- topological order


def topological_order(
    populations: Sequence[Population], connections: Iterable[Connection]
) -> tuple[Population, ...]:
    """Order populations so that every ``delay=0`` connection runs source first.

    Kahn's algorithm; among the populations that are ready, the one declared first runs
    first, so the order is deterministic.

    Args:
        populations: All populations, in insertion order.
        connections: All connections; only the ``delay=0`` ones constrain the order.

    Returns:
        The populations in execution order.

    Raises:
        ValueError: If the ``delay=0`` connections contain a cycle; the message lists
            only the populations on one cycle and the connection to delay.
    """
    index = {p.name: p.index for p in populations}
    by_index = {p.index: p for p in populations}
    successors: dict[str, list[str]] = {p.name: [] for p in populations}
    in_degree = dict.fromkeys(index, 0)
    for c in connections:
        if c.delay == 0:
            successors[c.src].append(c.dst)
            in_degree[c.dst] += 1
    ready = [index[name] for name, d in in_degree.items() if d == 0]
    heapq.heapify(ready)
    order: list[Population] = []
    while ready:
        pop = by_index[heapq.heappop(ready)]
        order.append(pop)
        for dst in successors[pop.name]:
            in_degree[dst] -= 1
            if in_degree[dst] == 0:
                heapq.heappush(ready, index[dst])
    if len(order) < len(populations):
        remaining = {name for name, d in in_degree.items() if d > 0}
        raise ValueError(_cycle_message(_find_cycle(remaining, successors, index)))
    return tuple(order)


def _find_cycle(
    remaining: set[str], successors: dict[str, list[str]], index: dict[str, int]
) -> list[str]:
    """One cycle among ``remaining`` (every one of them has a remaining predecessor)."""
    # Every remaining population lies on a cycle or downstream of one. A depth-first
    # search inside ``remaining`` that records its path finds a back edge, i.e. a cycle,
    # at the latest when it starts from a population on a cycle.
    start = min(remaining, key=index.__getitem__)
    path: list[str] = []
    on_path: dict[str, int] = {}
    visited: set[str] = set()

    def dfs(node: str) -> list[str] | None:
        on_path[node] = len(path)
        path.append(node)
        for nxt in successors[node]:
            if nxt not in remaining:
                continue
            if nxt in on_path:
                return path[on_path[nxt] :]
            if nxt not in visited:
                found = dfs(nxt)
                if found is not None:
                    return found
        path.pop()
        del on_path[node]
        visited.add(node)
        return None

    for node in [start, *sorted(remaining, key=index.__getitem__)]:
        if node not in visited:
            cycle = dfs(node)
            if cycle is not None:
                # Start the cycle at its earliest-declared population.
                first = min(range(len(cycle)), key=lambda i: index[cycle[i]])
                return cycle[first:] + cycle[:first]
    raise RuntimeError("internal error: no cycle found among the unordered populations")


def _cycle_message(cycle: list[str]) -> str:
    loop = " -> ".join(repr(n) for n in [*cycle, cycle[0]])
    last, first = cycle[-1], cycle[0]
    return (
        f"finalize(): the delay=0 connections form a cycle {loop}. A delay=0 connection "
        "reads its source's output from the same step, so the populations on a cycle "
        "have no order to run in. Break the cycle by delaying one of its connections, "
        f"e.g. connect({last!r}, {first!r}, delay=1) instead of delay=0."
    )


def build_plan(
    populations: Sequence[Population], connections: Sequence[Connection]
) -> ExecutionPlan:
    """Validate a declared graph and precompute its per-step execution plan.

    Args:
        populations: All populations, in insertion order.
        connections: All connections, in insertion order.

    Returns:
        The `ExecutionPlan`.

    Raises:
        ValueError: If the graph has no population or no output, a population has
            neither an incoming connection nor an observation input, or the ``delay=0``
            connections form a cycle.
    """
    if not populations:
        raise ValueError(
            "finalize(): the graph has no populations; declare some with add_input(), "
            "add_population() and add_output() before finalize()."
        )
    if not any(p.output_to is not None for p in populations):
        raise ValueError(
            "finalize(): the graph has no output population, so its forward output would "
            "be empty; declare one with add_output(name, size) and connect it."
        )
    fed = {c.dst for c in connections}
    for p in populations:
        if p.input_from is None and p.name not in fed:
            raise ValueError(
                f"finalize(): population {p.name!r} has no incoming connection and no "
                "observation input, so its output would be a constant. Connect a "
                f"population to it (connect(src, {p.name!r})) or remove it."
            )
    order = topological_order(populations, connections)
    incoming = tuple(tuple(c for c in connections if c.dst == p.name) for p in order)
    lengths: dict[str, int] = {}
    for c in connections:
        if c.delay > 0:
            lengths[c.src] = max(lengths.get(c.src, 0), c.delay)
    buffers = tuple((p.name, lengths[p.name], p.size) for p in populations if p.name in lengths)
    outputs = tuple((p.output_to, p.name) for p in populations if p.output_to is not None)
    leaky = tuple((p.name, p.size) for p in populations if p.tau is not None)
    return ExecutionPlan(
        order=order, incoming=incoming, buffers=buffers, outputs=outputs, leaky=leaky
    )


# ------------------------------------------------------------------------------ rendering


def _activation_name(fn: Activation | None) -> str:
    if fn is None:
        return "linear"
    return str(getattr(fn, "__name__", None) or type(fn).__name__)


def _dynamics_notes(p: Population) -> list[str]:
    """``["tau 5", "excitatory"]``-style notes for a leaky and / or signed population."""
    notes = []
    if p.tau is not None:
        notes.append(f"tau {p.tau:g}" + (" learned" if p.learn_tau else ""))
    if p.sign is not None:
        notes.append(p.sign)
    return notes


def describe(
    populations: Sequence[Population],
    connections: Sequence[Connection],
    plan: ExecutionPlan | None,
    transform_names: Mapping[str, str] | None = None,
) -> str:
    """A plain-text table of populations and connections (see ``PopulationGraph.describe``).

    Args:
        populations: All populations, in insertion order.
        connections: All connections, in insertion order.
        plan: The execution plan if the graph is finalized (then populations are listed
            in execution order, with their buffer lengths), else ``None``.
        transform_names: Optional ``{connection name: transform description}``.

    Returns:
        The multi-line summary.
    """
    transform_names = transform_names or {}
    pops = plan.order if plan is not None else tuple(populations)
    lengths = {name: length for name, length, _ in plan.buffers} if plan is not None else {}
    status = "finalized" if plan is not None else "not finalized"
    lines = [
        f"PopulationGraph: {len(populations)} populations, {len(connections)} connections "
        f"({status})",
        "populations" + (" (execution order):" if plan is not None else ":"),
    ]
    width = max([len(p.name) for p in populations] + [4])
    for p in pops:
        notes = [f"size {p.size}", _activation_name(p.activation), *_dynamics_notes(p)]
        if p.input_from is not None:
            notes.append(f"input obs[{p.input_from!r}]")
        if p.output_to is not None:
            notes.append(f"output {p.output_to!r}")
        if p.name in lengths:
            notes.append(f"buffer {lengths[p.name]}")
        lines.append(f"  {p.name:<{width}}  " + ", ".join(notes))
    lines.append("connections:")
    cwidth = max([len(c.name) for c in connections] + [4])
    for c in connections:
        line = f"  {c.name:<{cwidth}}  {c.src} -> {c.dst}, delay {c.delay}"
        if c.name in transform_names:
            line += f", {transform_names[c.name]}"
        lines.append(line)
    return "\n".join(lines)


def to_mermaid(
    populations: Sequence[Population],
    connections: Sequence[Connection],
    *,
    direction: str = "LR",
) -> str:
    """A mermaid ``flowchart`` of the topology (see ``PopulationGraph.to_mermaid``).

    Args:
        populations: All populations, in insertion order.
        connections: All connections, in insertion order.
        direction: Mermaid flow direction.

    Returns:
        The diagram source.

    Raises:
        ValueError: On an unknown ``direction``.
    """
    if direction not in ("LR", "RL", "TB", "TD", "BT"):
        raise ValueError(
            f"to_mermaid(): direction must be one of 'LR', 'RL', 'TB', 'TD', 'BT', got "
            f"{direction!r}."
        )
    ids = {p.name: f"p{i}" for i, p in enumerate(populations)}
    lines = [f"flowchart {direction}"]
    obs_ids: dict[str, str] = {}
    for p in populations:
        label = f"{p.name}<br/>size {p.size}"
        if p.activation is not None:
            label += f", {_activation_name(p.activation)}"
        for note in _dynamics_notes(p):
            label += f", {note}"
        lines.append(f'    {ids[p.name]}["{label}"]')
    for p in populations:
        if p.input_from is not None:
            if p.input_from not in obs_ids:
                obs_ids[p.input_from] = f"obs{len(obs_ids)}"
                lines.append(f"    {obs_ids[p.input_from]}([\"obs['{p.input_from}']\"])")
            lines.append(f"    {obs_ids[p.input_from]} --> {ids[p.name]}")
    for c in connections:
        arrow = "-->" if c.delay == 0 else "-.->"
        lines.append(f'    {ids[c.src]} {arrow}|"delay {c.delay}"| {ids[c.dst]}')
    for i, p in enumerate(p for p in populations if p.output_to is not None):
        lines.append(f"    out{i}([\"output['{p.output_to}']\"])")
        lines.append(f"    {ids[p.name]} --> out{i}")
    return "\n".join(lines)
