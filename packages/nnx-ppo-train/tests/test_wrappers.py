"""Tests for nnx_ppo.wrappers on our envs, brax inverted_pendulum and Playground."""

import copy
import math
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nnx_ppo.wrappers as wrappers_pkg
from nnx_ppo.envs import MemoryTask, PointMass, TwoAgentEnv
from nnx_ppo.wrappers import (
    AutoResetWrapper,
    EpisodeWrapper,
    RewardScalingWrapper,
    Wrapper,
    reset_done,
    wrap_for_training,
)

# brax's generalized backend imports jaxopt, which warns on import that it is unmaintained,
# brax warns that its own systems are unmaintained when it loads an MJCF model, and
# brax's contact code reads a field of mjx.Data that MuJoCo has deprecated.
_THIRD_PARTY_WARNINGS = (
    pytest.mark.filterwarnings("ignore:JAXopt is no longer maintained:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:Brax System, piplines and environments:UserWarning"),
    pytest.mark.filterwarnings("ignore:Accessing `ncon` directly:DeprecationWarning"),
)


def _third_party(test):
    for mark in _THIRD_PARTY_WARNINGS:
        test = mark(test)
    return test


def _at(env, pos):
    """A state of ``env`` (possibly wrapped PointMass) with the point moved to ``pos``."""
    s = env.reset(jax.random.key(0))
    p = jnp.asarray(pos, jnp.float32)
    return s.replace(obs=p, pipeline_state=p)


LEFT = jnp.array([-1.0, 0.0])


# --- EpisodeWrapper -------------------------------------------------------------------


def test_truncation_at_exactly_episode_length():
    env = EpisodeWrapper(PointMass(), episode_length=3)
    step = jax.jit(env.step)
    s = env.reset(jax.random.key(0))
    assert int(s.info["steps"]) == 0 and float(s.info["truncation"]) == 0.0
    seen = []
    for _ in range(4):
        s = step(s, jnp.zeros(2))
        seen.append((int(s.info["steps"]), float(s.done), float(s.info["truncation"])))
    # Steps 1 and 2 run on; step 3 = episode_length truncates; (the wrapper does not reset,
    # so step 4 is still past the limit and truncated again).
    assert seen == [(1, 0.0, 0.0), (2, 0.0, 0.0), (3, 1.0, 1.0), (4, 1.0, 1.0)]
    assert s.info["steps"].dtype == jnp.int32


@settings(max_examples=15, deadline=None)
@given(length=st.integers(1, 6), repeat=st.integers(1, 3), radius=st.sampled_from([None, 0.35]))
def test_episode_wrapper_properties(length, repeat, radius):
    # From (0.6, 0) moving left by 0.1 per env step, a terminate_radius of 0.35 ends the
    # episode at env step 3 (distance 0.3; step 2 is at 0.4); None never terminates.
    env = EpisodeWrapper(PointMass(terminate_radius=radius), length, action_repeat=repeat)
    s = _at(env, (0.6, 0.0))
    calls = math.ceil(length / repeat)
    for call in range(1, calls + 1):
        s = env.step(s, LEFT)
        done, trunc = float(s.done), float(s.info["truncation"])
        terminated = radius is not None and call * repeat >= 3
        assert int(s.info["steps"]) == call * repeat
        # truncation only at the limit, never together with a termination; done = either.
        assert trunc == float(call == calls and not terminated)
        assert done == float(terminated or call == calls)
        if done:
            break


def test_termination_is_not_truncation():
    env = EpisodeWrapper(PointMass(terminate_radius=0.1), episode_length=2)
    # Termination before the limit: (0.15, 0) -> (0.05, 0) is inside 0.1. done 1, trunc 0.
    s = env.step(_at(env, (0.15, 0.0)), LEFT)
    assert (float(s.done), float(s.info["truncation"])) == (1.0, 0.0)
    # Termination exactly at the limit: still a termination, not a truncation.
    s = env.step(_at(env, (0.35, 0.0)), LEFT)  # (0.25, 0): runs on
    assert (float(s.done), float(s.info["truncation"])) == (0.0, 0.0)
    s = env.step(s.replace(obs=jnp.array([0.15, 0.0]), pipeline_state=jnp.array([0.15, 0.0])), LEFT)
    assert (int(s.info["steps"]), float(s.done), float(s.info["truncation"])) == (2, 1.0, 0.0)
    # No termination at the limit: truncation.
    s = env.step(env.step(_at(env, (1.0, 0.0)), LEFT), LEFT)
    assert (float(s.done), float(s.info["truncation"])) == (1.0, 1.0)


