"""One tiny trained quickstart run (an LSTM on brax inverted_pendulum, 40-step episodes,
behind a one-step observation lag and an action lag of 0 or 1, seeing the last 3
observations: ``obs`` is ``[B, 12]``), shared by the export and play tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from nnx_ppo_quickstart.cli import main as quickstart

TINY = [
    "--network", "lstm", "--steps", "800", "--n-envs", "8", "--rollout-length", "10",
    "--n-minibatches", "2", "--n-epochs", "1", "--eval-every", "800", "--eval-envs", "2",
    "--episode-length", "40", "--checkpoint-every", "400", "--no-progress",
    "--obs-lag", "1", "--action-lag", "0:1", "--obs-history", "3",
]  # fmt: skip


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("quickstart") / "run"
    assert quickstart([*TINY, "--output-dir", str(out)]) == 0
    return out
