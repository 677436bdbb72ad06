"""Videos: rendered with the environment's render and written after training."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import types

import numpy as np
import pytest
from flax import nnx

from nnx_ppo.algorithms.config import EvalConfig, PPOConfig, TrainConfig
from nnx_ppo.algorithms.observe.video import choose_mujoco_gl
from nnx_ppo.algorithms.ppo.train import train_ppo
from nnx_ppo.envs import PointMass
from nnx_ppo.networks.factories import make_mlp_actor_critic
from nnx_ppo.wrappers import EpisodeWrapper

NO_EVAL = EvalConfig(enabled=False)


class _RenderablePointMass(PointMass):
    dt = 0.05

    def render(self, trajectory, height, width, camera=None):
        return [np.full((height, width, 3), i, np.uint8) for i in range(len(trajectory))]


def test_video_is_rendered_after_training(monkeypatch, tmp_path):
    from nnx_ppo.algorithms.config import VideoConfig
    from nnx_ppo.algorithms.observe import video as video_module

    written = []
    monkeypatch.setattr(video_module, "_write_video", lambda *a: written.append(a))
    monkeypatch.setattr(video_module, "_writer_problem", lambda: None)
    env = EpisodeWrapper(_RenderablePointMass(), episode_length=4)
    net = make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0))
    config = TrainConfig(
        ppo=PPOConfig(n_envs=2, rollout_length=2, n_minibatches=1, total_steps=4),
        eval=NO_EVAL,
        video=VideoConfig(
            enabled=True, directory=str(tmp_path), episode_length=6, width=8, height=6
        ),
    )
    train_ppo(env, net, config, progress=False)
    ((path, frames, fps),) = written
    assert path == str(tmp_path / "video_4.mp4")
    assert len(frames) == 6 and frames[0].shape == (6, 8, 3)
    assert fps == pytest.approx(20.0)

    with pytest.raises(ValueError, match="render"):
        train_ppo(EpisodeWrapper(PointMass(), 4), net, config, progress=False)


class _BrokenRenderPointMass(_RenderablePointMass):
    def render(self, trajectory, height, width, camera=None):
        raise RuntimeError("gladLoadGL error")  # as MuJoCo without an OpenGL context


def _video_config(tmp_path):
    from nnx_ppo.algorithms.config import VideoConfig

    return TrainConfig(
        ppo=PPOConfig(n_envs=2, rollout_length=2, n_minibatches=1, total_steps=4),
        eval=NO_EVAL,
        video=VideoConfig(enabled=True, directory=str(tmp_path), episode_length=6),
    )


def test_a_machine_that_cannot_render_fails_before_training(monkeypatch, tmp_path):
    from nnx_ppo.algorithms.observe import video as video_module

    monkeypatch.setattr(video_module, "_writer_problem", lambda: None)
    logged = []
    net = make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0))
    env = EpisodeWrapper(_BrokenRenderPointMass(), episode_length=4)
    with pytest.raises(ValueError, match=r"eval_env cannot render a frame.*gladLoadGL.*MUJOCO_GL"):
        train_ppo(
            env,
            net,
            _video_config(tmp_path),
            progress=False,
            log_fn=lambda metrics, step: logged.append(step),
        )
    assert logged == []  # refused before the first iteration


@pytest.mark.parametrize(
    ("mediapy", "ffmpeg", "match"),
    [(False, "/usr/bin/ffmpeg", r"nnx-ppo-train\[video\]"), (True, None, "ffmpeg binary")],
)
def test_videos_need_mediapy_and_ffmpeg(mediapy, ffmpeg, match, monkeypatch, tmp_path):
    import sys
    import types

    from nnx_ppo.algorithms.observe import video as video_module

    monkeypatch.setitem(sys.modules, "mediapy", types.ModuleType("mediapy") if mediapy else None)
    monkeypatch.setattr(video_module.shutil, "which", lambda name: ffmpeg)
    net = make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0))
    env = EpisodeWrapper(_RenderablePointMass(), episode_length=4)
    with pytest.raises(ValueError, match=match):
        train_ppo(env, net, _video_config(tmp_path), progress=False)


def test_choose_mujoco_gl_keeps_a_choice_and_refuses_after_mujoco_is_imported(monkeypatch):
    monkeypatch.setenv("MUJOCO_GL", "osmesa")
    assert choose_mujoco_gl() == "osmesa"
    monkeypatch.delenv("MUJOCO_GL")
    monkeypatch.setenv("DISPLAY", ":0")
    assert choose_mujoco_gl() == "glfw"  # MuJoCo's default works with a display
    monkeypatch.delenv("DISPLAY")
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setitem(sys.modules, "mujoco", types.ModuleType("mujoco"))
    with pytest.raises(RuntimeError, match="before mujoco is imported"):
        choose_mujoco_gl()


CHOOSE = """
import dataclasses
import os
from nnx_ppo.algorithms.observe.video import choose_mujoco_gl
backend = choose_mujoco_gl()
print("CHOSEN", backend, os.environ.get("MUJOCO_GL"))
if backend is not None:  # what it chose renders in this process
    import mujoco
    context = mujoco.GLContext(8, 8)
    context.make_current()
    print("RENDERS")
