"""The suite's network families (plain data; the children build the networks).

Sizes follow the speed benchmark (:mod:`nnx_ppo_benchmarks.settings`) so that the
``cartpole`` cells are the benchmark's runs with learning curves:

- ``mlp``: policy 32x32, value 64x64, no memory: the lower bound on the POMDP tasks;
- ``mlp_stack``: the same MLPs over the last ``STACK`` observations, stacked with
  ``Delay`` lines (what brax users do instead of recurrence);
- ``lstm``: an LSTM of 64 per port, then policy 32 / value 64;
- ``gru``: the same with a GRU of 64 per port;
- ``rnn``: the same with a `SimpleRNN` (tanh) of 64 per port;
- ``graph_mlp``, ``graph_rnn``: the ``mlp`` and ``rnn`` networks built as one
  ``PopulationGraph`` per port (a chain of populations: ``obs -> [r, tanh, self-loop
  at delay 1] -> hidden -> output``), with the library's default initialisation: the
  controls that a graph learns like the module it spells out;
- ``graph``: the ring ``PopulationGraph`` of the benchmark (8 populations of 16,
  delays 1-2, shared read-outs): actor and critic share every population;
- ``graph_split``: one such ring per port (one for the actor, one for the critic), as
  the LSTM family has one LSTM per port;
- ``graph_nv``: the ``graph`` network trained with ``PPOConfig(normalize_values=True)``
  (value targets standardised), what the graph tutorial tells users to do when actor
  and critic share populations (nnx-ppo 0.3.0 has no such option);
- ``mlp_default``, ``mlp_default_stack``, ``lstm_default``, ``graph_rnn_default``: the
  ``mlp``, ``mlp_stack``, ``lstm`` and ``graph_rnn`` networks with Playground's default
  head sizes (policy 32x4, value 256x5, the speed benchmark's ``mlp_default``), so
  that memory is compared with the lower bound at equal capacity: about six times the
  parameters of the small heads, most of them in the critic.

All use swish activations, an observation normalizer and the shared entropy weight
and ``min_std``.
"""

from __future__ import annotations

import dataclasses
from typing import TypedDict

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
        network: The kind of network it builds, a family name (``name`` itself by
            default): ``"mlp"``, ``"mlp_stack"``, ``"lstm"``, ``"gru"``, ``"graph"``
            or ``"graph_split"``.
        normalize_values: Train with ``PPOConfig(normalize_values=True)`` (ours only).
        policy_hidden: Hidden widths of the policy MLP (after the recurrent layer, if
            any; the graph families have none).
        value_hidden: Hidden widths of the value MLP, likewise.
        recurrent_size: Width of the LSTM or GRU of each port (recurrent kinds only).
    """

    name: str
    description: str
    implementations: tuple[str, ...] = ("ours", "nnx-ppo-0.3.0")
    network: str = ""
    normalize_values: bool = False
    policy_hidden: tuple[int, ...] = ()
    value_hidden: tuple[int, ...] = ()
    recurrent_size: int = 0

    @property
    def network_family(self) -> str:
        """The kind of network the children build (with this family's head sizes)."""
        return self.network or self.name


class _Heads(TypedDict):
    policy_hidden: tuple[int, ...]
    value_hidden: tuple[int, ...]


_SMALL = _Heads(policy_hidden=(32, 32), value_hidden=(64, 64))
_AFTER_RECURRENT = _Heads(policy_hidden=(32,), value_hidden=(64,))
_RECURRENT_SIZE = 64
_PLAYGROUND = _Heads(policy_hidden=(32,) * 4, value_hidden=(256,) * 5)

FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("mlp", "MLP, policy 32x32, value 64x64 (no memory)", **_SMALL),
        Family("mlp_stack", f"MLP over the last {STACK} observations (Delay lines)", **_SMALL),
        Family(
            "lstm",
            "LSTM 64 per port, then policy 32, value 64",
            recurrent_size=_RECURRENT_SIZE,
            **_AFTER_RECURRENT,
        ),
        Family(
            "gru",
            "GRU 64 per port, then policy 32, value 64",
            ("ours",),
            recurrent_size=_RECURRENT_SIZE,
            **_AFTER_RECURRENT,
        ),
        Family(
            "rnn",
            "SimpleRNN (tanh) 64 per port, then policy 32, value 64",
            ("ours",),
            recurrent_size=_RECURRENT_SIZE,
            **_AFTER_RECURRENT,
        ),
        Family(
            "graph_mlp",
            "the mlp family as a feedforward PopulationGraph per port",
            ("ours",),
            **_SMALL,
        ),
        Family(
            "graph_rnn",
            "the rnn family as a PopulationGraph per port (tanh population, self-loop)",
            ("ours",),
            recurrent_size=_RECURRENT_SIZE,
            **_AFTER_RECURRENT,
        ),
        Family(
            "graph_rnn_default",
            "the graph_rnn chain with Playground's default heads: policy 32x4, value 256x5",
            ("ours",),
            network="graph_rnn",
            recurrent_size=_RECURRENT_SIZE,
            **_PLAYGROUND,
        ),
        Family("graph", "PopulationGraph ring: 8 populations of 16, delays 1-2"),
        Family("graph_split", "the graph ring per port (actor and critic)", ("ours",)),
        Family(
            "graph_nv",
            "the graph ring, value targets normalised (normalize_values=True)",
            ("ours",),
            network="graph",
            normalize_values=True,
        ),
        Family(
            "mlp_default",
            "MLP, Playground default: policy 32x4, value 256x5 (no memory)",
            network="mlp",
            **_PLAYGROUND,
        ),
        Family(
            "mlp_default_stack",
            f"the Playground-default MLP over the last {STACK} observations",
            network="mlp_stack",
            **_PLAYGROUND,
        ),
        Family(
            "lstm_default",
            "LSTM 64 per port, then Playground's default policy 32x4, value 256x5",
            network="lstm",
            recurrent_size=_RECURRENT_SIZE,
            **_PLAYGROUND,
        ),
    )
}
"""Family name -> :class:`Family` (nnx-ppo 0.3.0 has no GRU)."""
