"""The control suite and the GPU benchmark: settings, plans, tables, and a tiny run.

The default tests build no venv and train nothing (a child's PPO compile on this shared
CPU costs minutes; the GPU benchmark's orchestration is tested with fake children); the
tiny end-to-end run of ``--suite gpu`` (ours) is ``extended``.
"""

from __future__ import annotations

import dataclasses
import json
import time

import pytest
from nnx_ppo_benchmarks.cli import main as bench_main
from nnx_ppo_benchmarks.settings import PPOSettings
from nnx_ppo_benchmarks.suite import gpu
from nnx_ppo_benchmarks.suite.cli import main as suite_main
from nnx_ppo_benchmarks.suite.report import markdown, summarize
from nnx_ppo_benchmarks.suite.run import SuiteOptions, collect, plan_suite, task_dir
from nnx_ppo_benchmarks.suite.tasks import BRAX_COMMON, CONTROL_TASKS, task_settings

COMMON = dict(BRAX_COMMON, unroll_length=10, num_updates_per_batch=2)


def test_settings_are_playgrounds_per_task_brax_ppo_settings():
    from mujoco_playground.config import dm_control_suite_params

    for name in ("CheetahRun", "FingerSpin"):
        published = dm_control_suite_params.brax_ppo_config(name)
        s = task_settings(name, n_envs=256, n_minibatches=8)
        assert (s.n_envs, s.n_minibatches) == (256, 8)
        assert s.discounting == published["discounting"]
        assert s.learning_rate == published["learning_rate"]
        assert s.entropy_cost == published["entropy_cost"]
        assert s.reward_scaling == published["reward_scaling"]
        assert s.rollout_length == published["unroll_length"]
        assert s.n_epochs == published["num_updates_per_batch"]
    # FingerSpin is the one dm_control task here with its own discount.
    assert task_settings("FingerSpin", n_envs=8, n_minibatches=2).discounting == 0.95
    with pytest.raises(ValueError, match="n_envs=10 must be divisible by n_minibatches=4"):
        task_settings("CheetahRun", n_envs=10, n_minibatches=4)


def test_suite_has_playground_and_brax_tasks():
    playground = [t for t in CONTROL_TASKS if not t.startswith("brax/")]
    brax = [t for t in CONTROL_TASKS if t.startswith("brax/")]
    assert len(playground) >= 4 and len(brax) >= 2
    assert task_dir(__import__("pathlib").Path("out"), "brax/hopper").name == "brax-hopper"


def test_plan_runs_brax_only_for_mlps_and_alternates_by_seed():
    options = SuiteOptions(
        tasks=("CartpoleBalance", "brax/hopper"),
        networks=("mlp_small", "lstm", "graph"),
        seeds=(3, 4, 5),
        n_envs=16,
        n_minibatches=4,
        total_steps=1000,
        n_chunks=2,
    )
    plan = plan_suite(options, published=COMMON)
    assert len(plan) == 2 * (3 * 2 + 3 + 3)
    mlp = [(s.implementation, s.seed) for s in plan[:6]]
    assert mlp == [("ours", 3), ("brax", 3), ("brax", 4), ("ours", 4), ("ours", 5), ("brax", 5)]
    assert {s.implementation for s in plan if s.network != "mlp_small"} == {"ours"}
    # Same settings and budget on both sides: 16 envs x 10 steps, 7 iterations of 160.
    assert {(s.ppo, s.total_steps) for s in plan} == {
        (PPOSettings(n_envs=16, n_minibatches=4, rollout_length=10, n_epochs=2), 1280)
    }
    with pytest.raises(ValueError, match="unknown task 'Nope'"):
        SuiteOptions(tasks=("Nope",))
    with pytest.raises(ValueError, match=r"implementation 'nnx-ppo-0\.3\.0' is not in the suite"):
        SuiteOptions(implementations=("nnx-ppo-0.3.0",))


