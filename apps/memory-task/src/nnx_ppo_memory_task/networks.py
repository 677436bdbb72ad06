"""The four actor-critics compared on `MemoryTask`.

All four map a cue ``[B, cue_size]`` to a tanh-squashed action ``[B, cue_size]`` and a
value ``[B]``; they differ only in what they can remember:

- ``mlp``: no carry at all. Its action is a function of the current cue only, so it
  earns 0 in expectation on the task whatever it learns.
- ``lstm``: an LSTM per port (`make_lstm_actor_critic`);
  learns what to keep in its memory.
- ``delay``: a `Delay` line of exactly ``delay`` steps
  in front of memoryless heads: the memory is built in by hand.
- ``graph``: a `PopulationGraph` whose hidden population
  has a ``delay=1`` self-loop (an Elman-style recurrent unit) read by an action and a
  value population.

The observation is not normalized: the cues are already in ``{-1, 0, +1}``.
"""

from __future__ import annotations

from flax import nnx

from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.containers import Sequential
from nnx_ppo.networks.delay import Delay
from nnx_ppo.networks.factories import make_lstm_actor_critic, make_mlp_actor_critic
from nnx_ppo.networks.feedforward import MLP
from nnx_ppo.networks.graph import PopulationGraph
from nnx_ppo.networks.sampling_layers import NormalTanhSampler
from nnx_ppo.networks.utils import Filter

__all__ = ["NETWORKS", "make_graph", "make_network"]

NETWORKS = ("mlp", "lstm", "delay", "graph")
"""The network names, in the order they are trained and plotted."""

_ENTROPY = 1e-2


def make_graph(cue_size: int, hidden: int, rngs: nnx.Rngs) -> PopulationGraph:
    """The recurrent population graph (not yet wrapped for PPO).

    ``obs['cue'] -> cue -> hidden``, ``hidden -> hidden`` with ``delay=1``, and
    ``hidden`` read out by the linear ``action_params`` (``2 * cue_size``: mean and
    pre-std) and ``value`` (1) populations.

    Args:
        cue_size: Width of the cue and of the action.
        hidden: Width of the recurrent population.
        rngs: Initialization of the connections.

    Returns:
        The finalized graph; its forward output is
        ``{"action_params": [B, 2 * cue_size], "value": [B, 1]}``.
    """
    g = PopulationGraph(rngs)
    g.add_input("cue", size=cue_size, input_from="cue")
    g.add_population("hidden", size=hidden, activation=nnx.tanh)
    g.connect("cue", "hidden")
    g.connect("hidden", "hidden", delay=1)
    g.add_output("action_params", size=2 * cue_size)
    g.connect("hidden", "action_params")
    g.add_output("value", size=1)
    g.connect("hidden", "value")
    g.finalize()
    return g


def make_network(
    kind: str, *, cue_size: int = 1, delay: int = 2, hidden: int = 32, seed: int = 0
) -> Sequential:
    """Build the actor-critic ``kind`` for ``MemoryTask(delay, cue_size)``.

    Args:
        kind: One of `NETWORKS`.
        cue_size: Observation and action width.
        delay: The task's delay; only the ``delay`` network uses it (its delay line
            has exactly this length).
        hidden: Width of the hidden layers, the LSTM and the recurrent population.
        seed: Seed of the parameters and of the sampler's random stream.

    Returns:
        A network whose output is a
        `PPONetworkOutput` with actions
        ``[B, cue_size]``, log-likelihoods ``[B]`` and values ``[B]``.

    Raises:
        ValueError: If ``kind`` is unknown (the message lists the valid names).
    """
    if kind not in NETWORKS:
        raise ValueError(f"unknown network {kind!r}; valid choices: {', '.join(NETWORKS)}")
    rngs = nnx.Rngs(seed)
    if kind == "mlp":
        return make_mlp_actor_critic(
            cue_size,
            cue_size,
            (hidden, hidden),
            (2 * hidden, 2 * hidden),
            rngs=rngs,
            normalize_obs=False,
            entropy_weight=_ENTROPY,
        )
    if kind == "lstm":
        return make_lstm_actor_critic(
            cue_size,
            cue_size,
            hidden,
            (hidden,),
            (hidden,),
            rngs=rngs,
            normalize_obs=False,
            entropy_weight=_ENTROPY,
        )
    if kind == "delay":
        import jax.numpy as jnp

        return Sequential(
            [
                Delay(jnp.zeros(cue_size), delay),
                PPOAdapter(
                    action=Sequential(
                        [
                            MLP(cue_size, (hidden,), 2 * cue_size, rngs=rngs),
                            NormalTanhSampler(rngs, entropy_weight=_ENTROPY),
                        ]
                    ),
                    value=MLP(cue_size, (hidden,), 1, rngs=rngs),
                ),
            ]
        )
    return Sequential(
        [
            Filter(lambda x: {"cue": x}),
            make_graph(cue_size, hidden, rngs),
            PPOAdapter(
                action=Sequential(
                    [Filter("action_params"), NormalTanhSampler(rngs, entropy_weight=_ENTROPY)]
                ),
                value=Filter("value"),
            ),
        ]
    )
