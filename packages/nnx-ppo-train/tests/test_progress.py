"""Training progress in ``state.info``: the exact step counts an environment sees in
every step of every device call, after a resume, in evaluation; environments without
the keys are untouched."""

from __future__ import annotations

from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.algorithms.checkpointing.checkpointer import Checkpointer
from nnx_ppo.algorithms.config import EvalConfig, LogLevel, PPOConfig, TrainConfig
from nnx_ppo.algorithms.core.progress import (
    IS_TRAINING,
    TRAINING_PROGRESS,
    TRAINING_STEP,
    check_step_range,
    progress_info,
    training_progress,
    write_progress,
)
from nnx_ppo.algorithms.observe.evaluation import evaluate
from nnx_ppo.algorithms.ppo.train import train_ppo
from nnx_ppo.envs import PointMass
from nnx_ppo.networks.factories import make_lstm_actor_critic, make_mlp_actor_critic
from nnx_ppo.wrappers import EpisodeWrapper


class ProbeEnv(PointMass):
    """PointMass that declares the progress keys and reports what each step saw to
    ``seen`` (a host callback, one call per environment and step)."""

    def __init__(self, seen: list[tuple[int, float, bool]]) -> None:
        super().__init__()
        self.seen = seen

    def reset(self, rng):
        state = super().reset(rng)
        return state.replace(info={**state.info, **progress_info()})

    def step(self, state, action):
        def record(step, progress, training):
            self.seen.append((int(step), float(progress), bool(training)))

        info = state.info
        jax.debug.callback(record, info[TRAINING_STEP], info[TRAINING_PROGRESS], info[IS_TRAINING])
        return super().step(state, action)


N_ENVS, T = 4, 3


def _config(total_steps: int, **ppo) -> TrainConfig:
    settings = dict(
        n_envs=N_ENVS, rollout_length=T, n_minibatches=2, n_epochs=1,
        total_steps=total_steps, log_level=LogLevel.LOSSES,
    )  # fmt: skip
    return TrainConfig(
        ppo=PPOConfig(**{**settings, **ppo}), eval=EvalConfig(n_envs=2, max_episode_length=2)
    )


def _expected(iterations: range, total: int) -> Counter:
    """Iteration k, rollout step t: (k * T + t) * n_envs steps, seen by every env."""
    counts: Counter = Counter()
    for k in iterations:
        for t in range(T):
            step = (k * T + t) * N_ENVS
            counts[(step, np.float32(step) / np.float32(total), True)] += N_ENVS
    return counts


def _check(seen, iterations: range, total: int) -> None:
    training = sorted((s, p) for s, p, t in seen if t)
    expected = sorted(
        (s, float(p)) for (s, p, _), n in _expected(iterations, total).items() for _ in range(n)
    )
    assert [s for s, _ in training] == [s for s, _ in expected]
    np.testing.assert_allclose([p for _, p in training], [p for _, p in expected], rtol=1e-6)


@pytest.mark.parametrize("reset_mode", ["cached", "fresh"])
def test_every_step_of_every_call_sees_the_exact_count(reset_mode):
    seen: list = []
    env = EpisodeWrapper(ProbeEnv(seen), episode_length=4)  # episodes end mid-rollout
    total = 5 * N_ENVS * T
    net = make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0))
    result = train_ppo(env, net, _config(total, reset_mode=reset_mode), progress=False)
    assert result.total_steps == total
    _check(seen, range(5), total)
    # Two evaluations (start and end), 2 envs x 2 steps each: the final task.
    evaluation = [x for x in seen if not x[2]]
    assert evaluation == [(total, 1.0, False)] * 8


def test_several_iterations_per_call_and_a_recurrent_network():
    seen: list = []
    env = EpisodeWrapper(ProbeEnv(seen), episode_length=4)
    total = 6 * N_ENVS * T
    net = make_lstm_actor_critic(2, 2, 8, (8,), (8,), rngs=nnx.Rngs(0))
    config = _config(total, iterations_per_call=3)
    train_ppo(env, net, config, progress=False)
    _check(seen, range(6), total)


class _Stop(Exception):
    pass


@pytest.mark.heavy
def test_a_resumed_run_continues_the_count(tmp_path):
    total = 6 * N_ENVS * T  # 6 iterations of 12 steps

    def stop(metrics, step):
        if step >= 36:
            raise _Stop

    first: list = []
    env = EpisodeWrapper(ProbeEnv(first), episode_length=4)
    net = make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0))
    # A checkpoint every call: each call's log is read before the next call starts.
    with Checkpointer(tmp_path / "run", save_every_steps=12) as ckpt, pytest.raises(_Stop):
        train_ppo(env, net, _config(total), progress=False, log_fn=stop, checkpoint=ckpt)
    _check(first, range(3), total)  # stopped after iteration 3, checkpoint at step 36

    second: list = []
    env = EpisodeWrapper(ProbeEnv(second), episode_length=4)
    net = make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0))
    with Checkpointer(tmp_path / "run", save_every_steps=12) as ckpt:
        train_ppo(env, net, _config(total), progress=False, checkpoint=ckpt)
        assert ckpt.restored_step == 36
    _check(second, range(3, 6), total)


def test_declaring_the_keys_changes_nothing_else_and_undeclared_envs_are_untouched():
    """An env that declares the keys (but whose dynamics ignore them) trains to the same
    parameters, bit for bit, as the same env without them; the latter's state keeps its
    own info keys only."""

    def run(env):
        net = make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0))
        return train_ppo(env, net, _config(3 * N_ENVS * T), progress=False).state

    plain = run(EpisodeWrapper(PointMass(), episode_length=4))
    declared = run(EpisodeWrapper(ProbeEnv([]), episode_length=4))
    assert set(plain.env_state.info) == {"steps", "truncation"}
    assert set(declared.env_state.info) == {"steps", "truncation", *progress_info()}
    for a, b in zip(jax.tree.leaves(plain.params), jax.tree.leaves(declared.params), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_evaluate_alone_writes_the_final_task_and_leaves_the_step():
    seen: list = []
    env = EpisodeWrapper(ProbeEnv(seen), episode_length=2)
    net = make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0))
    evaluate(env, net, jax.random.PRNGKey(0), n_envs=2, max_episode_length=2)
    assert seen == [(0, 1.0, False)] * 4


def test_write_progress_keeps_dtypes_and_shapes_and_checks_the_step_dtype():
    env = ProbeEnv([])
    state = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), 3))
    written = write_progress(state, step=jnp.int32(7), progress=0.5, training=False)
    for key in (TRAINING_STEP, TRAINING_PROGRESS, IS_TRAINING):
        assert written.info[key].shape == (3,)
        assert written.info[key].dtype == state.info[key].dtype
    assert written.info[TRAINING_STEP].tolist() == [7, 7, 7]
    assert written.info[IS_TRAINING].tolist() == [False] * 3
    bad = state.replace(info={**state.info, TRAINING_STEP: jnp.zeros(3, jnp.float32)})
    with pytest.raises(TypeError, match="declare it as an integer"):
        write_progress(bad, step=1, progress=0.0, training=True)
    with pytest.raises(ValueError, match="more than its dtype int32 holds"):
        check_step_range(state, 2**31)
    check_step_range(state, 2**31 - 1)


def test_training_progress_is_a_clipped_float32_fraction():
    assert training_progress(jnp.int32(30), 120).dtype == jnp.float32
    assert float(training_progress(jnp.int32(30), 120)) == 0.25
    assert float(training_progress(jnp.int32(130), 120)) == 1.0
    assert float(training_progress(jnp.int32(0), 0)) == 1.0
