"""Merging shard folders (written by hand here, as `train_shard` writes them): runs
back in the sweep's order from their shards' logs; another sweep's, unfinished,
duplicate and missing shards refused by name. The merge of shards trained as processes
is `test_shards.py`'s (extended)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from nnx_ppo.algorithms.analysis.curves import curves_of
from nnx_ppo.algorithms.analysis.statistics import iqm, load_scores
from nnx_ppo.algorithms.config import EvalConfig, PPOConfig, TrainConfig
from nnx_ppo.algorithms.sweeps.merge import merge_shards
from nnx_ppo.algorithms.sweeps.shards import Shard, SweepMismatchError, sweep_identity

CONFIG = TrainConfig(ppo=PPOConfig(n_envs=4, n_minibatches=2), eval=EvalConfig(enabled=False))
# 5 runs: seeds 0..4, two learning rates; 2 shards: shard 0 holds runs 0, 2, 4.
SEEDS = [0, 1, 2, 3, 4]
LR = [1e-3, 3e-4, 1e-3, 3e-4, 1e-3]


def _write_shard(root, index, count=2, *, seeds=SEEDS, lr=LR, finished=True):
    identity = sweep_identity(CONFIG, "PointMass", seeds, {"learning_rate": lr})
    shard = Shard(index, count)
    folder = shard.folder(root)
    folder.mkdir(parents=True)
    mine = shard.runs(len(seeds))
    record = {
        "format": 1,
        "identity": identity.to_json(),
        "shard": {"index": index, "count": count},
    }
    (folder / "sweep.json").write_text(json.dumps(record | {"runs": mine}))
    lines = []
    for step in (0, 10, 20):
        for local, j in enumerate(mine):
            # Run j's return at step s is 10 * j + s / 10; its loss is logged from step 10.
            line = {"step": step, "run": local, "eval/episode_reward/mean": 10.0 * j + step / 10}
            if step:
                line["loss/total"] = float(j + step)
            lines.append(json.dumps(line))
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    if finished:
        (folder / "result.json").write_text(json.dumps({"format": 1, "finished": True}))
    return folder


def test_merge_puts_every_run_back_in_the_sweeps_order(tmp_path):
    folders = [_write_shard(tmp_path, 1), _write_shard(tmp_path, 0)]
    merged = merge_shards(folders)
    assert [run.run for run in merged.runs] == [0, 1, 2, 3, 4]
    assert [run.seed for run in merged.runs] == SEEDS
    assert [run.shard for run in merged.runs] == [0, 1, 0, 1, 0]  # round-robin
    assert [run.values for run in merged.runs] == [{"learning_rate": lr} for lr in LR]
    assert merged.folders == (folders[1], folders[0])
    run3 = merged.runs[3]
    assert run3.eval_history == [
        (s, {"eval/episode_reward/mean": 30.0 + s / 10}) for s in (0, 10, 20)
    ]
    assert run3.metrics == {"eval/episode_reward/mean": 32.0, "loss/total": 23.0}
    assert run3.final == {"eval/episode_reward/mean": 32.0}
    steps, values = curves_of(merged)  # reads like a SweepResult
    assert steps.tolist() == [0, 10, 20] and values[:, -1].tolist() == [2.0, 12.0, 22.0, 32.0, 42.0]
    assert merged.groups() == {"learning_rate=0.001": [0, 2, 4], "learning_rate=0.0003": [1, 3]}
    scores = merged.scores()
    assert scores["learning_rate=0.001"].tolist() == [[2.0], [22.0], [42.0]]  # [runs, 1 task]
    assert merged.rows()[1] == {
        "run": 1, "seed": 1, "learning_rate": 3e-4, "shard": 1, "eval/episode_reward/mean": 12.0,
    }  # fmt: skip
    table = merged.table()
    assert (
        table.splitlines()[0] == "| run | seed | learning_rate | shard | eval/episode_reward/mean |"
    )
    assert "| 4 | 4 | 0.001 | 0 | 42 |" in table
    # IQM of [2, 22, 42]: floor(3 / 4) = 0 trimmed, the mean 22.
    assert iqm(scores["learning_rate=0.001"]) == 22.0
    assert "| learning_rate=0.001 | 3 | 22 [" in merged.summary(n_resamples=200)

    written = merged.write(tmp_path / "merged", plots=False)  # plots: test_shards.py
    assert {p.name for p in written} == {"runs.md", "runs.json", "scores.npz"}
    saved = load_scores(tmp_path / "merged" / "scores.npz")
    assert {k: v.tolist() for k, v in saved.items()} == {k: v.tolist() for k, v in scores.items()}
    data = json.loads((tmp_path / "merged" / "runs.json").read_text())
    assert data["identity"]["digest"] == merged.identity.digest
    assert data["runs"][3]["eval_history"][-1] == [20, {"eval/episode_reward/mean": 32.0}]


def test_a_shard_of_another_sweep_is_refused_by_name(tmp_path):
    ours = _write_shard(tmp_path / "a", 0)
    theirs = _write_shard(tmp_path / "b", 1, lr=[1e-3] * 5)  # other learning rates
    with pytest.raises(SweepMismatchError, match="another sweep: its runs differ") as error:
        merge_shards([ours, theirs])
    assert error.value.folder == theirs and error.value.field == "runs"
    assert str(theirs) in str(error.value) and str(ours) in str(error.value)
    other_count = _write_shard(tmp_path / "c", 1, count=3)
    with pytest.raises(SweepMismatchError, match=r"its shard differs \(3 shards there, 2 in"):
        merge_shards([ours, other_count])


def test_missing_duplicate_and_unfinished_shards_are_refused_by_name(tmp_path):
    first = _write_shard(tmp_path / "a", 0)
    with pytest.raises(ValueError, match=r"shards \[1\] of 2 are missing \(given: \[0\]\)"):
        merge_shards([first])
    again = _write_shard(tmp_path / "b", 0)
    with pytest.raises(ValueError, match="both hold shard 0/2"):
        merge_shards([first, again])
    unfinished = _write_shard(tmp_path / "c", 1, finished=False)
    with pytest.raises(ValueError, match=r"shard 1/2 in .*c.* is not finished .*resume it"):
        merge_shards([first, unfinished])
    with pytest.raises(ValueError, match="is not a shard folder"):
        merge_shards([first, tmp_path])
    with pytest.raises(ValueError, match="no folder given"):
        merge_shards([])


def test_a_run_without_a_finite_evaluation_is_reported_not_averaged(tmp_path):
    folders = [_write_shard(tmp_path, i) for i in range(2)]
    path = folders[1] / "metrics.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for line in lines:
        if line["run"] == 0 and line["step"] == 20:
            line["eval/episode_reward/mean"] = None  # JSONLWriter's NaN
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    merged = merge_shards(folders)
    assert math.isnan(merged.runs[1].final["eval/episode_reward/mean"])
    assert np.isnan(merged.scores()["learning_rate=0.0003"][0, 0])
    assert "| learning_rate=0.0003 | 2 | n/a" in merged.summary(n_resamples=10)


def test_the_command_line_merges_or_says_why_not(tmp_path, capsys):
    from nnx_ppo.algorithms.sweeps.merge import _main

    folders = [str(_write_shard(tmp_path / "sweep", i)) for i in range(2)]
    out = tmp_path / "merged"
    assert _main([*folders, "--output-dir", str(out), "--no-plots"]) == 0
    printed = capsys.readouterr().out
    assert (
        "| 3 | 3 | 0.0003 | 1 | 32 |" in printed and "| learning_rate=0.001 | 3 | 22 [" in printed
    )
    assert sorted(p.name for p in out.iterdir()) == ["runs.json", "runs.md", "scores.npz"]
    assert _main(folders[:1]) == 2
    assert "shards [1] of 2 are missing" in capsys.readouterr().err
