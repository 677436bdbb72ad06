"""What the artefact says each input holds (`nnx_ppo_export.inputs`), for the layouts a
quickstart run can have: a history of a dict observation, a privileged critic's keys,
latency."""

from __future__ import annotations

import doctest

from nnx_ppo_export import inputs
from nnx_ppo_export.inputs import observation_layout, observation_notes


def test_doctests() -> None:
    outcome = doctest.testmod(inputs, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert outcome.attempted > 0 and outcome.failed == 0


def test_a_stacked_dict_observation_with_a_privileged_critic() -> None:
    cli = {"obs_history": 4, "critic_obs": "privileged_state", "action_lag": "2"}
    # After ObservationHistory(flatten=True): 4 x 48 and 4 x 123 values.
    layout = observation_layout(cli, {"state": 192, "privileged_state": 492})
    assert layout["entry_size"] == {"obs/state": 48, "obs/privileged_state": 123}
    assert layout["critic_only_keys"] == ["privileged_state"]
    notes = observation_notes(layout, "Go1JoystickFlatTerrain", ["obs/state"])
    assert list(notes) == ["obs/state"]  # the critic's key is no input of the policy
    note = notes["obs/state"]
    assert "the last 4 observations 'state' of Go1JoystickFlatTerrain (48 values each)" in note
    assert "values [0:48] the oldest, [144:192] the newest" in note
    assert "the first 3 steps of an episode" in note
    assert "delayed by 2 steps" in note and "'privileged_state'" in note
    assert "old (the run's --obs-lag)" not in note  # no observation lag


def test_one_observation_without_lags() -> None:
    layout = observation_layout({}, 4)
    assert layout["history"] == 1 and layout["entry_size"] == {"obs": 4}
    assert observation_notes(layout, "ant", ["obs"]) == {
        "obs": "the current observation of ant (4 values)."
    }
