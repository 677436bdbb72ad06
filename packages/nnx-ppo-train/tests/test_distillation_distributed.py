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

from pathlib import Path

import numpy as np
import pytest
from _distributed_runs import (
    assert_indivisible_error,
    assert_resumes_on_two_and_one,
    load_variables,
    network_variables,
    run_on_four_devices,
    run_two_processes,
)
from flax import nnx

from nnx_ppo.networks.factories import make_lstm_actor_critic

STEPS_PER_ITERATION = 16 * 8
HALF = 2 * STEPS_PER_ITERATION  # one device call of two iterations


@pytest.fixture(scope="module")
def distill(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    """Run the 4-device distillation script once: ``(facts, output prefix)``."""
    out = tmp_path_factory.mktemp("distill") / "out"
    return run_on_four_devices(out, "distill"), out


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
    for a, b in zip(load_variables(out, "teacher-4"), network_variables(teacher), strict=True):
        np.testing.assert_array_equal(a, b)
    # log_fn ran after each of the 2 device calls (2 iterations of 128 steps each).
    assert facts["student-4-logged"] == [HALF, 2 * HALF]


@pytest.mark.extended
def test_checkpoint_from_four_devices_resumes_on_two_and_one(distill) -> None:
    facts, out = distill
    assert_resumes_on_two_and_one(
        facts, out, reference="student-1", resumed="student-resume", half=HALF
    )
    assert [facts[f"resume{devices}-total-steps"] for devices in (2, 1)] == [2 * HALF] * 2


@pytest.mark.extended
def test_indivisible_n_envs_is_a_clear_error(distill) -> None:
    assert_indivisible_error(distill[0])


# --------------------------------------------------------------------------- 2 processes


@pytest.mark.extended
def test_two_processes_distill_like_one_process(distill, tmp_path: Path) -> None:
    facts, out = distill
    worker = run_two_processes(
        "distill-worker",
        tmp_path,
        reference=load_variables(out, "student-1"),
        saved="student",
        total_steps=2 * HALF,
        template=make_lstm_actor_critic(2, 2, 6, (8,), (8,), rngs=nnx.Rngs(5)),
    )
    for i in (0, 1):
        assert worker[i]["eval"] == pytest.approx(facts["student-1-eval"], rel=1e-5)
    assert worker[0]["logged"] == [HALF, 2 * HALF]  # only process 0 logs
