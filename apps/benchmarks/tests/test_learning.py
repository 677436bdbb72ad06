"""The learning-quality suite's planning, statistics and report (no child processes)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from nnx_ppo_benchmarks.common import area_under_curve, band, median_ci
from nnx_ppo_benchmarks.learning.cli import main, plan_cells
from nnx_ppo_benchmarks.learning.report import summarize, write_report
from nnx_ppo_benchmarks.learning.tasks import (
    TASKS,
    ObservationMask,
    make_env,
    stagger_steps,
    staggered,
)


def test_area_under_curve_is_the_average_return():
    # Trapezoids over [0, 10] and [10, 30]: (0 + 10) / 2 * 10 + (10 + 40) / 2 * 20 = 550,
    # over 30 steps.
    assert area_under_curve([(0, 0.0), (10, 10.0), (30, 40.0)]) == pytest.approx(550 / 30)
    with pytest.raises(ValueError, match="needs >= 2 points"):
        area_under_curve([(0, 1.0)])


def test_median_ci_brackets_the_median_and_shrinks_with_agreement():
    low, mid, high = median_ci([10.0, 11.0, 12.0, 13.0, 500.0])
    assert mid == 12.0
    assert 10.0 <= low <= mid <= high <= 500.0
    # Identical seeds: no spread at all.
    assert median_ci([7.0] * 5) == (7.0, 7.0, 7.0)
    with pytest.raises(ValueError, match="at least one value"):
        median_ci([])


def test_band_is_pointwise_and_needs_common_steps():
    curves = [[(0, float(s)), (10, 10.0 * s)] for s in (1, 2, 3, 4, 5)]
    b = band(curves)
    assert b["steps"] == [0.0, 10.0]
    assert b["median"] == [3.0, 30.0]
    assert all(lo <= m <= hi for lo, m, hi in zip(b["low"], b["median"], b["high"], strict=True))
    with pytest.raises(ValueError, match="same steps"):
        band([[(0, 1.0), (10, 2.0)], [(0, 1.0), (20, 2.0)]])


def test_plan_skips_cells_an_implementation_cannot_run():
    cells = plan_cells(
        ["memory_chain", "memory_d2"], ["gru", "lstm"], ["ours", "nnx-ppo-0.3.0"], [1, 2]
    )
    names = [c.name for c in cells]
    # nnx-ppo 0.3.0 has no GRU and no discrete-action sampler.
    assert names == [
        "memory_chain__gru__ours",
        "memory_chain__lstm__ours",
        "memory_d2__gru__ours",
        "memory_d2__lstm__ours",
        "memory_d2__lstm__nnx-ppo-0.3.0",
    ]
    # Budgets are whole evaluation chunks of 5120-step iterations: 204,800 / 5120 = 40
    # iterations = 8 chunks of 5; 100,000 steps = 19.5 iterations -> 8 chunks of 3.
    assert cells[-1].total_steps == 8 * 5 * 5120
    short = plan_cells(["memory_d2"], ["lstm"], ["ours"], [1], steps=100_000)
    assert short[0].total_steps == 8 * 3 * 5120
    assert json.loads(cells[0].to_json())["ppo"]["n_envs"] == 256
    assert json.loads(cells[0].to_json())["stagger"] is True
    assert plan_cells(["memory_d2"], ["lstm"], ["ours"], [1], stagger=False)[0].stagger is False
    # nnx-ppo 0.3.0 has no learning-rate schedule: with one, only ours is planned.
    decayed = plan_cells(
        ["cartpole"], ["lstm"], ["ours", "nnx-ppo-0.3.0"], [1], lr_schedule="linear"
    )
    assert [(c.name, c.lr_schedule) for c in decayed] == [("cartpole__lstm__ours", "linear")]
    assert json.loads(decayed[0].to_json())["lr_schedule"] == "linear"


def test_stagger_is_half_an_episode_and_old_records_keep_their_starts():
    assert stagger_steps(TASKS["cartpole"], True) == 500
    assert stagger_steps(TASKS["memory_d2"], True) == 50
    assert stagger_steps(TASKS["cartpole"], False) == 0
    # Before the option, nnx-ppo 0.3.0's wrapper always staggered and ours never did.
    assert staggered({"implementation": "nnx-ppo-0.3.0"})
    assert not staggered({"implementation": "ours"})
    assert not staggered({"implementation": "nnx-ppo-0.3.0", "stagger": False})


def test_observation_mask_keeps_the_listed_entries():
    import jax

    task = TASKS["memory_d2"]
    env = ObservationMask(make_env(task), (0,))
    state = env.reset(jax.random.key(0))
    assert env.observation_size == 1
    assert state.obs.shape == (1,)
    state = env.step(state, jax.numpy.zeros(1))
    assert state.obs.shape == (1,)


def _fake_results():
    runs = [
        {"seed": s, "curve": [[0, 0.0], [100, 10.0 * s]], "final": 10.0 * s, "train_s": 1.0}
        for s in (1, 2, 3)
    ]
    cell = {
        "task": "memory_d2",
        "family": "lstm",
        "implementation": "ours",
        "seeds": [1, 2, 3],
        "total_steps": 100,
        "eval_envs": 4,
        "final_eval_envs": 8,
        "stagger": True,
        "status": "ok",
        "runs": runs,
    }
    failed = {**cell, "family": "graph", "status": "failed", "runs": [], "error": "boom"}
    del failed["stagger"]  # recorded before the option: ours started at step 0
    meta = {"command": "nnx-ppo-learning", "load_before": [1.0], "load_after": [1.0]}
    return {"meta": meta, "cells": [cell, failed]}


def test_summary_and_report(tmp_path):
    results = _fake_results()
    s = summarize(results["cells"][0])
    # Finals 10, 20, 30; areas (0 + 10 s) / 2 = 5, 10, 15.
    assert s["final"][1] == 20.0
    assert s["auc"][1] == 10.0
    assert summarize(results["cells"][1]) is None
    text = write_report(results, tmp_path).read_text()
    assert "| lstm | ours | staggered | 3 | 20.0 [" in text
    assert "| graph | ours | at step 0 | 0 | failed: boom |" in text
    assert (tmp_path / "curves_memory_d2.png").stat().st_size > 1000
    tables = (tmp_path / "tables.md").read_text()
    assert "| lstm | ours | staggered | 3 | 20.0 [" in tables
    assert "png" not in tables
    decayed = {**results["cells"][0], "lr_schedule": "linear"}
    text = write_report({**results, "cells": [decayed]}, tmp_path).read_text()
    assert "| lstm | ours | staggered; learning rate decayed to 0 | 3 | 20.0 [" in text


def test_latency_tasks_are_ours_and_report_the_cross_evaluation(tmp_path):
    # nnx-ppo 0.3.0 has no Latency wrapper: its cells are not planned.
    cells = plan_cells(["pendulum", "pendulum_lag"], ["mlp"], ["ours", "nnx-ppo-0.3.0"], [1])
    names = [c.name for c in cells]
    assert names == [
        "pendulum__mlp__ours",
        "pendulum__mlp__nnx-ppo-0.3.0",
        "pendulum_lag__mlp__ours",
    ]
    assert TASKS["pendulum_lag"].cross_eval == ("pendulum",)
    # Each run's return on the other task is a column: finals on it 1, 2, 3 -> median 2.
    results = _fake_results()
    cell = {**results["cells"][0], "task": "pendulum_lag"}
    cell["runs"] = [{**r, "final_on": {"pendulum": r["seed"]}} for r in cell["runs"]]
    assert summarize(cell)["final_on"]["pendulum"][1] == 2.0
    text = write_report({**results, "cells": [cell]}, tmp_path).read_text()
    assert "| final return on `pendulum`, median [95% CI] |" in text
    assert "| lstm | ours | staggered | 3 | 20.0 [10.0, 30.0] | 2.0 [1.0, 3.0] |" in text


def test_report_only_rerenders(tmp_path, capsys):
    (tmp_path / "results.json").write_text(json.dumps(_fake_results()))
    assert main(["--report-only", "--output-dir", str(tmp_path)]) == 0
    assert (tmp_path / "results.md").exists()
    assert np.isfinite(summarize(_fake_results()["cells"][0])["auc"][0])


def test_report_covers_cells_of_earlier_runs(tmp_path):
    from nnx_ppo_benchmarks.learning.cli import _with_earlier_cells

    fake = _fake_results()["cells"]
    (tmp_path / "cells").mkdir()
    (tmp_path / "cells" / "memory_d2__graph__ours.json").write_text(json.dumps(fake[1]))
    earlier_task = {**fake[0], "task": "cartpole"}
    (tmp_path / "cells" / "cartpole__lstm__ours.json").write_text(json.dumps(earlier_task))
    cells = _with_earlier_cells([fake[0]], tmp_path)
    # Task order of TASKS (cartpole first), then family order (lstm before graph).
    assert [(c["task"], c["family"]) for c in cells] == [
        ("cartpole", "lstm"),
        ("memory_d2", "lstm"),
        ("memory_d2", "graph"),
    ]


def test_an_interrupted_cell_keeps_its_finished_seeds(tmp_path):
    from nnx_ppo_benchmarks.learning.cli import Cell, _finished_runs

    cell = Cell("memory_d2", "lstm", "ours", (1, 2, 3), 100)
    path = tmp_path / "cell.json"
    assert _finished_runs(cell, path) == []
    runs = _fake_results()["cells"][0]["runs"]
    path.write_text(json.dumps({"total_steps": 100, "stagger": True, "runs": runs[:2]}))
    assert [r["seed"] for r in _finished_runs(cell, path)] == [1, 2]
    # Other episode starts: run again (a record without the key is ours at step 0).
    assert _finished_runs(dataclasses.replace(cell, stagger=False), path) == []
    path.write_text(json.dumps({"implementation": "ours", "total_steps": 100, "runs": runs}))
    assert _finished_runs(cell, path) == []
    assert len(_finished_runs(dataclasses.replace(cell, stagger=False), path)) == 3
    path.write_text(json.dumps({"total_steps": 100, "stagger": True, "runs": runs[:2]}))
    # Another learning-rate schedule (a record without the key had a constant rate).
    assert _finished_runs(dataclasses.replace(cell, lr_schedule="linear"), path) == []
    # Another budget, or seeds that are not a prefix of the cell's, are run again.
    assert _finished_runs(Cell("memory_d2", "lstm", "ours", (1, 2, 3), 200), path) == []
    assert _finished_runs(Cell("memory_d2", "lstm", "ours", (2, 1, 3), 100), path) == []


def test_every_family_of_ours_builds_a_network_that_steps_and_sweeps():
    import functools

    import jax
    import jax.numpy as jnp
    from flax import nnx
    from nnx_ppo_benchmarks.learning.child_ours import build_network
    from nnx_ppo_benchmarks.learning.families import FAMILIES
    from nnx_ppo_benchmarks.learning.tasks import TASKS

    from nnx_ppo.algorithms.sweeps.many import _build_networks

    # graph_nv is the graph network with value normalisation in its training config.
    assert FAMILIES["graph_nv"].network_family == "graph"
    assert FAMILIES["graph_nv"].normalize_values and not FAMILIES["graph"].normalize_values
    for family in (f for f in FAMILIES.values() if "ours" in f.implementations):
        make = functools.partial(build_network, TASKS["cartpole"], family.name, 5, 1)
        net = make(nnx.Rngs(0))
        out = net(net.initialize_state(2), jnp.zeros((2, 5)))
        assert out.output.actions.shape == (2, 1), family.name
        # The check train_many makes before compiling (one structure for every seed),
        # so that every family trains its seeds as one sweep; the seeds' parameters
        # differ.
        _, _, params, _ = _build_networks(make, [0, 1])
        flat = [jnp.concatenate([x.ravel() for x in jax.tree.leaves(p)]) for p in params]
        assert flat[0].shape == flat[1].shape and not jnp.allclose(*flat), family.name


def _tiny_cell(family: str, seeds: list[int]) -> dict:
    import dataclasses

    from nnx_ppo_benchmarks.settings import PPOSettings

    # 8 envs x 4 steps = 32 steps per iteration; memory_d2's 8 evaluations of one
    # iteration each: 256 steps.
    ppo = PPOSettings(n_envs=8, rollout_length=4, n_minibatches=2, n_epochs=1)
    return dict(
        task="memory_d2", family=family, implementation="ours", seeds=seeds,
        total_steps=256, eval_envs=4, final_eval_envs=4, ppo=dataclasses.asdict(ppo),
    )  # fmt: skip


@pytest.mark.extended
def test_a_cells_sweep_equals_its_seeds_one_at_a_time():
    from nnx_ppo_benchmarks.learning.child_ours import run_seed, run_seeds

    cell = _tiny_cell("mlp", [3, 4])
    many = run_seeds(cell, [3, 4])
    one = run_seed(cell, 4)
    assert [r["seed"] for r in many] == [3, 4]
    assert set(many[1]) == set(one) == {
        "seed", "curve", "final", "total_steps", "train_s", "sweep_s", "sweep_runs"
    }  # fmt: skip
    # An evaluation before training and one after each of the 8 iterations.
    steps = [s for s, _ in one["curve"]]
    assert steps == [32 * i for i in range(9)] == [s for s, _ in many[1]["curve"]]
    # Run 1 of the sweep is seed 4's own train_ppo run: the same curve and final return
    # up to float32 rounding (vmapping reorders some reductions; measured: <= 1e-6 on
    # returns of about 1), while the other seed's curve is another run's.
    assert [r for _, r in many[1]["curve"]] == pytest.approx(
        [r for _, r in one["curve"]], rel=1e-4, abs=1e-4
    )
    assert many[1]["final"] == pytest.approx(one["final"], rel=1e-4, abs=1e-4)
    assert [r for _, r in many[0]["curve"][1:]] != pytest.approx(
        [r for _, r in one["curve"][1:]], abs=1e-2
    )
    assert many[0]["total_steps"] == many[1]["total_steps"] == one["total_steps"] == 256
    # train_s: the sweep's wall time shared between its runs.
    assert many[0]["sweep_runs"] == 2 and one["sweep_runs"] == 1
    assert many[0]["train_s"] == many[1]["train_s"] == pytest.approx(many[0]["sweep_s"] / 2)
    assert one["train_s"] == one["sweep_s"] > 0


def _fake_run(cell, seed):
    if seed == 13:
        raise RuntimeError("diverged")
    return {"seed": seed, "curve": [[0, 1.0]], "final": float(seed), "total_steps": 1}


def test_a_child_writes_one_sweep_or_seed_by_seed(tmp_path):
    from nnx_ppo_benchmarks.learning._child import run_cell

    out = tmp_path / "cell.json"
    calls = []

    def sweep(cell, seeds):
        calls.append(list(seeds))
        return [_fake_run(cell, s) for s in seeds]

    cell = {"task": "memory_d2", "seeds": [1, 2, 3]}
    assert run_cell(cell, out, _fake_run, sweep) == 0
    record = json.loads(out.read_text())
    assert calls == [[1, 2, 3]]
    assert (record["status"], record["seed_mode"]) == ("ok", "sweep")
    assert [r["seed"] for r in record["runs"]] == [1, 2, 3]
    # A failed sweep loses all its seeds and names them; seed by seed, the seeds before
    # the failure are kept and the failed one is named.
    assert run_cell({**cell, "seeds": [12, 13]}, out, _fake_run, sweep) == 1
    record = json.loads(out.read_text())
    assert record["runs"] == [] and record["error"] == (
        "seeds [12, 13] (one sweep): RuntimeError: diverged"
    )
    assert run_cell({**cell, "seeds": [12, 13, 14]}, out, _fake_run) == 1
    record = json.loads(out.read_text())
    assert record["seed_mode"] == "one_at_a_time"
    assert [r["seed"] for r in record["runs"]] == [12]
    assert record["error"] == "seed 13: RuntimeError: diverged"


_FAKE_CHILD = """\
import json, sys
args = sys.argv[1:]
cell = json.loads(args[args.index("--cell") + 1])
runs = [{"seed": s, "curve": [[0, 0.0], [100, 1.0]], "final": 1.0, "train_s": 1.0}
        for s in cell["seeds"]]
