"""Unit tests of the harness's planning and arithmetic (no JAX, no child processes)."""

from __future__ import annotations

import json

import pytest
from nnx_ppo_benchmarks.cli import main
from nnx_ppo_benchmarks.metrics import METRICS, derive, ratio_summary, spread
from nnx_ppo_benchmarks.report import markdown, summarize
from nnx_ppo_benchmarks.runner import BenchOptions, plan_runs
from nnx_ppo_benchmarks.settings import EvalSettings, PPOSettings, RunSpec, chunk_plan


def test_chunk_plan_rounds_up_to_whole_chunks():
    # 100_000 steps / 5120 per iteration = 19.5 -> 20 iterations; 20 / 3 chunks -> 7 per
    # chunk; 3 * 7 * 5120 = 107_520 steps.
    assert chunk_plan(100_000, 3, 5120) == (7, 107_520)
    # An exact fit is kept: 10 iterations in 2 chunks of 5.
    assert chunk_plan(51_200, 2, 5120) == (5, 51_200)
    with pytest.raises(ValueError, match="n_chunks=0"):
        chunk_plan(1000, 0, 5120)


def test_derive_skips_the_first_chunk_and_chunks_that_compiled():
    raw = {
        # First report at 20 s (compile + first chunk); the second chunk (20, 30] holds
        # an 8 s recompilation; then 4000 steps per 2 s in (30, 32] and (32, 34].
        "progress": [[20.0, 4000], [30.0, 8000], [32.0, 12000], [34.0, 16000]],
        "train_compile_events": [[15.0, 12.0], [25.0, 8.0], [33.0, 0.05]],
        "timings": {"train_s": 34.5, "eval_s": 3.0},
        "compile": {"train": {"trace_s": 2.0, "lower_s": 1.0, "backend_s": 17.05}},
        "peak_rss_mb": 1000.0,
        "final_eval_reward": 900.0,
    }
    d = derive(raw)
    # Clean: (30, 32] and (32, 34] (0.05 s of compile is under 5% of 2 s):
    # 8000 steps / 4 s = 2000 steps/s.
    assert d["steady_sps"] == 2000.0
    assert d["clean_chunks"] == 2
    # 16000 steps take 8 s at that rate: 34.5 - 8 = 26.5 s of overhead.
    assert d["overhead_s"] == 26.5
    assert d["compile_s"] == 20.05
    assert d["recompile_s"] == 8.05
    assert d["e2e_s"] == 37.5
    # One report, or no clean chunk, gives no rate.
    assert derive({**raw, "progress": [[20.0, 4000]]})["steady_sps"] is None
    assert derive({**raw, "progress": [[20.0, 4000], [30.0, 8000]]})["steady_sps"] is None


def test_spread_and_paired_ratios():
    assert spread([]) is None
    assert spread([None]) is None
    # Ratios 4/2 = 2, 3/3 = 1 and 9/3 = 3 (the pair with None is skipped).
    r = ratio_summary([4.0, 3.0, 9.0, None], [2.0, 3.0, 3.0, 1.0])
    assert (r["min"], r["median"], r["max"], r["n"]) == (1.0, 2.0, 3.0, 3)


def test_plan_alternates_and_rotates():
    plan = plan_runs(
        BenchOptions(
            implementations=("ours", "brax", "nnx-ppo-0.3.0", "env-only"),
            networks=("mlp_small", "graph"),
            repeats=3,
            total_steps=10_240,
            n_chunks=2,
        )
    )
    small = [(s.implementation, s.seed) for s in plan if s.network == "mlp_small"]
    assert small[:4] == [("ours", 0), ("brax", 0), ("nnx-ppo-0.3.0", 0), ("env-only", 0)]
    assert [i for i, seed in small if seed == 1] == ["brax", "nnx-ppo-0.3.0", "env-only", "ours"]
    # brax has no graph network; env-only runs only with the first family.
    graph = [s.implementation for s in plan if s.network == "graph"]
    assert sorted(set(graph)) == ["nnx-ppo-0.3.0", "ours"] and len(graph) == 6
    assert {s.total_steps for s in plan} == {10_240}


def test_the_minibatch_variant_is_ours_with_minibatch_advantages():
    from nnx_ppo_benchmarks.children.ours import make_train_config

    modes = {
        impl: make_train_config(
            RunSpec(implementation=impl, network="mlp_small")
        ).ppo.advantage_estimation
        for impl in ("ours", "ours-minibatch-gae")
    }
    assert modes == {"ours": "rollout", "ours-minibatch-gae": "minibatch"}


