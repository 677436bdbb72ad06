"""The trainer's developer benchmarks (``packages/nnx-ppo-train/benchmarks``), tiny.

They are scripts, not modules of an installed package, and they run on this app's
environment, networks and settings (`nnx_ppo_benchmarks.settings`), so their tests live
here, where the ``apps`` session installs the app, rather than with nnx-ppo-train's own
tests (which run with that distribution's dependencies only).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from nnx_ppo_benchmarks.settings import PPOSettings, RunSpec

SCRIPTS = Path(__file__).parents[3] / "packages" / "nnx-ppo-train" / "benchmarks"


def _script(name: str) -> ModuleType:
    """``SCRIPTS/<name>.py`` imported by path (its ``main`` is not run)."""
    path = SCRIPTS / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_trainer_benchmark_{name}", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("comparison", "network"),
    [
        ("advantages", "mlp_small"),
        pytest.param("replay", "encoder_lstm", marks=pytest.mark.extended),
    ],
)
def test_ab_compares_two_variants_of_our_trainer(comparison, network):
    compare = _script("ab").compare
    spec = RunSpec(
        implementation="ours",
        network=network,
        total_steps=160,
        n_chunks=1,
        ppo=PPOSettings(n_envs=8, rollout_length=4, n_minibatches=2, n_epochs=1),
    )
    result = compare(comparison, spec, reps=2, warmup=1)
    assert len(result["variants"]) == 2
    assert all(v["median_ms"] > 0 for v in result["variants"].values())
    ratio = result["ratio_a_over_b"]
    assert 0 < ratio["min"] <= ratio["median"] <= ratio["max"]