"""


def test_choose_mujoco_gl_picks_a_backend_that_renders_or_none():
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "DISPLAY")}
    env.pop("WAYLAND_DISPLAY", None)
    env.pop("PYOPENGL_PLATFORM", None)
    done = subprocess.run(
        [sys.executable, "-c", CHOOSE], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    chosen = done.stdout.split("CHOSEN")[1].split()
    assert chosen[0] == chosen[1]  # returned what MUJOCO_GL now says (None: unset)
    assert (chosen[0] == "None") != ("RENDERS" in done.stdout)


class _StatePointMass(_RenderablePointMass):
    """Frames that show the state: each pixel is the observation's sum."""

    def render(self, trajectory, height, width, camera=None):
        return [np.full((height, width, 3), float(np.sum(s.obs)), np.float32) for s in trajectory]


@pytest.mark.parametrize("algorithm", ["ppo", "distillation"])
def test_a_sweep_records_each_runs_video_as_its_own_run_does(algorithm, monkeypatch, tmp_path):
    # The same code records a PPO sweep's and a distillation sweep's videos (the
    # skeleton's, reading config.video of either config).
    from nnx_ppo.algorithms.config import DistillationConfig, VideoConfig
    from nnx_ppo.algorithms.distillation.train import train_distillation
    from nnx_ppo.algorithms.observe import video as video_module
    from nnx_ppo.algorithms.sweeps.many import train_many

    written = {}
    monkeypatch.setattr(
        video_module, "_write_video", lambda path, frames, fps: written.update({path: frames})
    )
    monkeypatch.setattr(video_module, "_writer_problem", lambda: None)
    env = EpisodeWrapper(_StatePointMass(), episode_length=4)
    video = VideoConfig(enabled=True, every_steps=4, directory=str(tmp_path), episode_length=5)
    sizes = dict(n_envs=2, rollout_length=2, n_minibatches=1, total_steps=8)

    def make_network(rngs):
        return make_mlp_actor_critic(2, 2, (8,), (8,), rngs=rngs)

    if algorithm == "ppo":
        config = TrainConfig(ppo=PPOConfig(**sizes), eval=NO_EVAL, video=video)
        teacher = None

        def train_one(network, own):
            train_ppo(env, network, own, progress=False)
    else:
        config = DistillationConfig(**sizes, eval=NO_EVAL, video=video)
        teacher = make_network(nnx.Rngs(9))

        def train_one(network, own):
            train_distillation(env, teacher, network, own, progress=False)

    train_many(env, make_network, config, seeds=[5, 2], teacher=teacher, progress=False)
    sweep = dict(written)
    assert sorted(sweep) == sorted(
        str(tmp_path / f"run_{run}" / f"video_{step}.mp4") for run in (0, 1) for step in (4, 8)
    )
    for run, seed in enumerate([5, 2]):
        written.clear()
        mine = dataclasses.replace(video, directory=str(tmp_path / str(seed)))
        train_one(make_network(nnx.Rngs(seed)), dataclasses.replace(config, seed=seed, video=mine))
        for step in (4, 8):
            ours = sweep[str(tmp_path / f"run_{run}" / f"video_{step}.mp4")]
            theirs = written[str(tmp_path / str(seed) / f"video_{step}.mp4")]
            np.testing.assert_allclose(np.stack(ours), np.stack(theirs), rtol=1e-5, atol=1e-5)
    # The runs' episodes differ (other parameters and keys): not one video copied.
    first, second = (sweep[str(tmp_path / f"run_{run}" / "video_8.mp4")] for run in (0, 1))
    assert not np.allclose(np.stack(first), np.stack(second))
