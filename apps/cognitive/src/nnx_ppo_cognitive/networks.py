"""The networks of the cognitive-task app: a GRU, a Dale's-law E/I graph and a
low-rank RNN.

All are actor-critics for discrete actions (`CategoricalSampler`) with the critic in a
GRU of its own, as pyrl's baseline network is (Song, Yang & Wang 2017: the value
network is a GRU reading the policy network's activity; here it reads the observation,
so the actor's units are the policy's alone):

- `make_gru_actor_critic`: ``GRU(hidden) -> Dense(actions) -> CategoricalSampler``.
- `make_ei_actor_critic`: a `PopulationGraph` with an excitatory and an inhibitory
  population (80 % / 20 % of ``n_units``, Dale's law: the sign of every outgoing weight
  is fixed), leaky rate units (``tau`` ms at the task's ``dt``), rectified-tanh rates
  (``max(0, tanh(x))``, pycog's ``rtanh``: ReLU rates ran away to NaN during PPO
  training on one seed of five even with the gradient clipped), all four
  recurrent connections at delay 1, the observation driving both, and the action logits
  read from the excitatory population only (Song, Yang & Wang 2016's E/I network).
- `make_low_rank_actor_critic`: ``LowRankRNN(hidden, rank) -> Dense(actions) ->
  CategoricalSampler``, leaky tanh units with connectivity ``m n^T / N`` (plus ``g
  chi``), Mastrogiuseppe & Ostojic 2018.

The E/I and low-rank networks take ``sigma_rec``, recurrent noise with Song, Yang &
Wang 2016's scaling (pyrl's ``var_rec = sigma_rec ** 2``; they use 0.15), drawn from
per-environment keys in the carry so that PPO's loss replay reproduces it, and off in
``eval()`` (the trial evaluation, export and the analyses see the noise-free network).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.containers import Sequential
from nnx_ppo.networks.feedforward import Dense
from nnx_ppo.networks.graph import PopulationGraph
from nnx_ppo.networks.low_rank import LowRankRNN
from nnx_ppo.networks.recurrent import GRU
from nnx_ppo.networks.sampling_layers import CategoricalSampler
from nnx_ppo.networks.utils import Filter

__all__ = [
    "NETWORKS",
    "ei_graph",
    "make_ei_actor_critic",
    "make_gru_actor_critic",
    "make_low_rank_actor_critic",
    "rectified_tanh",
]


def _critic(obs_size: int, hidden: int, rngs: nnx.Rngs) -> Sequential:
    return Sequential([GRU(obs_size, hidden, rngs=rngs), Dense(hidden, 1, rngs=rngs)])


def make_gru_actor_critic(
    obs_size: int,
    n_actions: int,
    *,
    rngs: nnx.Rngs,
    hidden: int = 100,
    entropy_weight: float = 1e-2,
) -> Sequential:
    """A GRU policy of ``hidden`` units (pyrl's 100 by default) with a linear read-out
    of ``n_actions`` logits, and a GRU critic of the same size."""
    actor = Sequential(
        [
            GRU(obs_size, hidden, rngs=rngs),
            Dense(hidden, n_actions, rngs=rngs),
            CategoricalSampler(rngs, entropy_weight),
        ]
    )
    return Sequential([PPOAdapter(action=actor, value=_critic(obs_size, hidden, rngs))])


def ei_graph(
    rngs: nnx.Rngs,
    obs_size: int,
    n_actions: int,
    *,
    n_units: int = 100,
    excitatory_fraction: float = 0.8,
    tau_ms: float = 100.0,
    dt_ms: float = 10.0,
    sigma_rec: float = 0.0,
) -> PopulationGraph:
    """The E/I population graph (see the module docstring), finalized.

    Populations ``e`` (``round(excitatory_fraction * n_units)`` units) and ``i`` (the
    rest), both leaky (``tau = tau_ms`` at ``dt = dt_ms``) with `rectified_tanh` rates
    and recurrent noise ``sigma_rec`` (0: none); input ``obs`` (observation key
    ``"obs"``); output ``logits`` read from ``e``.

    Raises:
        ValueError: If a population would be empty or ``dt_ms > tau_ms``.
    """
    n_e = round(excitatory_fraction * n_units)
    if not 0 < n_e < n_units:
        raise ValueError(
            f"ei_graph: excitatory_fraction={excitatory_fraction!r} of n_units={n_units} "
            "leaves a population empty; pick a fraction in (0, 1) and enough units."
        )
    if dt_ms > tau_ms:
        raise ValueError(
            f"ei_graph: dt_ms={dt_ms} is above tau_ms={tau_ms}: the leak dt / tau must be "
            "at most 1; lower dt or raise tau."
        )
    graph = PopulationGraph(rngs, dt=dt_ms)
    graph.add_input("obs", size=obs_size, input_from="obs")
    unit = {"activation": rectified_tanh, "tau": tau_ms, "sigma_rec": sigma_rec}
    graph.add_population("e", size=n_e, sign="excitatory", **unit)
    graph.add_population("i", size=n_units - n_e, sign="inhibitory", **unit)
    for target in ("e", "i"):
        graph.connect("obs", target)
        for source in ("e", "i"):
            graph.connect(source, target, delay=1)
    graph.add_output("logits", size=n_actions)
    graph.connect("e", "logits")
    graph.finalize()
    return graph


def make_ei_actor_critic(
    obs_size: int,
    n_actions: int,
    *,
    rngs: nnx.Rngs,
    n_units: int = 100,
    excitatory_fraction: float = 0.8,
    tau_ms: float = 100.0,
    dt_ms: float = 10.0,
    entropy_weight: float = 1e-2,
    sigma_rec: float = 0.0,
) -> Sequential:
    """`ei_graph` as the policy (its ``logits`` into a `CategoricalSampler`), and a
    GRU critic of ``n_units``."""
    graph = ei_graph(
        rngs,
        obs_size,
        n_actions,
        n_units=n_units,
        excitatory_fraction=excitatory_fraction,
        tau_ms=tau_ms,
        dt_ms=dt_ms,
        sigma_rec=sigma_rec,
    )
    actor = Sequential(
        [Filter(_as_obs), graph, Filter("logits"), CategoricalSampler(rngs, entropy_weight)]
    )
    return Sequential([PPOAdapter(action=actor, value=_critic(obs_size, n_units, rngs))])


def make_low_rank_actor_critic(
    obs_size: int,
    n_actions: int,
    *,
    rngs: nnx.Rngs,
    hidden: int = 100,
    rank: int = 2,
    g: float = 0.0,
    tau_ms: float = 100.0,
    dt_ms: float = 10.0,
    sigma_rec: float = 0.0,
    entropy_weight: float = 1e-2,
) -> Sequential:
    """A `LowRankRNN` policy of ``hidden`` leaky tanh units (connectivity of rank
    ``rank`` plus ``g`` times a fixed random matrix, ``tau = tau_ms`` at ``dt = dt_ms``,
    noise ``sigma_rec``) with a linear read-out of ``n_actions`` logits, and a GRU
    critic of the same size."""
    cell = LowRankRNN(
        obs_size, hidden, rank=rank, g=g, tau=tau_ms, dt=dt_ms, sigma_rec=sigma_rec, rngs=rngs
    )
    actor = Sequential(
        [cell, Dense(hidden, n_actions, rngs=rngs), CategoricalSampler(rngs, entropy_weight)]
    )
    return Sequential([PPOAdapter(action=actor, value=_critic(obs_size, hidden, rngs))])


def rectified_tanh(x: jax.Array) -> jax.Array:
    """``max(0, tanh(x))``: a firing rate in ``[0, 1)``, linear near threshold."""
    return jnp.maximum(jnp.tanh(x), 0.0)


def _as_obs(x: Any) -> dict[str, Any]:
    """``[B, F] -> {"obs": [B, F]}``, the graph's input."""
    return {"obs": x}


NETWORKS = {
    "gru": "a GRU of 100 units (pyrl)",
    "ei": "a Dale's-law E/I graph, 80 % excitatory",
    "lowrank": "a leaky low-rank RNN (m n^T / N, --rank)",
}
"""The ``--network`` choices."""
