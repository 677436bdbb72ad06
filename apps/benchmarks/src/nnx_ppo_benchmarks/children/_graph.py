"""The ``graph`` family's topology, built through the PopulationGraph API that nnx-ppo
0.3.0 and this workspace share."""

from __future__ import annotations

from typing import Any

from nnx_ppo_benchmarks.settings import GRAPH_POPULATION_SIZE, GRAPH_POPULATIONS

__all__ = ["build_layered_graph", "build_ring_graph"]


def build_ring_graph(
    graph: Any, obs_size: int, action_size: int, activation: Any, params_per_action: int = 2
) -> Any:
    """Populate and finalize ``graph`` (a fresh ``PopulationGraph``).

    Eight hidden populations of 16 units in a ring: each reads the observation
    (delay 0), its clockwise neighbour one step ago (delay 1) and its anticlockwise
    neighbour two steps ago (delay 2). Two read-outs sum all populations (delay 0):
    ``action_params`` (``params_per_action * action_size``: mean and pre-std, or logits
    with ``params_per_action=1``) and ``value`` (1). 40 connections.

    Reads ``obs["obs"]``; outputs ``{"action_params": [B, P * A], "value": [B, 1]}``
    with ``P = params_per_action``.
    """
    n, size = GRAPH_POPULATIONS, GRAPH_POPULATION_SIZE
    graph.add_input("obs", size=obs_size, input_from="obs")
    for i in range(n):
        graph.add_population(f"p{i}", size=size, activation=activation)
    graph.add_output("action_params", size=params_per_action * action_size)
    graph.add_output("value", size=1)
    for i in range(n):
        graph.connect("obs", f"p{i}")
        graph.connect(f"p{(i - 1) % n}", f"p{i}", delay=1)
        graph.connect(f"p{(i + 1) % n}", f"p{i}", delay=2)
        graph.connect(f"p{i}", "action_params")
        graph.connect(f"p{i}", "value")
    graph.finalize()
    return graph


def build_layered_graph(
    graph: Any,
    obs_size: int,
    output: str,
    output_size: int,
    hidden: tuple[int, ...],
    activation: Any,
) -> Any:
    """Populate and finalize ``graph`` as one port's feedforward network: a chain of
    populations ``obs -> h0 -> h1 -> ... -> output``, every connection a default
    ``Dense``, the hidden populations ``hidden`` wide with ``activation``, the output
    linear: ``MLP(obs_size, hidden, output_size)`` as a graph (the ``graph_mlp``
    family; ``graph_rnn`` is the library's `make_graph_actor_critic`).

    Reads ``obs["obs"]``; outputs ``{output: [B, output_size]}``.
    """
    graph.add_input("obs", size=obs_size, input_from="obs")
    previous = "obs"
    for i, width in enumerate(hidden):
        graph.add_population(f"h{i}", size=width, activation=activation)
        graph.connect(previous, f"h{i}")
        previous = f"h{i}"
    graph.add_output(output, size=output_size)
    graph.connect(previous, output)
    graph.finalize()
    return graph
