"""Network presets: an MLP, an LSTM and a population-graph actor-critic."""

from __future__ import annotations

from typing import Any

from flax import nnx

from nnx_ppo.networks.containers import Sequential
from nnx_ppo.networks.factories import make_lstm_actor_critic, make_mlp_actor_critic
from nnx_ppo.networks.graph import make_graph_actor_critic
from nnx_ppo_quickstart.presets import NETWORK_SIZES

__all__ = ["PRESETS", "make_network"]

PRESETS = ("mlp", "lstm", "graph")


def make_network(
    preset: str, obs_size: Any, action_size: Any, seed: int, *, entropy_weight: float = 1e-2
) -> Sequential:
    """Build the actor-critic named by ``preset`` for vector observations and actions,
    its action sampler's entropy bonus weighted by ``entropy_weight`` (``--entropy-cost``).

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
        return make_mlp_actor_critic(
            obs_size,
            action_size,
            NETWORK_SIZES["policy"],
            NETWORK_SIZES["value"],
            rngs=rngs,
            entropy_weight=entropy_weight,
        )
    if preset == "lstm":
        return make_lstm_actor_critic(
            obs_size, action_size, rngs=rngs, entropy_weight=entropy_weight
        )
    # Per port a tanh memory population with a delayed self-loop, then Playground's
    # default heads: the graph the graph-networks tutorial recommends for control.
    return make_graph_actor_critic(obs_size, action_size, rngs=rngs, entropy_weight=entropy_weight)
