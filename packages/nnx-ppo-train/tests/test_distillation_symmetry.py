"""A symmetric student (`DistillationConfig.symmetry`): refused before compiling when it
cannot work, its mirrored sequences (replayed from mirrored carries, the mirror of the
teacher's action as target) against the student run step by step on the mirrored
observations, a symmetric student from an asymmetric teacher, and exact resume.

The mirror maps, the rollout's mirrored carries and the mirror loss are
`test_symmetry.py`'s; a distillation sweep with a symmetry is in the trainer contract
(``extended``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _train_test_helpers import assert_trees_equal
from flax import nnx

from nnx_ppo.algorithms.config import (
    DistillationConfig,
    EvalConfig,
    LogLevel,
    config_from_dict,
    config_to_dict,
)
from nnx_ppo.algorithms.core.mirroring import MirrorStep, augmented, symmetry_error
from nnx_ppo.algorithms.core.rollout import (
    eval_copy,
    initial_episode_stats,
    ppo_output,
    replay,
    reset_envs,
    split_network,
    unroll,
)
from nnx_ppo.algorithms.distillation import train as distillation_module
from nnx_ppo.algorithms.distillation.pairing import match_samplers
from nnx_ppo.algorithms.distillation.train import train_distillation
from nnx_ppo.algorithms.symmetry import Mirror, Symmetry
from nnx_ppo.envs import PointMass
from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.containers import Sequential
from nnx_ppo.networks.factories import make_lstm_actor_critic, make_mlp_actor_critic
from nnx_ppo.networks.feedforward import Dense
from nnx_ppo.networks.sampling_layers import NormalSampler
from nnx_ppo.networks.types import reset_where
from nnx_ppo.wrappers import EpisodeWrapper

FLIP_X = Mirror.from_signs(-1, 1)  # PointMass mirrored in x: (x, y) -> (-x, y), likewise the action
AUGMENT = Symmetry(observation=FLIP_X, action=FLIP_X)
NO_EVAL = EvalConfig(enabled=False)


def _mlp(seed: int) -> nnx.Module:
    return make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(seed))


def _lstm(seed: int) -> nnx.Module:
    return make_lstm_actor_critic(2, 2, 8, (8,), (8,), rngs=nnx.Rngs(seed))


# --------------------------------------------------------------------------- checks


def test_a_symmetry_that_cannot_work_is_refused_before_compiling(monkeypatch):
    # The config keeps it as data (JSON round trip) and refuses PPO's ratio choice.
    config = DistillationConfig(n_envs=4, rollout_length=5, n_minibatches=2, symmetry=AUGMENT)
    assert config_from_dict(config_to_dict(config)) == config
    with pytest.raises(ValueError, match="ratio='mirrored', a choice of PPO's"):
        DistillationConfig(symmetry=Symmetry(observation=FLIP_X, action=FLIP_X, ratio="mirrored"))
    with pytest.raises(TypeError, match="must be a Symmetry or None"):
        DistillationConfig(symmetry=FLIP_X)  # type: ignore[arg-type]
    # A mirror that does not fit the student's observation: named before the iteration
    # is built (`_make_iteration` is never reached).
    monkeypatch.setattr(distillation_module, "_make_iteration", None)
    wide = Symmetry(observation=Mirror.from_signs(-1, 1, 1), action=FLIP_X)
    bad = DistillationConfig(n_envs=4, rollout_length=5, n_minibatches=2, symmetry=wide)
    env = EpisodeWrapper(PointMass(), episode_length=4)
    with pytest.raises(ValueError, match="mirrors a last axis of 3 entries"):
        train_distillation(env, _mlp(0), _mlp(1), bad, progress=False)


# --------------------------------------------------------------------------- exactness


def test_the_mirrored_sequences_are_the_student_on_the_mirror_scoring_the_mirrored_teacher():
    # An LSTM student (with its observation normalizer) drives PointMass with 3-step
    # episodes over a 6-step rollout (carry resets); an MLP teacher labels it. The
    # reference runs the student step by step on the mirrored observations from the
    # initial carry, resetting where the rollout did, and scores M(raw mean action of
    # the teacher on the *real* observation); the real half scores the teacher's raw
    # mean on the real observations. The trainer's minibatch (the real and mirrored
    # sequences in one replay) must equal it to float32 rounding.
    env = EpisodeWrapper(PointMass(), episode_length=3)
    teacher, student = _mlp(0), _lstm(1)
    t_slots, s_slots = match_samplers(env, teacher, student, 4, value_distillation=False)
    t_graphdef, t_params, t_state = split_network(eval_copy(teacher))
    graphdef, params, network_state = split_network(student)
    n, steps = 4, 6
    first = reset_envs(env, jax.random.PRNGKey(0), n)
    zero = student.initialize_state(n)

    @jax.jit
    def minibatch(params):
        *_, rollout = unroll(
            env, graphdef, params, network_state, first, zero, initial_episode_stats(n),
            jax.random.PRNGKey(1), first, length=steps, bootstrap_on_truncation=False,
            mirror=MirrorStep(graphdef, AUGMENT, None), mirror_carry=zero,
        )  # fmt: skip
        tr, mirror = rollout.transitions, rollout.mirror
        _, labels = distillation_module._label(
            t_graphdef, t_slots, (t_params, t_state), teacher.initialize_state(n), tr.obs,
            tr.done, with_value=False,
        )  # fmt: skip
        tree = jax.tree.structure(tr.log_likelihood)
        mirrored = distillation_module._mirrored_labels(
            AUGMENT, s_slots, mirror, labels.raw_action, tree
        )
        real = tr.replace(
            rollout_extras=distillation_module._with_raw_actions(
                tr.rollout_extras, s_slots, labels.raw_action
            )
        )
        both, carries = augmented(AUGMENT, real, zero, mirrored, mirror.initial_carry)
        return tr, replay(graphdef, params, network_state, carries, both).log_likelihood

    tr, log_likelihood = minibatch(params)

    teacher_model = nnx.merge(t_graphdef, t_params, t_state)
    model = nnx.merge(graphdef, params, network_state)
    slot = s_slots.indices[0]

    def score(carry, obs, raw):  # the student's log-likelihood of ``raw`` and next carry
        leaves, treedef = jax.tree.flatten(model(carry, obs).rollout_extras)
        leaves[slot] = raw
        out = model(carry, obs, jax.tree.unflatten(treedef, leaves))
        return ppo_output(out).loglikelihoods, out.next_state

    def teacher_raw(obs):  # the MLP teacher's raw mean action
        return jax.tree.leaves(teacher_model(teacher.initialize_state(n), obs).rollout_extras)[
            t_slots.indices[0]
        ]

    carry, m_carry, real_ll, mirror_ll, gaps = zero, zero, [], [], []
    for t in range(steps):
        obs_m = AUGMENT.mirror_observation(tr.obs[t])
        target = AUGMENT.mirror_action(teacher_raw(tr.obs[t]))
        gaps.append(float(jnp.max(jnp.abs(target - teacher_raw(obs_m)))))
        ll, next_carry = score(carry, tr.obs[t], teacher_raw(tr.obs[t]))
        m_ll, m_next = score(m_carry, obs_m, target)
        real_ll.append(ll)
        mirror_ll.append(m_ll)
        carry = reset_where(model, tr.done[t], next_carry)
        m_carry = reset_where(model, tr.done[t], m_next)
    assert bool(jnp.any(tr.done[:-1]))  # the carries were reset inside the rollout
    assert min(gaps) > 1e-3  # the teacher is asymmetric: M a(s) is not a(M s)
    np.testing.assert_allclose(log_likelihood[:, :n], jnp.stack(real_ll), atol=1e-5)
    np.testing.assert_allclose(log_likelihood[:, n:], jnp.stack(mirror_ll), atol=1e-5)


# --------------------------------------------------------------------------- learning


def _linear(kernel: np.ndarray | None, seed: int) -> nnx.Module:
    """A linear policy: mean action ``W s`` (``W = kernel``, ``[A, n]``, no bias; ``None``:
    the layer's random initialisation), a learnt constant std, a linear critic."""
    rngs = nnx.Rngs(seed)
    head = Dense(2, 4, rngs=rngs)
    if kernel is not None:
        weights = np.zeros((2, 4), np.float32)
        weights[:, :2] = kernel.T  # the mean; the pre-std columns stay 0
        head.linear.kernel[...] = jnp.asarray(weights)
        head.linear.bias[...] = jnp.zeros(4)
    return PPOAdapter(action=Sequential([head, NormalSampler(rngs)]), value=Dense(2, 1, rngs=rngs))


def test_a_student_distilled_with_a_symmetry_is_symmetric_though_its_teacher_is_not():
    # Teacher W = [[1, 1], [0, 1]]: a(Ms) - M a(s) = (2y, 0) (test_symmetry.py), its
    # symmetry error mean |2y|. A linear student copies it without a symmetry; with
    # augmentation it also learns M a(s) at M s, i.e. the symmetrised teacher
    # (W + M W M) / 2 = I, whose error is 0.
    env = EpisodeWrapper(PointMass(), episode_length=10)
    teacher = _linear(np.array([[1.0, 1.0], [0.0, 1.0]]), 0)
    obs = reset_envs(env, jax.random.PRNGKey(7), 64).obs[None]  # [1, 64, 2]
    errors = {}
    for symmetry in (None, AUGMENT):
        student = _linear(None, 1)
        config = DistillationConfig(
            n_envs=16, rollout_length=10, n_minibatches=2, n_epochs=4, total_steps=16 * 10 * 20,
            learning_rate=1e-1, symmetry=symmetry, eval=NO_EVAL, log_level=LogLevel.NONE,
        )  # fmt: skip
        train_distillation(env, teacher, student, config, progress=False)
        errors[symmetry is not None] = symmetry_error(student, AUGMENT, obs)
    teacher_error = symmetry_error(teacher, AUGMENT, obs)
    np.testing.assert_allclose(teacher_error, float(jnp.mean(jnp.abs(2 * obs[..., 1]))), rtol=1e-5)
    assert errors[False] > 0.5 * teacher_error, (errors, teacher_error)  # it copied the teacher
    assert errors[True] < 0.1 * errors[False], (errors, teacher_error)


# --------------------------------------------------------------------------- resume


class _Resume:
    """A CheckpointHook that keeps device copies of every save and resumes from
    ``start`` (``None``: a fresh run)."""

    def __init__(self, start=None):
        self.start, self.saved = start, {}

    def restore(self, template):
        return self.start

    def save(self, state, step, metrics, *, final=False):
        self.saved[step] = (jax.tree.map(jnp.copy, state), dict(metrics))


def test_a_symmetric_recurrent_student_resumes_bit_for_bit():
    # An LSTM student with augmentation and the mirror loss, 3 iterations; resumed from
    # the state after the first, it ends where the uninterrupted run ends, mirrored
    # carries included (they are state: without them the resumed mirrored sequences
    # would start from the initial carry).
    env = EpisodeWrapper(PointMass(), episode_length=6)
    symmetry = Symmetry(observation=FLIP_X, action=FLIP_X, mirror_loss_weight=0.1)
    config = DistillationConfig(
        n_envs=4, rollout_length=5, n_minibatches=2, n_epochs=2, total_steps=60,
        value_loss_weight=0.5, symmetry=symmetry, eval=NO_EVAL, log_level=LogLevel.LOSSES,
    )  # fmt: skip
    full = _Resume()
    train_distillation(env, _mlp(0), _lstm(1), config, progress=False, checkpoint=full)
    assert sorted(full.saved) == [20, 40, 60]
    state, metrics = full.saved[60]
    assert {"loss/mirrored", "loss/mirror"} <= set(metrics)
    assert all(np.isfinite(v) for v in metrics.values())
    mirrored, real = jax.tree.leaves(state.mirror_carry), jax.tree.leaves(state.carry)
    assert any(bool(jnp.any(m != r)) for m, r in zip(mirrored, real, strict=True))
    resumed = _Resume(full.saved[20][0])
    train_distillation(env, _mlp(0), _lstm(1), config, progress=False, checkpoint=resumed)
    assert sorted(resumed.saved) == [40, 60]
    assert_trees_equal(resumed.saved[60][0], state)
    assert resumed.saved[60][1] == metrics