def test_staggered_starts_are_ours_only_and_start_within_the_first_half(tmp_path, capsys):
    import jax
    import numpy as np
    from nnx_ppo_benchmarks.children.ours import make_envs

    options = SuiteOptions(
        tasks=("CartpoleBalance",), networks=("mlp_small",), implementations=("ours",),
        seeds=(0,), n_envs=16, n_minibatches=4, total_steps=1000, n_chunks=2, stagger=True,
    )  # fmt: skip
    [spec] = plan_suite(options, published=COMMON)
    assert spec.stagger == COMMON["episode_length"] // 2 > 0
    unstaggered = dataclasses.replace(options, stagger=False)
    assert [s.stagger for s in plan_suite(unstaggered, published=COMMON)] == [0]
    # The child's training episodes start at steps in [0, stagger); evaluation's at 0.
    train_env, eval_env = make_envs(spec)
    keys = jax.random.split(jax.random.key(0), 64)
    steps = np.asarray(jax.jit(jax.vmap(train_env.reset))(keys).info["steps"])
    assert steps.min() >= 0 and steps.max() < spec.stagger and len(set(steps.tolist())) > 8
    assert not np.asarray(jax.jit(jax.vmap(eval_env.reset))(keys).info["steps"]).any()
    # brax PPO starts every episode at step 0: refused, with the fix, before any run.
    with pytest.raises(ValueError, match=r"stagger=True: brax PPO .*\(--implementations ours\)"):
        SuiteOptions(stagger=True)
    argv = ["--tasks", "CartpoleBalance", "--stagger", "--output-dir", str(tmp_path)]
    assert suite_main(argv) == 2
    assert "brax PPO 0.14.2 starts every training episode at step 0" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def _run(task, impl, seed, ret, sps, status="ok"):
    return {
        "env_name": task,
        "network": "mlp_small",
        "implementation": impl,
        "seed": seed,
        "status": status,
        "derived": {
            "final_eval_reward": ret,
            "steady_sps": sps,
            "compile_s": 12.0,
            "peak_rss_mb": 900.0,
            "train_s": 30.0,
        },
    }


def test_report_table_has_intervals_and_ratios():
    runs = [
        _run("CheetahRun", "ours", s, r, sps)
        for s, r, sps in ((0, 300.0, 2000.0), (1, 320.0, 2200.0), (2, 310.0, 2100.0))
    ] + [
        _run("CheetahRun", "brax", s, r, sps)
        for s, r, sps in ((0, 150.0, 1000.0), (1, 160.0, 1000.0), (2, 155.0, 1000.0))
    ]
    runs.append({**_run("CheetahRun", "brax", 3, None, None), "status": "not run"})
    summary = summarize(runs)
    ours, brax = summary["rows"]
    assert ours["return"]["median"] == 310.0
    assert ours["return"]["low"] <= 310.0 <= ours["return"]["high"]
    assert brax["seeds"] == [0, 1, 2] and brax["not_run"] == 1 and brax["failed"] == 0
    [ratio] = summary["ratios"]
    assert ratio["return"] == pytest.approx(2.0) and ratio["steady_sps"] == pytest.approx(2.1)
    assert ratio["within_brax_interval"] is True
    text = markdown(summary, title="T")
    assert "| CheetahRun | mlp_small | ours | 3 | 310.0 [" in text
    assert "| CheetahRun | mlp_small | brax | 3 (1 not run) | 155.0 [" in text
    assert "| CheetahRun | mlp_small | 2.00 | 2.10 | yes |" in text


