"""The modular controller: one population per body part, talking through the root.

For every body part ``p`` of a `BodyLayout`
(``torso`` and each joint ``hip_<leg>`` / ``ankle_<leg>``):

- an input population ``<p>_obs`` reads ``obs[p]``;
- a hidden population (``root`` for the torso, ``p`` for a joint, ``swish``) integrates
  its own observation and the delayed messages of its neighbours;
- each joint has a linear output population ``<p>_act`` emitting the mean and pre-std of
  its torque (``output[p]``, ``[B, 2]``), through a connection initialized with small
  weights (the untrained policy applies small torques).

Neighbours talk through reciprocal ``delay=1`` connections along the body tree:
``root <-> hip_<leg> <-> ankle_<leg>``. A message from an ankle reaches the root two
steps later; the root's coordination signal reaches a hip one step later.

The critic is a separate chain in the same graph: ``critic_1`` (fed by every
observation population) ``-> critic_2 -> value`` (``[B, 1]``). It shares no parameters
with the body-part populations: with rewards scaled to returns in the thousands, a
critic that shared them swamped the policy's gradients and the first runs diverged.

The PPO network around the graph normalizes the dict observation per body part, samples
one tanh-squashed torque per joint with a `Map` of
samplers (actions ``{joint: [B, 1]}``) and picks the value with a
`Filter`.
"""

from __future__ import annotations

from flax import nnx

from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.containers import Sequential
from nnx_ppo.networks.feedforward import Dense
from nnx_ppo.networks.graph import PopulationGraph
from nnx_ppo.networks.normalizer import Normalizer
from nnx_ppo.networks.sampling_layers import NormalTanhSampler
from nnx_ppo.networks.utils import Filter, Map
from nnx_ppo_modular_controller.body import ANT, LEGS, BodyLayout

__all__ = ["make_controller", "make_graph"]


def _check_size(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r} must be an int >= 1 (a population width).")
    return value


def make_graph(
    layout: BodyLayout = ANT,
    *,
    root_size: int = 64,
    joint_size: int = 16,
    critic_size: int = 256,
    rngs: nnx.Rngs,
) -> PopulationGraph:
    """The controller's population graph for a four-legged ``layout``.

    Args:
        layout: Observation entries per body part; needs a ``torso`` part and
            ``hip_<leg>`` / ``ankle_<leg>`` parts for every leg of `LEGS`.
        root_size: Width of the ``root`` population.
        joint_size: Width of every joint population.
        critic_size: Width of the two critic populations.
        rngs: Initialization of the connections.

    Returns:
        The finalized graph. Its input is ``{part: [B, n_part]}``, its output
        ``{joint: [B, 2] for every joint, "value": [B, 1]}``.

    Raises:
        ValueError: If a size is not a positive int or ``layout`` lacks a body part.
    """
    root_size = _check_size("root_size", root_size)
    joint_size = _check_size("joint_size", joint_size)
    critic_size = _check_size("critic_size", critic_size)
    joints = [f"{kind}_{leg}" for leg in LEGS for kind in ("hip", "ankle")]
    missing = [p for p in ("torso", *joints) if p not in layout.observation]
    if missing:
        raise ValueError(
            f"make_graph: the layout has no observation for {missing}; it needs 'torso' "
            f"and {joints}."
        )
    g = PopulationGraph(rngs)
    g.add_input("torso_obs", size=len(layout.observation["torso"]), input_from="torso")
    g.add_population("root", size=root_size, activation=nnx.swish)
    g.connect("torso_obs", "root")
    for leg in LEGS:
        parent = "root"
        for joint in (f"hip_{leg}", f"ankle_{leg}"):
            g.add_input(f"{joint}_obs", size=len(layout.observation[joint]), input_from=joint)
            g.add_population(joint, size=joint_size, activation=nnx.swish)
            g.connect(f"{joint}_obs", joint)
            g.connect(parent, joint, delay=1, reciprocal=True)
            parent = joint
    # Small initial torque heads: the untrained policy starts near zero torque with
    # std softplus(0) ~ 0.7 instead of saturated torques that pay the full control cost.
    small = nnx.initializers.variance_scaling(1e-2, "fan_in", "truncated_normal")
    for joint in joints:
        g.add_output(f"{joint}_act", size=2, output_to=joint)
        g.connect(
            joint, f"{joint}_act", transform=Dense(joint_size, 2, rngs=rngs, kernel_init=small)
        )
    # The critic: its own two layers on all observations, sharing no parameters with
    # the actor populations (whose returns-sized gradients would swamp the policy's).
    g.add_population("critic_1", size=critic_size, activation=nnx.swish)
    for part in ("torso", *joints):
        g.connect(f"{part}_obs", "critic_1")
    g.add_population("critic_2", size=critic_size, activation=nnx.swish)
    g.connect("critic_1", "critic_2")
    g.add_output("value", size=1)
    g.connect("critic_2", "value")
    g.finalize()
    return g


def make_controller(
    layout: BodyLayout = ANT,
    *,
    root_size: int = 64,
    joint_size: int = 16,
    critic_size: int = 256,
    entropy_weight: float = 1e-2,
    seed: int = 0,
) -> Sequential:
    """The PPO network: per-part normalizer, the graph, per-joint samplers, value filter.

    Args:
        layout: As in `make_graph`.
        root_size: Width of the ``root`` population.
        joint_size: Width of every joint population.
        critic_size: Width of the two critic populations.
        entropy_weight: Entropy bonus of each joint's sampler.
        seed: Seed of the parameters and the samplers' random streams.

    Returns:
        ``Sequential([Normalizer, PopulationGraph, PPOAdapter])``. Called on
        ``{part: [B, n_part]}`` it returns a
        `PPONetworkOutput` with actions
        ``{joint: [B, 1]}``, log-likelihoods ``{joint: [B]}`` and values ``[B]``.

    Raises:
        ValueError: As `make_graph`.
    """
    rngs = nnx.Rngs(seed)
    graph = make_graph(
        layout, root_size=root_size, joint_size=joint_size, critic_size=critic_size, rngs=rngs
    )
    joints = [
        p.output_to for p in graph.populations if p.output_to is not None and p.output_to != "value"
    ]
    return Sequential(
        [
            Normalizer({part: len(idx) for part, idx in layout.observation.items()}),
            graph,
            PPOAdapter(
                action=Map(
                    {j: NormalTanhSampler(rngs, entropy_weight=entropy_weight) for j in joints}
                ),
                value=Filter("value"),
            ),
        ]
    )