def test_action_repeat_sums_rewards_and_counts_env_steps():
    env = EpisodeWrapper(PointMass(), episode_length=3, action_repeat=2)
    s = env.step(_at(env, (0.3, 0.4)), jnp.array([-1.0, -1.0]))
    # (0.3, 0.4) -> (0.2, 0.3) -> (0.1, 0.2): r = -sqrt(0.13) - sqrt(0.05).
    np.testing.assert_allclose(s.reward, -math.sqrt(0.13) - math.sqrt(0.05), rtol=1e-6)
    np.testing.assert_allclose(s.obs, [0.1, 0.2], atol=1e-6)
    assert (int(s.info["steps"]), float(s.done)) == (2, 0.0)
    # Second call: 4 env steps >= 3, truncated.
    s = env.step(s, jnp.zeros(2))
    assert (int(s.info["steps"]), float(s.done), float(s.info["truncation"])) == (4, 1.0, 1.0)


def test_action_repeat_freezes_after_termination():
    env = EpisodeWrapper(PointMass(terminate_radius=0.25), episode_length=10, action_repeat=3)
    s = env.step(_at(env, (0.3, 0.0)), LEFT)
    # Repeat 1: (0.2, 0) terminates (0.2 < 0.25), r = -0.2; repeats 2-3 are frozen and add 0.
    np.testing.assert_allclose(s.reward, -0.2, rtol=1e-6)
    np.testing.assert_allclose(s.obs, [0.2, 0.0], atol=1e-6)
    assert (float(s.done), float(s.info["truncation"])) == (1.0, 0.0)


def test_action_repeat_dict_rewards():
    env = EpisodeWrapper(TwoAgentEnv(), episode_length=4, action_repeat=2)
    inner = TwoAgentEnv()
    s0 = env.reset(jax.random.key(1))
    a = {"agent_a": jnp.array([0.5, -1.0]), "agent_b": jnp.array([1.0, 0.2])}
    i1 = inner.step(s0, a)
    i2 = inner.step(i1, a)
    s = env.step(s0, a)
    for k in ("agent_a", "agent_b"):
        np.testing.assert_allclose(s.reward[k], i1.reward[k] + i2.reward[k], rtol=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"episode_length": 0}, "episode_length=0"),
        ({"episode_length": 2.5}, "episode_length=2.5"),
        ({"episode_length": True}, "episode_length=True"),
        ({"episode_length": 5, "action_repeat": 0}, "action_repeat=0"),
        (
            {"episode_length": 5, "stagger": -1},
            r"stagger=-1 must be an int in \[0, episode_length=5\]",
        ),
        ({"episode_length": 5, "stagger": 6}, "stagger=6"),
        ({"episode_length": 5, "stagger": 2.0}, "stagger=2.0"),
        ({"episode_length": 5, "stagger": True}, "stagger=True"),
    ],
)
def test_episode_wrapper_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        EpisodeWrapper(PointMass(), **kwargs)


def test_stagger_zero_leaves_the_reset_unchanged():
    key = jax.random.key(3)
    plain = EpisodeWrapper(MemoryTask(2), 10).reset(key)
    zero = EpisodeWrapper(MemoryTask(2), 10, stagger=0).reset(key)
    np.testing.assert_array_equal(plain.obs, MemoryTask(2).reset(key).obs)
    assert jax.tree.all(jax.tree.map(lambda a, b: bool((a == b).all()), plain, zero))


