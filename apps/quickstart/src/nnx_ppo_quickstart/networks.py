"""Network presets: an MLP, an LSTM and a small population graph actor-critic."""

from __future__ import annotations

from typing import Any

from flax import nnx

from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.containers import Sequential
from nnx_ppo.networks.factories import make_lstm_actor_critic, make_mlp_actor_critic
from nnx_ppo.networks.graph import PopulationGraph
from nnx_ppo.networks.normalizer import Normalizer
from nnx_ppo.networks.sampling_layers import NormalTanhSampler
from nnx_ppo.networks.utils import Filter

__all__ = ["PRESETS", "make_network"]

PRESETS = ("mlp", "lstm", "graph")


def _graph_actor_critic(obs_size: int, action_size: int, rngs: nnx.Rngs) -> Sequential:
    """Input -> recurrent hidden population (delayed self-loop) -> action / value read-outs."""
    g = PopulationGraph(rngs)
    g.add_input("obs", size=obs_size, input_from="obs")
    g.add_population("hidden", size=64, activation=nnx.swish)
    g.add_population("motor", size=32, activation=nnx.swish)
    g.connect("obs", "hidden")
    g.connect("hidden", "hidden", delay=1)
    g.connect("obs", "motor")
    g.connect("hidden", "motor")
    g.add_output("action_params", size=2 * action_size)
    g.connect("motor", "action_params")
    g.add_output("value", size=1)
    g.connect("hidden", "value")
    g.connect("obs", "value")
    g.finalize()
    return Sequential(
        [
            Normalizer(obs_size),
            Filter(lambda x: {"obs": x}),
            g,
            PPOAdapter(
                action=Sequential(
                    [Filter("action_params"), NormalTanhSampler(rngs, entropy_weight=1e-2)]
                ),
                value=Filter("value"),
            ),
        ]
    )


def make_network(preset: str, obs_size: Any, action_size: Any, seed: int) -> Sequential:
    """Build the actor-critic named by ``preset`` for vector observations and actions.

    Raises:
        ValueError: For an unknown preset, or env sizes the preset cannot handle.
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown --network {preset!r}; valid choices: {', '.join(PRESETS)}")
    if not isinstance(obs_size, int) or not isinstance(action_size, int):
        raise ValueError(
            f"the quickstart presets need a vector observation and action, got "
            f"observation_size={obs_size!r}, action_size={action_size!r}; pick an env "
            "with array observations or build a dict-aware network (see the tutorials)"
        )
    rngs = nnx.Rngs(seed)
    if preset == "mlp":
        return make_mlp_actor_critic(obs_size, action_size, (32,) * 4, (256,) * 5, rngs=rngs)
    if preset == "lstm":
        return make_lstm_actor_critic(obs_size, action_size, rngs=rngs)
    return _graph_actor_critic(obs_size, action_size, rngs)
