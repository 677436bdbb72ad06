"""The topology of a `PopulationGraph`: its records, order, plan and renderings.

Everything here runs while a graph is declared and finalized: the records of
populations and connections, the topological order over ``delay=0`` connections (with
the cycle diagnosis), the per-step execution plan, and the text / mermaid renderings
of the topology. The checks of the build calls (names, sizes, delays, duplicates,
connections, each transform's input and output size) are in the package-internal
``_checks`` module.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

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
        sigma_rec: The recurrent noise level of a leaky population (0.0: none).
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
    sigma_rec: float = 0.0


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
    if p.sigma_rec > 0:
        notes.append(f"noise {p.sigma_rec:g}")
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
