"""Sharded sweeps: the round-robin rule, shards from ``--shard`` or a SLURM array task,
the sweep identity, folders of another sweep refused before training; and (extended)
four shards trained as separate processes, one preempted and resumed, merged into the
one-program sweep's results."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nnx_ppo.algorithms.config import EvalConfig, PPOConfig, TrainConfig
from nnx_ppo.algorithms.sweeps.shards import (
    Shard,
    SweepMismatchError,
    shard_runs,
    sweep_identity,
    train_shard,
)

CONFIG = TrainConfig(ppo=PPOConfig(n_envs=4, n_minibatches=2), eval=EvalConfig(enabled=False))


@pytest.mark.parametrize("k,n", [(10, 4), (4, 4), (3, 5), (7, 1)])
def test_every_run_is_in_exactly_one_shard_round_robin(k, n):
    shards = [shard_runs(list(range(k)), i, n) for i in range(n)]
    assert sorted(j for shard in shards for j in shard) == list(range(k))
    assert max(map(len, shards)) - min(map(len, shards)) <= 1
    for i, shard in enumerate(shards):
        assert shard == [j for j in range(k) if j % n == i]  # run j -> shard j % n
    assert Shard(1, 4).runs(10) == [1, 5, 9]


@pytest.mark.parametrize(
    "text", ["4/4", "-1/4", "1", "a/b", "1/0", "1/2/3"]
)  # fmt: skip
def test_a_bad_shard_argument_is_refused(text):
    with pytest.raises(ValueError, match="INDEX/COUNT"):
        Shard.parse(text)


ID, MIN, STEP, COUNT = (f"SLURM_ARRAY_TASK_{x}" for x in ("ID", "MIN", "STEP", "COUNT"))


@pytest.mark.parametrize(
    "env,shard",
    [
        ({ID: "2", COUNT: "4"}, Shard(2, 4)),  # --array=0-3
        ({ID: "1", MIN: "1", COUNT: "8"}, Shard(0, 8)),  # --array=1-8
        ({ID: "6", STEP: "2", COUNT: "8"}, Shard(3, 8)),  # --array=0-14:2: ids 0, 2, ..., 14
    ],
)  # fmt: skip
def test_the_shard_of_a_slurm_array_task(env, shard):
    assert Shard.from_environment(env) == shard


def test_a_partial_array_needs_the_count():
    # --array=3,7 to redo two shards of 10: SLURM says min 3, count 2.
    env = {ID: "7", MIN: "3", COUNT: "2"}
    with pytest.raises(ValueError, match=r"not shard 0\.\.count-1"):
        Shard.from_environment(env)
    assert Shard.from_environment(env, count=10) == Shard(7, 10)
    with pytest.raises(ValueError, match="count=5"):
        Shard.from_environment(env, count=5)
    with pytest.raises(ValueError, match=r"\$SLURM_ARRAY_TASK_ID is not set.*--shard"):
        Shard.from_environment({})
    assert Shard.resolve("1/3") == Shard(1, 3)  # --shard wins over the environment


def test_the_sweep_identity_names_what_differs():
    base = sweep_identity(CONFIG, "PointMass", [0, 1], {"learning_rate": [1e-3, 3e-4]})
    same = sweep_identity(CONFIG, "PointMass", [0, 1], {"learning_rate": [1e-3, 3e-4]})
    assert base.digest == same.digest and base.difference(same) is None
    assert base.runs == ({"seed": 0, "learning_rate": 1e-3}, {"seed": 1, "learning_rate": 3e-4})
    others = {
        "config": sweep_identity(
            TrainConfig(ppo=PPOConfig(n_envs=8, n_minibatches=2), eval=EvalConfig(enabled=False)),
            "PointMass", [0, 1], {"learning_rate": [1e-3, 3e-4]},
        ),
        "env": sweep_identity(CONFIG, "Pendulum", [0, 1], {"learning_rate": [1e-3, 3e-4]}),
        "runs": sweep_identity(CONFIG, "PointMass", [0, 1], {"learning_rate": [1e-3, 1e-3]}),
    }  # fmt: skip
    for field, other in others.items():
        assert base.difference(other) == field and other.digest != base.digest
    # The version is part of it: a shard trained by another release is another sweep.
    data = base.to_json() | {"version": "0.0.0"}
    assert base.difference(type(base).from_json(data)) == "version"
    assert type(base).from_json(base.to_json()).digest == base.digest


def test_a_folder_of_another_sweep_is_refused_before_training(tmp_path):
    # The sweep file is what train_shard writes first; a second sweep (other learning
    # rates) in the same folder is refused before any network is built.
    folder = Shard(0, 2).folder(tmp_path)
    folder.mkdir()
    identity = sweep_identity(CONFIG, "PointMass", [0, 1], {"learning_rate": [1e-3, 3e-4]})
    record = {"format": 1, "identity": identity.to_json(), "shard": {"index": 0, "count": 2}}
    (folder / "sweep.json").write_text(json.dumps(record | {"runs": [0]}))

    def no_network(rngs):
        raise AssertionError("built a network for a refused folder")

    kwargs = {"seeds": [0, 1], "shard": Shard(0, 2), "directory": folder, "env_name": "PointMass"}
    with pytest.raises(SweepMismatchError, match="another sweep: its runs differ") as error:
        train_shard(None, no_network, CONFIG, overrides={"learning_rate": [1e-3, 1e-3]}, **kwargs)
    assert error.value.folder == folder and error.value.field == "runs"
    with pytest.raises(SweepMismatchError, match="holds shard 0/2 of this sweep, not shard 1/2"):
        train_shard(
            None, no_network, CONFIG, overrides={"learning_rate": [1e-3, 3e-4]},
            **(kwargs | {"shard": Shard(1, 2)}),
        )  # fmt: skip
    with pytest.raises(TypeError, match="checkpoint= is the shard folder's"):
        train_shard(None, no_network, CONFIG, checkpoint=None, **kwargs)


# --------------------------------------------------------------------------- processes

SCRIPT = Path(__file__).with_name("_shard_script.py")


@pytest.mark.extended
def test_shards_as_processes_one_preempted_merge_into_the_one_program_sweep(tmp_path):
    # Four shards of the 4-run sweep of _shard_script.py (one run each), as separate
    # processes numbered by SLURM's variables; shard 1 sends itself SIGTERM when its run
    # logs step 20, stops with a checkpoint (exit 143) and is started again.
    # Tolerance: a shard is the K=1 program, the reference the K=4 one; vmapping changes
    # how XLA orders some float32 reductions (test_sweeps.py's rtol=1e-4, atol=1e-6).
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import _shard_script as script
    finally:
        sys.path.remove(str(SCRIPT.parent))
    from nnx_ppo.algorithms.sweeps.many import train_many
    from nnx_ppo.algorithms.sweeps.merge import merge_shards

    root = tmp_path / "sweep"

    def start(index, **extra):
        env = os.environ | {"SLURM_ARRAY_TASK_ID": str(index), "SLURM_ARRAY_TASK_COUNT": "4"}
        return subprocess.Popen(
            [sys.executable, str(SCRIPT), str(root)], env=env | extra,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip

    procs = [start(i, **({"SIGTERM_AT_STEP": "20"} if i == 1 else {})) for i in range(4)]
    outputs = [proc.communicate(timeout=600)[0] for proc in procs]
    codes = [proc.returncode for proc in procs]
    assert codes == [0, 128 + signal.SIGTERM, 0, 0], outputs
    assert "stopped by SIGTERM" in outputs[1]
    preempted = Shard(1, 4).folder(root)
    assert not (preempted / "result.json").exists()
    with pytest.raises(ValueError, match=r"shard 1/4 in .* is not finished"):
        merge_shards(sorted(root.glob("shard-*")))
    stopped_at = max(int(p.name) for p in (preempted / "checkpoints").iterdir() if p.name.isdigit())
    assert 20 <= stopped_at < 60

    resumed = start(1)
    output = resumed.communicate(timeout=600)[0]
    assert resumed.returncode == 0, output
    merged = merge_shards(sorted(root.glob("shard-*"), reverse=True))  # any order

    reference = train_many(
        script.ENV, script.make_network, script.CONFIG, seeds=script.SEEDS,
        overrides=script.OVERRIDES, progress=False,
    )  # fmt: skip
    assert [run.seed for run in merged.runs] == script.SEEDS
    assert [run.shard for run in merged.runs] == [0, 1, 2, 3]
    assert [run.values["learning_rate"] for run in merged.runs] == script.OVERRIDES["learning_rate"]
    for j, run in enumerate(merged.runs):
        theirs = reference.eval_histories[j]
        assert [s for s, _ in run.eval_history] == [s for s, _ in theirs] == [0, 40, 60]
        for (_, ours), (_, want) in zip(run.eval_history, theirs, strict=True):
            assert set(ours) == set(want)
            for name, value in want.items():
                np.testing.assert_allclose(ours[name], value, rtol=1e-4, atol=1e-6, err_msg=name)
        for name, value in reference.metrics[j].items():
            if name.startswith("throughput/"):  # wall-clock rates
                continue
            np.testing.assert_allclose(run.metrics[name], value, rtol=1e-4, atol=1e-6, err_msg=name)
    rows = merged.rows()
    want = [theirs[-1][1]["eval/episode_reward/mean"] for theirs in reference.eval_histories]
    np.testing.assert_allclose(
        [row["eval/episode_reward/mean"] for row in rows], want, rtol=1e-4, atol=1e-6
    )
    written = {p.name for p in merged.write(tmp_path / "merged")}
    assert written == {"runs.md", "runs.json", "scores.npz", "curves.png"}  # matplotlib: dev
    assert set(np.load(tmp_path / "merged" / "scores.npz").files) == set(merged.groups())

    # Another sweep (other learning rates) in a finished shard's folder: refused.
    with pytest.raises(SweepMismatchError, match="its runs differ"):
        train_shard(
            script.ENV, script.make_network, script.CONFIG, seeds=script.SEEDS,
            overrides={**script.OVERRIDES, "learning_rate": [1e-3] * 4},
            shard=Shard(2, 4), directory=Shard(2, 4).folder(root), progress=False,
        )  # fmt: skip
