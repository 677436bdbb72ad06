"""One shard of the tiny sweep `test_shards.py` runs as separate processes.

    python _shard_script.py ROOT --shard I/N         (or $SLURM_ARRAY_TASK_ID/...)

With ``SIGTERM_AT_STEP=s`` in the environment the process sends itself ``SIGTERM``
once a run logs step ``s``: a preemption at a known step. Exits with 143 when stopped.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from flax import nnx

from nnx_ppo.algorithms import EvalConfig, PPOConfig, StopOnSignal, TrainConfig
from nnx_ppo.algorithms.sweeps.shards import Shard, train_shard
from nnx_ppo.envs import PointMass
from nnx_ppo.networks.factories import make_mlp_actor_critic
from nnx_ppo.wrappers import EpisodeWrapper

ENV = EpisodeWrapper(PointMass(), episode_length=6)
# 4 envs x 5 steps = 20 env steps per iteration, 3 iterations; evaluations at 0, 40, 60.
CONFIG = TrainConfig(
    ppo=PPOConfig(
        n_envs=4, rollout_length=5, n_minibatches=2, n_epochs=2, total_steps=60,
        learning_rate=1e-2,
    ),
    eval=EvalConfig(n_envs=2, max_episode_length=6, every_steps=40),
)  # fmt: skip
SEEDS = [3, 1, 4, 5]
OVERRIDES = {"learning_rate": [1e-2, 3e-3, 2e-2, 1e-2], "clip_range": [0.2, 0.1, 0.3, 0.2]}


def make_network(rngs: nnx.Rngs) -> nnx.Module:
    return make_mlp_actor_critic(2, 2, (8,), (8,), rngs=rngs)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("--shard", default=None)
    args = parser.parse_args(argv)
    shard = Shard.resolve(args.shard)
    kill_at = os.environ.get("SIGTERM_AT_STEP")

    def log_fn(metrics, step, run):
        # 4 runs in 4 shards: run j is shard j's only run; log_fn gets the sweep's index.
        if run != shard.index:
            raise AssertionError(f"log_fn got run {run} in shard {shard}")
        if kill_at is not None and step == int(kill_at):
            os.kill(os.getpid(), signal.SIGTERM)

    with StopOnSignal() as stop:
        result = train_shard(
            ENV, make_network, CONFIG, seeds=SEEDS, overrides=OVERRIDES, shard=shard,
            directory=shard.folder(args.root), save_every_steps=20, stop=stop,
            progress=False, log_fn=log_fn,
        )  # fmt: skip
    if result is not None and result.stopped:
        print(f"shard {shard} stopped by {stop.reason} at step {result.total_steps}")
        return stop.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