def test_stagger_draws_the_start_and_shortens_the_episode():
    env = EpisodeWrapper(PointMass(), episode_length=8, stagger=5)
    starts = jax.vmap(env.reset)(jax.random.split(jax.random.key(0), 400)).info["steps"]
    assert starts.dtype == jnp.int32
    # Every start in [0, 5) occurs, nothing outside it.
    assert sorted(set(np.asarray(starts).tolist())) == [0, 1, 2, 3, 4]
    s = env.reset(jax.random.key(1))
    start = int(s.info["steps"])
    length = 0
    while not float(s.done):
        s = env.step(s, jnp.zeros(2))
        length += 1
    assert (length, int(s.info["steps"]), float(s.info["truncation"])) == (8 - start, 8, 1.0)


@pytest.mark.parametrize("full_reset", [False, True])
def test_stagger_under_auto_reset(full_reset):
    # Episodes of 6 steps, starts in [0, 6): every episode of an environment restarts at
    # its first draw with a cached reset, and at a new draw with a fresh one.
    env = AutoResetWrapper(EpisodeWrapper(PointMass(), 6, stagger=6), full_reset=full_reset)
    n = 64
    s = jax.vmap(env.reset)(jax.random.split(jax.random.key(2), n))
    first = np.asarray(s.info["steps"])
    step = jax.jit(jax.vmap(env.step))
    restarts = [[] for _ in range(n)]
    for _ in range(30):
        s = step(s, jnp.zeros((n, 2)))
        for i in np.flatnonzero(np.asarray(s.done)):
            restarts[i].append(int(s.info["steps"][i]))
    assert all(len(r) >= 5 for r in restarts)
    same = [r == [first[i]] * len(r) for i, r in enumerate(restarts)]
    assert all(same) if not full_reset else not any(same)


@pytest.mark.parametrize(("stagger", "expected"), [(True, 5), (False, 0), (3, 3), (0, 0), (11, 11)])
def test_wrap_for_training_staggers_half_the_episode_by_default(stagger, expected):
    env = wrap_for_training(PointMass(), episode_length=11, action_repeat=2, stagger=stagger)
    assert isinstance(env, EpisodeWrapper)
    assert (env.episode_length, env.action_repeat, env.stagger) == (11, 2, expected)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"stagger": 0.5}, r"stagger=0.5 must be a bool"),
        ({"stagger": 12}, r"stagger=12 must be an int in \[0, episode_length=11\]"),
        ({"episode_length": 0}, r"episode_length=0 must be an int >= 1"),
    ],
)
def test_wrap_for_training_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        wrap_for_training(PointMass(), **{"episode_length": 11, **kwargs})


def test_staggered_training_episodes_are_shorter_by_the_mean_start():
    # The episode statistics of staggered training: PointMass never terminates, so every
    # episode runs to the limit of 8 steps and lasts 8 - d steps, d uniform in [0, 4)
    # (a fresh draw per episode with reset_mode="fresh"): 8 - 1.5 = 6.5 on average.
    # Without the stagger, every episode lasts exactly 8 steps.
    from flax import nnx

    from nnx_ppo.algorithms.config import EvalConfig, LogLevel, PPOConfig, TrainConfig
    from nnx_ppo.algorithms.ppo.train import train_ppo
    from nnx_ppo.networks.factories import make_mlp_actor_critic

    lengths = []
    config = TrainConfig(
        ppo=PPOConfig(
            n_envs=64, rollout_length=16, n_minibatches=2, n_epochs=1, total_steps=64 * 16 * 8,
            reset_mode="fresh", log_level=LogLevel.ROLLOUT,
        ),
        eval=EvalConfig(enabled=False),
    )  # fmt: skip
    train_ppo(
        wrap_for_training(PointMass(), episode_length=8, stagger=4),
        make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0)),
        config,
        progress=False,
        log_fn=lambda metrics, step: lengths.append(float(metrics["rollout/episode_length"])),
    )
    assert len(lengths) == 8
    assert 6.3 < float(np.mean(lengths)) < 6.7, lengths


def test_episode_wrapper_needs_its_own_reset():
    env = EpisodeWrapper(PointMass(), 5)
    with pytest.raises(ValueError, match=r"no 'steps' key.*Call reset on the wrapper"):
        env.step(PointMass().reset(jax.random.key(0)), jnp.zeros(2))


def test_wrapper_rejects_non_env():
    with pytest.raises(TypeError, match=r"no callable \['reset', 'step'\]"):
        Wrapper(object())


