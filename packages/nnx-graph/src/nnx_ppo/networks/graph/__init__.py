"""Population graphs: named populations joined by delayed connections.

`PopulationGraph` is a `StatefulModule` declared
with ``add_input`` / ``add_population`` / ``add_output`` / ``connect`` and frozen by
``finalize()``. The build-time records it exposes (`Population`,
`Connection`) are defined in `nnx_ppo.networks.graph.topology`; `SignedDense`, the
sign-constrained connection of excitatory and inhibitory populations (Dale's law), in
`nnx_ppo.networks.graph.signed_dense`. `make_graph_actor_critic` (in
`nnx_ppo.networks.graph.factories`) builds the recommended graph actor-critic for
control tasks, one `control_graph` per port.
"""

from importlib.metadata import version as _version

from nnx_ppo.networks.graph.factories import control_graph, make_graph_actor_critic
from nnx_ppo.networks.graph.population_graph import PopulationGraph
from nnx_ppo.networks.graph.signed_dense import SignedDense
from nnx_ppo.networks.graph.topology import Connection, Population

__version__: str = _version("nnx-graph")

__all__ = [
    "Connection",
    "Population",
    "PopulationGraph",
    "SignedDense",
    "__version__",
    "control_graph",
    "make_graph_actor_critic",
]
