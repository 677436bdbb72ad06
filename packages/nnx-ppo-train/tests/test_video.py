"""Videos: rendered with the environment's render and written after training."""

from __future__ import annotations

import numpy as np
import pytest
from flax import nnx

from nnx_ppo.algorithms.config import EvalConfig, PPOConfig, TrainConfig
from nnx_ppo.algorithms.ppo import train_ppo
from nnx_ppo.envs import PointMass
from nnx_ppo.networks.factories import make_mlp_actor_critic
from nnx_ppo.wrappers import EpisodeWrapper

NO_EVAL = EvalConfig(enabled=False)


class _RenderablePointMass(PointMass):
    dt = 0.05

    def render(self, trajectory, height, width, camera=None):
        return [np.full((height, width, 3), i, np.uint8) for i in range(len(trajectory))]


def test_video_is_rendered_after_training(monkeypatch, tmp_path):
    from nnx_ppo.algorithms import video as video_module
    from nnx_ppo.algorithms.config import VideoConfig

    written = []
    monkeypatch.setattr(video_module, "_write_video", lambda *a: written.append(a))
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
