"""A resumed run is the same run in everything it records, for more network families
and in new processes; recovering from a divergence as the error message says works; a
failure late in a run never costs its checkpoint; arguments are checked before anything
is compiled.

The split runs stop in a separate process (a ``log_fn`` that raises, after the JSONL
file got the record and past the last checkpoint) and resume in another one. The
contract every trainer keeps (exact resume, divergence, run options, devices) is
`test_trainer_contract.py`'s: these are its costlier variants.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _train_test_helpers import tiny_config
from flax import nnx

from nnx_ppo.algorithms.checkpointing.checkpointer import Checkpointer, load_metadata, load_network
from nnx_ppo.algorithms.config import EvalConfig, PPOConfig, TrainConfig
from nnx_ppo.algorithms.core.faults import NonFiniteError
from nnx_ppo.algorithms.observe.evaluation import evaluate
from nnx_ppo.algorithms.ppo.train import train_ppo
from nnx_ppo.envs import MemoryTask, PointMass
from nnx_ppo.networks.factories import make_mlp_actor_critic
from nnx_ppo.wrappers import EpisodeWrapper

ENV = EpisodeWrapper(PointMass(), episode_length=8)

# 4 envs x 4 steps = 16 env steps per call, 16 calls. Periods that divide neither each
# other nor the call: evaluations every 56 steps (at 0, 64, 128, 192, 256: the first
# call at which 56 steps have passed), checkpoints when the step crosses a multiple of
# 40 (48, 80, 128, 160, 208, 240, 256), logs every 3 calls (48, 96, 144, 192, 240, 256).
# The first attempt stops at its record of step 192 (written to the JSONL file, beyond
# its last checkpoint at 160); the second resumes from 160 and must drop that record.
SPLIT_SCRIPT = """
import json, sys
from flax import nnx
from nnx_ppo.algorithms.checkpointing.checkpointer import Checkpointer
from nnx_ppo.algorithms.config import EvalConfig, LogLevel, PPOConfig, TrainConfig
from nnx_ppo.algorithms.ppo.train import train_ppo
from nnx_ppo.envs import PointMass
from nnx_ppo.networks.factories import make_lstm_actor_critic, make_mlp_actor_critic
from nnx_ppo.wrappers import EpisodeWrapper

kind, directory, jsonl, stop_at, out = sys.argv[1:6]


def network():
    rngs = nnx.Rngs(0)
    if kind in ("mlp", "mlp_nv"):
        return make_mlp_actor_critic(2, 2, (8,), (8,), rngs=rngs)
    if kind == "lstm":
        return make_lstm_actor_critic(2, 2, 8, (8,), (8,), rngs=rngs)
    from _train_test_helpers import graph_network  # this folder is on PYTHONPATH

    return graph_network(rngs, normalize=True)


class Stop(Exception):
    pass


def log_fn(metrics, step):
    if int(stop_at) >= 0 and step >= int(stop_at):
        raise Stop(step)


log = LogLevel.LOSSES | LogLevel.ACTOR | LogLevel.CRITIC | LogLevel.ROLLOUT
config = TrainConfig(
    ppo=PPOConfig(n_envs=4, rollout_length=4, n_minibatches=2, n_epochs=2,
                  total_steps=256, learning_rate=3e-3, log_level=log,
                  normalize_values=kind.endswith("_nv")),
    eval=EvalConfig(every_steps=56, n_envs=4, max_episode_length=8),
    log_every_calls=3,
)
env = EpisodeWrapper(PointMass(), episode_length=8)
with Checkpointer(directory, config=config, save_every_steps=40, max_to_keep=None) as ckpt:
    try:
        result = train_ppo(env, network(), config, progress=False, jsonl_path=jsonl,
                           checkpoint=ckpt, log_fn=log_fn)
    except Stop:
        sys.exit(3)
    with open(out, "w") as f:
        json.dump({"eval_history": result.eval_history, "metrics": result.metrics,
                   "restored_step": ckpt.restored_step, "steps": ckpt.steps}, f)
