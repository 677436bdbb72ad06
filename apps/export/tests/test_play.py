"""``nnx-ppo-play`` on the tiny quickstart run: returns equal `evaluate`'s, activations,
a video without progress bars in the output, and the refusals (``--randomized`` on a
nominal run, ``--video`` without OpenGL)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
import tqdm
import tqdm.auto
from nnx_ppo_export import rebuild as rebuild_module
from nnx_ppo_export.play import _no_progress_bars, main
from nnx_ppo_export.rebuild import rebuild

from nnx_ppo.algorithms import evaluate


def test_play_prints_the_returns_evaluate_measures(run_dir: Path, capsys: Any) -> None:
    assert main([str(run_dir), "--episodes", "2", "--seed", "3"]) == 0
    printed = capsys.readouterr().out
    returns = [float(r) for r in re.findall(r"episode \d+: return (\S+)", printed)]
    mean = float(re.search(r"Mean return over 2 episodes: (\S+)", printed).group(1))
    assert len(returns) == 2 and "checkpoint at step 800" in printed
    # The same network, env, key and episode count through the trainer's evaluate: the
    # rollout is the same, so its mean equals the printed returns' (printed to 6 digits).
    rebuilt = rebuild(run_dir)
    metrics = evaluate(
        rebuilt.envs.eval, rebuilt.network, jax.random.PRNGKey(3), n_envs=2, max_episode_length=40
    )
    np.testing.assert_allclose(np.mean(returns), metrics["eval/episode_reward/mean"], rtol=1e-5)
    np.testing.assert_allclose(mean, metrics["eval/episode_reward/mean"], rtol=1e-5)
    np.testing.assert_allclose(np.std(returns), metrics["eval/episode_reward/std"], atol=1e-3)


@pytest.mark.extended  # another compiled rollout (~20 s); the recording is tested in the trainer
def test_play_saves_activations(run_dir: Path, tmp_path: Path, capsys: Any) -> None:
    acts = tmp_path / "acts.npz"
    assert main([str(run_dir), "--episodes", "2", "--activations", str(acts)]) == 0
    assert f"Activations [T=40, B=2, ...]: {acts}" in capsys.readouterr().out
    with np.load(acts) as data:
        assert data["done"].shape == (40, 2)
        lstm = [k for k in data.files if k.startswith("activations/")]
        assert lstm and all(data[k].shape[:2] == (40, 2) for k in lstm), data.files


def _randomized_refusal(folder: Path, capsys: Any, monkeypatch: Any) -> str:
    """``nnx-ppo-play FOLDER --randomized``: exit code 2 before anything is rebuilt; the
    error output."""

    def no_rebuild(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the run was rebuilt before --randomized was refused")

    monkeypatch.setattr(rebuild_module, "rebuild", no_rebuild)
    assert main([str(folder), "--randomized"]) == 2
    return capsys.readouterr().err


def test_randomized_is_refused_naming_the_run_before_anything_is_built(
    run_dir: Path, capsys: Any, monkeypatch: Any
) -> None:
    err = _randomized_refusal(run_dir, capsys, monkeypatch)
    assert err.startswith(f"nnx-ppo-play: error: --randomized: run {run_dir} was trained")
    assert "inverted_pendulum's nominal model" in err  # the run's env, from its config.json
    assert "Leave out --randomized" in err and "EvalConfig(randomized=True)" in err
    assert len(err.strip().splitlines()) == 1


def test_randomized_on_a_folder_that_is_no_run(
    tmp_path: Path, capsys: Any, monkeypatch: Any
) -> None:
    err = _randomized_refusal(tmp_path, capsys, monkeypatch)
    assert f"--randomized: {tmp_path} holds no config.json of an nnx-ppo-quickstart run" in err


def test_no_progress_bars_silences_tqdm_inside_the_block_only(capsys: Any) -> None:
    # Playground's render loops over `tqdm.tqdm(frames)`; tqdm.auto is another entry point.
    with _no_progress_bars():
        assert sum(tqdm.tqdm(range(3))) == 3 and sum(tqdm.auto.tqdm(range(4))) == 6
        with tqdm.tqdm(total=2, disable=False) as bar:  # even a bar asked for explicitly
            bar.update(2)
    assert capsys.readouterr().err == ""
    for _ in tqdm.tqdm(range(3)):  # restored: bars draw again after the block
        pass
    assert "3/3" in capsys.readouterr().err


_RENDER_TWICE = """
import sys
from nnx_ppo.algorithms.observe.video import choose_mujoco_gl
if choose_mujoco_gl(("egl", "osmesa")) is None:  # before MuJoCo is imported
    print("no OpenGL backend")
    raise SystemExit(0)
import jax
from mujoco_playground import registry
from nnx_ppo_export.play import _no_progress_bars
env = registry.load("CartpoleBalance")
state = jax.jit(env.reset)(jax.random.key(0))
env.render([state] * 3, height=24, width=32)  # Playground's own call draws a bar
print("--- silenced ---", file=sys.stderr, flush=True)
with _no_progress_bars():
    frames = env.render([state] * 3, height=24, width=32)
print("frames", len(frames), frames[0].shape)
"""


@pytest.mark.extended  # loads a Playground env and renders in a subprocess (~20 s)
def test_playground_render_draws_no_progress_bar_when_silenced() -> None:
    # The render `nnx-ppo-play --video` makes (and its frame check): Playground's
    # render_array loops over tqdm(frames); the same call inside _no_progress_bars
    # renders the frames and prints nothing.
    cmd = [sys.executable, "-c", _RENDER_TWICE]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    if "no OpenGL backend" in result.stdout:
        pytest.skip("no OpenGL backend for MuJoCo's renderer on this machine")
    assert "frames 3 (24, 32, 3)" in result.stdout
    drawn, silenced = result.stderr.split("--- silenced ---\n")
    assert "3/3" in drawn  # the bar this test would see without the switch
    assert "it/s" not in silenced and "%|" not in silenced, silenced


def test_video_without_an_opengl_backend_fails_at_once(tmp_path: Path) -> None:
    # A `mujoco` that cannot be imported makes every backend probe fail, as on a machine
    # with neither EGL nor OSMesa. The command fails before it loads the run.
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "mujoco.py").write_text("raise ImportError('no OpenGL here (test)')\n")
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "DISPLAY")}
    env.pop("WAYLAND_DISPLAY", None)
    env["PYTHONPATH"] = os.pathsep.join([str(fake), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "nnx_ppo_export.play", str(tmp_path / "run"), "--video", "v.mp4"]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "no OpenGL backend" in result.stderr and "MUJOCO_GL=egl, osmesa" in result.stderr