def test_run_spec_round_trips_through_json():
    spec = RunSpec(
        implementation="ours",
        network="lstm",
        seed=3,
        total_steps=20_480,
        n_chunks=2,
        ppo=PPOSettings(n_envs=16),
        eval=EvalSettings(n_envs=4),
        iterations_per_call=2,
    )
    assert RunSpec.from_json(spec.to_json()) == spec
    assert spec.iterations_per_chunk == 20_480 // (2 * 16 * 20)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"implementations": ("rllib",)}, "unknown implementation 'rllib'"),
        ({"networks": ("cnn",)}, "unknown network 'cnn'"),
        ({"n_chunks": 1}, "n_chunks=1 must be >= 2"),
        ({"ppo": PPOSettings(n_envs=100)}, "n_envs=100 must be divisible by n_minibatches=8"),
    ],
)
def test_options_are_validated(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BenchOptions(**kwargs)


def test_cli_rejects_bad_input(capsys):
    assert main(["--chunks", "1"]) == 2
    assert "n_chunks=1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--networks", "cnn"])
    assert "comma-separated list" in capsys.readouterr().err


def _run(impl: str, seed: int, sps: float, rss: float) -> dict:
    derived = {**dict.fromkeys(METRICS, 1.0), "steady_sps": sps, "peak_rss_mb": rss}
    return {
        "status": "ok",
        "implementation": impl,
        "network": "mlp_small",
        "seed": seed,
        "derived": derived,
    }


def test_summary_pairs_ratios_by_seed():
    runs = [
        _run("ours", 0, 300.0, 900.0),
        _run("brax", 0, 100.0, 1000.0),
        _run("env-only", 0, 600.0, 500.0),
        _run("ours", 1, 400.0, 900.0),
        _run("brax", 1, 400.0, 900.0),
        _run("env-only", 1, 800.0, 500.0),
        _run("ours-minibatch-gae", 0, 200.0, 900.0),
        {"status": "failed", "implementation": "brax", "network": "mlp_small", "seed": 2},
    ]
    summary = summarize({"runs": runs})
    sps = summary["mlp_small"]["ratios"]["ours/brax"]["steady_sps"]
    # Seed 0: 300 / 100 = 3; seed 1: 400 / 400 = 1.
    assert (sps["min"], sps["median"], sps["max"]) == (1.0, 2.0, 3.0)
    rss = summary["mlp_small"]["ratios"]["ours/brax"]["peak_rss_mb"]
    assert (rss["min"], rss["max"]) == (0.9, 1.0)
    # Against the limit: 300 / 600 = 0.5 and 400 / 800 = 0.5.
    assert summary["mlp_small"]["ratios"]["ours/env-only"]["steady_sps"]["median"] == 0.5
    assert summary["mlp_small"]["brax"]["failed"] == 1
    # Each of our implementations is compared with each other one (seed 0 only here).
    variant = summary["mlp_small"]["ratios"]["ours-minibatch-gae/brax"]["steady_sps"]
    assert (variant["median"], variant["n"]) == (2.0, 1)
    assert summary["env-only"]["env-only"]["steady_sps"]["median"] == 700.0
    meta = {
        "env_name": "CartpoleBalance",
        "ppo": PPOSettings().__dict__,
        "eval": EvalSettings().__dict__,
        "total_steps": 1000,
        "n_chunks": 2,
        "repeats": 2,
        "cpu_count": 2,
        "load_before": [1.0, 1.0, 1.0],
        "load_after": [1.0, 1.0, 1.0],
    }
    table = markdown({"meta": meta, "runs": runs, "summary": summary})
    assert "| mlp_small | ours/brax | 2.00 (1.00-3.00) |" in table
    assert "brax PPO 0.14.2 (1 failed)" in table
    json.dumps(summary)  # serialisable


def test_diverged_runs_are_flagged_not_averaged():
    runs = [_run("ours", seed, 100.0, 900.0) for seed in (0, 1)]
    runs[1]["derived"].update(final_eval_reward=None, eval_nonfinite=True)
    stats = summarize({"runs": runs})["mlp_small"]["ours"]
    assert stats["diverged"] == 1
    assert stats["final_eval_reward"]["n"] == 1
    # A NaN return from a child is reported as diverged, never as a number.
    raw = {"progress": [], "final_eval_reward": "nan"}
    assert derive(raw)["eval_nonfinite"] and derive(raw)["final_eval_reward"] is None
