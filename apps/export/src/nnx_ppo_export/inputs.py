"""What each input of a quickstart run's exported policy holds.

A tensor's shape does not say that ``obs [B, 15]`` is three stacked observations of
five values, oldest first, or that a key the critic read is not an input at all.
`observation_layout` records it from the run's options (``--obs-history``,
``--obs-lag``, ``--action-lag``, ``--critic-obs``) for ``policy.json``'s ``source``,
and `observation_notes` words it per observation tensor for the artefact's README
(`export_policy`'s ``observation_notes``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["observation_layout", "observation_notes"]


def _lag_words(lag: str) -> str:
    low, _, high = str(lag).partition(":")
    if not high or low == high:
        return f"{low} step{'s' if low != '1' else ''}"
    return f"{low} to {high} steps (drawn per environment and episode)"


def observation_layout(cli: Mapping[str, Any], observation_size: Any) -> dict[str, Any]:
    """The observation's layout for ``policy.json`` (``source["observation"]``).

    Args:
        cli: The run's command-line record (``config.json``'s ``cli``).
        observation_size: The observation one policy step sees (the env's after
            `ObservationHistory`): an int, or a dict of ints per key.

    Examples:
        >>> layout = observation_layout({"env": "ant", "obs_history": 3}, 15)
        >>> layout["history"], layout["entry_size"], layout["order"], layout["padding"]
        (3, {'obs': 5}, 'oldest first', 'zeros')
        >>> observation_layout({"env": "ant"}, 5)["history"]
        1
    """
    history = int(cli.get("obs_history", 1))
    sizes = (
        {f"obs/{key}": int(size) for key, size in observation_size.items()}
        if isinstance(observation_size, Mapping)
        else {"obs": int(observation_size)}
    )
    critic = [key for key in str(cli.get("critic_obs", "")).split(",") if key.strip()]
    return {
        "history": history,
        "order": "oldest first",
        "padding": "zeros",
        "entry_size": {name: size // history for name, size in sizes.items()},
        "critic_only_keys": [key.strip() for key in critic],
        "obs_lag": str(cli.get("obs_lag", "0")),
        "action_lag": str(cli.get("action_lag", "0")),
    }


def observation_notes(
    layout: Mapping[str, Any], env: str, observation_names: Sequence[str]
) -> dict[str, str]:
    """One sentence per observation tensor the policy takes, for the README.

    Args:
        layout: `observation_layout`'s record.
        env: The environment's name.
        observation_names: The policy's observation tensors
            (`DeterministicPolicy.observation_names`).

    Examples:
        >>> layout = observation_layout({"obs_history": 3, "obs_lag": "1"}, 15)
        >>> print(observation_notes(layout, "ant", ["obs"])["obs"])
        ... # doctest: +NORMALIZE_WHITESPACE
        the last 3 observations of ant (5 values each), concatenated oldest first:
        values [0:5] the oldest, [10:15] the newest; zeros in the slots older than the
        episode's first observation (the first 2 steps of an episode). Each observation
        is 1 step old (the run's --obs-lag).
    """
    history = int(layout["history"])
    notes = {}
    for name in observation_names:
        size = int(layout["entry_size"][name])
        what = f"of {env}" if name == "obs" else f"'{name.removeprefix('obs/')}' of {env}"
        if history > 1:
            text = (
                f"the last {history} observations {what} ({size} values each), "
                f"concatenated oldest first: values [0:{size}] the oldest, "
                f"[{(history - 1) * size}:{history * size}] the newest; zeros in the slots "
                "older than the episode's first observation (the first "
                f"{history - 1} step{'s' if history > 2 else ''} of an episode)."
            )
        else:
            text = f"the current observation {what} ({size} values)."
        if layout["obs_lag"] != "0":
            text += (
                f" Each observation is {_lag_words(layout['obs_lag'])} old (the run's --obs-lag)."
            )
        notes[name] = text
    if layout["action_lag"] != "0" and observation_names:
        notes[observation_names[0]] += (
            f" The policy was trained with its actions delayed by "
            f"{_lag_words(layout['action_lag'])} (the run's --action-lag); the artefact "
            "does not delay them."
        )
    if layout["critic_only_keys"] and observation_names:
        keys = ", ".join(f"'{key}'" for key in layout["critic_only_keys"])
        first = observation_names[0]
        notes[first] += (
            f" The critic also read {keys} in training (--critic-obs); the policy does "
            "not, so it is no input."
        )
    return notes
