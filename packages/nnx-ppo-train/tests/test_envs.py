"""Tests for nnx_ppo.envs: shapes, determinism, jit/vmap, hand-checked rewards."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nnx_ppo.envs as envs_pkg
from nnx_ppo.envs import DictObsEnv, Env, MemoryTask, PointMass, State, TwoAgentEnv
from nnx_ppo.envs import base as envs_base

ENVS = {
    "point_mass": lambda: PointMass(),
    "memory_task": lambda: MemoryTask(delay=2, cue_size=3, cue_probability=0.5),
    "dict_obs": lambda: DictObsEnv(),
    "two_agent": lambda: TwoAgentEnv(),
}


def _actions(env: Env, key: jax.Array, batch: tuple[int, ...] = ()) -> object:
    """Random actions in [-1.5, 1.5] (so clipping is exercised) shaped like action_size."""
    size = env.action_size
    if isinstance(size, int):
        return jax.random.uniform(key, (*batch, size), minval=-1.5, maxval=1.5)
    keys = jax.random.split(key, len(size))
    return {
        k: jax.random.uniform(kk, (*batch, n), minval=-1.5, maxval=1.5)
        for kk, (k, n) in zip(keys, sorted(size.items()), strict=True)
    }


def _rollout(env: Env, key: jax.Array, n_steps: int) -> list[State]:
    reset_key, act_key = jax.random.split(key)
    states = [env.reset(reset_key)]
    for k in jax.random.split(act_key, n_steps):
        states.append(env.step(states[-1], _actions(env, k)))
    return states


def _spec(tree: object) -> object:
    return jax.tree.map(lambda x: (jnp.shape(x), jnp.asarray(x).dtype), tree)


def _assert_trees_equal(a: object, b: object) -> None:
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        if jnp.issubdtype(jnp.asarray(x).dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("name", sorted(ENVS))
def test_shapes_match_declared_sizes_and_are_stable(name):
    env = ENVS[name]()
    states = _rollout(env, jax.random.key(0), 3)
    # The declared observation_size equals the one derived from reset's output shape.
    assert env.observation_size == Env.observation_size.fget(env)
    obs_size = env.observation_size
    if isinstance(obs_size, int):
        assert states[0].obs.shape == (obs_size,)
    else:
        assert {k: v.shape for k, v in states[0].obs.items()} == obs_size
    for s in states:
        # Scalars per env, float32, and the same tree/shape/dtype at every step (scan-able).
        assert _spec(s) == _spec(states[0])
        assert s.done.shape == () and s.done.dtype == jnp.float32
        for r in jax.tree.leaves(s.reward):
            assert r.shape == () and r.dtype == jnp.float32
        assert float(s.done) == 0.0  # our envs never truncate, these configs never terminate


@pytest.mark.parametrize("name", sorted(ENVS))
def test_deterministic_given_key_and_key_matters(name):
    env = ENVS[name]()
    a = _rollout(env, jax.random.key(3), 4)
    b = _rollout(env, jax.random.key(3), 4)
    c = _rollout(env, jax.random.key(4), 4)
    _assert_trees_equal(a, b)
    assert not np.array_equal(
        np.concatenate([np.ravel(x) for x in jax.tree.leaves(a[0].obs)]),
        np.concatenate([np.ravel(x) for x in jax.tree.leaves(c[0].obs)]),
    )


@pytest.mark.parametrize("name", sorted(ENVS))
def test_jit_vmap_matches_unbatched_eager(name):
    env = ENVS[name]()
    n = 3
    reset_keys = jax.random.split(jax.random.key(1), n)
    actions = _actions(env, jax.random.key(2), (n,))

    @jax.jit
    def batched(keys, actions):
        s0 = jax.vmap(env.reset)(keys)
        return jax.vmap(env.step)(s0, actions)

    out = batched(reset_keys, actions)
    for i in range(n):
        expected = env.step(env.reset(reset_keys[i]), jax.tree.map(lambda x, i=i: x[i], actions))
        got = jax.tree.map(lambda x, i=i: x[i], out)
        for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True):
            if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
                x, y = jax.random.key_data(x), jax.random.key_data(y)
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-6)


def test_raw_uint32_keys_work():
    # brax and Playground use jax.random.PRNGKey; typed keys are tested everywhere else.
    env = MemoryTask(delay=1)
    s = env.step(env.reset(jax.random.PRNGKey(0)), jnp.zeros(1))
    assert s.obs.shape == (1,)


def _point_mass_at(env: PointMass, pos: tuple[float, float]) -> State:
    p = jnp.asarray(pos, jnp.float32)
    return env.reset(jax.random.key(0)).replace(obs=p, pipeline_state=p)


def test_point_mass_scripted_rewards():
    env = PointMass(step_size=0.1, arena_size=2.0)
    s = _point_mass_at(env, (0.3, 0.4))
    # (0.3, 0.4) + 0.1 * (-1, -1) = (0.2, 0.3); r = -sqrt(0.04 + 0.09) = -sqrt(0.13).
    s = env.step(s, jnp.array([-1.0, -1.0]))
    np.testing.assert_allclose(s.obs, [0.2, 0.3], atol=1e-6)
    np.testing.assert_allclose(s.reward, -math.sqrt(0.13), rtol=1e-6)
    np.testing.assert_allclose(s.metrics["distance"], math.sqrt(0.13), rtol=1e-6)
    # Action (-2, 0) is clipped to (-1, 0): (0.1, 0.3); r = -sqrt(0.01 + 0.09).
    s = env.step(s, jnp.array([-2.0, 0.0]))
    np.testing.assert_allclose(s.obs, [0.1, 0.3], atol=1e-6)
    np.testing.assert_allclose(s.reward, -math.sqrt(0.1), rtol=1e-6)
    # The arena clips the position: (1.95, 0) + (0.1, 0) -> (2.0, 0); r = -2.
    s = env.step(_point_mass_at(env, (1.95, 0.0)), jnp.array([1.0, 0.0]))
    np.testing.assert_allclose(s.obs, [2.0, 0.0])
    np.testing.assert_allclose(s.reward, -2.0)
    assert float(s.done) == 0.0


def test_point_mass_start_positions_and_termination():
    env = PointMass(init_radius=0.5, terminate_radius=0.1)
    starts = jax.vmap(env.reset)(jax.random.split(jax.random.key(0), 256)).obs
    assert float(jnp.max(jnp.abs(starts))) <= 0.5
    assert float(jnp.max(jnp.abs(starts))) > 0.4  # it does use the whole square
    # (0.15, 0) -> (0.05, 0): distance 0.05 < 0.1 terminates; (0.3, 0) -> (0.2, 0) does not.
    assert float(env.step(_point_mass_at(env, (0.15, 0.0)), jnp.array([-1.0, 0.0])).done) == 1.0
    assert float(env.step(_point_mass_at(env, (0.3, 0.0)), jnp.array([-1.0, 0.0])).done) == 0.0


def test_memory_task_scripted_rewards():
    env = MemoryTask(delay=2, cue_size=2)
    s = env.reset(jax.random.key(0))
    # Put o_{t-2} = (1, -1) and o_{t-1} = (-1, -1) in the history.
    history = jnp.array([[1.0, -1.0], [-1.0, -1.0]])
    s = s.replace(pipeline_state={**s.pipeline_state, "history": history})
    # target = o_{t-2} = (1, -1); a = (1, 0): r = mean(1 * 1, 0 * -1) = 0.5.
    s1 = env.step(s, jnp.array([1.0, 0.0]))
    np.testing.assert_allclose(s1.reward, 0.5)
    np.testing.assert_allclose(s1.metrics["max_reward"], 1.0)
    # Next target = o_{t-1} = (-1, -1); a = (0.5, -3) clipped to (0.5, -1):
    # r = mean(-0.5, 1) = 0.25.
    s2 = env.step(s1, jnp.array([0.5, -3.0]))
    np.testing.assert_allclose(s2.reward, 0.25)
    # Next target = o_t, the observation of s (the history shifted it in).
    s3 = env.step(s2, s.obs)
    np.testing.assert_allclose(s3.reward, 1.0)
    # Cues are +-1 (cue_probability=1) and change over time.
    obs = jnp.stack([s.obs, s1.obs, s2.obs, s3.obs])
    assert set(np.unique(np.asarray(obs)).tolist()) <= {-1.0, 1.0}


def test_memory_task_hold_scores_the_last_shown_cue():
    # delay 1, hold: cues o_0..o_4 = +1, 0, 0, -1, 0 (0: not shown). The target at step
    # t is the last cue shown at or before t - 1: t=0: none (0); t=1..3: +1 (o_0 held
    # through the unshown o_1, o_2); t=4: -1 (o_3). Acting +1 every step earns
    # 0, 1, 1, 1, -1.
    env = MemoryTask(delay=1, cue_probability=0.5, hold=True)
    s = env.reset(jax.random.key(0))
    cues = [1.0, 0.0, 0.0, -1.0, 0.0]
    s = s.replace(pipeline_state={**s.pipeline_state, "cue": jnp.array([cues[0]])})
    rewards = []
    for t in range(5):
        s = env.step(s, jnp.ones(1))
        rewards.append(float(s.reward))
        if t + 1 < 5:  # show the scripted next cue instead of the drawn one
            s = s.replace(pipeline_state={**s.pipeline_state, "cue": jnp.array([cues[t + 1]])})
    assert rewards == [0.0, 1.0, 1.0, 1.0, -1.0]
    assert "held" not in MemoryTask().reset(jax.random.key(0)).pipeline_state
    with pytest.raises(ValueError, match="hold=1 must be True or False"):
        MemoryTask(hold=1)


def _memory_returns(env: MemoryTask, policy, n_envs: int, n_steps: int) -> jax.Array:
    """Undiscounted returns [n_envs]; policy(obs_history [t+1, cue]) -> action [cue]."""

    def episode(key):
        s = env.reset(key)
        history = [s.obs]
        total = jnp.zeros(())
        for _ in range(n_steps):
            s = env.step(s, policy(history))
            history.append(s.obs)
            total = total + s.reward
        return total

    return jax.jit(jax.vmap(episode))(jax.random.split(jax.random.key(0), n_envs))


def test_memory_task_oracle_optimal_and_memoryless_gets_zero():
    k, n_steps, n_envs = 3, 12, 512
    env = MemoryTask(delay=k)

    def oracle(history):  # the k-steps-ago cue (zeros before it exists)
        return history[-1 - k] if len(history) > k else jnp.zeros(1)

    def copy_current(history):  # memoryless: reproduce the cue seen now
        return history[-1]

    def constant(history):  # memoryless: always +1
        return jnp.ones(1)

    def window(history):  # remembers k - 1 steps: still not enough
        return history[-k] if len(history) >= k else jnp.zeros(1)

    # Oracle: reward 1 at each of the n_steps - k steps with a target, 0 before: 12 - 3 = 9.
    np.testing.assert_allclose(_memory_returns(env, oracle, n_envs, n_steps), n_steps - k)
    # Memoryless policies: each reward is a product of independent +-1 cues (or +-1 alone),
    # mean 0, variance 1, pairwise uncorrelated; the mean return over 512 episodes of 9
    # rewarded steps has std sqrt(9 / 512) = 0.13, so |mean| < 0.8 is a > 6-sigma bound.
    for policy in (copy_current, constant, window):
        returns = _memory_returns(env, policy, n_envs, n_steps)
        assert abs(float(jnp.mean(returns))) < 0.8, policy.__name__


def test_memory_task_sparse_cues_expected_optimum():
    # With cue_probability p the oracle earns p * (T - k) in expectation: 0.5 * 9 = 4.5.
    # Per episode it is Binomial(9, 0.5): std 1.5; over 512 episodes std 0.066.
    k, n_steps = 3, 12
    env = MemoryTask(delay=k, cue_probability=0.5)

    def oracle(history):
        return history[-1 - k] if len(history) > k else jnp.zeros(1)

    returns = _memory_returns(env, oracle, 512, n_steps)
    assert abs(float(jnp.mean(returns)) - 4.5) < 0.4
    assert set(np.unique(np.asarray(returns)).tolist()) <= set(range(10))


def test_dict_obs_env_scripted_rewards():
    env = DictObsEnv(step_size=0.1, grip_radius=0.15, grip_weight=0.1)
    s = env.reset(jax.random.key(0))
    zero2 = jnp.zeros(2)
    goal = jnp.array([0.1, 0.0])
    s = s.replace(pipeline_state={"hand": zero2, "grip": jnp.zeros(1), "goal": goal})
    right = jnp.array([1.0, 0.0])
    # hand (0,0) -> (0.1,0): d = 0 < 0.15, gripper +1 pays: r = -0 + 0.1 * 1 * (+1) = 0.1.
    s = env.step(s, {"arm": right, "gripper": jnp.array([1.0])})
    np.testing.assert_allclose(s.reward, 0.1, atol=1e-6)
    np.testing.assert_allclose(s.obs["proprio"], [0.1, 0.0, 1.0], atol=1e-6)
    np.testing.assert_allclose(s.obs["goal"], goal)
    # hand -> (0.2,0): d = 0.1 < 0.15, gripper -1 (open) is wrong: r = -0.1 - 0.1 = -0.2.
    s = env.step(s, {"arm": right, "gripper": jnp.array([-1.0])})
    np.testing.assert_allclose(s.reward, -0.2, atol=1e-6)
    # hand -> (0.3,0): d = 0.2 >= 0.15, gripper -1 (open) is right: r = -0.2 + 0.1 = -0.1.
    s = env.step(s, {"arm": right, "gripper": jnp.array([-1.0])})
    np.testing.assert_allclose(s.reward, -0.1, atol=1e-6)
    np.testing.assert_allclose(s.metrics["distance"], 0.2, atol=1e-6)


def test_two_agent_env_scripted_rewards():
    env = TwoAgentEnv(step_size=0.1)
    s = env.reset(jax.random.key(0))
    s = s.replace(
        pipeline_state={"agent_a": jnp.array([0.3, 0.4]), "agent_b": jnp.array([0.0, 0.0])}
    )
    s = env.step(s, {"agent_a": jnp.array([-1.0, -1.0]), "agent_b": jnp.array([1.0, 1.0])})
    # p_a = (0.2, 0.3), p_b = (0.1, 0.1): r_a = -sqrt(0.13); r_b = -||(-0.1, -0.2)|| = -sqrt(0.05).
    np.testing.assert_allclose(s.reward["agent_a"], -math.sqrt(0.13), rtol=1e-6)
    np.testing.assert_allclose(s.reward["agent_b"], -math.sqrt(0.05), rtol=1e-6)
    np.testing.assert_allclose(s.obs["agent_a"], [0.2, 0.3, 0.1, 0.1], atol=1e-6)
    np.testing.assert_allclose(s.obs["agent_b"], [0.1, 0.1, 0.2, 0.3], atol=1e-6)
    np.testing.assert_allclose(s.metrics["distance_ab"], math.sqrt(0.05), rtol=1e-6)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: PointMass(step_size=0.0), "step_size=0.0"),
        (lambda: PointMass(init_radius=-1.0), "init_radius=-1.0"),
        (lambda: PointMass(init_radius=3.0, arena_size=2.0), "arena_size=2.0"),
        (lambda: PointMass(terminate_radius=float("nan")), "terminate_radius=nan"),
        (lambda: MemoryTask(delay=0), "delay=0"),
        (lambda: MemoryTask(cue_size=True), "cue_size=True"),
        (lambda: MemoryTask(cue_probability=1.5), "cue_probability=1.5"),
        (lambda: DictObsEnv(grip_radius=0.0), "grip_radius=0.0"),
        (lambda: TwoAgentEnv(step_size=-0.1), "step_size=-0.1"),
    ],
)
def test_constructor_validation(make, match):
    with pytest.raises(ValueError, match=match.replace("(", r"\(")):
        make()


def test_wrong_action_shape_or_keys_is_a_clear_error():
    env = PointMass()
    s = env.reset(jax.random.key(0))
    with pytest.raises(ValueError, match=r"shape \(2,\), got \(4, 2\).*vmap"):
        env.step(s, jnp.zeros((4, 2)))
    denv = DictObsEnv()
    ds = denv.reset(jax.random.key(0))
    with pytest.raises(ValueError, match=r"keys \['arm', 'gripper'\], got \['arm'\]"):
        denv.step(ds, {"arm": jnp.zeros(2)})
    with pytest.raises(ValueError, match=r"gripper.*shape \(1,\), got \(2,\)"):
        denv.step(ds, {"arm": jnp.zeros(2), "gripper": jnp.zeros(2)})


def test_package_exports():
    expected = ["ActionSize", "DictObsEnv", "Env", "GymnaxEnv", "MemoryTask", "ObservationSize"]
    expected += ["PointMass", "State", "TwoAgentEnv"]
    assert sorted(envs_pkg.__all__) == expected
    for name in envs_pkg.__all__:
        assert getattr(envs_pkg, name).__doc__


def test_docstring_examples_run(docstring_examples):
    import nnx_ppo.envs.dict_obs_env
    import nnx_ppo.envs.memory_task
    import nnx_ppo.envs.point_mass
    import nnx_ppo.envs.two_agent_env

    docstring_examples(
        envs_base,
        nnx_ppo.envs.point_mass,
        nnx_ppo.envs.memory_task,
        nnx_ppo.envs.dict_obs_env,
        nnx_ppo.envs.two_agent_env,
    )
