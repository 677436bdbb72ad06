"""The ONNX runtime example (``examples/run_onnx_policy.py``): numpy and onnxruntime only.

An LSTM policy is rolled out in ``MemoryTask`` (200 steps, episodes restarted every 70),
exported to ONNX, and the example steps the recorded observations (with the done flags)
feeding its carry back. ``nox -s export`` also runs it in a virtual environment holding
only ``onnxruntime`` and ``numpy`` (``NNX_PPO_NO_JAX_PYTHON`` is that interpreter) and
checks first that JAX cannot be imported there.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
from flax import nnx
from nnx_ppo_export.rollouts import Rollout, record_rollout

from nnx_ppo.envs import MemoryTask
from nnx_ppo.networks.export import export_policy, read_manifest
from nnx_ppo.networks.factories import make_lstm_actor_critic

EXAMPLE = Path(__file__).parents[1] / "examples" / "run_onnx_policy.py"
NO_JAX_PYTHON = os.environ.get("NNX_PPO_NO_JAX_PYTHON")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Rollout]:
    pytest.importorskip("jax2onnx")
    env = MemoryTask(delay=3)
    network = make_lstm_actor_critic(
        env.observation_size, env.action_size, 16, (16,), (16,), rngs=nnx.Rngs(0)
    )
    rollout = record_rollout(env, network, n_envs=4, n_steps=200, episode_length=70)
    root = tmp_path_factory.mktemp("runtime")
    artefact = export_policy(network, env.observation_size, root / "policy", format="onnx")
    names = read_manifest(artefact)["observation"]
    leaves = jax.tree.leaves(rollout.observations)
    observations = root / "observations.npz"
    np.savez(observations, done=rollout.done, **dict(zip(names, leaves, strict=True)))
    return artefact, observations, rollout


def _check(actions: Any, rollout: Rollout) -> None:
    want = rollout.actions
    assert set(actions) == {"action"} and actions["action"].shape == want.shape
    np.testing.assert_allclose(actions["action"], want, atol=1e-5, rtol=0)


def test_example_in_process(recorded: tuple, tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    artefact, observations, rollout = recorded
    spec = importlib.util.spec_from_file_location("run_onnx_policy", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    out = tmp_path / "actions.npz"
    assert example.main([str(artefact), str(observations), "--out", str(out)]) == 0
    with np.load(out) as data:
        _check(dict(data), rollout)


def test_example_in_a_venv_without_jax(recorded: tuple, tmp_path: Path) -> None:
    if not NO_JAX_PYTHON:
        pytest.skip("NNX_PPO_NO_JAX_PYTHON is not set (nox -s export sets it)")
    artefact, observations, rollout = recorded
    probe = subprocess.run(
        [NO_JAX_PYTHON, "-c", "import jax"], capture_output=True, text=True, check=False
    )
    assert probe.returncode != 0 and "No module named 'jax'" in probe.stderr, (
        f"{NO_JAX_PYTHON} can import jax, so it does not show the runtime needs no JAX"
    )
    out = tmp_path / "actions.npz"
    subprocess.run(
        [NO_JAX_PYTHON, str(EXAMPLE), str(artefact), str(observations), "--out", str(out)],
        check=True,
    )
    with np.load(out) as data:
        _check(dict(data), rollout)
