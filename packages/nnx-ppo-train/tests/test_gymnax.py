"""`GymnaxEnv` (the ``gymnax`` extra) and `MaskObservation`: gymnax environments train,
resume and export through the public adapter; termination and truncation stay apart."""

from __future__ import annotations

import shutil
import subprocess
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx, struct

gymnax = pytest.importorskip("gymnax")
from gymnax.environments import environment, spaces  # noqa: E402

from nnx_ppo.algorithms.checkpointing.checkpointer import Checkpointer  # noqa: E402
from nnx_ppo.algorithms.config import EvalConfig, PPOConfig, TrainConfig  # noqa: E402
from nnx_ppo.algorithms.ppo.train import train_ppo  # noqa: E402
from nnx_ppo.algorithms.sweeps.many import train_many  # noqa: E402
from nnx_ppo.envs import GymnaxEnv  # noqa: E402
from nnx_ppo.networks.export import DeterministicPolicy, export_policy, load_stablehlo  # noqa: E402
from nnx_ppo.networks.factories import make_mlp_actor_critic  # noqa: E402
from nnx_ppo.wrappers import MaskObservation, wrap_for_training  # noqa: E402

# 4 envs x 4 steps per iteration, 8-unit networks: a few iterations in seconds.
CONFIG = TrainConfig(
    ppo=PPOConfig(n_envs=4, rollout_length=4, n_minibatches=2, n_epochs=1, total_steps=64),
    eval=EvalConfig(n_envs=4, max_episode_length=8, every_steps=32),
)


def _network(env: Any, rngs: nnx.Rngs | None = None) -> Any:
    return make_mlp_actor_critic(
        env.observation_size,
        env.action_size,
        (8,),
        (8,),
        rngs=nnx.Rngs(0) if rngs is None else rngs,
        action_distribution=env.unwrapped.action_distribution,
    )


def _params(network: Any) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree.leaves(nnx.state(network, nnx.Param))]


# --------------------------------------------------------------------------- hand-built


@struct.dataclass
class _CountState(environment.EnvState):
    time: int


@struct.dataclass
class _CountParams(environment.EnvParams):
    terminate_at: int = 3
    max_steps_in_episode: int = 3


class _Count(environment.Environment[_CountState, _CountParams]):
    """Counts steps; terminates when ``time == terminate_at``; gymnax's default time
    limit truncates at ``time >= max_steps_in_episode``."""

    @property
    def default_params(self) -> _CountParams:
        return _CountParams()

    def reset_env(self, key: jax.Array, params: _CountParams) -> tuple[jax.Array, _CountState]:
        return jnp.zeros(1), _CountState(time=0)

    def step_env(self, key, state, action, params):
        state = _CountState(time=state.time + 1)
        terminated = state.time == params.terminate_at
        return jnp.full(1, state.time), state, jnp.float32(1), terminated, {}

    def action_space(self, params=None) -> spaces.Discrete:
        return spaces.Discrete(2)


def _run(env: GymnaxEnv, n: int) -> list[tuple[float, float]]:
    """``(done, truncation)`` of ``n`` steps from a reset."""
    state, out = env.reset(jax.random.key(0)), []
    for _ in range(n):
        state = env.step(state, jnp.int32(0))
        out.append((float(state.done), float(state.info["truncation"])))
    return out


def test_terminating_on_the_time_limit_step_is_a_termination():
    # time reaches 3 on the third step: terminated (time == 3) and at the limit (3 >= 3).
    env = GymnaxEnv(_Count(), _CountParams(terminate_at=3, max_steps_in_episode=3))
    assert _run(env, 3) == [(0.0, 0.0), (0.0, 0.0), (1.0, 0.0)]


def test_hitting_only_the_time_limit_is_a_truncation():
    env = GymnaxEnv(_Count(), _CountParams(terminate_at=99, max_steps_in_episode=3))
    assert env.max_episode_steps == 3
    assert _run(env, 3) == [(0.0, 0.0), (0.0, 0.0), (1.0, 1.0)]


