"""Policy distillation: pair checks, sampler slots, the loss, learning and exact resume."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.algorithms import distillation as distillation_module
from nnx_ppo.algorithms import pairing as pairing_module
from nnx_ppo.algorithms.config import EvalConfig, LogLevel
from nnx_ppo.algorithms.distillation import (
    DistillationConfig,
    DistillationResult,
    DistillationState,
    check_distillation_pair,
    distillation_loss,
    train_distillation,
)
from nnx_ppo.algorithms.rollout import eval_copy, reset_envs
from nnx_ppo.envs import PointMass, TwoAgentEnv
from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.containers import Parallel, Sequential
from nnx_ppo.networks.factories import make_lstm_actor_critic, make_mlp_actor_critic
from nnx_ppo.networks.feedforward import MLP, Dense
from nnx_ppo.networks.normalizer import Normalizer
from nnx_ppo.networks.sampling_layers import NormalSampler, NormalTanhSampler
from nnx_ppo.networks.utils import Map
from nnx_ppo.wrappers import EpisodeWrapper

NO_EVAL = EvalConfig(enabled=False)


# --------------------------------------------------------------------------- builders


def _constant_dense(in_features, bias, rngs):
    """Dense with a zero kernel: outputs ``bias`` whatever the input."""
    bias = jnp.asarray(bias, jnp.float32)
    return Dense(
        in_features,
        bias.shape[0],
        rngs=rngs,
        kernel_init=nnx.initializers.zeros,
        bias_init=lambda key, shape, dtype=jnp.float32: bias.astype(dtype),
    )


def _constant_two_agent_net(action_params, values, *, seed=0):
    """TwoAgentEnv network whose per-agent action parameters ``[mean, pre_std]`` and
    values are constants: ``action_params = {agent: [m1, m2, p1, p2]}``."""
    rngs = nnx.Rngs(seed)
    return PPOAdapter(
        action=Map(
            {
                agent: Sequential(
                    [_constant_dense(4, params, rngs), NormalTanhSampler(rngs, entropy_weight=0.0)]
                )
                for agent, params in action_params.items()
            }
        ),
        value=Map({agent: _constant_dense(4, [v], rngs) for agent, v in values.items()}),
    )


def _two_agent_student(seed=0):
    """Normalizer -> PPOAdapter(Map per agent: MLP + sampler; Map per agent: critic)."""
    rngs = nnx.Rngs(seed)
    agents = ("agent_b", "agent_a")  # insertion order differs from sorted order
    return Sequential(
        [
            Normalizer({agent: 4 for agent in agents}),
            PPOAdapter(
                action=Map(
                    {
                        agent: Sequential([MLP(4, (8,), 4, rngs=rngs), NormalTanhSampler(rngs)])
                        for agent in agents
                    }
                ),
                value=Map({agent: Dense(4, 1, rngs=rngs) for agent in agents}),
            ),
        ]
    )


# --------------------------------------------------------------------------- config


def test_config_validates_its_fields():
    with pytest.raises(ValueError, match=r"n_envs=10 is not divisible by n_minibatches=4"):
        DistillationConfig(n_envs=10, n_minibatches=4)
    with pytest.raises(ValueError, match=r"value_loss_weight=-1.0 must be >= 0"):
        DistillationConfig(value_loss_weight=-1.0)
    with pytest.raises(ValueError, match=r"learning_rate=0.0 must be > 0"):
        DistillationConfig(learning_rate=0.0)
    with pytest.raises(TypeError, match=r"n_epochs=2.0 must be an int"):
        DistillationConfig(n_epochs=2.0)
    with pytest.raises(TypeError, match=r"eval=.* must be an EvalConfig"):
        DistillationConfig(eval={"enabled": False})
    with pytest.raises(ValueError, match="reset_mode='never' is not one of"):
        DistillationConfig(reset_mode="never")
    config = DistillationConfig(
        n_envs=4, n_minibatches=2, rollout_length=5, total_steps=41, iterations_per_call=2
    )
    # 41 steps at 20 per iteration need 3 iterations, rounded up to whole calls of 2.
    assert (config.steps_per_iteration, config.n_iterations) == (20, 4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.n_envs = 8  # type: ignore[misc]


def test_train_distillation_rejects_a_ppo_config():
    from nnx_ppo.algorithms.config import PPOConfig

    net = make_mlp_actor_critic(2, 2, (4,), (4,), rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match="must be a DistillationConfig"):
        train_distillation(PointMass(), net, net, PPOConfig(), progress=False)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- loss


def test_distillation_loss_hand_derived():
    # Action leaves "a" and "b" are summed per sample: [[-1 + 0, -3 - 2]] = [[-1, -5]],
    # so nll = -mean = 3. Regularization mean (0.5 + 1.5) / 2 = 1, weighted 0.5.
    # Value heads: 0.5 * mean([1, 4]) = 1.25 and 0.5 * mean([0, 1]) = 0.25, sum 1.5,
    # weighted 2 -> 3. Total 3 + 0.5 + 3 = 6.5.
    log_likelihoods = {"a": jnp.array([[-1.0, -3.0]]), "b": jnp.array([[0.0, -2.0]])}
    values = {"x": jnp.array([[1.0, 2.0]]), "y": jnp.array([[1.0, 1.0]])}
    teacher_values = {"x": jnp.zeros((1, 2)), "y": jnp.array([[1.0, 0.0]])}
    loss, metrics = distillation_loss(
        log_likelihoods,
        jnp.array([[0.5, 1.5]]),
        values,
        teacher_values,
        value_loss_weight=2.0,
        regularization_weight=0.5,
    )
    assert float(loss) == pytest.approx(6.5)
    assert float(metrics["loss/action_nll"]) == pytest.approx(3.0)
    assert float(metrics["loss/regularization"]) == pytest.approx(1.0)
    assert float(metrics["loss/value"]) == pytest.approx(1.5)
    assert float(metrics["loss/total"]) == pytest.approx(6.5)
    # Without value distillation the value arguments are ignored: 3 + 1 * 1.
    loss, metrics = distillation_loss(log_likelihoods, jnp.array([[0.5, 1.5]]))
    assert float(loss) == pytest.approx(4.0)
    assert set(metrics) == {"loss/total", "loss/action_nll", "loss/regularization"}


def test_distillation_loss_gradient_does_not_reach_the_teacher_values():
    def loss_of(teacher_value):
        loss, _ = distillation_loss(
            jnp.zeros((1, 1)),
            jnp.zeros((1, 1)),
            jnp.ones((1, 1)),
            teacher_value,
            value_loss_weight=1.0,
        )
        return loss

    assert float(jax.grad(loss_of)(jnp.zeros((1, 1)))[0, 0]) == 0.0


def test_distillation_loss_needs_values_for_value_distillation():
    with pytest.raises(ValueError, match="needs values and teacher_values"):
        distillation_loss(jnp.zeros((1, 1)), jnp.zeros((1, 1)), value_loss_weight=1.0)
    with pytest.raises(ValueError, match="value tree"):
        distillation_loss(
            jnp.zeros((1, 1)),
            jnp.zeros((1, 1)),
            {"a": jnp.zeros((1, 1))},
            jnp.zeros((1, 1)),
            value_loss_weight=1.0,
        )


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


def test_value_distillation_needs_matching_value_trees():
    env = EpisodeWrapper(TwoAgentEnv(), 5)
    teacher = _constant_two_agent_net(
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
    check_distillation_pair(env, teacher, _two_agent_student(), value_distillation=True)


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


def test_sampler_slots_are_found_in_nested_extras():
    # The student's extras are [normalizer {agent_a, agent_b}, adapter {action: Map
    # {agent_b: [mlp (), sampler raw], agent_a: [...]}, value: ...}]; the slots must be
    # the samplers' raw actions, matched to the action leaves by key (sorted order of
    # the actions dict: agent_a, agent_b).
    env = TwoAgentEnv()
    student = _two_agent_student()
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


def test_student_scores_the_teachers_raw_mean_action():
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
    teacher = _constant_two_agent_net(
        {k: [*v, 3.0, 3.0] for k, v in teacher_mean.items()}, {"agent_a": 2.0, "agent_b": -1.0}
    )
    student = _constant_two_agent_net(
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

    def __init__(self, resume_from=None):
        self.saved = {}
        self.finals = []
        self.resume_from = resume_from
        self.template = None

    def restore(self, template):
        self.template = template
        if self.resume_from is None:
            return None
        assert jax.tree.structure(self.resume_from) == jax.tree.structure(template)
        return jax.tree.map(jnp.copy, self.resume_from)

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


def test_resuming_a_distillation_run_is_exact(lstm_run):
    # Resuming from the state saved after 20 of 30 iterations ends exactly where the
    # uninterrupted run ended (every leaf: parameters, optimizer, envs, both carries,
    # episode statistics, key, counters).
    _, _, full, full_hook, _, _ = lstm_run
    _, _, resumed = _lstm_run(_MemoryCheckpoint(resume_from=full_hook.saved[400]))
    assert resumed.total_steps == 600
    for a, b in zip(_leaves(full.state), _leaves(resumed.state), strict=True):
        np.testing.assert_array_equal(a, b)
    # The resumed run evaluates after its first call (440) and its last (600), with
    # exactly the uninterrupted run's results.
    assert resumed.eval_history == full.eval_history[-2:]


def test_resume_with_the_checkpointer_is_exact(lstm_run, tmp_path):
    from nnx_ppo.algorithms import checkpointing

    _, _, full, _, _, _ = lstm_run
    # Stop after 20 iterations (a run of 400 steps), then resume to 600 from disk.
    directory = tmp_path / "ckpt"
    with checkpointing.Checkpointer(directory, save_every_steps=200) as ckpt:
        env = EpisodeWrapper(PointMass(), episode_length=6)
        teacher = make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0))
        student = make_lstm_actor_critic(2, 2, 8, (8,), (8,), rngs=nnx.Rngs(1))
        config = DistillationConfig(
            n_envs=4,
            rollout_length=5,
            n_epochs=2,
            n_minibatches=2,
            learning_rate=1e-2,
            total_steps=400,
            value_loss_weight=0.5,
            reset_mode="refresh",
            iterations_per_call=2,
            eval=NO_EVAL,
            log_level=LogLevel.LOSSES | LogLevel.CRITIC | LogLevel.ROLLOUT,
        )
        train_distillation(env, teacher, student, config, progress=False, checkpoint=ckpt)
    with checkpointing.Checkpointer(directory, save_every_steps=200) as ckpt:
        _, _, resumed = _lstm_run(ckpt)
        assert ckpt.restored_step == 400
    for a, b in zip(_leaves(full.state), _leaves(resumed.state), strict=True):
        np.testing.assert_array_equal(a, b)
    # The distilled student loads for deployment like a PPO-trained network.
    policy = checkpointing.load_network(
        directory, make_lstm_actor_critic(2, 2, 8, (8,), (8,), rngs=nnx.Rngs(7))
    )
    for a, b in zip(_leaves(nnx.state(policy, nnx.Param)), _leaves(full.state.params), strict=True):
        np.testing.assert_array_equal(a, b)


# --------------------------------------------------------------------------- learning


@pytest.mark.slow
def test_lstm_student_reaches_90_percent_of_a_ppo_teacher_on_point_mass():
    from nnx_ppo.algorithms.config import PPOConfig, TrainConfig
    from nnx_ppo.algorithms.evaluation import evaluate
    from nnx_ppo.algorithms.ppo import train_ppo

    # Rewards are negative distances, so "90% of the teacher's return" is measured
    # against doing nothing: over 30 steps that earns about -30 * E|p0| = -23
    # (E|p0| = 0.765 for p0 uniform in [-1, 1]^2) and a trained teacher about -3. The
    # student must close >= 90% of that gap: R_student >= R_teacher - 0.1 * (R_teacher
    # - R_nothing), i.e. about -5.
    env = EpisodeWrapper(PointMass(), episode_length=30)
    teacher = make_mlp_actor_critic(2, 2, (32, 32), (64, 64), rngs=nnx.Rngs(0))
    train_ppo(
        env,
        teacher,
        TrainConfig(
            ppo=PPOConfig(
                n_envs=64,
                rollout_length=16,
                n_minibatches=4,
                learning_rate=3e-3,
                discounting_factor=0.95,
                total_steps=30_000,
            ),
            eval=NO_EVAL,
        ),
        progress=False,
    )
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