# --- RewardScalingWrapper -------------------------------------------------------------


def test_reward_scaling_array():
    env = RewardScalingWrapper(PointMass(), 10.0)
    s = env.step(_at(env, (0.3, 0.4)), jnp.array([-1.0, -1.0]))
    # Unscaled r = -sqrt(0.13) (see test_envs); scaled by 10; metrics stay unscaled.
    np.testing.assert_allclose(s.reward, -10 * math.sqrt(0.13), rtol=1e-6)
    np.testing.assert_allclose(s.metrics["distance"], math.sqrt(0.13), rtol=1e-6)
    assert s.reward.dtype == jnp.float32


def test_reward_scaling_dict_per_key_and_float():
    base = TwoAgentEnv()
    s0 = base.reset(jax.random.key(0))
    a = {"agent_a": jnp.array([1.0, 0.0]), "agent_b": jnp.array([0.0, -1.0])}
    raw = base.step(s0, a).reward
    per_key = RewardScalingWrapper(base, {"agent_a": 2.0, "agent_b": -0.5}).step(s0, a).reward
    np.testing.assert_allclose(per_key["agent_a"], 2.0 * raw["agent_a"], rtol=1e-6)
    np.testing.assert_allclose(per_key["agent_b"], -0.5 * raw["agent_b"], rtol=1e-6)
    both = RewardScalingWrapper(base, 3.0).step(s0, a).reward
    for k in raw:
        np.testing.assert_allclose(both[k], 3.0 * raw[k], rtol=1e-6)


def test_reward_scaling_errors():
    with pytest.raises(TypeError, match="scale=inf"):
        RewardScalingWrapper(PointMass(), float("inf"))
    with pytest.raises(TypeError, match=r"scale\['a'\]='x'"):
        RewardScalingWrapper(TwoAgentEnv(), {"a": "x"})
    with pytest.raises(ValueError, match="empty"):
        RewardScalingWrapper(TwoAgentEnv(), {})
    env = RewardScalingWrapper(TwoAgentEnv(), {"agent_a": 1.0})
    with pytest.raises(ValueError, match=r"keys \['agent_a'\].*\['agent_a', 'agent_b'\]"):
        env.reset(jax.random.key(0))
    env = RewardScalingWrapper(PointMass(), {"agent_a": 1.0})
    with pytest.raises(ValueError, match="an array reward"):
        env.reset(jax.random.key(0))


# --- attribute forwarding -------------------------------------------------------------


def test_attribute_forwarding_through_nested_wrappers():
    inner = PointMass(step_size=0.25)
    env = AutoResetWrapper(RewardScalingWrapper(EpisodeWrapper(inner, 7), 2.0))
    assert env.step_size == 0.25  # PointMass attribute, three wrappers down
    assert env.episode_length == 7  # EpisodeWrapper attribute, two down
    assert env.scale == 2.0
    assert (env.observation_size, env.action_size) == (2, 2)
    assert env.unwrapped is inner
    with pytest.raises(AttributeError, match="no_such_attr"):
        _ = env.no_such_attr
    # copy and pickle probe dunders before __init__ runs: no infinite recursion.
    clone = copy.deepcopy(env)
    assert clone.step_size == 0.25
    assert pickle.loads(pickle.dumps(env)).episode_length == 7


# --- AutoResetWrapper and reset_done ----------------------------------------------------


def test_auto_reset_cached_restarts_from_first_state():
    env = AutoResetWrapper(EpisodeWrapper(PointMass(), episode_length=2))
    step = jax.jit(env.step)
    s0 = env.reset(jax.random.key(0))
    np.testing.assert_array_equal(s0.obs, PointMass().reset(jax.random.key(0)).obs)
    a = jnp.array([0.3, -0.7])
    s1 = step(s0, a)
    s2 = step(s1, a)
    # Step 2 ends the episode: transition fields from the step, the rest from the reset.
    assert (float(s2.done), float(s2.info["truncation"]), int(s2.info["steps"])) == (1.0, 1.0, 0)
    expected_r = -float(jnp.linalg.norm(s0.obs + 2 * 0.1 * a))
    np.testing.assert_allclose(s2.reward, expected_r, rtol=1e-6)
    np.testing.assert_array_equal(s2.obs, s0.obs)
    np.testing.assert_array_equal(s2.pipeline_state, s0.pipeline_state)
    # The next episode replays the first one exactly.
    s3 = step(s2, a)
    assert float(s3.done) == 0.0 and int(s3.info["steps"]) == 1
    np.testing.assert_array_equal(s3.obs, s1.obs)
    np.testing.assert_array_equal(s3.reward, s1.reward)


