"""A clean stop (`nnx_ppo.algorithms.core.preemption`): SIGTERM to a training process stops
it through `StopOnSignal` with a checkpoint, and running it again continues bit for bit.
That a stop request ends every trainer's run after a device call with a checkpoint, and
that resuming continues it exactly, is `test_trainer_contract.py`'s."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from _train_test_helpers import assert_trees_equal
from flax import nnx

from nnx_ppo.algorithms.checkpointing.checkpointer import Checkpointer
from nnx_ppo.algorithms.config import EvalConfig, LogLevel, PPOConfig, TrainConfig
from nnx_ppo.algorithms.core.preemption import StopOnSignal
from nnx_ppo.algorithms.sweeps.many import train_many
from nnx_ppo.envs import PointMass
from nnx_ppo.networks.factories import make_mlp_actor_critic
from nnx_ppo.wrappers import EpisodeWrapper

ENV = EpisodeWrapper(PointMass(), episode_length=6)
LOG = LogLevel.LOSSES | LogLevel.ACTOR | LogLevel.ROLLOUT  # no wall-clock metrics


def _config(total: int, eval_every: int = 60) -> TrainConfig:
    # 20 env steps per iteration and per call.
    return TrainConfig(
        ppo=PPOConfig(
            n_envs=4, rollout_length=5, n_minibatches=2, n_epochs=1, total_steps=total,
            log_level=LOG,
        ),
        eval=EvalConfig(n_envs=2, max_episode_length=6, every_steps=eval_every),
    )  # fmt: skip


def _mlp(rngs: nnx.Rngs | int = 0) -> nnx.Module:
    rngs = nnx.Rngs(rngs) if isinstance(rngs, int) else rngs
    return make_mlp_actor_critic(2, 2, (8,), (8,), rngs=rngs)


def test_stop_on_signal_restores_handlers_and_ctrl_c_twice_interrupts():
    before = signal.getsignal(signal.SIGINT)
    with StopOnSignal() as stop:
        assert not stop() and stop.exit_code == 0
        os.kill(os.getpid(), signal.SIGINT)
        assert stop() and stop.reason == "SIGINT" and stop.exit_code == 130
        os.kill(os.getpid(), signal.SIGTERM)  # a later SIGTERM changes nothing
        assert stop.reason == "SIGINT"
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before

    failure: list[BaseException] = []

    def enter() -> None:
        try:
            StopOnSignal().__enter__()
        except RuntimeError as error:
            failure.append(error)

    thread = threading.Thread(target=enter)
    thread.start()
    thread.join()
    assert failure and "main thread" in str(failure[0])


SWEEP_SCRIPT = """
import sys
from flax import nnx
from nnx_ppo.algorithms.checkpointing.checkpointer import Checkpointer
from nnx_ppo.algorithms.core.preemption import StopOnSignal
from nnx_ppo.algorithms.sweeps.many import train_many
from test_preemption import ENV, _config, _mlp

directory, total = sys.argv[1], int(sys.argv[2])
config = _config(total, eval_every=1000)
with Checkpointer(directory, config=config, save_every_steps=2000) as ckpt, \\
        StopOnSignal() as stop:
    result = train_many(
        ENV, _mlp, config, seeds=[0, 3], checkpoint=ckpt, stop=stop,
        jsonl_path=directory + ".jsonl", progress=False,
    )
print("END", result.total_steps, result.stopped, flush=True)
raise SystemExit(stop.exit_code if result.stopped else 0)
"""


def test_sigterm_stops_a_sweep_cleanly_and_it_resumes_bitwise(tmp_path):
    # A sweep of 2 runs x 300 calls of 20 steps, checkpoints every 2000 steps. SIGTERM
    # once the first checkpoint is on disk: the process checkpoints where it is and
    # exits with 143; run again, it resumes there and ends with the uninterrupted
    # sweep's state and log.
    total = 6000
    script = tmp_path / "sweep.py"
    script.write_text(SWEEP_SCRIPT)
    directory = tmp_path / "split"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), env.get("PYTHONPATH", "")])
    env.setdefault("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "jax_cache"))
    env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    command = [sys.executable, str(script), str(directory), str(total)]
    # The uninterrupted sweep first (with a persistent cache, its programs are the
    # subprocesses' too).
    full = train_many(
        ENV, _mlp, _config(total, eval_every=1000), seeds=[0, 3],
        jsonl_path=tmp_path / "full.jsonl", progress=False,
    )  # fmt: skip

    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 180
    while not (directory.exists() and any(p.name.isdigit() for p in directory.iterdir())):
        assert proc.poll() is None, proc.communicate()[0].decode()[-3000:]
        assert time.monotonic() < deadline, "no checkpoint within 180 s"
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == 128 + signal.SIGTERM, output[-3000:]
    end = [line.split() for line in output.splitlines() if line.startswith("END")]
    stopped_at = int(end[0][1])
    assert end[0][2] == "True" and 2000 <= stopped_at < total
    with Checkpointer(directory) as ckpt:
        assert ckpt.steps[-1] == stopped_at  # the stop's own checkpoint

    resumed = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert f"END {total} False" in resumed.stdout

    with Checkpointer(directory) as ckpt:
        final = ckpt.restore(full.state)
    assert_trees_equal(final, full.state)
    split_log = (tmp_path / "split.jsonl").read_text().splitlines()
    assert split_log == (tmp_path / "full.jsonl").read_text().splitlines()
    assert {json.loads(line)["run"] for line in split_log} == {0, 1}