record = {"status": "ok", "runs": runs, "argv": args}
open(args[args.index("--out") + 1], "w").write(json.dumps(record))
"""


def test_a_resumed_cell_runs_its_remaining_seeds_in_one_child(tmp_path):
    import sys

    from nnx_ppo_benchmarks.learning.cli import Cell, run_cell

    # A stand-in for the child's interpreter: it records its arguments and returns one
    # run per seed it was given.
    python = tmp_path / "python"
    python.write_text(f"#!{sys.executable}\n{_FAKE_CHILD}")
    python.chmod(0o755)
    cell = Cell("memory_d2", "lstm", "ours", (1, 2, 3, 4), 100)
    path = tmp_path / "cells" / f"{cell.name}.json"
    path.parent.mkdir()
    runs = _fake_results()["cells"][0]["runs"]
    path.write_text(json.dumps({"total_steps": 100, "runs": runs[:1]}))  # seed 1 finished
    record = run_cell(cell, python, tmp_path)
    argv = record["argv"]
    assert json.loads(argv[argv.index("--cell") + 1])["seeds"] == [2, 3, 4]
    assert "--one-at-a-time" not in argv
    assert [r["seed"] for r in record["runs"]] == [1, 2, 3, 4]
    assert record["seeds"] == [1, 2, 3, 4] and record["status"] == "ok"
    record = run_cell(cell, python, tmp_path, rerun=True, one_at_a_time=True)
    argv = record["argv"]
    assert json.loads(argv[argv.index("--cell") + 1])["seeds"] == [1, 2, 3, 4]
    assert "--one-at-a-time" in argv


def test_report_gives_rliable_iqm_and_probability_of_improvement(tmp_path):
    results = _fake_results()
    ours = results["cells"][0]  # finals 10, 20, 30
    other = {**ours, "implementation": "nnx-ppo-0.3.0"}
    other["runs"] = [
        {**r, "final": f} for r, f in zip(ours["runs"], (5.0, 20.0, 25.0), strict=True)
    ]
    # IQM of 3 seeds: floor(3 / 4) = 0 trimmed, the mean: 20 and 16.67.
    assert summarize(ours)["iqm"][1] == 20.0
    assert summarize(other)["iqm"][1] == pytest.approx(50 / 3)
    # P(ours > other) over the 9 seed pairs: 10 beats 5 (1); 20 beats 5, ties 20 (1.5);
    # 30 beats all three (3): 5.5 / 9 = 0.61, so P(other > ours) = 3.5 / 9 = 0.39.
    text = write_report({**results, "cells": [ours, other]}, tmp_path).read_text()
    assert "| final return, IQM [95% CI] | P(final > first row's) |" in text
    assert "| 10, 20, 30 | 20.0 [" in text and "| reference |" in text
    assert "| 5, 20, 25 | 16.7 [" in text and "| 0.39 |" in text
    assert "### Probability of improvement across tasks" in text
    assert "| lstm | nnx-ppo-0.3.0 | staggered | 0.61 [" in text
    assert "| `memory_d2` 0.61 |" in text