def test_auto_reset_fresh_draws_new_start_states():
    env = AutoResetWrapper(EpisodeWrapper(MemoryTask(delay=2), episode_length=1), full_reset=True)
    step = jax.jit(env.step)
    s = env.reset(jax.random.key(0))
    firsts = [s.pipeline_state["rng"]]
    for _ in range(3):
        s = step(s, jnp.ones(1))
        assert (float(s.done), int(s.info["steps"])) == (1.0, 0)
        # A fresh reset: the history is all zeros again and the env key is new each time.
        np.testing.assert_array_equal(s.pipeline_state["history"], jnp.zeros((2, 1)))
        firsts.append(s.pipeline_state["rng"])
    data = {tuple(np.asarray(jax.random.key_data(k)).tolist()) for k in firsts}
    assert len(data) == 4
    # Deterministic given the key.
    again = env.step(env.reset(jax.random.key(0)), jnp.ones(1))
    first_step = step(env.reset(jax.random.key(0)), jnp.ones(1))
    np.testing.assert_array_equal(again.obs, first_step.obs)


def test_reset_done_batched_selects_per_env():
    env = EpisodeWrapper(PointMass(), episode_length=5)
    keys = jax.random.split(jax.random.key(0), 2)
    first = jax.vmap(env.reset)(keys)
    stepped = jax.vmap(env.step)(first, jnp.ones((2, 2)))
    stepped = stepped.replace(done=jnp.array([1.0, 0.0]))
    out = reset_done(stepped, first)
    np.testing.assert_array_equal(out.obs[0], first.obs[0])  # env 0 done: reset
    np.testing.assert_array_equal(out.obs[1], stepped.obs[1])  # env 1 running: unchanged
    np.testing.assert_array_equal(out.info["steps"], [0, 1])
    np.testing.assert_array_equal(out.reward, stepped.reward)
    np.testing.assert_array_equal(out.done, [1.0, 0.0])


def test_reset_done_mismatched_info_keys():
    env = PointMass()
    s = env.reset(jax.random.key(0))
    stepped = s.replace(info={"only_in_step": jnp.zeros(())})
    with pytest.raises(ValueError, match=r"only there: \['only_in_step'\]"):
        reset_done(stepped, s)
    out = reset_done(stepped, s, preserve_info_keys=("only_in_step",))
    assert set(out.info) == {"only_in_step"}


def test_auto_reset_validation():
    with pytest.raises(TypeError, match="full_reset=1"):
        AutoResetWrapper(PointMass(), full_reset=1)
    with pytest.raises(TypeError, match="preserve_info_keys='truncation'"):
        AutoResetWrapper(PointMass(), preserve_info_keys="truncation")


def test_package_exports():
    assert sorted(wrappers_pkg.__all__) == [
        "AutoResetWrapper",
        "EpisodeWrapper",
        "Latency",
        "MaskObservation",
        "ObservationHistory",
        "RewardScalingWrapper",
        "Wrapper",
        "reset_done",
        "wrap_for_training",
    ]


def test_docstring_examples_run(docstring_examples):
    import nnx_ppo.wrappers.auto_reset
    import nnx_ppo.wrappers.base
    import nnx_ppo.wrappers.episode
    import nnx_ppo.wrappers.reward_scaling
    import nnx_ppo.wrappers.training

    docstring_examples(
        nnx_ppo.wrappers.training,
        nnx_ppo.wrappers.base,
        nnx_ppo.wrappers.episode,
        nnx_ppo.wrappers.reward_scaling,
        nnx_ppo.wrappers.auto_reset,
    )


# --- brax and MuJoCo Playground -------------------------------------------------------