def test_terminating_before_the_limit_is_a_termination_and_time_limit_false_ignores_it():
    params = _CountParams(terminate_at=2, max_steps_in_episode=3)
    assert _run(GymnaxEnv(_Count(), params), 2) == [(0.0, 0.0), (1.0, 0.0)]
    unlimited = GymnaxEnv(_Count(), _CountParams(terminate_at=99), time_limit=False)
    assert unlimited.max_episode_steps is None
    assert _run(unlimited, 4) == [(0.0, 0.0)] * 4


def test_with_time_limit_false_the_training_wrapper_owns_the_limit():
    # gymnax's limit (2) is ignored; EpisodeWrapper's (3) truncates.
    inner = GymnaxEnv(
        _Count(), _CountParams(terminate_at=99, max_steps_in_episode=2), time_limit=False
    )
    env = wrap_for_training(inner, episode_length=3, stagger=False)
    assert _run(env, 3) == [(0.0, 0.0), (0.0, 0.0), (1.0, 1.0)]


def test_the_adapter_does_not_auto_reset():
    # gymnax's own step would reset the finished episode (time back to 0); ours keeps it.
    env = GymnaxEnv(_Count(), _CountParams(terminate_at=99, max_steps_in_episode=2))
    state = env.reset(jax.random.key(0))
    for _ in range(3):
        state = env.step(state, jnp.int32(0))
    assert int(state.pipeline_state.env_state.time) == 3
    assert float(state.obs[0]) == 3.0


# --------------------------------------------------------------------------- spaces


def test_discrete_and_box_spaces_map_to_samplers_and_box_actions_are_rescaled():
    cartpole = GymnaxEnv.make("CartPole-v1")
    assert (cartpole.observation_size, cartpole.action_size) == (4, 2)
    assert (cartpole.action_distribution, cartpole.discrete) == ("categorical", True)
    assert cartpole.max_episode_steps == 500
    pendulum = GymnaxEnv.make("Pendulum-v1", max_torque=3.0)
    assert (pendulum.observation_size, pendulum.action_size) == (3, 1)
    assert pendulum.action_distribution == "normal_tanh"
    state = pendulum.reset(jax.random.key(0))
    # [-1, 1] -> [-3, 3]: 0.5 -> 1.5; beyond 1 is clipped first.
    for action, torque in ((0.5, 1.5), (-1.0, -3.0), (7.0, 3.0)):
        stepped = pendulum.step(state, jnp.array([action]))
        assert float(stepped.pipeline_state.env_state.last_u) == pytest.approx(torque)
    raw = GymnaxEnv.make("Pendulum-v1", rescale_actions=False)
    stepped = raw.step(raw.reset(jax.random.key(0)), jnp.array([0.5]))
    assert float(stepped.pipeline_state.env_state.last_u) == pytest.approx(0.5)


def test_wrong_arguments_are_named():
    with pytest.raises(TypeError, match="not a gymnax Environment"):
        GymnaxEnv(object())
    with pytest.raises(ValueError, match=r"\['gravityy'\] are not fields"):
        GymnaxEnv.make("CartPole-v1", gravityy=1.0)
    env = GymnaxEnv.make("Pendulum-v1")
    with pytest.raises(ValueError, match=r"shape \(1,\), got \(2,\)"):
        env.step(env.reset(jax.random.key(0)), jnp.zeros(2))


def test_importing_the_envs_does_not_import_gymnax():
    code = "import sys, nnx_ppo.envs, nnx_ppo.wrappers; print('gymnax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# --------------------------------------------------------------------------- masking


def test_mask_observation_gives_velocity_free_cartpole():
    full = GymnaxEnv.make("CartPole-v1")
    env = MaskObservation(full, keep=[0, 2])  # x, theta (no x_dot, theta_dot)
    assert env.observation_size == 2
    state = env.reset(jax.random.key(0))
    reference = full.reset(jax.random.key(0))
    for _ in range(3):
        state = jax.jit(env.step)(state, jnp.int32(1))
        reference = jax.jit(full.step)(reference, jnp.int32(1))
        np.testing.assert_array_equal(state.obs, reference.obs[jnp.array([0, 2])])
    with pytest.raises(ValueError, match=r"keep=\[0, 4\] must be distinct int indices in \[0, 4\)"):
        MaskObservation(full, keep=[0, 4])
    with pytest.raises(ValueError, match="distinct"):
        MaskObservation(full, keep=[1, 1])


