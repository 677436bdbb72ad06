"""Policy distillation: pair checks, sampler slots, the loss and learning (exact resume,
divergence, run options and devices: `test_trainer_contract.py`)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _train_test_helpers import POINT_MASS_PPO
from flax import nnx

from nnx_ppo.algorithms.config import EvalConfig, LogLevel
from nnx_ppo.algorithms.core.rollout import eval_copy
from nnx_ppo.algorithms.distillation import pairing as pairing_module
from nnx_ppo.algorithms.distillation import train as distillation_module
from nnx_ppo.algorithms.distillation.train import (
    DistillationConfig,
    DistillationResult,
    DistillationState,
    train_distillation,
)
from nnx_ppo.envs import PointMass, TwoAgentEnv
from nnx_ppo.networks.factories import make_lstm_actor_critic, make_mlp_actor_critic
from nnx_ppo.wrappers import EpisodeWrapper

NO_EVAL = EvalConfig(enabled=False)


# --------------------------------------------------------------------------- builders


# --------------------------------------------------------------------------- config


def test_train_distillation_rejects_a_ppo_config():
    from nnx_ppo.algorithms.config import PPOConfig

    net = make_mlp_actor_critic(2, 2, (4,), (4,), rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match="must be a DistillationConfig"):
        train_distillation(PointMass(), net, net, PPOConfig(), progress=False)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- labels


def test_teacher_labels_thread_and_reset_the_teachers_carry(nets):
    # A teacher that sees the observation one step late (Delay k=1, zeros before the
    # buffer fills), labelling T=4 steps of B=2 envs where env 0's episode ends at t=1.
    # With f(x) the teacher's raw mean action on input x (its adapter alone):
    #   t=0: both read the initial 0            -> f(0)
    #   t=1: both read obs[0]                   -> f(obs[0])
    #   t=2: env 0 was reset after t=1 -> f(0); env 1 reads obs[1] -> f(obs[1])
    #   t=3: both read obs[2]                   -> f(obs[2])
    teacher = eval_copy(nets.delay(2, 2, k_steps=1))
    graphdef, params, rest = nnx.split(teacher, nnx.Param, ...)
    T, B = 4, 2
    obs = jnp.arange(T * B * 2, dtype=jnp.float32).reshape(T, B, 2) / 10.0 + 1.0
    done = jnp.zeros((T, B), bool).at[1, 0].set(True)
    _, slots = pairing_module._trace("teacher", graphdef, params, rest, B, obs[0])
    carry, labels = distillation_module._label(
        graphdef, slots, (params, rest), teacher.initialize_state(B), obs, done, with_value=True
    )
    (raw,) = labels.raw_action
    adapter = teacher.layers[1]

    def f(x):
        return adapter(adapter.initialize_state(B), x).rollout_extras["action"][1]

    zeros = jnp.zeros((B, 2))
    np.testing.assert_allclose(raw[0], f(zeros), rtol=1e-6)
    np.testing.assert_allclose(raw[1], f(obs[0]), rtol=1e-6)
    np.testing.assert_allclose(raw[2, 0], f(zeros)[0], rtol=1e-6)
    np.testing.assert_allclose(raw[2, 1], f(obs[1])[1], rtol=1e-6)
    np.testing.assert_allclose(raw[3], f(obs[2]), rtol=1e-6)
    assert not np.allclose(raw[2, 1], raw[0, 1])  # the reset is what makes env 0 differ
    # The teacher's values come from the same calls, and its carry holds obs[3].
    assert labels.value.shape == (T, B)
    np.testing.assert_allclose(carry[0][:, 0], obs[3], rtol=1e-6)


# --------------------------------------------------------------------------- training


def _log_normal(u, mean, std):
    return -0.5 * ((u - mean) / std) ** 2 - math.log(std) - 0.5 * math.log(2 * math.pi)


def _tanh_log_det(u):
    return math.log(1.0 - math.tanh(u) ** 2)


def _softplus(x):
    return math.log1p(math.exp(x))


def test_student_scores_the_teachers_raw_mean_action(nets):
    # Teacher and student have constant outputs, so every sample of the one minibatch
    # (one iteration, one epoch, one minibatch: the loss is logged before any update)
    # has the same hand-computable loss. The teacher's eval-mode raw action is its mean
    # c; the student's tanh-Gaussian log-likelihood of the action tanh(c) is
    #     sum_i [log N(c_i; m_i, s_i) - log(1 - tanh(c_i)^2)],  s_i = softplus(p_i) + 1e-3.
    # Scoring tanh(c) as if it were raw, or the student's own sample, gives other numbers;
    # swapping the agents' labels gives another number too.
    teacher_mean = {"agent_a": [0.5, -1.0], "agent_b": [2.0, 0.0]}
    student_mean = {"agent_a": [0.0, 0.0], "agent_b": [1.0, 1.0]}
    student_pre_std = {"agent_a": [0.0, 0.0], "agent_b": [1.0, -1.0]}
    teacher = nets.constant_two_agent(
        {k: [*v, 3.0, 3.0] for k, v in teacher_mean.items()}, {"agent_a": 2.0, "agent_b": -1.0}
    )
    student = nets.constant_two_agent(
        {k: student_mean[k] + student_pre_std[k] for k in student_mean},
        {"agent_a": 0.5, "agent_b": 0.0},
        seed=1,
    )
    log_pi = 0.0
    for agent in ("agent_a", "agent_b"):
        for c, m, p in zip(
            teacher_mean[agent], student_mean[agent], student_pre_std[agent], strict=True
        ):
            log_pi += _log_normal(c, m, _softplus(p) + 1e-3) - _tanh_log_det(c)
    # Values: 0.5 * (0.5 - 2)^2 + 0.5 * (0 - (-1))^2 = 1.125 + 0.5 = 1.625.
    expected_value_loss = 1.625

    logs = []
    config = DistillationConfig(
        n_envs=2,
        rollout_length=3,
        n_epochs=1,
        n_minibatches=1,
        total_steps=6,
        value_loss_weight=2.0,
        eval=NO_EVAL,
        log_level=LogLevel.LOSSES,
    )
    env = EpisodeWrapper(TwoAgentEnv(), 2)
    train_distillation(
        env, teacher, student, config, progress=False, log_fn=lambda m, s: logs.append(dict(m))
    )
    (metrics,) = logs
    assert metrics["loss/action_nll"] == pytest.approx(-log_pi, rel=1e-5)
    assert metrics["loss/value"] == pytest.approx(expected_value_loss, rel=1e-5)
    assert metrics["loss/regularization"] == 0.0
    assert metrics["loss/total"] == pytest.approx(-log_pi + 2.0 * expected_value_loss, rel=1e-5)


class _MemoryCheckpoint:
    """A CheckpointHook keeping device copies (the trainer donates the state it saves)."""

    def __init__(self):
        self.saved = {}
        self.finals = []
        self.template = None

    def restore(self, template):
        self.template = template
        return None

    def save(self, state, step, metrics, *, final=False):
        self.saved[step] = jax.tree.map(jnp.copy, state)
        if final:
            self.finals.append(step)


def _lstm_run(hook=None, log_fn=None):
    """An LSTM student (with normalizer) learning from an MLP teacher, values too."""
    env = EpisodeWrapper(PointMass(), episode_length=6)
    teacher = make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0))
    student = make_lstm_actor_critic(2, 2, 8, (8,), (8,), rngs=nnx.Rngs(1))
    config = DistillationConfig(
        n_envs=4,
        rollout_length=5,
        n_epochs=2,
        n_minibatches=2,
        learning_rate=1e-2,
        total_steps=20 * 30,
        value_loss_weight=0.5,
        reset_mode="refresh",
        iterations_per_call=2,
        eval=EvalConfig(n_envs=4, max_episode_length=6, at_start=False, every_steps=200),
        log_level=LogLevel.LOSSES | LogLevel.CRITIC | LogLevel.ROLLOUT,
    )
    result = train_distillation(
        env, teacher, student, config, progress=False, checkpoint=hook, log_fn=log_fn
    )
    return teacher, student, result


@pytest.fixture(scope="module")
def lstm_run():
    hook = _MemoryCheckpoint()
    logs = []
    traces = []
    make_iteration = distillation_module._make_iteration

    def counting_make_iteration(*args, **kwargs):
        iteration = make_iteration(*args, **kwargs)

        def counted(state, teacher):
            traces.append(1)  # runs once per trace, not per execution
            return iteration(state, teacher)

        return counted

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(distillation_module, "_make_iteration", counting_make_iteration)
        teacher, student, result = _lstm_run(hook, lambda m, s: logs.append((s, dict(m))))
    return teacher, student, result, hook, logs, len(traces)


def _leaves(tree):
    out = []
    for leaf in jax.tree.leaves(tree):
        if jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        out.append(np.asarray(leaf))
    return out


def test_lstm_student_learns_from_an_mlp_teacher(lstm_run):
    teacher, student, result, hook, logs, n_traces = lstm_run
    assert n_traces == 1  # 15 device calls, one trace: nothing re-traces
    assert isinstance(result, DistillationResult)
    assert isinstance(result.state, DistillationState)
    assert result.total_steps == 600
    train_logs = [m for _, m in logs if "loss/action_nll" in m]
    assert len(train_logs) == 15  # 30 iterations, 2 per call
    nll = [m["loss/action_nll"] for m in train_logs]
    value = [m["loss/value"] for m in train_logs]
    # The teacher is deterministic, so the student's likelihood of its actions can grow
    # without bound as the student's std shrinks; starting near 1.4 per sample (two
    # action dims at std ~0.7), it drops well below 0.
    assert np.mean(nll[-3:]) < np.mean(nll[:3]) - 1.0, nll
    assert np.mean(value[-3:]) < np.mean(value[:3]), value
    assert all(np.isfinite(m["loss/total"]) for m in train_logs)
    # Evaluations (as in train_ppo) after the first call, then whenever 200 steps have
    # passed since the last one (checked per 40-step call), and after the last call.
    assert [s for s, _ in result.eval_history] == [40, 240, 440, 600]
    # The student holds the trained parameters; the teacher (and its mode) is untouched.
    trained = nnx.state(student, nnx.Param)
    for a, b in zip(jax.tree.leaves(trained), jax.tree.leaves(result.state.params), strict=True):
        np.testing.assert_array_equal(a, b)
    fresh_teacher = make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0))
    for a, b in zip(_leaves(nnx.state(teacher)), _leaves(nnx.state(fresh_teacher)), strict=True):
        np.testing.assert_array_equal(a, b)
    assert not any(getattr(m, "deterministic", False) for _, m in nnx.iter_graph(teacher))
    # The hook saw a DistillationState template and every call, the last marked final.
    assert isinstance(hook.template, DistillationState)
    assert sorted(hook.saved) == list(range(40, 601, 40))
    assert hook.finals == [600]


# --------------------------------------------------------------------------- learning


@pytest.mark.slow
def test_lstm_student_reaches_90_percent_of_a_ppo_teacher_on_point_mass():
    from nnx_ppo.algorithms.config import TrainConfig
    from nnx_ppo.algorithms.observe.evaluation import evaluate
    from nnx_ppo.algorithms.ppo.train import train_ppo

    # Rewards are negative distances, so "90% of the teacher's return" is measured
    # against doing nothing: over 30 steps that earns about -30 * E|p0| = -23
    # (E|p0| = 0.765 for p0 uniform in [-1, 1]^2) and a trained teacher about -3. The
    # student must close >= 90% of that gap: R_student >= R_teacher - 0.1 * (R_teacher
    # - R_nothing), i.e. about -5.
    env = EpisodeWrapper(PointMass(), episode_length=30)
    teacher = make_mlp_actor_critic(2, 2, (32, 32), (64, 64), rngs=nnx.Rngs(0))
    train_ppo(env, teacher, TrainConfig(ppo=POINT_MASS_PPO, eval=NO_EVAL), progress=False)
    key = jax.random.PRNGKey(123)
    teacher_return = evaluate(env, teacher, key, n_envs=128, max_episode_length=30)[
        "eval/episode_reward/mean"
    ]
    nothing_return = -30 * 0.7652
    assert teacher_return > -5, teacher_return  # the teacher is good

    student = make_lstm_actor_critic(2, 2, 32, (32,), (32,), rngs=nnx.Rngs(1))
    config = DistillationConfig(
        n_envs=32,
        rollout_length=16,
        n_minibatches=4,
        learning_rate=3e-3,
        total_steps=10_240,
        eval=EvalConfig(n_envs=128, max_episode_length=30),
    )
    result = train_distillation(env, teacher, student, config, progress=False)
    first = result.eval_history[0][1]["eval/episode_reward/mean"]
    student_return = evaluate(env, student, key, n_envs=128, max_episode_length=30)[
        "eval/episode_reward/mean"
    ]
    threshold = teacher_return - 0.1 * (teacher_return - nothing_return)
    assert first < threshold  # the untrained student is not already there
    assert student_return >= threshold, (student_return, teacher_return, result.eval_history)
