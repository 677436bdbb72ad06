"""Topological order, execution plan and the text / mermaid renderings."""

from __future__ import annotations

import itertools

import pytest
from flax import nnx

from nnx_ppo.networks.graph import Connection, Population, PopulationGraph
from nnx_ppo.networks.graph.topology import (
    build_plan,
    connection_name,
    to_mermaid,
    topological_order,
)


def _pops(*names: str) -> list[Population]:
    return [Population(n, 1, None, None, None, index=i) for i, n in enumerate(names)]


def _edges(*triples: tuple[str, str, int]) -> list[Connection]:
    return [Connection(connection_name(s, d, k), s, d, k) for s, d, k in triples]


def test_connection_names_encode_the_delay():
    assert connection_name("a", "b", 0) == "a->b"
    assert connection_name("h", "h", 3) == "h->h@3"


def test_ties_are_broken_by_declaration_order():
    # No delay-0 edges at all: the order is the declaration order.
    pops = _pops("d", "b", "c", "a")
    assert [p.name for p in topological_order(pops, [])] == ["d", "b", "c", "a"]
    # c -> d forces d after c; among ready populations the earliest-declared runs first:
    # ready {b, c, a} -> b (index 1), then c (2), then d becomes ready (index 0) and
    # precedes a (3).
    order = topological_order(pops, _edges(("c", "d", 0)))
    assert [p.name for p in order] == ["b", "c", "d", "a"]


def test_delayed_edges_do_not_constrain_the_order():
    pops = _pops("a", "b")
    order = topological_order(pops, _edges(("b", "a", 1), ("a", "b", 2)))
    assert [p.name for p in order] == ["a", "b"]


@pytest.mark.parametrize("perm", list(itertools.permutations(range(4))))
def test_order_respects_every_delay_zero_edge(perm):
    # A diamond a -> {b, c} -> d declared in every order.
    names = ["a", "b", "c", "d"]
    pops = _pops(*[names[i] for i in perm])
    edges = _edges(("a", "b", 0), ("a", "c", 0), ("b", "d", 0), ("c", "d", 0))
    position = {p.name: k for k, p in enumerate(topological_order(pops, edges))}
    assert all(position[e.src] < position[e.dst] for e in edges)


def test_two_node_cycle_message():
    with pytest.raises(ValueError, match=r"cycle 'a' -> 'b' -> 'a'.*connect\('b', 'a', delay=1\)"):
        topological_order(_pops("a", "b"), _edges(("a", "b", 0), ("b", "a", 0)))


def test_cycle_reported_from_its_earliest_declared_population():
    # Declared x, y, z, w; the cycle z -> w -> y -> z is reported starting at y.
    pops = _pops("x", "y", "z", "w")
    edges = _edges(("x", "z", 0), ("z", "w", 0), ("w", "y", 0), ("y", "z", 0))
    with pytest.raises(ValueError, match=r"cycle 'y' -> 'z' -> 'w' -> 'y'") as info:
        topological_order(pops, edges)
    assert "'x'" not in str(info.value)


def test_plan_buffers_incoming_and_outputs():
    pops = [
        Population("in", 2, None, "obs", None, 0),
        Population("h", 3, None, None, None, 1),
        Population("out", 1, None, None, "y", 2),
    ]
    edges = _edges(("in", "h", 0), ("h", "h", 1), ("h", "out", 0), ("in", "out", 4))
    plan = build_plan(pops, edges)
    assert [p.name for p in plan.order] == ["in", "h", "out"]
    assert [[c.name for c in inc] for inc in plan.incoming] == [
        [],
        ["in->h", "h->h@1"],
        ["h->out", "in->out@4"],
    ]
    # (population, longest outgoing delay, size), declaration order.
    assert plan.buffers == (("in", 4, 2), ("h", 1, 3))
    assert plan.outputs == (("y", "out"),)


def _example() -> PopulationGraph:
    g = PopulationGraph(nnx.Rngs(0))
    g.add_input("in_x", size=8, input_from="x")
    g.add_population("hidden", size=32, activation=nnx.tanh)
    g.connect("in_x", "hidden")
    g.connect("hidden", "hidden", delay=1)
    g.add_output("value", size=1, output_to="v")
    g.connect("hidden", "value")
    g.connect("in_x", "value", delay=3)
    return g


def test_describe_lists_sizes_delays_buffers_and_transforms():
    g = _example()
    before = g.describe()
    assert "(not finalized)" in before
    g.finalize()
    text = g.describe()
    assert text.splitlines()[0] == "PopulationGraph: 3 populations, 4 connections (finalized)"
    assert "in_x    size 8, linear, input obs['x'], buffer 3" in text
    assert "hidden  size 32, tanh, buffer 1" in text
    assert "value   size 1, linear, output 'v'" in text
    assert "hidden->hidden@1  hidden -> hidden, delay 1, Dense(32, 32)" in text
    assert "in_x->value@3     in_x -> value, delay 3, Dense(8, 1)" in text


def test_mermaid_renders_populations_edges_with_delays_and_io():
    text = _example().to_mermaid()
    lines = text.splitlines()
    assert lines[0] == "flowchart LR"
    assert '    p0["in_x<br/>size 8"]' in lines
    assert '    p1["hidden<br/>size 32, tanh"]' in lines
    # delay-0 edges are solid, delayed ones dotted; each is labelled with its delay.
    assert '    p0 -->|"delay 0"| p1' in lines
    assert '    p1 -.->|"delay 1"| p1' in lines
    assert '    p0 -.->|"delay 3"| p2' in lines
    assert "    obs0 --> p0" in lines and "    p2 --> out0" in lines
    assert "output['v']" in text
    assert _example().to_mermaid("TB").startswith("flowchart TB")
    with pytest.raises(ValueError, match="direction must be one of"):
        to_mermaid([], [], direction="sideways")