# --------------------------------------------------------------------------- training


# CartPole (discrete actions) runs in the extended session: the feature matrix's pixel
# family (test_matrix.py, default run) trains a discrete GymnaxEnv and checks its
# StableHLO export. Pendulum's Box action (rescaled by the adapter) is checked here.
@pytest.mark.parametrize(
    "name", [pytest.param("CartPole-v1", marks=pytest.mark.extended), "Pendulum-v1"]
)
def test_train_ppo_on_gymnax_then_export_gives_the_networks_actions(name, tmp_path):
    env = GymnaxEnv.make(name)
    network = _network(env)
    before = _params(network)
    result = train_ppo(env, network, CONFIG, progress=False)
    assert any(np.any(a != b) for a, b in zip(before, _params(network), strict=True))
    assert result.eval_history and np.isfinite(
        result.eval_history[-1][1]["eval/episode_reward/mean"]
    )
    # The deterministic policy, exported to StableHLO and loaded back, gives the trained
    # network's eval() actions on the environments' last observations.
    obs = result.state.env_state.obs
    reference = nnx.clone(network)
    reference.eval()
    want = reference(reference.initialize_state(obs.shape[0]), obs).output.actions
    policy = DeterministicPolicy(network, env.observation_size)
    _, actions = policy.step({}, obs)
    loaded = load_stablehlo(export_policy(policy, None, tmp_path / "policy"))
    exported = loaded.step({policy.observation_names[0]: obs})[policy.action_names[0]]
    np.testing.assert_allclose(actions, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(exported, want, rtol=1e-5, atol=1e-6)


@pytest.mark.extended  # the feature matrix's pixel family resumes a GymnaxEnv run bitwise
def test_a_resumed_gymnax_run_equals_the_uninterrupted_one_bit_for_bit(tmp_path):
    env = MaskObservation(GymnaxEnv.make("CartPole-v1", max_steps_in_episode=6), keep=[0, 2])
    config = TrainConfig(ppo=CONFIG.ppo, eval=EvalConfig(enabled=False))
    whole = _network(env, nnx.Rngs(0))
    with Checkpointer(tmp_path / "whole", save_every_steps=32, max_to_keep=None) as ckpt:
        train_ppo(env, whole, config, progress=False, checkpoint=ckpt)
        assert ckpt.steps == [32, 64]
    # A second run that holds only the checkpoint at 32 resumes from it.
    shutil.copytree(tmp_path / "whole" / "32", tmp_path / "half" / "32")
    resumed = _network(env, nnx.Rngs(1))
    with Checkpointer(tmp_path / "half") as ckpt:
        train_ppo(env, resumed, config, progress=False, checkpoint=ckpt)
        assert ckpt.restored_step == 32
    for a, b in zip(_params(whole), _params(resumed), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.heavy  # ~25 s: K runs compile their own program; train_ppo covers the adapter
def test_train_many_trains_a_gymnax_env():
    env = GymnaxEnv.make("Pendulum-v1")
    result = train_many(env, lambda rngs: _network(env, rngs), CONFIG, seeds=[0, 1], progress=False)
    assert len(result.eval_histories) == 2
    assert all(np.isfinite(h[-1][1]["eval/episode_reward/mean"]) for h in result.eval_histories)


def test_env_params_are_randomized_per_environment_by_the_trainers_hook():
    env0, params = gymnax.make("Pendulum-v1")
    env = GymnaxEnv(env0, params)  # Python-scalar fields, as gymnax builds them

    def heavier_gravity(params, rng):
        g = jax.vmap(lambda k: jax.random.uniform(k, (), minval=5.0, maxval=15.0))(rng)
        return params.replace(g=g), jax.tree.map(lambda _: None, params).replace(g=0)

    config = TrainConfig(ppo=CONFIG.ppo, eval=EvalConfig(enabled=False))
    result = train_ppo(env, _network(env), config, progress=False, randomization_fn=heavier_gravity)
    g = np.asarray(result.state.models["g"])
    assert g.shape == (4,) and len(set(g.tolist())) == 4
    assert np.all((g >= 5.0) & (g <= 15.0))
