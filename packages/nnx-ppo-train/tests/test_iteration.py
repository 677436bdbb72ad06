"""The training iteration: replay exactness, minibatch advantages, tracing, several
iterations per call."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _train_test_helpers import ONE_MINIBATCH, one_iteration
from flax import nnx

from nnx_ppo.algorithms.config import EvalConfig, LogLevel, PPOConfig, TrainConfig
from nnx_ppo.algorithms.core.rollout import replay, reset_envs, unroll_env
from nnx_ppo.algorithms.ppo import iteration as iteration_module
from nnx_ppo.algorithms.ppo.advantages import gae
from nnx_ppo.algorithms.ppo.iteration import (
    init_train_state,
    make_optimizer,
    make_training_iteration,
)
from nnx_ppo.algorithms.ppo.train import TrainResult, train_ppo
from nnx_ppo.algorithms.symmetry import Mirror, Symmetry
from nnx_ppo.algorithms.trainer.skeleton import make_train_call
from nnx_ppo.envs import PointMass
from nnx_ppo.networks.factories import make_mlp_actor_critic
from nnx_ppo.wrappers import EpisodeWrapper

NO_EVAL = EvalConfig(enabled=False)

NETWORKS = {
    "mlp": lambda nets: make_mlp_actor_critic(2, 2, (16,), (16,), rngs=nnx.Rngs(0)),
    "lstm": lambda nets: nets.lstm(2, 2),
    "delay": lambda nets: nets.delay(2, 2, k_steps=2),
    "variational": lambda nets: nets.vb(2, 2),
}
# The floor sessions run the MLP and LSTM cases, the other families only at the latest.
CORE = ("mlp", "lstm")
# Replay is exact up to float32 rounding: the rollout's and the replay's XLA programs
# fuse differently (and differently on each CPU), so the action mean can differ by an
# ulp or two, which moves log N(u; mean, std) by |u - mean| / std^2 * ulp(mean). The
# variational network's policy has std down to 1.3e-3 (min_std 1e-3) at |mean| ~2 on one
# env, where that is ~3e-4 (measured here: 2.1e-5 and 5.6e-4 on AMD EPYC without
# AVX-512; the ulps were 4.8e-7 at most); the others keep std ~0.1-10 and stay
# below 1e-6. A replay error (a wrong noise key, a missed carry reset, other
# statistics) moves ratios by O(0.1-1).
RATIO_BOUND = {"variational": 5e-3}
# The train_ppo runs: 4 envs x 5 steps = 20 env steps per iteration, 2 minibatches.
TWENTY_STEPS = dict(n_envs=4, rollout_length=5, n_minibatches=2)


def _kinds(kinds):
    return [k if k in CORE else pytest.param(k, marks=pytest.mark.heavy) for k in kinds]


@pytest.mark.parametrize(
    ("kind", "sequence_length"),
    [(kind, None) for kind in CORE]
    + [pytest.param(kind, None, marks=pytest.mark.heavy) for kind in NETWORKS if kind not in CORE]
    + [("lstm", 2), pytest.param("delay", 4, marks=pytest.mark.heavy), ("lstm_mirrored", 2)],
)
def test_replay_ratio_is_one_before_the_first_update(kind, sequence_length, nets):
    # One epoch of one minibatch: the only minibatch is replayed with the rollout's
    # parameters and statistics, so every ratio must be 1 (clip fraction exactly 0).
    # Episodes of 3 steps in a rollout of 8 exercise the carry resets. The second
    # iteration runs after the normalizer statistics and parameters changed. With a
    # sequence_length the rollout is replayed as 2- or 4-step sequences from the carries
    # it stored (with L=2 one starts right after a reset, at step 6). "_mirrored": with
    # PointMass's x mirror, the minibatch also holds the mirrored sequences, replayed
    # from the mirrored carries; their ratios against the mirrored actions' likelihoods
    # on the mirrored observations (ratio="mirrored") must be 1 too, and the mirror
    # loss is computed.
    env = EpisodeWrapper(PointMass(), episode_length=3)
    flip_x = Mirror.from_signs(-1, 1)
    mirrored = kind.endswith("_mirrored")
    config = PPOConfig(
        **ONE_MINIBATCH,
        sequence_length=sequence_length,
        learning_rate=1e-2,
        total_steps=64,
        log_level=LogLevel.ACTOR | (LogLevel.LOSSES if mirrored else LogLevel.NONE),
        symmetry=Symmetry(
            observation=flip_x, action=flip_x, ratio="mirrored", mirror_loss_weight=1.0
        )
        if mirrored
        else None,
    )
    kind = kind.removesuffix("_mirrored")
    optimizer = make_optimizer(config)
    graphdef, state = init_train_state(
        env, NETWORKS[kind](nets), config, optimizer, jax.random.PRNGKey(0)
    )
    train_call = make_train_call(make_training_iteration(env, graphdef, optimizer, config))
    for _ in range(2):
        state, metrics = train_call(state)
        assert float(metrics["actor/clip_fraction"]) == 0.0
        assert float(metrics["actor/ratio_max_deviation"]) < RATIO_BOUND.get(kind, 1e-5)
        assert abs(float(metrics["actor/approx_kl"])) < 1e-7
        assert (float(metrics.get("loss/mirror", 0.0)) > 0) == mirrored
        if mirrored:  # the mirrored half alone
            assert float(metrics["actor/mirror_ratio_max_deviation"]) < 1e-5


@pytest.mark.parametrize("kind", _kinds(["lstm", "variational"]))
def test_replay_of_a_subset_of_envs_reproduces_the_rollout(kind, nets):
    # Minibatches are sets of whole env sequences replayed from the stored initial
    # carry: replaying envs [3, 0] alone reproduces their log-likelihoods and values.
    env = EpisodeWrapper(PointMass(), episode_length=3)
    net = NETWORKS[kind](nets)
    first = reset_envs(env, jax.random.PRNGKey(0), 4)
    carry = net.initialize_state(4)
    _, carry, _ = unroll_env(env, net, first, carry, 4, reset_state=first)  # non-zero carry
    _, _, rollout = unroll_env(env, net, first, carry, 7, reset_state=first)
    subset = jnp.array([3, 0])
    tr = jax.tree.map(lambda x: x[:, subset], rollout.transitions)
    init = jax.tree.map(lambda x: x[subset], rollout.initial_carry)
    graphdef, params, rest = nnx.split(net, nnx.Param, ...)
    out = jax.jit(lambda p, r, c, t: replay(graphdef, p, r, c, t))(params, rest, init, tr)
    np.testing.assert_allclose(out.log_likelihood, tr.log_likelihood, atol=1e-5)
    np.testing.assert_allclose(out.value, tr.value, atol=1e-5)


@pytest.mark.parametrize("kind", ["mlp", "lstm"])
def test_minibatch_advantages_equal_rollout_advantages_before_the_first_update(kind, nets):
    # One epoch of one minibatch: the minibatch is replayed with the rollout's
    # parameters, so advantages recomputed from the replay (and the bootstrap value from
    # the replayed carry) equal the rollout's, and so do the update and the metrics.
    # Episodes of 3 steps in a rollout of 8: truncations, final values, carry resets.
    env = EpisodeWrapper(PointMass(), episode_length=3)
    base = dict(ONE_MINIBATCH, learning_rate=1e-2)
    results = [
        one_iteration(env, NETWORKS[kind](nets), PPOConfig(**base, advantage_estimation=mode))
        for mode in ("rollout", "minibatch")
    ]
    (rollout_state, rollout_metrics), (minibatch_state, minibatch_metrics) = results
    for a, b in zip(
        jax.tree.leaves(rollout_state.params), jax.tree.leaves(minibatch_state.params), strict=True
    ):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert rollout_metrics.keys() == minibatch_metrics.keys()
    for name, value in rollout_metrics.items():
        np.testing.assert_allclose(value, minibatch_metrics[name], rtol=1e-5, atol=1e-6)


def test_minibatch_advantages_follow_the_updated_critic():
    # With 4 minibatch updates per iteration, the later minibatches' targets come from
    # the updated critic: the mean value target differs from the rollout mode's.
    env = EpisodeWrapper(PointMass(), episode_length=3)
    base = dict(n_envs=4, rollout_length=8, n_epochs=2, n_minibatches=2, learning_rate=1e-1)
    targets = [
        float(
            one_iteration(
                env,
                make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0)),
                PPOConfig(**base, advantage_estimation=mode, log_level=LogLevel.CRITIC),
            )[1]["critic/target_mean"]
        )
        for mode in ("rollout", "minibatch")
    ]
    assert abs(targets[0] - targets[1]) > 1e-3, targets


@pytest.mark.parametrize("mode", ["rollout", "minibatch"])
def test_advantage_fn_replaces_gae_where_it_is_called(mode):
    # An estimator with gae's targets and zero advantages: the clipped surrogate of a
    # zero advantage is -min(r * 0, clip(r) * 0) = 0 whatever the ratio r, so the policy
    # loss is exactly 0 (with gae it is not), and the critic, with its own parameters,
    # fits the same targets (in "minibatch" mode too, where the estimator runs in every
    # minibatch on the replay's values).
    env = EpisodeWrapper(PointMass(), episode_length=3)
    config = PPOConfig(
        n_envs=4, rollout_length=8, n_epochs=2, n_minibatches=2, normalize_advantages=False,
        advantage_estimation=mode, log_level=LogLevel.LOSSES | LogLevel.CRITIC,
    )  # fmt: skip

    def zero_advantages(*args, **kwargs):
        advantages, targets = gae(*args, **kwargs)
        return jnp.zeros_like(advantages), targets

    def net():
        return make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0))

    _, with_gae = one_iteration(env, net(), config)
    _, with_zeros = one_iteration(env, net(), config, advantage_fn=zero_advantages)
    assert float(with_gae["loss/policy"]) != 0.0
    assert float(with_zeros["loss/policy"]) == 0.0
    np.testing.assert_allclose(
        with_zeros["critic/target_mean"], with_gae["critic/target_mean"], rtol=1e-5
    )


def test_statistics_first_lets_the_replay_see_the_rollouts_statistics():
    # One epoch of one minibatch (as in the replay-ratio test): by default the replay
    # normalizes with the rollout's statistics, so every ratio is 1. With
    # statistics_first the normalizer takes in the rollout before the gradient phase,
    # so the replay's inputs differ from the rollout's and the ratios move off 1; the
    # statistics the iteration ends with are the same (the same rollout, taken in once).
    # A network without statistics trains the same either way.
    env = EpisodeWrapper(PointMass(), episode_length=3)
    config = PPOConfig(**ONE_MINIBATCH, log_level=LogLevel.ACTOR)

    def net(normalize):
        return make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0), normalize_obs=normalize)

    after, after_metrics = one_iteration(env, net(True), config)
    first, first_metrics = one_iteration(env, net(True), config, statistics_first=True)
    assert float(after_metrics["actor/ratio_max_deviation"]) < 1e-5
    assert float(first_metrics["actor/ratio_max_deviation"]) > 1e-3
    for a, b in zip(
        jax.tree.leaves(after.network_state), jax.tree.leaves(first.network_state), strict=True
    ):
        if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):  # the sampler's stream
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_allclose(a, b, rtol=1e-6)
    plain = [
        one_iteration(env, net(False), config, statistics_first=flag)[0].params
        for flag in (False, True)
    ]
    for a, b in zip(*map(jax.tree.leaves, plain), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_target_kl_stops_the_iterations_updates_once_the_kl_passes_it():
    # 2 epochs x 2 minibatches = 4 updates. The first minibatch's KL is rounding noise
    # around 0 (the replay reproduces the rollout to ~1e-6 in the log-likelihoods, a KL
    # of ~1e-12; above 1.5e-10 at the JAX floor), so it is stepped at a target of 1e-5;
    # after one Adam step (lr 1e-2) the next minibatch's KL is ~3e-3, far above 1.5e-5,
    # so it and the two after it are skipped: 1 update of 4 taken, and the skipped ones
    # leave the parameters and the optimizer state (its count) as the first left them.
    # A target no update reaches takes them all.
    env = EpisodeWrapper(PointMass(), episode_length=3)
    base = dict(n_envs=4, rollout_length=8, n_epochs=2, n_minibatches=2, learning_rate=1e-2)

    def run(target_kl):
        config = PPOConfig(**base, target_kl=target_kl, log_level=LogLevel.LOSSES)
        net = make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0))
        return one_iteration(env, net, config)

    (loose, loose_metrics), (tight, tight_metrics) = run(1e9), run(1e-5)
    assert float(loose_metrics["train/updates_taken"]) == 1.0
    assert float(tight_metrics["train/updates_taken"]) == 0.25
    counts = [int(c) for c in jax.tree.leaves(tight.opt_state) if jnp.ndim(c) == 0]
    assert counts == [1], counts  # Adam's step count: one update, not four
    moved = [
        np.abs(a - b).max()
        for a, b in zip(*map(jax.tree.leaves, (tight.params, loose.params)), strict=True)
    ]
    assert min(moved) > 0.0, moved
    with pytest.raises(ValueError, match=r"target_kl=0\.0"):
        PPOConfig(target_kl=0.0)


def test_variant_options_are_checked_when_the_iteration_is_built():
    env = EpisodeWrapper(PointMass(), episode_length=3)
    config = PPOConfig(n_envs=4, rollout_length=8, n_minibatches=1)
    net = make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0))
    optimizer = make_optimizer(config)
    graphdef, _ = init_train_state(env, net, config, optimizer, jax.random.PRNGKey(0))
    with pytest.raises(TypeError, match=r"advantage_fn='gae' must be an advantage estimator"):
        make_training_iteration(env, graphdef, optimizer, config, advantage_fn="gae")
    with pytest.raises(TypeError, match=r"statistics_first=1 must be True or False"):
        make_training_iteration(env, graphdef, optimizer, config, statistics_first=1)


def test_rollout_without_stored_values():
    from nnx_ppo.algorithms.core.rollout import initial_episode_stats, unroll

    env = EpisodeWrapper(PointMass(), episode_length=3)
    net = make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0))
    graphdef, params, rest = nnx.split(net, nnx.Param, ...)
    first = reset_envs(env, jax.random.PRNGKey(0), 4)
    *_, rollout = unroll(
        env,
        graphdef,
        params,
        rest,
        first,
        net.initialize_state(4),
        initial_episode_stats(4),
        jax.random.PRNGKey(1),
        first,
        length=5,
        bootstrap_on_truncation=True,
        store_values=False,
    )
    assert rollout.transitions.value is None and rollout.bootstrap_value is None
    # Final values of truncated episodes are still computed (episodes end at step 3).
    assert rollout.transitions.final_value.shape == (5, 4)
    assert bool(jnp.any(rollout.transitions.final_value != 0))


def test_train_ppo_traces_the_iteration_once_and_returns_an_exact_result(monkeypatch, tmp_path):
    calls = []
    real_gae = iteration_module.gae

    def counting_gae(*args, **kwargs):
        calls.append(1)  # runs once per trace of the iteration, never at run time
        return real_gae(*args, **kwargs)

    monkeypatch.setattr(iteration_module, "gae", counting_gae)
    env = EpisodeWrapper(PointMass(), episode_length=5)
    net = make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0))
    initial = jax.tree.map(jnp.copy, nnx.state(net, nnx.Param))
    logged = []
    config = TrainConfig(
        ppo=PPOConfig(
            **TWENTY_STEPS, n_epochs=2, total_steps=41, log_level=LogLevel.LOSSES | LogLevel.ROLLOUT
        ),
        eval=EvalConfig(n_envs=2, max_episode_length=5, every_steps=40),
    )
    result = train_ppo(
        env,
        net,
        config,
        log_fn=lambda m, s: logged.append((s, dict(m))),
        progress=False,
        jsonl_path=tmp_path / "log.jsonl",
    )

    assert len(calls) == 1  # 3 device calls, one trace
    # 41 steps at 20 per iteration -> 3 iterations, 60 steps, an exact Python int.
    assert isinstance(result, TrainResult)
    assert result.total_steps == 60 and isinstance(result.total_steps, int)
    assert int(result.state.iteration) == 3
    # Evaluations: at the start, once 40 steps had passed, and at the end.
    assert [s for s, _ in result.eval_history] == [0, 40, 60]
    # The network holds the trained parameters, and they moved.
    trained = nnx.state(net, nnx.Param)
    for a, b in zip(jax.tree.leaves(trained), jax.tree.leaves(result.state.params), strict=True):
        np.testing.assert_array_equal(a, b)
    assert any(
        not np.array_equal(a, c)
        for a, c in zip(jax.tree.leaves(trained), jax.tree.leaves(initial), strict=True)
    )
    # Only the enabled metric groups (plus evaluations) are logged.
    train_logs = [m for _, m in logged if "loss/total" in m]
    assert [s for s, m in logged if "loss/total" in m] == [20, 40, 60]
    for metrics in train_logs:
        # train/learning_rate belongs to LOSSES (see the metrics reference).
        names = {k for k in metrics if k.split("/")[0] not in ("loss", "rollout", "eval")}
        assert names == {"train/learning_rate"}
    lines = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [s for s, _ in logged]


def test_several_iterations_per_call():
    env = EpisodeWrapper(PointMass(), episode_length=5)
    net = make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0))
    logged = []
    config = TrainConfig(
        ppo=PPOConfig(
            **TWENTY_STEPS, total_steps=50, iterations_per_call=2, log_level=LogLevel.LOSSES
        ),
        eval=NO_EVAL,
    )
    result = train_ppo(env, net, config, log_fn=lambda m, s: logged.append(s), progress=False)
    # 50 steps need 3 iterations of 20, rounded up to 2 calls of 2 iterations.
    assert result.total_steps == 80
    assert int(result.state.iteration) == 4
    assert logged == [40, 80]
