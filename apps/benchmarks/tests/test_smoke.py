"""Smoke test: the whole harness for our implementation only, tiny and in this
environment (the isolated brax / nnx-ppo 0.3.0 venvs need network installs)."""

from __future__ import annotations

import json

from nnx_ppo_benchmarks.cli import main
from nnx_ppo_benchmarks.metrics import METRICS

TINY = [
    "--implementations", "ours", "--networks", "mlp_small", "--environments", "current",
    "--repeats", "1", "--steps", "600", "--chunks", "3", "--n-envs", "8",
    "--rollout-length", "5", "--n-minibatches", "2", "--n-epochs", "1",
    "--eval-envs", "2", "--eval-length", "10", "--timeout", "300",
]  # fmt: skip


def test_tiny_benchmark_writes_the_documented_schema(tmp_path, capsys):
    assert main([*TINY, "--output-dir", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert set(results) == {"meta", "runs", "summary", "schema_version"}
    assert results["schema_version"] == 1
    meta = results["meta"]
    # 600 steps / (8 envs * 5 steps) = 15 iterations, 5 per chunk: exactly 600 steps.
    assert (meta["total_steps"], meta["iterations_per_chunk"]) == (600, 5)
    assert meta["environments"] == "current" and meta["command"][0] == "nnx-ppo-bench"

    [run] = results["runs"]
    assert run["status"] == "ok", run.get("error")
    assert (run["implementation"], run["network"], run["seed"]) == ("ours", "mlp_small", 0)
    assert run["total_steps"] == 600
    # One report per chunk, after 200, 400 and 600 steps, at increasing times.
    assert [s for _, s in run["progress"]] == [200, 400, 600]
    times = [t for t, _ in run["progress"]]
    assert times == sorted(times) and times[-1] <= run["timings"]["train_s"]
    assert set(run["derived"]) == {*METRICS, "clean_chunks", "eval_nonfinite"}
    derived = run["derived"]
    assert derived["compile_s"] > 0 and derived["peak_rss_mb"] > 100
    assert derived["e2e_s"] == run["timings"]["train_s"] + run["timings"]["eval_s"]
    # CartpoleBalance rewards are in [0, 1] per step: a 10-step evaluation returns <= 10.
    assert 0.0 <= derived["final_eval_reward"] <= 10.0
    assert run["versions"]["jax"] and run["n_params"] > 0

    stats = results["summary"]["mlp_small"]["ours"]
    assert stats["final_eval_reward"]["n"] == 1 and stats["failed"] == 0
    table = (tmp_path / "results.md").read_text()
    assert "| mlp_small | ours (train_ppo) |" in table
    assert (tmp_path / "results.png").read_bytes()[:4] == b"\x89PNG"
    assert "wrote" in capsys.readouterr().out