"""


def _run_script(tmp_path: Path, kind: str, name: str, stop_at: int) -> tuple[int, Path]:
    script = tmp_path / "split.py"
    script.write_text(SPLIT_SCRIPT)
    env = dict(os.environ)
    env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    paths = [str(Path(__file__).parent), *filter(None, [env.get("PYTHONPATH")])]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    out = tmp_path / f"{name}.json"
    args = [kind, tmp_path / name, tmp_path / f"{name}.jsonl", stop_at, out]
    proc = subprocess.run(
        [sys.executable, str(script), *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert proc.returncode in (0, 3), proc.stderr[-3000:]
    return proc.returncode, out


# nv: value statistics. The MLP network's in-process split and resume, for every trainer,
# is test_trainer_contract.py's (it runs in the default sessions, at the floors too).
@pytest.mark.extended
@pytest.mark.parametrize("kind", ["lstm", "graph", "mlp_nv"])
def test_split_and_resume_in_new_processes_records_the_uninterrupted_run(kind, tmp_path):
    if kind == "graph":
        pytest.importorskip("nnx_ppo.networks.graph", reason="needs nnx-graph")
    code, reference_out = _run_script(tmp_path, kind, "reference", stop_at=-1)
    assert code == 0
    code, _ = _run_script(tmp_path, kind, "split", stop_at=180)
    assert code == 3  # stopped at its record of step 192
    first_jsonl = (tmp_path / "split.jsonl").read_text().splitlines()
    assert json.loads(first_jsonl[-1])["step"] == 192  # beyond the checkpoint at 160
    assert sorted(int(p.name) for p in (tmp_path / "split").iterdir()) == [48, 80, 128, 160]
    code, resumed_out = _run_script(tmp_path, kind, "split", stop_at=-1)
    assert code == 0

    reference = json.loads(reference_out.read_text())
    resumed = json.loads(resumed_out.read_text())
    assert resumed["restored_step"] == 160
    assert resumed["steps"] == reference["steps"] == [48, 80, 128, 160, 208, 240, 256]
    # The JSONL file, line for line and bit for bit.
    reference_jsonl = (tmp_path / "reference.jsonl").read_text()
    assert (tmp_path / "split.jsonl").read_text() == reference_jsonl
    records = [json.loads(line) for line in reference_jsonl.splitlines()]
    evaluated = [r["step"] for r in records if "eval/episode_reward/mean" in r]
    assert evaluated == [0, 64, 128, 192, 256]
    assert [r["step"] for r in records if "loss/total" in r] == [48, 96, 144, 192, 240, 256]
    # The evaluations after the resume step, and the returned metrics.
    assert [s for s, _ in reference["eval_history"]] == [0, 64, 128, 192, 256]
    assert resumed["eval_history"] == [e for e in reference["eval_history"] if e[0] > 160]
    assert resumed["metrics"] == reference["metrics"]
    # The final checkpoints hold the same network, bit for bit.
    a = load_metadata(tmp_path / "split", 256)
    b = load_metadata(tmp_path / "reference", 256)
    assert a["arrays"] == b["arrays"] and a["metrics"] == b["metrics"]


# --------------------------------------------------------------------------- NaN


def _mlp(seed: int = 0) -> nnx.Module:
    return make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(seed))


def _too_high_after_40_updates(count):
    """A schedule whose peak is far too high: 3e-3 for 40 optimizer updates (10
    iterations of 2 epochs x 2 minibatches), then 1e10, which diverges at once."""
    return jnp.where(count < 40, 3e-3, 1e10)


def _lowered(count):
    """The same schedule with the peak lowered (it must still be a schedule: a schedule
    keeps a step count in the optimizer state, a constant does not)."""
    return jnp.where(count < 40, 3e-3, 1e-3)


@pytest.fixture(scope="module")
def diverged(tmp_path_factory) -> tuple[Path, NonFiniteError]:
    """A run with `_too_high_after_40_updates`, checkpointed every 32 steps (2 kept),
    run once for the recoveries: ``(its checkpoint folder, the error it stopped with)``."""
    directory = tmp_path_factory.mktemp("diverged") / "c"
    with (
        Checkpointer(directory, save_every_steps=32, max_to_keep=2) as ckpt,
        pytest.raises(NonFiniteError) as info,
    ):
        train_ppo(ENV, _mlp(), tiny_config(256, _too_high_after_40_updates), progress=False,
                  checkpoint=ckpt)  # fmt: skip
    return directory, info.value


@pytest.mark.heavy
@pytest.mark.parametrize("recovery", ["lower learning_rate", "lower learning_rate + max_grad_norm"])
def test_the_documented_recoveries_from_a_divergence_resume_and_train_on(
    recovery, diverged, tmp_path
):
    source, error = diverged
    directory = tmp_path / "c"
    shutil.copytree(source, directory)  # each recovery resumes its own copy
    assert error.iteration == 11  # the first with the learning rate of 1e10
    assert "lower learning_rate" in str(error) and "max_grad_norm" in str(error)
    assert load_metadata(directory)["step"] == 160  # the last good checkpoint
    checkpointed = jax.tree.leaves(nnx.state(load_network(directory, _mlp(1)), nnx.Param))

    # Change the config as the message says and resume from that checkpoint.
    clip = 0.5 if "max_grad_norm" in recovery else None
    config = tiny_config(256, _lowered, max_grad_norm=clip)
    network = _mlp()
    with Checkpointer(directory, save_every_steps=32, max_to_keep=2) as ckpt:
        result = train_ppo(ENV, network, config, progress=False, checkpoint=ckpt)
        assert ckpt.restored_step == 160
    assert result.total_steps == 256 and int(result.state.iteration) == 16
    assert np.isfinite(result.metrics["loss/total"])
    params = jax.tree.leaves(nnx.state(network, nnx.Param))
    assert all(np.isfinite(np.asarray(x)).all() for x in params)
    # It trained on from the checkpoint: the parameters moved.
    assert any(not np.array_equal(a, b) for a, b in zip(params, checkpointed, strict=True))


@pytest.mark.parametrize(
    ("before", "after"),
    [({}, {"max_grad_norm": 1.0}), ({"max_grad_norm": 1.0}, {}), ({}, {"weight_decay": 1e-4})],
)
def test_changing_stateless_optimizer_transforms_restores_adams_state(before, after, tmp_path):
    from nnx_ppo.algorithms.ppo.iteration import init_train_state, make_optimizer

    def config(**kwargs):
        ppo = PPOConfig(n_envs=4, rollout_length=4, n_minibatches=2, total_steps=32, **kwargs)
        return TrainConfig(ppo=ppo, eval=EvalConfig(enabled=False))

    # A state as training leaves it, without compiling a training program: two optimizer
    # updates with made-up gradients give Adam a count of 2 and nonzero moments.
    old = config(**before).ppo
    optimizer = make_optimizer(old)
    trained = init_train_state(ENV, _mlp(), old, optimizer, jax.random.PRNGKey(0))[1]

    @jax.jit
    def two_updates(params, opt_state):
        for scale in (1.0, -0.5):
            grads = jax.tree.map(lambda p, s=scale: s * jnp.cos(p) + 0.1, params)
            _, opt_state = optimizer.update(grads, opt_state, params)
        return opt_state

    opt_state = two_updates(trained.params, trained.opt_state)
    trained = trained.replace(opt_state=opt_state)
    counts = [x for x in jax.tree.leaves(opt_state) if np.ndim(x) == 0]
    assert counts and all(int(c) == 2 for c in counts)
    with Checkpointer(tmp_path / "c") as ckpt:
        ckpt.save(trained, 32, {}, final=True)
    new = config(**after).ppo
    template = init_train_state(ENV, _mlp(), new, make_optimizer(new), jax.random.PRNGKey(1))[1]
    assert jax.tree.structure(template.opt_state) != jax.tree.structure(trained.opt_state)
    with Checkpointer(tmp_path / "c") as ckpt:
        restored = ckpt.restore(template)
    assert restored is not None
    assert jax.tree.structure(restored.opt_state) == jax.tree.structure(template.opt_state)
    # Adam's count and moments, leaf for leaf (the clipping/decay transforms hold none).
    for a, b in zip(
        jax.tree.leaves(restored.opt_state), jax.tree.leaves(trained.opt_state), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_schedule_replaced_by_a_constant_is_still_a_clear_mismatch(tmp_path):
    from nnx_ppo.algorithms.checkpointing.checkpointer import CheckpointMismatchError
    from nnx_ppo.algorithms.ppo.iteration import init_train_state, make_optimizer

    # The saved state's optimizer layout is what matters; it is the one training keeps.
    old = tiny_config(16, _lowered).ppo
    trained = init_train_state(ENV, _mlp(), old, make_optimizer(old), jax.random.PRNGKey(0))[1]
    with Checkpointer(tmp_path / "c") as ckpt:
        ckpt.save(trained, 16, {}, final=True)
    new = tiny_config(16, 1e-3).ppo
    template = init_train_state(ENV, _mlp(), new, make_optimizer(new), jax.random.PRNGKey(1))[1]
    with Checkpointer(tmp_path / "c") as ckpt, pytest.raises(CheckpointMismatchError):
        ckpt.restore(template)


# --------------------------------------------------------------------------- late failures


class _EvalFails(Exception):
    pass


def test_a_run_whose_final_evaluation_raises_still_writes_its_final_checkpoint(
    monkeypatch, tmp_path
):
    import nnx_ppo.algorithms.trainer.skeleton as trainer_module

    real = trainer_module.evaluation_task

    def failing_at_the_end(*args, **kwargs):
        task = real(*args, **kwargs)

        def run(state, iteration, step):
            if step == 64:
                raise _EvalFails("the final evaluation failed")
            return task.run(state, iteration, step)

        return type(task)(run, task.every_steps, at_start=task.at_start)

    monkeypatch.setattr(trainer_module, "evaluation_task", failing_at_the_end)
    config = TrainConfig(
        ppo=tiny_config(64, 3e-3).ppo,
        eval=EvalConfig(at_start=False, n_envs=4, max_episode_length=8),
    )
    with Checkpointer(tmp_path / "c") as ckpt, pytest.raises(_EvalFails):
        train_ppo(ENV, _mlp(), config, progress=False, checkpoint=ckpt)
    assert load_metadata(tmp_path / "c")["step"] == 64  # the trained run is on disk
    monkeypatch.undo()
    reference = _mlp()  # the same run without evaluation: the same trained network
    train_ppo(ENV, reference, tiny_config(64, 3e-3), progress=False)
    loaded = load_network(tmp_path / "c", _mlp(1))
    for a, b in zip(
        jax.tree.leaves(nnx.state(loaded)), jax.tree.leaves(nnx.state(reference)), strict=True
    ):
        if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# --------------------------------------------------------------------------- arguments


def _never_compiled(monkeypatch):
    """Make the first compiling step of both trainers fail loudly."""

    def unreachable(*args, **kwargs):
        raise AssertionError("compiled before checking the arguments")

    from nnx_ppo.algorithms.trainer import skeleton as trainer_module

    monkeypatch.setattr(trainer_module, "init_state", unreachable)  # both trainers' run


def test_a_video_env_without_render_fails_before_compiling(monkeypatch, tmp_path):
    from nnx_ppo.algorithms.config import VideoConfig

    _never_compiled(monkeypatch)
    config = TrainConfig(
        ppo=tiny_config(64, 3e-3).ppo,
        eval=EvalConfig(enabled=False),
        video=VideoConfig(enabled=True, directory=str(tmp_path)),
    )
    with pytest.raises(ValueError, match=r"render.*eval_env is a EpisodeWrapper"):
        train_ppo(ENV, _mlp(), config, progress=False)


BAD_EVAL_ENV = EpisodeWrapper(MemoryTask(cue_size=3), episode_length=8)  # [3] observations


def test_evaluate_checks_its_arguments_and_the_network_first():
    net = _mlp()
    key = jax.random.PRNGKey(0)
    with pytest.raises(ValueError, match=r"failed on the environment's observation .*\(2, 3\)"):
        evaluate(BAD_EVAL_ENV, net, key, n_envs=2, max_episode_length=4)
    with pytest.raises(ValueError, match="n_envs=0 must be >= 1"):
        evaluate(ENV, net, key, n_envs=0)
    with pytest.raises(TypeError, match="key=0 must be a JAX PRNG key"):
        evaluate(ENV, net, 0, n_envs=2)  # type: ignore[arg-type]
    net.eval()  # evaluate leaves the network's mode alone, and samples if asked
    sampled = evaluate(ENV, net, key, n_envs=4, max_episode_length=8, deterministic=False)
    mean = evaluate(ENV, net, key, n_envs=4, max_episode_length=8)
    assert sampled != mean
    assert net.layers[-1].action.layers[-1].deterministic is True
