"""`ObservationHistory`: hand-derived stacks over episodes with resets, jit/vmap, dict
observations, composition with `wrap_for_training`, and its errors."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nnx_ppo.envs import DictObsEnv, PointMass
from nnx_ppo.envs.base import Env, State
from nnx_ppo.wrappers import AutoResetWrapper, ObservationHistory, Wrapper, wrap_for_training


class _Counter(Env):
    """obs = [t, 10 + t]; each step adds 1 to ``state.obs`` (so it reads the obs it was
    given); ends (done = 1) when t reaches 3; ``info["seen"]`` records the obs the step
    received."""

    observation_size = 2
    action_size = 1

    def reset(self, rng: jax.Array) -> State:
        del rng
        z = jnp.zeros(())
        return State(
            obs=jnp.array([0.0, 10.0]),
            reward=z,
            done=z,
            metrics={},
            info={"seen": jnp.zeros(2), "truncation": z},
        )

    def step(self, state: State, action: jax.Array) -> State:
        del action
        obs = state.obs + 1.0
        info = {**state.info, "seen": state.obs}
        return state.replace(obs=obs, done=(obs[0] >= 3).astype(jnp.float32), info=info)


def _row(t: float) -> list[float]:
    return [t, 10.0 + t]


def _play(env: Any, steps: int) -> list[State]:
    state = env.reset(jax.random.key(0))
    states = [state]
    for _ in range(steps):
        state = env.step(state, jnp.zeros(1))
        states.append(state)
    return states


@pytest.mark.parametrize(
    ("padding", "pad"), [("zeros", [0.0, 0.0]), ("first", [0.0, 10.0])], ids=["zeros", "first"]
)
def test_stacks_oldest_first_and_restarts_at_reset(padding: str, pad: list[float]) -> None:
    env = ObservationHistory(_Counter(), length=3, padding=padding)
    assert env.observation_size == (3, 2)
    states = _play(env, 3)
    want = [
        [pad, pad, _row(0)],
        [pad, _row(0), _row(1)],
        [_row(0), _row(1), _row(2)],
        [_row(1), _row(2), _row(3)],
    ]
    for t, (state, expected) in enumerate(zip(states, want, strict=True)):
        np.testing.assert_array_equal(np.asarray(state.obs), expected, err_msg=f"step {t}")
    # the wrapped step received the newest observation, not the stack
    np.testing.assert_array_equal(np.asarray(states[3].info["seen"]), _row(2))
    assert float(states[3].done) == 1.0 and "truncation" in states[3].info
    # a new episode starts a new history: nothing of the last one is left
    np.testing.assert_array_equal(np.asarray(env.reset(jax.random.key(1)).obs), [pad, pad, _row(0)])
    # after reset_done (the trainer's auto-reset) the stack is the reset state's
    auto = AutoResetWrapper(env)
    s = auto.reset(jax.random.key(0))
    for _ in range(4):
        s = auto.step(s, jnp.zeros(1))
    np.testing.assert_array_equal(np.asarray(s.obs), [pad, _row(0), _row(1)])


def test_flatten_and_length_one() -> None:
    flat = ObservationHistory(_Counter(), length=2, flatten=True)
    assert flat.observation_size == 4
    states = _play(flat, 2)
    np.testing.assert_array_equal(np.asarray(states[2].obs), [*_row(1), *_row(2)])
    single = ObservationHistory(_Counter(), length=1)
    assert single.observation_size == (1, 2)
    np.testing.assert_array_equal(np.asarray(_play(single, 2)[2].obs), [_row(2)])


def test_jit_and_vmap_match_eager() -> None:
    env = ObservationHistory(PointMass(), length=3)
    keys = jax.random.split(jax.random.key(0), 2)
    actions = jax.random.uniform(jax.random.key(1), (3, 2, 2), minval=-1, maxval=1)
    reset, step = jax.jit(jax.vmap(env.reset)), jax.jit(jax.vmap(env.step))
    batched = reset(keys)
    eager = [env.reset(k) for k in keys]
    for t in range(3):
        batched = step(batched, actions[t])
        eager = [env.step(s, actions[t, i]) for i, s in enumerate(eager)]
    np.testing.assert_allclose(
        np.asarray(batched.obs), np.stack([np.asarray(s.obs) for s in eager]), atol=1e-6
    )
    assert batched.obs.shape == (2, 3, 2)


def test_dict_observation_stacks_only_the_named_keys() -> None:
    base = DictObsEnv()
    env = ObservationHistory(base, length=2, keys="proprio")
    assert env.observation_size == {"goal": (2,), "proprio": (2, 3)}
    s0 = env.reset(jax.random.key(0))
    s1 = env.step(s0, {"arm": jnp.ones(2), "gripper": jnp.ones(1)})
    inner0 = base.reset(jax.random.key(0))
    inner1 = base.step(inner0, {"arm": jnp.ones(2), "gripper": jnp.ones(1)})
    np.testing.assert_array_equal(np.asarray(s0.obs["proprio"][0]), np.zeros(3))
    np.testing.assert_allclose(np.asarray(s1.obs["proprio"][0]), np.asarray(inner0.obs["proprio"]))
    np.testing.assert_allclose(np.asarray(s1.obs["proprio"][1]), np.asarray(inner1.obs["proprio"]))
    np.testing.assert_allclose(np.asarray(s1.obs["goal"]), np.asarray(inner1.obs["goal"]))
    both = ObservationHistory(base, length=3)
    assert both.observation_size == {"goal": (3, 2), "proprio": (3, 3)}


def test_composes_with_wrap_for_training() -> None:
    env = ObservationHistory(
        wrap_for_training(_Counter(), episode_length=2, action_repeat=1, stagger=False), length=2
    )
    s = env.reset(jax.random.key(0))
    s = env.step(s, jnp.zeros(1))
    s = env.step(s, jnp.zeros(1))
    np.testing.assert_array_equal(np.asarray(s.obs), [_row(1), _row(2)])
    assert int(s.info["steps"]) == 2 and float(s.info["truncation"]) == 1.0
    # outside the action repeat, the history holds one observation per policy step
    repeated = ObservationHistory(wrap_for_training(_Counter(), action_repeat=2), length=2)
    s = repeated.step(repeated.reset(jax.random.key(0)), jnp.zeros(1))
    np.testing.assert_array_equal(np.asarray(s.obs), [_row(0), _row(2)])


def test_errors_name_the_argument() -> None:
    with pytest.raises(ValueError, match=r"length=0 must be an int >= 1"):
        ObservationHistory(PointMass(), length=0)
    with pytest.raises(ValueError, match=r"padding='edge'"):
        ObservationHistory(PointMass(), length=2, padding="edge")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"keys='state'.*array"):
        ObservationHistory(PointMass(), length=2, keys="state")
    with pytest.raises(
        ValueError, match=r"not in the observation: \['state'\].*keys \['goal', 'proprio'\]"
    ):
        ObservationHistory(DictObsEnv(), length=2, keys=["state"])


def test_docstring_examples_run(docstring_examples: Any) -> None:
    import nnx_ppo.wrappers.history

    docstring_examples(nnx_ppo.wrappers.history)


class _WithPrivileged(Wrapper):
    """PointMass with Playground-style dict observations: ``"state"`` (the position)
    and ``"privileged_state"`` (its square, which only a critic should read)."""

    @property
    def observation_size(self) -> dict[str, tuple[int, ...]]:
        return {"state": (2,), "privileged_state": (2,)}

    def _dict(self, state: State) -> State:
        return state.replace(obs={"state": state.obs, "privileged_state": state.obs**2})

    def reset(self, rng: jax.Array) -> State:
        return self._dict(self.env.reset(rng))

    def step(self, state: State, action: jax.Array) -> State:
        return self._dict(self.env.step(state.replace(obs=state.obs["state"]), action))


@pytest.mark.extended
def test_train_ppo_with_history_and_privileged_critic() -> None:
    from flax import nnx

    from nnx_ppo.algorithms.config import EvalConfig, PPOConfig, TrainConfig
    from nnx_ppo.algorithms.ppo.train import train_ppo
    from nnx_ppo.networks.export import DeterministicPolicy
    from nnx_ppo.networks.factories import make_mlp_actor_critic

    env = ObservationHistory(
        wrap_for_training(_WithPrivileged(PointMass()), episode_length=3, stagger=False),
        length=2,
        keys="state",
    )
    assert env.observation_size == {"state": (2, 2), "privileged_state": (2,)}
    net = make_mlp_actor_critic(
        env.observation_size,
        2,
        (8,),
        (8,),
        rngs=nnx.Rngs(0),
        actor_obs="state",
        critic_obs=("state", "privileged_state"),
    )
    config = TrainConfig(
        ppo=PPOConfig(n_envs=2, rollout_length=4, n_minibatches=1, n_epochs=1, total_steps=8),
        eval=EvalConfig(enabled=False),
    )
    result = train_ppo(env, net, config, progress=False)
    assert result.total_steps == 8
    assert all(np.isfinite(v) for v in result.metrics.values())
    policy = DeterministicPolicy(net, env.observation_size)
    assert policy.observation_names == ("obs/state",)
