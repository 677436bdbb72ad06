"""The ``nnx-ppo-export`` CLI on a real (tiny) quickstart run and its checkpoint."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
from nnx_ppo_export.cli import main
from nnx_ppo_export.rebuild import rebuild

from nnx_ppo.networks.export import DeterministicPolicy, load_stablehlo, read_manifest


def _policy_actions(policy: DeterministicPolicy, obs: np.ndarray) -> list[np.ndarray]:
    carry, actions = policy.initial_carry(obs.shape[1]), []
    for t in range(obs.shape[0]):
        carry, action = policy.step(carry, jnp.asarray(obs[t]))
        actions.append(np.asarray(action))
    return actions


def test_stablehlo_export_of_a_quickstart_run(
    run_dir: Path, tmp_path: Path, capsys: Any, monkeypatch: Any
) -> None:
    out = tmp_path / "shlo"
    monkeypatch.chdir(run_dir.parent)  # the run named as a user names it, relatively
    assert main([run_dir.name, "--format", "stablehlo", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "lstm on inverted_pendulum" in printed and "checkpoint at step 800" in printed
    manifest = json.loads((out / "policy.json").read_text())
    assert manifest["observation"] == ["obs"] and manifest["action"] == ["action"]
    assert len(manifest["carry"]) == 2  # the actor's LSTM (h, c); the critic's is dropped
    # The artefact names the run and the checkpoint it came from.
    # As given: the artefact does not carry the exporting machine's absolute paths.
    assert manifest["source"]["run"] == run_dir.name
    assert manifest["source"]["checkpoints"].startswith(run_dir.name)
    assert manifest["source"]["step"] == 800 and "git_commit" in manifest["source"]

    # The artefact equals the trained network (rebuilt independently) over 30 steps.
    trained = rebuild(run_dir)
    policy = DeterministicPolicy(trained.network, trained.observation_spec)
    obs = np.random.default_rng(0).normal(size=(30, 2, 12)).astype(np.float32)
    loaded = load_stablehlo(out)
    carry = loaded.initial_carry(2)
    for t, want in enumerate(_policy_actions(policy, obs)):
        result = loaded.step({"obs": obs[t], **carry})
        carry = {c["input"]: result[c["output"]] for c in manifest["carry"]}
        np.testing.assert_allclose(result["action"], want, atol=1e-5, rtol=0)


def test_record_obs_makes_a_self_describing_artefact(
    run_dir: Path, tmp_path: Path, capsys: Any
) -> None:
    out = tmp_path / "rec"
    args = ["--format", "stablehlo", "--out", str(out), "--record-obs", "60"]
    assert main([str(run_dir), *args, "--record-envs", "2"]) == 0
    assert "recorded 60 steps x 2 env(s) of inverted_pendulum" in capsys.readouterr().out
    manifest = read_manifest(out)
    # Provenance: the run's environment and versions, the exporter's versions.
    source = manifest["source"]
    assert source["env"] == "inverted_pendulum" and source["network"] == "lstm"
    assert source["episode_length"] == 40 and "jax" in source["trained_with"]
    assert {"nnx-modules", "jax", "flax"} <= set(manifest["producer"])
    # What the input holds: 3 stacked observations of 4 values, oldest first, zeros.
    layout = source["observation"]
    assert (layout["history"], layout["entry_size"], layout["order"]) == (
        3, {"obs": 4}, "oldest first"
    )  # fmt: skip
    assert (layout["padding"], layout["obs_lag"], layout["action_lag"]) == ("zeros", "1", "0:1")
    # The README names every tensor with its shape, and says what obs holds.
    readme = (out / "README.md").read_text()
    for fn in ("step", "reset"):
        for tensor in manifest[fn]["inputs"] + manifest[fn]["outputs"]:
            shape = "[" + ", ".join(str(d) for d in tensor["shape"]) + "]"
            assert f"`{tensor['name']}` | `{shape}`" in readme, tensor
    note = manifest["observation_notes"]["obs"]
    assert f"- `obs`: {note}" in readme
    assert "the last 3 observations of inverted_pendulum (4 values each)" in note
    assert "values [0:4] the oldest, [8:12] the newest" in note and "1 step old" in note
    # obs.npz: a real rollout (episodes of at most 40 steps) with the JAX actions; the
    # StableHLO artefact, its carry fed back and reset where done, reproduces them.
    with np.load(out / "obs.npz") as data:
        obs, done, expected = data["obs"], data["done"], data["expected/action"]
    assert obs.shape == (60, 2, 12) and expected.shape == (60, 2, 1)
    assert done.any(axis=0).all()  # every environment's first episode ended in it
    newest, middle = obs[..., 8:], obs[..., 4:8]
    for b in range(2):
        starts = [0, *(np.flatnonzero(done[:-2, b]) + 1)]
        for t in starts:
            # A fresh history at every episode start: zeros before the first observation.
            np.testing.assert_array_equal(obs[t, b, :8], 0.0)
            assert np.abs(newest[t, b]).max() > 0
            # Oldest first: each step's newest moves one slot back at the next step.
            np.testing.assert_array_equal(middle[t + 1, b], newest[t, b])
            # The run's one-step observation lag (kept in the recording): the first step
            # of every episode sees the reset observation again.
            np.testing.assert_array_equal(newest[t + 1, b], newest[t, b])
            assert not np.array_equal(newest[t + 2, b], newest[t + 1, b])
    assert source["obs_lag"] == "1" and source["action_lag"] == "0:1"
    loaded = load_stablehlo(out)
    carry = loaded.initial_carry(2)
    for t in range(60):
        result = loaded.step({"obs": obs[t], **carry})
        carry = {c["input"]: result[c["output"]] for c in manifest["carry"]}
        if done[t].any():
            reset = loaded.reset({**carry, "done": done[t]})
            carry = {c["input"]: reset[c["output"]] for c in manifest["carry"]}
        np.testing.assert_allclose(result["action"], expected[t], atol=1e-5, rtol=0)
    assert np.abs(expected).max() > 1e-3  # not a trivially zero policy


def test_record_obs_needs_a_quickstart_run(tmp_path: Path, capsys: Any) -> None:
    args = ["--format", "stablehlo", "--out", str(tmp_path / "o"), "--record-obs", "5"]
    assert main([str(tmp_path), *args, "--factory", "m:f"]) == 2
    assert "--record-obs needs the run's environment" in capsys.readouterr().err


def test_onnx_export_of_a_quickstart_run(run_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("jax2onnx")
    onnxruntime = pytest.importorskip("onnxruntime")
    out = tmp_path / "onnx"
    ckpt = run_dir / "checkpoints"  # the checkpoints/ folder works as well
    assert main([str(ckpt), "--format", "onnx", "--out", str(out), "--include-value"]) == 0
    session = onnxruntime.InferenceSession(str(out / "step.onnx"))
    names = [o.name for o in session.get_outputs()]
    assert names[0] == "action" and names[-1] == "value" and len(names) == 6  # 4 carry
    # The run's 3 stacked observations are said in the ONNX artefact too. (Its parity on
    # a recorded rollout of such an environment, with a privileged critic and latency,
    # is test_parity's lstm_privileged-history_latency case; the recording is the one
    # test_record_obs_makes_a_self_describing_artefact checks through this command.)
    assert [i.shape[1] for i in session.get_inputs() if i.name == "obs"] == [12]
    notes = read_manifest(out)["observation_notes"]
    assert notes["obs"].startswith("the last 3 observations of inverted_pendulum (4 values")


# A Python without jax2onnx (find_spec is how the CLI looks for it), asking for ONNX.
WITHOUT_JAX2ONNX = """
import importlib.util, sys
real = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name == "jax2onnx" else real(name, *a)
from nnx_ppo_export.cli import main
code = main([sys.argv[1], "--format", "onnx", "--out", sys.argv[2]])
print(code, "jax" in sys.modules)
"""


def test_onnx_without_the_extra_fails_before_loading_jax(run_dir: Path, tmp_path: Path) -> None:
    argv = [sys.executable, "-c", WITHOUT_JAX2ONNX, str(run_dir), str(tmp_path / "o")]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    # Exit 2 with the install command, before JAX is imported or the run rebuilt.
    assert result.stdout.split() == ["2", "False"], result.stdout + result.stderr
    assert 'pip install "nnx-modules[onnx]"' in result.stderr
    assert not (tmp_path / "o").exists()


def test_existing_out_needs_overwrite(run_dir: Path, tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "art"
    out.mkdir()
    assert main([str(run_dir), "--format", "stablehlo", "--out", str(out)]) == 2
    assert "already exists; pass --overwrite" in capsys.readouterr().err
    assert main([str(run_dir), "--format", "stablehlo", "--out", str(out), "--overwrite"]) == 0
    assert (out / "step.stablehlo").is_file()


def test_not_a_run_folder(tmp_path: Path, capsys: Any) -> None:
    assert main([str(tmp_path / "nope"), "--format", "onnx", "--out", str(tmp_path / "o")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main([str(tmp_path / "empty"), "--format", "onnx", "--out", str(tmp_path / "o")]) == 2
    assert "holds no finished checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_config_that_is_not_a_quickstart_record(
    run_dir: Path, tmp_path: Path, capsys: Any
) -> None:
    # A run folder whose config.json is a JSON list (or no JSON at all): one line.
    folder = tmp_path / "run"
    shutil.copytree(run_dir / "checkpoints", folder / "checkpoints")
    for text in ("[1, 2]", "{not json"):
        (folder / "config.json").write_text(text)
        assert main([str(folder), "--format", "stablehlo", "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "o").exists()


def test_unknown_format_is_a_usage_error(run_dir: Path, tmp_path: Path, capsys: Any) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([str(run_dir), "--format", "tflite", "--out", str(tmp_path / "o")])
    assert exit_info.value.code == 2
    assert "invalid choice: 'tflite'" in capsys.readouterr().err


FACTORY = """
from nnx_ppo_quickstart.networks import make_network

