"""`Latency`: hand-derived lagged streams, the lag draws, and every environment kind.

Training with it (resume, sweeps) is a cell of the feature matrix (test_matrix.py).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nnx_ppo.envs import DictObsEnv
from nnx_ppo.envs.base import Env, State
from nnx_ppo.wrappers import Latency, wrap_for_training


class Tape(Env):
    """obs = [t, a]: the step count and the action the last step applied. The count is
    read from ``state.obs``, so a wrapper that passed its lagged observation to ``step``
    would break it."""

    @property
    def action_size(self) -> int:
        return 1

    def reset(self, rng: jax.Array) -> State:
        return State(obs=jnp.zeros(2), reward=jnp.zeros(()), done=jnp.zeros(()))

    def step(self, state: State, action: jax.Array) -> State:
        return state.replace(obs=jnp.stack([state.obs[0] + 1.0, action[0]]))


def test_lagged_actions_and_observations_by_hand() -> None:
    # action_lag 2, obs_lag 1; the policy sends 10, 20, 30, 40, 50 at steps 1..5.
    # The environment applies a_{k-2} at step k (zero before two actions exist), so its
    # own observations after steps 1..5 are [1,0] [2,0] [3,10] [4,20] [5,30]; the policy
    # sees each one step late, the first observation [0,0] standing in before step 1's.
    env = Latency(Tape(), action_lag=2, obs_lag=1)
    step = jax.jit(env.step)
    state = env.reset(jax.random.key(0))
    seen = [np.asarray(state.obs).tolist()]
    for action in (10.0, 20.0, 30.0, 40.0, 50.0):
        state = step(state, jnp.array([action]))
        seen.append(np.asarray(state.obs).tolist())
    assert seen == [[0, 0], [0, 0], [1, 0], [2, 0], [3, 10], [4, 20]]
    # The newest true observation is kept for the environment's next step.
    assert np.asarray(state.info["latency"]["obs"][0]).tolist() == [5, 30]


def test_lags_are_drawn_per_environment_and_episode() -> None:
    env = Latency(Tape(), action_lag=(1, 3), obs_lag=(0, 1))
    n = 3000
    states = jax.vmap(env.reset)(jax.random.split(jax.random.key(0), n))
    action, obs = (np.asarray(states.info["latency"][k]) for k in ("action_lag", "obs_lag"))
    assert action.dtype == obs.dtype == np.int32
    # Uniform on {1, 2, 3} x {0, 1}, independently: each of the six pairs has p = 1/6
    # (sd of its count sqrt(3000 * 1/6 * 5/6) = 20; 100 is 5 sd).
    pairs = {(a, o): int(np.sum((action == a) & (obs == o))) for a in (1, 2, 3) for o in (0, 1)}
    assert sum(pairs.values()) == n
    assert all(abs(count - n / 6) < 100 for count in pairs.values()), pairs
    # A new episode of the same environment draws again (a new reset key).
    again = jax.vmap(env.reset)(jax.random.split(jax.random.key(1), n))
    assert np.mean(np.asarray(again.info["latency"]["action_lag"]) != action) > 0.5


@pytest.mark.parametrize(("hold_prob", "kept"), [(1.0, 1.0), (0.5, 0.625), (0.0, 0.25)])
def test_hold_prob_keeps_or_redraws_each_step(hold_prob: float, kept: float) -> None:
    # Lags in {0..3}: a step keeps its lag with probability hold + (1 - hold) / 4 (a
    # redraw may land on the same lag): 1, 0.625, 0.25. 64 envs x 100 steps.
    env = Latency(Tape(), action_lag=(0, 3), obs_lag=(0, 3), hold_prob=hold_prob)
    states = jax.vmap(env.reset)(jax.random.split(jax.random.key(0), 64))
    step = jax.jit(jax.vmap(env.step))

    def body(s: Any, _: None) -> tuple[Any, jax.Array]:
        s = step(s, jnp.zeros((64, 1)))
        return s, jnp.stack([s.info["latency"]["action_lag"], s.info["latency"]["obs_lag"]])

    _, lags = jax.lax.scan(body, states, None, length=100)  # [100, 2, 64]
    lags = np.asarray(lags)
    same = np.mean(lags[1:] == lags[:-1])
    assert abs(same - kept) < 0.03, same
    assert lags.min() >= 0 and lags.max() <= 3
    if hold_prob < 1.0:  # the redraw key is state, not a constant
        assert not np.array_equal(lags[:, 0], lags[:, 1])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"action_lag": -1}, "action_lag=-1 must be an int k >= 0"),
        ({"obs_lag": (3, 1)}, r"obs_lag=\(3, 1\) must be"),
        ({"action_lag": (0, 2.5)}, "action_lag=.* must be"),
        ({"action_lag": True}, "action_lag=True must be"),
        ({}, "are both always 0"),
        ({"action_lag": (0, 0), "obs_lag": 0}, "are both always 0"),
        ({"action_lag": 1, "hold_prob": 1.5}, "hold_prob=1.5 must be in"),
        ({"action_lag": 1, "hold_prob": "high"}, "hold_prob='high' must be a float"),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Latency(Tape(), **kwargs)


def test_dict_observations_and_actions_keep_their_structure() -> None:
    # A rollout's carry must keep its structure, shapes and dtypes from step to step.
    env = wrap_for_training(
        Latency(DictObsEnv(), action_lag=(0, 2), obs_lag=(1, 2), hold_prob=0.5),
        episode_length=10,
    )
    state = env.reset(jax.random.key(0))
    action = {k: jnp.ones((n,)) for k, n in env.action_size.items()}
    after = jax.jit(env.step)(state, action)
    assert jax.tree.structure(after) == jax.tree.structure(state)
    for a, b in zip(jax.tree.leaves(after), jax.tree.leaves(state), strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
    assert set(after.obs) == set(env.observation_size)
    assert after.info["latency"]["action"]["arm"].shape == (3, 2)  # max lag 2 + 1, arm: 2
    assert after.info["latency"]["obs"]["goal"].shape == (3, 2)


def test_discrete_gymnax_actions_are_delayed_as_integers() -> None:
    pytest.importorskip("gymnax")
    from nnx_ppo.envs import GymnaxEnv

    env = Latency(GymnaxEnv.make("CartPole-v1"), action_lag=1)
    state = env.reset(jax.random.key(0))
    history = state.info["latency"]["action"]
    assert history.shape == (2,) and history.dtype == jnp.int32
    state = jax.jit(env.step)(state, jnp.array(1, jnp.int32))
    assert np.asarray(state.info["latency"]["action"]).tolist() == [1, 0]


_BRAX_WARNINGS = (
    "ignore:JAXopt is no longer maintained:DeprecationWarning",
    "ignore:Brax System, piplines and environments:UserWarning",
    "ignore:Accessing `ncon` directly:DeprecationWarning",
)


@pytest.mark.filterwarnings(*_BRAX_WARNINGS)
def test_brax_observations_arrive_late_and_the_physics_is_unchanged() -> None:
    # With only an observation lag of 2 the simulator steps as without the wrapper
    # (the same actions reach it at once); the policy sees its observations 2 steps late.
    brax_envs = pytest.importorskip("brax.envs")
    plain = brax_envs.get_environment("inverted_pendulum", backend="generalized")
    env = Latency(plain, obs_lag=2)
    actions = jnp.sin(jnp.arange(6.0))[:, None] * 0.5

    def rollout(e: Any) -> jax.Array:
        def body(s: Any, a: jax.Array) -> tuple[Any, jax.Array]:
            s = e.step(s, a)
            return s, s.obs

        s0 = e.reset(jax.random.key(0))
        return jnp.concatenate([s0.obs[None], jax.lax.scan(body, s0, actions)[1]])

    true, lagged = jax.jit(lambda: rollout(plain))(), jax.jit(lambda: rollout(env))()
    np.testing.assert_array_equal(lagged[2:], true[:-2])
    np.testing.assert_array_equal(lagged[:2], true[:1].repeat(2, axis=0))
    assert np.abs(np.diff(true, axis=0)).max() > 0  # the pole moved


def test_a_state_of_the_wrapped_environment_is_refused() -> None:
    env = Latency(Tape(), action_lag=1)
    with pytest.raises(ValueError, match=r"Latency\.step: state\.info has no 'latency' key"):
        env.step(Tape().reset(jax.random.key(0)), jnp.zeros(1))
