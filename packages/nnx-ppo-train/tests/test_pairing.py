"""Pairing a distillation teacher's samplers with the student's: the checks and the
sampler slots."""

from __future__ import annotations

import jax
import pytest
from flax import nnx

from nnx_ppo.algorithms.config import EvalConfig
from nnx_ppo.algorithms.core.rollout import reset_envs
from nnx_ppo.algorithms.distillation import pairing as pairing_module
from nnx_ppo.algorithms.distillation.train import (
    DistillationConfig,
    check_distillation_pair,
    train_distillation,
)
from nnx_ppo.envs import PointMass, TwoAgentEnv
from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.containers import Parallel, Sequential
from nnx_ppo.networks.factories import make_mlp_actor_critic
from nnx_ppo.networks.feedforward import Dense
from nnx_ppo.networks.sampling_layers import NormalSampler, NormalTanhSampler
from nnx_ppo.networks.utils import Map
from nnx_ppo.wrappers import EpisodeWrapper

NO_EVAL = EvalConfig(enabled=False)


# --------------------------------------------------------------------------- pair checks


def test_action_tree_mismatch_names_both_trees():
    env = EpisodeWrapper(PointMass(), 5)
    student = make_mlp_actor_critic(2, 2, (4,), (4,), rngs=nnx.Rngs(0))
    rngs = nnx.Rngs(1)
    teacher = PPOAdapter(
        action=Parallel(move=Sequential([Dense(2, 4, rngs=rngs), NormalTanhSampler(rngs)])),
        value=Dense(2, 1, rngs=rngs),
    )
    with pytest.raises(ValueError) as info:
        check_distillation_pair(env, teacher, student, n_envs=3)
    message = str(info.value)
    assert "teacher's actions {'move': 'float32[3, 2]'}" in message
    assert "student's actions float32[3, 2]" in message
    # train_distillation runs the same check before compiling anything.
    config = DistillationConfig(n_envs=3, n_minibatches=1, total_steps=3, eval=NO_EVAL)
    with pytest.raises(ValueError, match=r"teacher's actions \{'move'"):
        train_distillation(env, teacher, student, config, progress=False)


def test_action_size_mismatch_is_an_error():
    env = PointMass()
    teacher = make_mlp_actor_critic(2, 3, (4,), (4,), rngs=nnx.Rngs(0))
    student = make_mlp_actor_critic(2, 2, (4,), (4,), rngs=nnx.Rngs(1))
    with pytest.raises(
        ValueError, match=r"float32\[2, 3\] and the student's actions float32\[2, 2\]"
    ):
        check_distillation_pair(env, teacher, student)


def test_sampler_kinds_must_squash_alike():
    env = PointMass()
    teacher = make_mlp_actor_critic(
        2, 2, (4,), (4,), rngs=nnx.Rngs(0), action_distribution="normal"
    )
    assert any(isinstance(m, NormalSampler) for _, m in nnx.iter_graph(teacher))
    student = make_mlp_actor_critic(2, 2, (4,), (4,), rngs=nnx.Rngs(1))
    with pytest.raises(
        ValueError, match="teacher's NormalSampler and the student's NormalTanhSampler"
    ):
        check_distillation_pair(env, teacher, student)


def test_value_distillation_needs_matching_value_trees(nets):
    env = EpisodeWrapper(TwoAgentEnv(), 5)
    teacher = nets.constant_two_agent(
        {"agent_a": [0.0] * 4, "agent_b": [0.0] * 4}, {"agent_a": 0.0, "agent_b": 0.0}
    )
    rngs = nnx.Rngs(0)
    student = PPOAdapter(  # one value head for a dict reward: fails the env check first
        action=Map(
            {
                k: Sequential([Dense(4, 4, rngs=rngs), NormalTanhSampler(rngs)])
                for k in ("agent_a", "agent_b")
            }
        ),
        value=Map({"agent_a": Dense(4, 1, rngs=rngs)}),
    )
    with pytest.raises(ValueError, match="value estimates"):
        check_distillation_pair(env, teacher, student)
    # Matching action trees pass, with or without value distillation.
    check_distillation_pair(env, teacher, nets.two_agent_student(), value_distillation=True)


def test_teacher_must_be_a_ppo_network():
    env = PointMass()
    student = make_mlp_actor_critic(2, 2, (4,), (4,), rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match="teacher must be a StatefulModule"):
        check_distillation_pair(env, nnx.Linear(2, 2, rngs=nnx.Rngs(0)), student)
    rngs = nnx.Rngs(0)
    not_ppo = Sequential([Dense(2, 4, rngs=rngs), NormalTanhSampler(rngs)])
    with pytest.raises(TypeError, match="PPONetworkOutput"):
        check_distillation_pair(env, not_ppo, student)


def test_teacher_failing_on_the_observation_is_reported():
    env = PointMass()
    teacher = make_mlp_actor_critic(3, 2, (4,), (4,), rngs=nnx.Rngs(0), normalize_obs=False)
    student = make_mlp_actor_critic(2, 2, (4,), (4,), rngs=nnx.Rngs(1))
    with pytest.raises(ValueError, match="the teacher failed on the environment's observation"):
        check_distillation_pair(env, teacher, student)


# --------------------------------------------------------------------------- slots


def test_sampler_slots_are_found_in_nested_extras(nets):
    # The student's extras are [normalizer {agent_a, agent_b}, adapter {action: Map
    # {agent_b: [mlp (), sampler raw], agent_a: [...]}, value: ...}]; the slots must be
    # the samplers' raw actions, matched to the action leaves by key (sorted order of
    # the actions dict: agent_a, agent_b).
    env = TwoAgentEnv()
    student = nets.two_agent_student()
    graphdef, params, rest = nnx.split(student, nnx.Param, ...)
    obs = jax.eval_shape(lambda k: reset_envs(env, k, 3), jax.random.PRNGKey(0)).obs
    out, slots = pairing_module._trace("student", graphdef, params, rest, 3, obs)
    paths = [
        jax.tree_util.keystr(path)
        for path, _ in jax.tree_util.tree_flatten_with_path(out.rollout_extras)[0]
    ]
    assert [paths[i] for i in slots.indices] == [
        "[1]['action']['agent_a'][1]",
        "[1]['action']['agent_b'][1]",
    ]
    assert slots.samplers == (NormalTanhSampler, NormalTanhSampler)
    assert [s.shape for s in slots.raw] == [(3, 2), (3, 2)]
    # The user's samplers keep their class (the probe works on a merged copy).
    assert {type(m) for _, m in nnx.iter_graph(student) if isinstance(m, NormalTanhSampler)} == {
        NormalTanhSampler
    }