def test_collect_reports_missing_runs_as_not_run(tmp_path):
    options = SuiteOptions(
        tasks=("CartpoleBalance",), networks=("mlp_small",), seeds=(0,), n_envs=16,
        n_minibatches=4, total_steps=1000, n_chunks=2, output_dir=tmp_path,
    )  # fmt: skip
    specs = plan_suite(options, published=COMMON)
    runs_dir = task_dir(tmp_path, "CartpoleBalance") / "runs"
    runs_dir.mkdir(parents=True)
    raw = {"status": "ok", "spec": json.loads(specs[0].to_json()), "final_eval_reward": 5.0,
           "progress": [[1.0, 160], [2.0, 320]], "timings": {"train_s": 2.0}}  # fmt: skip
    (runs_dir / "mlp_small__ours__seed0.json").write_text(json.dumps(raw))
    runs = collect(specs, tmp_path)["runs"]
    assert [(r["implementation"], r["status"]) for r in runs] == [
        ("ours", "ok"),
        ("brax", "not run"),
    ]
    # A file written before RunSpec had `stagger` is the unstaggered run, not a staggered one.
    del raw["spec"]["stagger"]
    (runs_dir / "mlp_small__ours__seed0.json").write_text(json.dumps(raw))
    assert collect(specs, tmp_path)["runs"][0]["status"] == "ok"
    staggered = [dataclasses.replace(specs[0], stagger=50)]
    assert collect(staggered, tmp_path)["runs"][0]["status"] == "not run"
    assert runs[0]["derived"]["steady_sps"] == 160.0


def test_gpu_plan_and_table_format():
    specs, sweep = gpu.gpu_plan(gpu.GpuPlan(), ("ours", "brax"))
    side = specs[:-2]
    assert {(s.env_name, s.network, s.implementation) for s in side} == {
        (t, n, i)
        for t in ("CartpoleBalance", "CheetahRun")
        for n, i in (("mlp_default", "ours"), ("mlp_default", "brax"), ("lstm", "ours"))
    }
    assert {s.ppo.n_envs for s in side} == {4096} and sweep.ppo.n_envs == 256
    summary = summarize([_run("CartpoleBalance", "ours", 0, 900.0, 4e5),
                         _run("CartpoleBalance", "brax", 0, 880.0, 5e5)])  # fmt: skip
    results = {
        "meta": {
            "hardware": {
                "device_kind": "NVIDIA H100",
                "platform": "gpu",
                "memory_bytes": 80 * 2**30,
                "jax": "0.9.2",
            },
            "plan": {"n_envs": 4096, "sweep_envs": 256},
            "command": ["nnx-ppo-bench", "--suite", "gpu"],
            "total_steps": 2_457_600,
            "wall_s": 400.0,
        },
        "summary": summary,
        "sweep": gpu.sweep_summary(
            {"status": "ok", "runs": 32, "derived": {"steady_sps": 5e4}, "process_wall_s": 60},
            [{"status": "ok", "implementation": "brax", "derived": {"steady_sps": 2e5}}],
        ),
    }
    text = gpu.render(results)
    assert "Hardware: NVIDIA H100 (gpu, 80.0 GiB), JAX 0.9.2." in text
    assert "| CartpoleBalance | mlp_small | 1.02 | 0.80 | yes |" in text
    assert "| train_many K=32 vs brax | 1,600,000 | 200,000 | 8.0x |" in text
    # A TPU as jax.devices() names it; a sweep left out (--parts) or cut by the budget.
    results["meta"]["hardware"] = {"device_kind": "TPU v5 lite", "platform": "tpu",
                                   "memory_bytes": 15.75 * 2**30, "jax": "0.10.2"}  # fmt: skip
    results["sweep"] = None
    text = gpu.render(results)
    assert "Hardware: TPU v5 lite (tpu, 15.8 GiB), JAX 0.10.2." in text
    assert "train_many" not in text and "Sweep" not in text
    results["sweep"] = gpu.sweep_summary(
        {"status": "not run", "runs": 32, "error": "time budget spent"}, []
    )
    assert "Sweep of 32 seeds: not run (time budget spent)." in gpu.render(results)


