"""Scale-out of ``train_distillation``: the sharded state's layout, checkpoints across
device counts, and a two-process ``jax.distributed`` run (2 devices vs 1, for every
trainer: ``test_trainer_contract.py``).

As in ``test_distributed.py``, runs on several devices or processes are subprocesses
(``_distributed_runs.py distill`` with 4 forced host devices, and a pair of
``distill-worker`` processes joined by ``jax.distributed.initialize``). All of them
distill the same LSTM teacher into the same LSTM student, both with a Normalizer (16
PointMass envs, 8-step rollouts, 2 minibatches, 2 epochs, 4 iterations in 2 device
calls, value distillation, "refresh" resets), so the one-device run of the first is the
reference for everything.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from _train_test_helpers import subprocess_env
from flax import nnx

from nnx_ppo.algorithms.checkpointing.checkpointer import Checkpointer, load_network
from nnx_ppo.networks.factories import make_lstm_actor_critic

RUNS = Path(__file__).parent / "_distributed_runs.py"
STEPS_PER_ITERATION = 16 * 8
HALF = 2 * STEPS_PER_ITERATION  # one device call of two iterations
# Reduction order differs between 1 and 4 devices (sums of 4 partial sums); after 4
# iterations the student's variables agree to ~1e-7, far below these bounds.
TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}


# --------------------------------------------------------------------------- helpers


def _variables(path: Path) -> list[np.ndarray]:
    with np.load(path) as data:
        return [data[f"arr_{i}"] for i in range(len(data.files))]


def _raw(x) -> np.ndarray:
    is_key = jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
    return np.asarray(jax.random.key_data(x) if is_key else x)


def _assert_same(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert len(a) == len(b) > 0
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x, y, **TOLERANCE)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def distill(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    """Run the 4-device distillation script once: ``(facts, output prefix)``."""
    out = tmp_path_factory.mktemp("distill") / "out"
    proc = subprocess.run(
        [sys.executable, str(RUNS), "distill", str(out)],
        env=subprocess_env(4),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(Path(f"{out}.json").read_text()), out


# --------------------------------------------------------------------------- 4 devices


@pytest.mark.extended
def test_four_device_state_layout_and_reporting(distill) -> None:
    facts, out = distill
    # The reference ran on one device; on 4, every batch field (both carries included)
    # is sharded along "data" with 16 / 4 = 4 envs per device, and the student's
    # parameters, statistics and optimizer state are replicated.
    assert facts["student-1-env-devices"] == 1
    for field in ("env_state", "reset_state", "carry", "teacher_carry", "episodes"):
        assert facts[f"student-4-{field}-sharded"], field
    assert facts["student-4-replicated"]
    # The student got plain one-device copies back; the teacher was not changed.
    assert facts["student-4-network-devices"] == [1]
    teacher = make_lstm_actor_critic(2, 2, 8, (8,), (8,), rngs=nnx.Rngs(1))
    fresh_teacher = [_raw(x) for x in jax.tree.leaves(nnx.state(teacher))]
    for a, b in zip(_variables(Path(f"{out}-teacher-4.npz")), fresh_teacher, strict=True):
        np.testing.assert_array_equal(a, b)
    # log_fn ran after each of the 2 device calls (2 iterations of 128 steps each).
    assert facts["student-4-logged"] == [HALF, 2 * HALF]


@pytest.mark.extended
def test_checkpoint_from_four_devices_resumes_on_two_and_one(distill) -> None:
    facts, out = distill
    assert facts["ckpt4-steps"] == [HALF, 2 * HALF]
    reference = _variables(Path(f"{out}-student-1.npz"))  # uninterrupted, one device
    for devices in (2, 1):
        assert facts[f"resume{devices}-restored"] == HALF
        assert facts[f"resume{devices}-total-steps"] == 2 * HALF
        _assert_same(reference, _variables(Path(f"{out}-student-resume-{devices}.npz")))


@pytest.mark.extended
def test_indivisible_n_envs_is_a_clear_error(distill) -> None:
    facts, _ = distill
    # 16 envs, 2 minibatches, 3 devices: multiples of 2 * 3 = 6 around 16 are 18 and 12.
    assert facts["indivisible-error"].startswith(
        "n_envs=16 is not divisible by n_minibatches=2 * 3 devices = 6"
    )
    assert "Use n_envs=18 or n_envs=12, or fewer devices" in facts["indivisible-error"]


# --------------------------------------------------------------------------- 2 processes


@pytest.mark.extended
def test_two_processes_distill_like_one_process(distill, tmp_path: Path) -> None:
    facts, out = distill
    port = _free_port()
    directory = tmp_path / "ckpt"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(RUNS),
                "distill-worker",
                str(i),
                str(port),
                str(directory),
                str(tmp_path / f"p{i}"),
            ],
            env=subprocess_env(None),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in (0, 1)
    ]
    logs = []
    try:
        for proc in procs:
            logs.append(proc.communicate(timeout=600)[0])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    assert all(p.returncode == 0 for p in procs), "\n".join(logs)
    worker = [json.loads((tmp_path / f"p{i}.json").read_text()) for i in (0, 1)]
    if "unsupported" in worker[0]:
        pytest.skip(f"no CPU collectives across processes in this JAX: {worker[0]['unsupported']}")

    assert [(w["process_count"], w["device_count"]) for w in worker] == [(2, 2), (2, 2)]
    reference = _variables(Path(f"{out}-student-1.npz"))
    for i in (0, 1):
        _assert_same(reference, _variables(tmp_path / f"p{i}-student.npz"))
        assert worker[i]["total_steps"] == 2 * HALF
        assert worker[i]["eval"] == pytest.approx(facts["student-1-eval"], rel=1e-5)
    # Only process 0 logs.
    assert worker[0]["logged"] == [HALF, 2 * HALF]
    assert worker[1]["logged"] == []
    # Process 0 wrote the gathered state: readable here, the student equal to the
    # reference.
    with Checkpointer(directory) as ckpt:
        assert ckpt.steps == [HALF, 2 * HALF]
    student = load_network(directory, make_lstm_actor_critic(2, 2, 6, (8,), (8,), rngs=nnx.Rngs(5)))
    _assert_same(reference, [_raw(x) for x in jax.tree.leaves(nnx.state(student))])