class _RecordRawReward(Wrapper):
    """Test helper: keeps the unscaled reward in info so the scaling can be checked."""

    def reset(self, rng):
        s = self.env.reset(rng)
        return s.replace(info={**s.info, "raw_reward": s.reward})

    def step(self, state, action):
        s = self.env.step(state, action)
        return s.replace(info={**s.info, "raw_reward": s.reward})


def _one_wrapped_step(env, full_reset=False):
    """AutoReset(RewardScaling(Record(Episode(env, 1)), 10)): one jitted reset + step."""
    wrapped = AutoResetWrapper(
        RewardScalingWrapper(_RecordRawReward(EpisodeWrapper(env, episode_length=1)), 10.0),
        full_reset=full_reset,
        preserve_info_keys=("truncation", "raw_reward"),
    )

    @jax.jit
    def run(key):
        s0 = wrapped.reset(key)
        return s0, wrapped.step(s0, jnp.zeros(wrapped.action_size))

    return wrapped, *run(jax.random.PRNGKey(0))


def _check_one_step(wrapped, s0, s1):
    # Episode length 1: the first step truncates (no termination from rest), the state is
    # auto-reset to the cached first state, and the reward is 10x the raw one.
    assert (float(s1.done), float(s1.info["truncation"]), int(s1.info["steps"])) == (1.0, 1.0, 0)
    np.testing.assert_array_equal(s1.obs, s0.obs)
    np.testing.assert_allclose(s1.reward, 10.0 * s1.info["raw_reward"], rtol=1e-6)
    assert float(jnp.abs(s1.info["raw_reward"])) > 0
    assert s1.obs.shape == (wrapped.observation_size,)


@_third_party
def test_brax_inverted_pendulum():
    envs = pytest.importorskip("brax.envs")
    env = envs.get_environment("inverted_pendulum", backend="generalized")
    wrapped, s0, s1 = _one_wrapped_step(env)
    _check_one_step(wrapped, s0, s1)
    assert type(s1) is type(jax.eval_shape(env.reset, jax.random.PRNGKey(0)))  # brax's State
    # inverted_pendulum pays 1 per step alive.
    np.testing.assert_allclose(s1.info["raw_reward"], 1.0)
    # The dynamics state is reset too.
    np.testing.assert_array_equal(s1.pipeline_state.q, s0.pipeline_state.q)
    # Forwarded attributes.
    assert wrapped.dt == env.dt and wrapped.sys is env.sys and wrapped.unwrapped is env
    assert wrapped.render == env.render


@_third_party
def test_playground_cartpole_balance():
    registry = pytest.importorskip("mujoco_playground").registry
    env = registry.load("CartpoleBalance", config_overrides={"impl": "jax"})
    wrapped, s0, s1 = _one_wrapped_step(env)
    _check_one_step(wrapped, s0, s1)
    assert type(s1) is type(s0) and hasattr(s1, "data")  # Playground's own State class
    np.testing.assert_array_equal(s1.data.qpos, s0.data.qpos)
    # Playground's own info (its rng) is reset with the rest of the state.
    np.testing.assert_array_equal(s1.info["rng"], s0.info["rng"])
    assert wrapped.dt == env.dt and wrapped.mj_model is env.mj_model
    assert wrapped.render == env.render


@_third_party
def test_our_envs_work_in_brax_training_wrappers():
    # Our State has brax's field names (pipeline_state included), so brax's own
    # VmapWrapper/EpisodeWrapper/AutoResetWrapper stack runs our envs unchanged.
    training = pytest.importorskip("brax.envs.wrappers.training")
    env = training.wrap(PointMass(), episode_length=2)

    @jax.jit
    def run(keys):
        s0 = env.reset(keys)
        s1 = env.step(s0, jnp.ones((2, 2)))
        return s0, env.step(s1, jnp.ones((2, 2)))

    s0, s2 = run(jax.random.split(jax.random.PRNGKey(0), 2))
    np.testing.assert_array_equal(s2.done, [1.0, 1.0])
    np.testing.assert_array_equal(s2.info["truncation"], [1.0, 1.0])
    np.testing.assert_array_equal(s2.obs, s0.obs)  # brax's cached auto-reset
