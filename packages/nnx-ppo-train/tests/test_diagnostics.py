"""`LogLevel.DIAGNOSTICS` (nnx-ppo's ``LoggingLevel.DIAGNOSTICS``): the
``diagnostics/nonfinite_*`` counts, and an environment whose next observation is
non-finite ended, reset and counted instead of poisoning the run."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.algorithms.config import EvalConfig, LoggingLevel, LogLevel, PPOConfig, TrainConfig
from nnx_ppo.algorithms.core.logging import in_log_level
from nnx_ppo.algorithms.core.rollout import initial_episode_stats, reset_envs, unroll
from nnx_ppo.algorithms.ppo.train import train_ppo
from nnx_ppo.envs import PointMass
from nnx_ppo.envs.base import Env, State
from nnx_ppo.networks.factories import make_mlp_actor_critic
from nnx_ppo.networks.normalizer import NormalizerStatistic
from nnx_ppo.wrappers import EpisodeWrapper

NAN_EVERY = 3  # the NaN env's observation is NaN after every 3rd step of an episode


class NaNEveryThirdStep(Env):
    """PointMass whose observation is NaN after the 3rd step of every episode (its own
    step counter in ``info["t"]``); its reward stays finite. Never ends by itself."""

    def __init__(self) -> None:
        self.inner = PointMass()

    @property
    def observation_size(self) -> int:
        return 2

    @property
    def action_size(self) -> int:
        return 2

    def reset(self, rng: jax.Array) -> State:
        state = self.inner.reset(rng)
        return state.replace(info={**state.info, "t": jnp.int32(0)})

    def step(self, state: State, action: jax.Array) -> State:
        t = state.info["t"] + 1
        stepped = self.inner.step(state, action)
        obs = jnp.where(t == NAN_EVERY, jnp.nan, stepped.obs)
        return stepped.replace(obs=obs, info={**stepped.info, "t": t})


def _arrays(tree) -> list[np.ndarray]:
    """Every leaf as a NumPy array (random keys as their data)."""
    leaves = []
    for leaf in jax.tree.leaves(tree):
        if jnp.issubdtype(jnp.asarray(leaf).dtype, jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        leaves.append(np.asarray(leaf))
    return leaves


def _network(seed: int = 0) -> nnx.Module:
    return make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(seed))


def test_the_level_is_its_own_group_outside_all_and_upstreams_name_is_an_alias():
    assert LoggingLevel is LogLevel
    assert LogLevel.DIAGNOSTICS not in LogLevel.ALL
    assert LogLevel.DIAGNOSTICS not in LogLevel.DEFAULT
    for quantity in ("reward", "obs", "action", "grad", "next_obs"):
        name = f"diagnostics/nonfinite_{quantity}"
        assert in_log_level(name, LogLevel.DIAGNOSTICS)
        assert not in_log_level(name, LogLevel.ALL)


def _rollout(env, diagnostics: bool, length: int = 7):
    net = _network()
    graphdef, params, network_state = nnx.split(net, nnx.Param, ...)
    first = reset_envs(env, jax.random.key(1), 3)

    @jax.jit
    def run(network_state, env_state, key):
        return unroll(
            env, graphdef, params, network_state, env_state, net.initialize_state(3),
            initial_episode_stats(3), key, first,
            length=length, bootstrap_on_truncation=True, diagnostics=diagnostics,
        )  # fmt: skip

    return run(network_state, first, jax.random.key(2))


def test_with_finite_observations_the_rollout_is_bitwise_the_same():
    # EpisodeWrapper(length 3) truncates within the rollout, so the truncation bootstrap
    # (computed from the final observation) is part of what must not change.
    env = EpisodeWrapper(PointMass(), episode_length=3)
    plain = _rollout(env, diagnostics=False)
    checked = _rollout(env, diagnostics=True)
    metrics = checked[-1].metrics
    counts = {k: metrics.pop(k) for k in list(metrics) if k.startswith("diagnostics/")}
    assert sorted(counts) == [
        "diagnostics/nonfinite_action", "diagnostics/nonfinite_next_obs",
        "diagnostics/nonfinite_obs", "diagnostics/nonfinite_reward",
    ]  # fmt: skip
    assert all(float(v) == 0.0 for v in counts.values())
    assert jax.tree.structure(plain) == jax.tree.structure(checked)
    for a, b in zip(_arrays(plain), _arrays(checked), strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_nan_next_observation_ends_the_episode_without_bootstrap_and_is_counted():
    # 3 envs x 7 steps; each env's 3rd and 6th steps return a NaN observation
    # (rollout steps t = 2 and t = 5): 3 * 2 = 6 env steps, each ending an episode.
    *_, rollout = _rollout(NaNEveryThirdStep(), diagnostics=True)
    tr = rollout.transitions
    assert float(rollout.metrics["diagnostics/nonfinite_next_obs"]) == 6.0
    assert float(rollout.metrics["rollout/episodes"]) == 6.0
    for name in ("obs", "action", "reward"):
        assert float(rollout.metrics[f"diagnostics/nonfinite_{name}"]) == 0.0
    done = np.asarray(tr.done)
    expected = np.zeros((7, 3), bool)
    expected[[2, 5]] = True
    np.testing.assert_array_equal(done, expected)
    assert not np.asarray(tr.truncation).any()  # a termination: nothing bootstrapped
    assert np.isfinite(np.asarray(tr.obs)).all()  # the network never saw the NaN
    assert np.isfinite(np.asarray(tr.log_likelihood)).all()
    assert np.isfinite(np.asarray(tr.value)).all()


def test_training_continues_counts_the_nan_observations_and_keeps_the_statistics_finite():
    # 4 envs x rollout 6 per iteration: every env restarts at rollout steps t = 2 and
    # t = 5, so each iteration starts each env afresh and has exactly 4 * 2 = 8 NaN next
    # observations (the only episode ends: 8 episodes of 3 steps). 2 iterations, one
    # logged per call.
    config = TrainConfig(
        ppo=PPOConfig(
            n_envs=4, rollout_length=6, n_minibatches=2, n_epochs=2, total_steps=48,
            log_level=LogLevel.DEFAULT | LogLevel.DIAGNOSTICS,
        ),
        eval=EvalConfig(enabled=False),
    )  # fmt: skip
    logged: list[tuple[int, dict[str, float]]] = []
    network = _network()
    result = train_ppo(
        NaNEveryThirdStep(), network, config, progress=False,
        log_fn=lambda metrics, step: logged.append((step, dict(metrics))),
    )  # fmt: skip
    assert result.total_steps == 48
    assert [step for step, _ in logged] == [24, 48]
    for _, metrics in logged:
        assert metrics["diagnostics/nonfinite_next_obs"] == 8.0
        assert metrics["rollout/episodes"] == 8.0
        assert metrics["rollout/episode_length"] == 3.0
        for name in ("obs", "action", "reward", "grad"):
            assert metrics[f"diagnostics/nonfinite_{name}"] == 0.0
    statistics = nnx.state(network, NormalizerStatistic)
    leaves = [np.asarray(x) for x in jax.tree.leaves(statistics)]
    assert leaves and all(np.isfinite(x).all() for x in leaves if x.dtype.kind == "f")
    params = [np.asarray(x) for x in jax.tree.leaves(nnx.state(network, nnx.Param))]
    assert all(np.isfinite(x).all() for x in params)


@pytest.mark.extended
def test_diagnostics_leave_a_finite_run_bitwise_unchanged():
    env = EpisodeWrapper(PointMass(), episode_length=5)

    def train(level: LogLevel) -> tuple[list[np.ndarray], dict[str, float]]:
        config = TrainConfig(
            ppo=PPOConfig(
                n_envs=4, rollout_length=6, n_minibatches=2, total_steps=48, log_level=level
            ),
            eval=EvalConfig(enabled=False),
        )
        network = _network()
        result = train_ppo(env, network, config, progress=False)
        return _arrays(nnx.state(network)), result.metrics

    plain, _ = train(LogLevel.DEFAULT)
    checked, metrics = train(LogLevel.DEFAULT | LogLevel.DIAGNOSTICS)
    for a, b in zip(plain, checked, strict=True):
        np.testing.assert_array_equal(a, b)
    counts = {k: v for k, v in metrics.items() if k.startswith("diagnostics/")}
    assert len(counts) == 5 and all(v == 0.0 for v in counts.values())