def test_gpu_orchestration_budget_retry_and_reuse(tmp_path, monkeypatch):
    # Fake children on a fake clock: each run costs 330 s of a 1000 s budget; brax's
    # first attempt finds the chip held by the previous child (10 s) and is retried.
    clock = {"now": 0.0}
    calls = []

    def fake_run_child(spec, env, folder, timeout_s):
        calls.append((spec.network, spec.implementation, round(timeout_s)))
        log = tmp_path / f"{len(calls)}.log"
        if spec.implementation == "brax" and not any(c[1] == "brax" for c in calls[:-1]):
            clock["now"] += 10.0
            log.write_text("RuntimeError: Internal error when accessing libtpu multi-process "
                           "lockfile\n")  # fmt: skip
            return {"status": "failed", "error": "exit status 1", "log": str(log)}
        clock["now"] += 330.0
        record = _run("CartpoleBalance", spec.implementation, 0, 20.0, 1000.0)
        return {**record, "network": spec.network, "log": str(log)}

    fake_time = type("T", (), {})()
    fake_time.perf_counter = lambda: clock["now"]
    fake_time.strftime = time.strftime
    fake_time.sleep = lambda s: calls.append(("sleep", s))
    monkeypatch.setattr(gpu, "time", fake_time)
    monkeypatch.setattr(gpu, "run_child", fake_run_child)
    monkeypatch.setattr(gpu, "probe_hardware", lambda python: {"device_kind": "TPU v5 lite"})
    argv = ["--tiny", "--tasks", "CartpoleBalance", "--environments", "current",
            "--time-budget", "1000", "--output-dir", str(tmp_path / "out")]  # fmt: skip
    assert gpu.main(argv) == 1  # the sweep did not fit
    assert calls == [
        ("mlp_default", "ours", 600),  # --timeout 600 < 1000 s left
        ("mlp_default", "brax", 600),
        ("sleep", 5.0),
        ("mlp_default", "brax", 590),  # the retry: the child's 600 s less the first 10
        ("lstm", "ours", 330),  # cut to the budget's 330 s left
    ]  # the sweep's single runs are the table's MLP runs (--tiny): reused, not rerun
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [r["status"] for r in results["runs"]] == ["ok"] * 3
    assert results["runs"][1]["retried_device_busy"] is True
    assert [r["reused"] for r in results["sweep_single_runs"]] == ["side-by-side"] * 2
    assert results["sweep"]["status"] == "not run"
    text = (tmp_path / "out" / "results.md").read_text()
    assert text.startswith("# GPU benchmark\n\nHardware: TPU v5 lite (?), JAX ?.")
    assert "| CartpoleBalance | mlp_default | 1.00 | 1.00 | yes |" in text
    assert "Sweep of 2 seeds: not run (time budget spent (0 s left, under 60 s))." in text


def test_bench_suite_flag_must_come_first(capsys):
    assert bench_main(["--repeats", "1", "--suite", "gpu"]) == 2
    assert "--suite gpu must be the first argument" in capsys.readouterr().err
    assert bench_main(["--suite", "nope"]) == 2
    assert "choose 'control' or 'gpu'" in capsys.readouterr().err


@pytest.mark.extended
def test_gpu_tiny_runs_ours_and_writes_the_docs_table(tmp_path):
    # Ours only, in this environment, the MLP only (2 children: the MLP and the K=2
    # sweep, whose single run is the MLP run; the LSTM's child is the same child with
    # another network name, test_learning.py builds and steps every family). brax's
    # child on this JAX: test_brax_compat.py.
    argv = ["--suite", "gpu", "--tiny", "--tasks", "CartpoleBalance", "--networks",
            "mlp_default", "--environments", "current", "--implementations", "ours",
            "--output-dir", str(tmp_path)]  # fmt: skip
    assert bench_main(argv) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["meta"]["hardware"]["device_kind"]
    rows = results["summary"]["rows"]
    assert [(r["network"], r["implementation"]) for r in rows] == [("mlp_default", "ours")]
    assert all(r["steady_sps"] and r["return"] for r in rows)
    assert results["sweep"]["runs"] == 2 and results["sweep"]["speedup"]["ours"] > 0
    assert results["sweep_single_runs"][0]["reused"] == "side-by-side"
    text = (tmp_path / "results.md").read_text()
    assert text.startswith("# GPU benchmark\n\nHardware: ")
    assert "| train_many K=2 vs ours |" in text
