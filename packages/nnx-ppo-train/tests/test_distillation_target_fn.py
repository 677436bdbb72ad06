"""Distillation with ``target_fn(teacher_extras, student_extras)`` (nnx-ppo's name): a
teacher with two actuators in a dict, a student with one concatenated action."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.algorithms.config import DistillationConfig, EvalConfig, PPOConfig
from nnx_ppo.algorithms.distillation.train import check_distillation_pair, train_distillation
from nnx_ppo.algorithms.sweeps.many import train_many
from nnx_ppo.envs import PointMass
from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.containers import Parallel, Sequential
from nnx_ppo.networks.factories import make_mlp_actor_critic
from nnx_ppo.networks.feedforward import MLP
from nnx_ppo.networks.normalizer import Normalizer
from nnx_ppo.networks.sampling_layers import NormalTanhSampler
from nnx_ppo.wrappers import EpisodeWrapper

ENV = EpisodeWrapper(PointMass(), episode_length=8)


def _teacher() -> nnx.Module:
    """Two actuators, ``{"left": [1], "right": [1]}``, each its own MLP and sampler."""
    rngs = nnx.Rngs(7)
    return Sequential([
        Normalizer(2),
        PPOAdapter(
            action=Parallel(
                left=Sequential([MLP(2, (8,), 2, rngs=rngs), NormalTanhSampler(rngs)]),
                right=Sequential([MLP(2, (8,), 2, rngs=rngs), NormalTanhSampler(rngs)]),
            ),
            value=MLP(2, (8,), 1, rngs=rngs),
        ),
    ])  # fmt: skip


def target_fn(teacher_extras, student_extras):
    # The teacher's extras: [Normalizer's raw obs, {"action": {"left": [mlp, raw], ...},
    # "value": ...}]; the samplers' raw (pre-tanh) means, [T, B, 1] each, side by side.
    actuators = teacher_extras[1]["action"]
    return jnp.concatenate([actuators["left"][1], actuators["right"][1]], axis=-1)


def _student(seed: int = 1) -> nnx.Module:
    return make_mlp_actor_critic(2, 2, (16,), (8,), rngs=nnx.Rngs(seed))


def _mean_gap(teacher: nnx.Module, student: nnx.Module) -> float:
    """Mean |student action - teacher action| in eval mode on a grid of positions."""
    obs = jnp.stack(jnp.meshgrid(jnp.linspace(-1, 1, 5), jnp.linspace(-1, 1, 5)), -1)
    obs = obs.reshape(-1, 2)
    for net in (teacher, student):
        net.eval()
    t = teacher(teacher.initialize_state(25), obs).output.actions
    s = student(student.initialize_state(25), obs).output.actions
    student.train()
    return float(jnp.mean(jnp.abs(s - jnp.concatenate([t["left"], t["right"]], -1))))


def test_without_target_fn_the_layouts_do_not_pair_and_a_wrong_target_is_named():
    teacher, student = _teacher(), _student()
    with pytest.raises(ValueError, match=r"teacher's actions \{'left'"):
        check_distillation_pair(ENV, teacher, student)
    check_distillation_pair(ENV, teacher, student, target_fn=target_fn)  # pairs now

    def only_left(teacher_extras, student_extras):
        return teacher_extras[1]["action"]["left"][1]

    with pytest.raises(ValueError, match=r"target_fn returned float32\[1, 2, 1\] .* float32"):
        check_distillation_pair(ENV, teacher, student, target_fn=only_left)

    def broken(teacher_extras, student_extras):
        return teacher_extras["left"]

    with pytest.raises(ValueError, match=r"target_fn failed on the teacher's rollout_extras"):
        check_distillation_pair(ENV, teacher, student, target_fn=broken)
    config = DistillationConfig(n_envs=2, n_minibatches=1, total_steps=2)
    with pytest.raises(TypeError, match=r"target_fn='concat' must be callable"):
        train_distillation(ENV, teacher, student, config, target_fn="concat", progress=False)
    ppo = PPOConfig(n_envs=2, n_minibatches=1, total_steps=2)
    with pytest.raises(TypeError, match=r"target_fn=<function target_fn .* without a teacher"):
        train_many(ENV, lambda r: _student(), ppo, seeds=[0], target_fn=target_fn)


@pytest.mark.extended  # the tutorial's example (docs tests) is the default suite's run
def test_a_student_with_one_concatenated_action_learns_a_two_actuator_teacher():
    # 8 envs x 8 steps x 12 iterations; the student (one [2] action) imitates the
    # teacher's left and right actuators, concatenated by target_fn. initial_eval=False
    # leaves out the step-0 evaluation the config asks for.
    teacher, student = _teacher(), _student()
    before = _mean_gap(teacher, student)
    config = DistillationConfig(
        n_envs=8, rollout_length=8, n_minibatches=2, learning_rate=1e-2, total_steps=768,
        eval=EvalConfig(n_envs=4, max_episode_length=8),
    )  # fmt: skip
    logged: list[dict[str, float]] = []
    result = train_distillation(
        ENV, teacher, student, config, target_fn=target_fn, progress=False,
        initial_eval=False, log_fn=lambda metrics, step: logged.append(dict(metrics)),
    )  # fmt: skip
    after = _mean_gap(teacher, student)
    assert result.total_steps == 768
    assert [step for step, _ in result.eval_history] == [768]
    nll = [m["loss/action_nll"] for m in logged if "loss/action_nll" in m]
    assert nll[-1] < nll[0] - 1.0, nll  # the student's likelihood of the targets grew
    assert after < 0.5 * before, (before, after)
    assert np.isfinite(after)
    # The teacher is unchanged by the run.
    assert jax.tree.all(
        jax.tree.map(
            lambda a, b: bool(jnp.array_equal(a, b)),
            nnx.state(teacher, nnx.Param),
            nnx.state(_teacher(), nnx.Param),
        )
    )


@pytest.mark.extended
def test_a_distillation_sweep_takes_target_fn_and_initial_eval():
    # Two students (seeds 1 and 2) distilled in one program: each run's loss falls, and
    # initial_eval=True evaluates every run at step 0 although the config says not to.
    config = DistillationConfig(
        n_envs=8, rollout_length=8, n_minibatches=2, learning_rate=1e-2, total_steps=512,
        eval=EvalConfig(n_envs=4, max_episode_length=8, at_start=False),
    )  # fmt: skip
    logged: dict[int, list[float]] = {0: [], 1: []}
    result = train_many(
        ENV, lambda rngs: make_mlp_actor_critic(2, 2, (16,), (8,), rngs=rngs), config,
        seeds=[1, 2], teacher=_teacher(), target_fn=target_fn, progress=False,
        initial_eval=True,
        log_fn=lambda metrics, step, run: logged[run].append(metrics.get("loss/action_nll")),
    )  # fmt: skip
    for run in (0, 1):
        logged[run] = [x for x in logged[run] if x is not None]  # the step-0 evaluation
        assert [step for step, _ in result.eval_histories[run]] == [0, 512]
        assert logged[run][-1] < logged[run][0], logged[run]
