"""Network presets: an MLP, an LSTM, a GRU, an LRU and a population-graph actor-critic."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from flax import nnx

from nnx_ppo.networks.containers import Sequential
from nnx_ppo.networks.factories import make_lstm_actor_critic, make_mlp_actor_critic
from nnx_ppo.networks.graph import make_graph_actor_critic
from nnx_ppo.networks.recurrent_actor_critic import make_recurrent_actor_critic
from nnx_ppo_quickstart.presets import NETWORK_SIZES

__all__ = ["PRESETS", "make_network", "parse_critic_obs", "privileged_critic_keys"]

PRESETS = ("mlp", "lstm", "gru", "lru", "graph")
"""The choices of ``--network``: ``lstm``, ``gru`` and ``lru`` are the same network with
another memory cell (one 128-unit cell per port, MLP heads;
`make_recurrent_actor_critic`). The LRU (a linear recurrence, replayed in parallel in
time) is the stateful cell that came closest to frame stacking on the control suite's
``CartpoleBalance/masked`` (the learning-quality page, "The stateful tax")."""


def make_network(
    preset: str,
    obs_size: Any,
    action_size: Any,
    seed: int | nnx.Rngs,
    *,
    entropy_weight: float = 1e-2,
    critic_obs: Sequence[str] = (),
) -> Sequential:
    """Build the actor-critic named by ``preset`` for vector observations and actions,
    its action sampler's entropy bonus weighted by ``entropy_weight`` (``--entropy-cost``),
    its parameters drawn from ``seed`` (an int, or the `nnx.Rngs` `train_many` passes a
    run's factory).

    ``critic_obs`` (``--critic-obs``) makes a privileged critic for a dict observation:
    the critic reads every key, the actor every key but these (``mlp`` and the cell presets).

    Raises:
        ValueError: For an unknown preset, env sizes the preset cannot handle, or
            ``critic_obs`` given for an array observation, naming a key the observation
            does not have (the message lists those it has), naming every key, or with
            the ``graph`` preset.
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown --network {preset!r}; valid choices: {', '.join(PRESETS)}")
    keys: dict[str, Any] = {}
    if critic_obs:
        keys = privileged_critic_keys(obs_size, critic_obs)
        if preset == "graph":
            raise ValueError(
                "--critic-obs needs --network mlp, lstm, gru or lru: the graph preset reads one "
                "observation vector for actor and critic"
            )
    elif not isinstance(obs_size, int) or not isinstance(action_size, int):
        raise ValueError(
            f"the quickstart presets need a vector observation and action, got "
            f"observation_size={obs_size!r}, action_size={action_size!r}; pick an env "
            "with array observations, pass --critic-obs KEY for a dict observation, or "
            "build a dict-aware network (see the tutorials)"
        )
    rngs = seed if isinstance(seed, nnx.Rngs) else nnx.Rngs(seed)
    if preset == "mlp":
        return make_mlp_actor_critic(
            obs_size,
            action_size,
            NETWORK_SIZES["policy"],
            NETWORK_SIZES["value"],
            rngs=rngs,
            entropy_weight=entropy_weight,
            **keys,
        )
    if preset == "lstm":
        return make_lstm_actor_critic(
            obs_size, action_size, rngs=rngs, entropy_weight=entropy_weight, **keys
        )
    if preset in ("gru", "lru"):  # the LSTM preset's layout and sizes with another cell
        return make_recurrent_actor_critic(
            obs_size, action_size, rngs=rngs, cell=preset, torso_blocks=0,
            entropy_weight=entropy_weight, **keys,
        )  # fmt: skip
    # Per port a tanh memory population with a delayed self-loop, then Playground's
    # default heads: the graph the graph-networks tutorial recommends for control.
    return make_graph_actor_critic(obs_size, action_size, rngs=rngs, entropy_weight=entropy_weight)


def parse_critic_obs(text: str) -> tuple[str, ...]:
    """The keys of ``--critic-obs`` (comma-separated; ``""``: none), as a run records it.

    Raises:
        ValueError: For an empty key (``"a,,b"``).

    Examples:
        >>> parse_critic_obs("privileged_state, contacts"), parse_critic_obs("")
        (('privileged_state', 'contacts'), ())
    """
    if not text:
        return ()
    keys = tuple(key.strip() for key in text.split(","))
    if not all(keys):
        raise ValueError(
            f"--critic-obs {text!r} is not a comma-separated list of observation keys "
            "(e.g. --critic-obs privileged_state)"
        )
    return keys


def privileged_critic_keys(obs_size: Any, critic_obs: Sequence[str]) -> dict[str, Any]:
    """The ``actor_obs`` / ``critic_obs`` arguments of ``--critic-obs critic_obs``: the
    actor reads every key of the dict observation but ``critic_obs``, the critic all.

    Raises:
        ValueError: For an array observation, a key the observation does not have, or
            ``critic_obs`` naming every key (the actor would read nothing).

    Examples:
        >>> privileged_critic_keys({"state": 4, "privileged_state": 9}, ["privileged_state"])
        {'actor_obs': ('state',), 'critic_obs': ('privileged_state', 'state')}
    """
    shown = ",".join(critic_obs)
    if not isinstance(obs_size, Mapping):
        raise ValueError(
            f"--critic-obs {shown}: the env's observation is an array "
            f"(observation_size={obs_size!r}), not a dict of named entries; a privileged "
            "critic needs an env with dict observations (leave --critic-obs out)"
        )
    available = sorted(obs_size)
    unknown = [key for key in critic_obs if key not in obs_size]
    if unknown:
        raise ValueError(
            f"--critic-obs {shown}: the observation has no key "
            f"{', '.join(repr(k) for k in unknown)}; its keys: {', '.join(available)}"
        )
    actor = tuple(key for key in available if key not in critic_obs)
    if not actor:
        raise ValueError(
            f"--critic-obs {shown} names every key of the observation, leaving the actor "
            f"nothing to read; name only the critic's extra keys among {', '.join(available)}"
        )
    return {"actor_obs": actor, "critic_obs": tuple(available)}
