"""The suite's network families (plain data; the children build the networks).

Sizes follow the speed benchmark (:mod:`nnx_ppo_benchmarks.settings`) so that the
``cartpole`` cells are the benchmark's runs with learning curves:

- ``mlp``: policy 32x32, value 64x64, no memory: the lower bound on the POMDP tasks;
- ``mlp_stack``: the same MLPs over the last ``STACK`` observations, stacked with
  ``Delay`` lines (what brax users do instead of recurrence);
- ``lstm``: an LSTM of 64 per port, then policy 32 / value 64;
- ``gru``: the same with a GRU of 64 per port;
- ``graph``: the ring ``PopulationGraph`` of the benchmark (8 populations of 16,
  delays 1-2, shared read-outs): actor and critic share every population;
- ``graph_split``: one such ring per port (one for the actor, one for the critic), as
  the LSTM family has one LSTM per port;
- ``graph_nv``: the ``graph`` network trained with ``PPOConfig(normalize_values=True)``
  (value targets standardised), what the graph tutorial tells users to do when actor
  and critic share populations (nnx-ppo 0.3.0 has no such option).

All use swish activations, an observation normalizer and the shared entropy weight
and ``min_std``.
"""

from __future__ import annotations

import dataclasses

__all__ = ["FAMILIES", "STACK", "Family"]

STACK = 4
"""Observations stacked by ``mlp_stack`` (the current one and 3 delayed ones)."""


@dataclasses.dataclass(frozen=True)
class Family:
    """A network family.

    Attributes:
        name: Key on the command line and in the results.
        description: One line for the report.
        implementations: The implementations that can build it.
        network: The family whose network it builds (``name`` itself by default).
        normalize_values: Train with ``PPOConfig(normalize_values=True)`` (ours only).
    """

    name: str
    description: str
    implementations: tuple[str, ...] = ("ours", "nnx-ppo-0.3.0")
    network: str = ""
    normalize_values: bool = False

    @property
    def network_family(self) -> str:
        """The family name the children build the network of."""
        return self.network or self.name


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("mlp", "MLP, policy 32x32, value 64x64 (no memory)"),
        Family("mlp_stack", f"MLP over the last {STACK} observations (Delay lines)"),
        Family("lstm", "LSTM 64 per port, then policy 32, value 64"),
        Family("gru", "GRU 64 per port, then policy 32, value 64", ("ours",)),
        Family("graph", "PopulationGraph ring: 8 populations of 16, delays 1-2"),
        Family("graph_split", "the graph ring per port (actor and critic)", ("ours",)),
        Family(
            "graph_nv",
            "the graph ring, value targets normalised (normalize_values=True)",
            ("ours",),
            network="graph",
            normalize_values=True,
        ),
    )
}
"""Family name -> :class:`Family` (nnx-ppo 0.3.0 has no GRU)."""
