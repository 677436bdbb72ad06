"""The library's plot_activations on a recorded memory-task LSTM episode (a PNG), and its
input checks."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest
from nnx_ppo_memory_task.networks import make_network

from nnx_ppo.algorithms import record_activations_rollout
from nnx_ppo.envs import MemoryTask
from nnx_ppo.networks.analysis.plotting import plot_activations
from nnx_ppo.networks.recording import flatten_activations
from nnx_ppo.wrappers import EpisodeWrapper


def test_plots_a_recorded_lstm_episode(tmp_path: Path) -> None:
    env = EpisodeWrapper(MemoryTask(2), 12)
    network = make_network("lstm", hidden=8, seed=0)
    acts, dones = record_activations_rollout(env, network, 3, 12, jax.random.key(0))
    actor = acts[0]["action"]
    path = tmp_path / "acts.png"
    plot_activations(
        flatten_activations({"LSTM h": actor[0], "head": actor[1]}),
        dones,
        path,
        env_index=2,
        signals={"action": actor[2]["action"]},
        title="untrained",
    )
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def test_rejects_inputs_it_cannot_draw(tmp_path: Path) -> None:
    dones = np.zeros((5, 2), bool)
    with pytest.raises(ValueError, match="out of range for 2 environments"):
        plot_activations({"a": np.zeros((5, 2, 3))}, dones, tmp_path / "x.png", env_index=2)
    with pytest.raises(ValueError, match=r"expected leading axes \[T, B\] = \[5, 2\]"):
        plot_activations({"a": np.zeros((4, 2, 3))}, dones, tmp_path / "x.png")
    with pytest.raises(ValueError, match="activations is empty"):
        plot_activations({}, dones, tmp_path / "x.png")