def build(metadata):
    assert metadata["config"]["ppo"]["n_envs"] == 8  # the stored TrainConfig
    return make_network("lstm", 12, 1, 0), 12  # 3 stacked observations of 4
"""


def test_factory_rebuilds_other_runs(
    run_dir: Path, tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "my_factory.py").write_text(FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "f"
    # A bare Checkpointer folder (no quickstart config.json next to it) needs --factory.
    bare = tmp_path / "bare"
    (run_dir / "checkpoints").rename(bare)
    try:
        args = [str(bare), "--format", "stablehlo", "--out", str(out)]
        assert main(args) == 2
        assert "pass --factory module:function" in capsys.readouterr().err
        assert main([*args, "--factory", "my_factory:build"]) == 0
        assert (out / "step.stablehlo").is_file()
        assert main([*args, "--factory", "missing_module:build", "--overwrite"]) == 2
        assert "cannot import 'missing_module'" in capsys.readouterr().err
        assert main([*args, "--factory", "json:dumps", "--overwrite"]) == 2
        assert "returned a str; it must return (template_network" in capsys.readouterr().err
        assert main([*args, "--factory", "builtins", "--overwrite"]) == 2
        assert "must be 'module:function'" in capsys.readouterr().err
    finally:
        bare.rename(run_dir / "checkpoints")


@pytest.mark.extended  # trains a 2-seed train_many run (~60 s under load)
def test_one_seed_of_a_seeds_run_exports(tmp_path: Path, capsys: Any) -> None:
    from nnx_ppo_quickstart.cli import main as quickstart

    run = tmp_path / "seeds"
    tiny = [
        "--network", "mlp", "--steps", "400", "--n-envs", "8", "--rollout-length", "10",
        "--n-minibatches", "2", "--n-epochs", "1", "--eval-every", "400", "--eval-envs", "2",
        "--episode-length", "40", "--checkpoint-every", "400", "--no-progress",
        "--obs-history", "3",
    ]  # fmt: skip
    assert quickstart([*tiny, "--seeds", "4,7", "--output-dir", str(run)]) == 0
    capsys.readouterr()
    # The run folder holds two policies: the error names the folders to pass.
    assert main([str(run), "--format", "stablehlo", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "holds the seeds 4,7 of one --seeds run" in err and str(run / "seed_7") in err
    out = tmp_path / "seed7"
    args = ["--format", "stablehlo", "--out", str(out), "--record-obs", "5"]
    assert main([str(run / "seed_7"), *args]) == 0
    assert "seed 7 of 4,7" in capsys.readouterr().out
    manifest = read_manifest(out)
    assert manifest["source"]["seed"] == 7
    # The artefact is seed 7's trained policy (run 1 of the checkpoint), not seed 4's:
    # its recorded actions are the ones the rebuilt seed-7 network takes, and differ
    # from seed 4's on the same observations.
    with np.load(out / "obs.npz") as data:
        obs, expected = data["obs"], data["expected/action"]
    policies = {
        seed: DeterministicPolicy(rebuild(run / f"seed_{seed}").network, 12) for seed in (4, 7)
    }
    np.testing.assert_allclose(
        np.stack(_policy_actions(policies[7], obs)), expected, atol=1e-5, rtol=0
    )
    other = np.stack(_policy_actions(policies[4], obs))
    assert np.abs(other - expected).max() > 1e-3


def test_a_seed_folder_of_a_sharded_run_reads_the_checkpoint_of_its_shard(tmp_path: Path) -> None:
    # The layout `nnx-ppo-quickstart --seeds 3,5,8 --shard I/2` leaves after the merge:
    # shard 0 trained seeds 3 and 8 (runs 0 and 2), shard 1 seed 5 (run 1).
    from nnx_ppo_export.rebuild import _run_index, find_checkpoints, seed_of

    run = tmp_path / "run"
    for index, runs in ((0, [0, 2]), (1, [1])):
        shard = run / f"shard-{index}-of-2"
        (shard / "checkpoints").mkdir(parents=True)
        cli = {"seeds": "3,5,8", "shard": f"{index}/2"}
        (shard / "config.json").write_text(json.dumps({"cli": cli}))
        (shard / "sweep.json").write_text(json.dumps({"runs": runs}))
    for seed in (3, 5, 8):
        (run / f"seed_{seed}").mkdir()
    shard0, shard1 = run / "shard-0-of-2", run / "shard-1-of-2"
    assert find_checkpoints(run / "seed_8") == (shard0 / "checkpoints", shard0)
    assert find_checkpoints(run / "seed_5") == (shard1 / "checkpoints", shard1)
    assert [seed_of(run / f"seed_{s}") for s in (3, 5, 8)] == [3, 5, 8]
    cli0 = {"seeds": "3,5,8", "shard": "0/2"}
    # Seed 8 is run 1 of its shard's checkpoint (run 2 of the whole run).
    assert [_run_index(shard0, cli0, s) for s in (3, 8)] == [0, 1]
    with pytest.raises(ValueError, match=r"trained the seeds 3,8, not 5; pass one of .*seed_3"):
        _run_index(shard0, cli0, 5)
    assert seed_of(run / "seed_4") is None and seed_of(run) is None
