"""The studies (`nnx_ppo_benchmarks.studies`): brax's advantages by hand, the ablation
arms as variants of PPO, and each study's command line."""

from __future__ import annotations

import importlib
import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from nnx_ppo_benchmarks.studies.ablations import arm_algorithm, brax_advantages

from nnx_ppo.algorithms.config import EvalConfig, LogLevel, PPOConfig, TrainConfig
from nnx_ppo.algorithms.sweeps.many import train_many
from nnx_ppo.envs import PointMass
from nnx_ppo.networks.factories import make_mlp_actor_critic
from nnx_ppo.wrappers import EpisodeWrapper

STUDIES = (
    "studies.ablations",
    "studies.eval_paths",
    "studies.kl_trace",
    "studies.limits",
    "studies.policy_shift",
    "studies.reset_modes",
    "studies.step_costs",
    "studies.supervised",
    "studies.symmetry",
    "studies.wrapper_paths",
    "trainer.ab",
    "trainer.profile_iteration",
    "trainer.sweep",
)


def _brax(terminations, truncations):
    # One env, T = 4, gamma = 0.9, lambda = 0.5, bootstrap value 3 (as test_gae.py's).
    column = lambda x: jnp.asarray(x, jnp.float32)[:, None]
    adv, targets = brax_advantages(
        column([1.0, 2.0, 3.0, 4.0]),
        column([0.5, 1.0, 1.5, 2.0]),
        jnp.array([3.0]),
        column(terminations),
        column(truncations),
        discounting_factor=0.9,
        gae_lambda=0.5,
    )
    return np.asarray(adv[:, 0]), np.asarray(targets[:, 0])


def test_brax_advantages_use_the_next_lambda_return():
    # Terminated at t=1. GAE(0.5) gives A = [1.85, 1, 5.415, 4.7] (test_gae.py), so the
    # targets are vs = V + A = [2.35, 2, 6.915, 6.7]; brax's advantage is
    # r_t + 0.9 (1 - term_t) vs_{t+1} - V_t, with vs_4 the bootstrap value 3:
    #   t=0: 1 + 0.9*2     - 0.5 = 2.3     t=1: 2 + 0 - 1 = 1 (terminated)
    #   t=2: 3 + 0.9*6.7   - 1.5 = 7.53    t=3: 4 + 0.9*3 - 2 = 4.7
    adv, targets = _brax([0, 1, 0, 0], [0, 0, 0, 0])
    np.testing.assert_allclose(targets, [2.35, 2.0, 6.915, 6.7], rtol=1e-6)
    np.testing.assert_allclose(adv, [2.3, 1.0, 7.53, 4.7], rtol=1e-6)
    # Truncated at t=1 (no final value): brax masks that step, A_1 = 0 and vs_1 = V_1 = 1
    # (GAE: A = [1.4, 0, 5.415, 4.7]), so t=0: 1 + 0.9*1 - 0.5 = 1.4; t=2, t=3 as above.
    adv, _ = _brax([0, 0, 0, 0], [0, 1, 0, 0])
    np.testing.assert_allclose(adv, [1.4, 0.0, 7.53, 4.7], rtol=1e-6)


def test_the_arms_train_variants_of_ppo():
    # The config and network arms are PPO itself. brax_adv and norm_first are variants:
    # one iteration of one epoch and minibatch, so PPO's replay reproduces its rollout
    # (ratios 1) and norm_first's does not (the normalizer took in the rollout first);
    # brax's advantages are not GAE's.
    assert arm_algorithm({"mb_gae", "lecun_uniform"}) is None
    env = EpisodeWrapper(PointMass(), episode_length=3)
    ppo = PPOConfig(
        n_envs=4, rollout_length=8, n_epochs=1, n_minibatches=1, total_steps=32,
        bootstrap_on_truncation=False, log_level=LogLevel.ACTOR,
    )  # fmt: skip
    config = TrainConfig(ppo=ppo, eval=EvalConfig(enabled=False))

    def metrics(parts):
        result = train_many(
            env, lambda rngs: make_mlp_actor_critic(2, 2, (8,), (8,), rngs=rngs), config,
            seeds=[0], algorithm=arm_algorithm(parts), progress=False,
        )  # fmt: skip
        return result.metrics[0]

    base, brax_adv, norm_first = metrics(set()), metrics({"brax_adv"}), metrics({"norm_first"})
    assert base["actor/ratio_max_deviation"] < 1e-5
    assert brax_adv["actor/ratio_max_deviation"] < 1e-5
    assert norm_first["actor/ratio_max_deviation"] > 1e-3
    assert abs(brax_adv["actor/advantage_mean"] - base["actor/advantage_mean"]) > 1e-3
    np.testing.assert_allclose(norm_first["actor/advantage_mean"], base["actor/advantage_mean"])


@pytest.mark.parametrize("name", STUDIES)
def test_each_study_runs_as_the_module_its_usage_names(name, capsys):
    # The docstring's command (continuation lines joined) runs this module.
    module = importlib.import_module(f"nnx_ppo_benchmarks.{name}")
    command = re.sub(r"\s*\\\s*\n\s*", " ", module.__doc__ or "")
    assert re.search(rf"python -m nnx_ppo_benchmarks\.{name}\b", command), name
    with pytest.raises(SystemExit) as exc:
        module.main(["--help"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: python -m nnx_ppo_benchmarks.{name}")


@pytest.mark.extended
def test_the_symmetry_study_reports_returns_errors_and_their_ratio(tmp_path):
    # Two arms of one seed at a tiny size (two iterations of PointMass): one JSON line
    # each, the errors measured on every arm, and the ratio of the medians to base's.
    from nnx_ppo_benchmarks.studies import symmetry

    out = tmp_path / "symmetry.jsonl"
    argv = ["--task", "pointmass", "--networks", "mlp_small", "--arms", "base,augment+loss",
            "--seeds", "0", "--steps", "320", "--out", str(out)]  # fmt: skip
    assert symmetry.main(argv) == 0
    base, sym = (json.loads(line) for line in out.read_text().splitlines())
    assert (base["arm"], sym["arm"], sym["mirror_loss_weight"]) == ("base", "augment+loss", 1.0)
    for record in (base, sym):
        assert record["total_steps"] == 320 and len(record["returns"]) == 1
        assert np.isfinite(record["returns"][0]) and record["symmetry_errors"][0] > 0
    ratio = base["median_symmetry_error"] / sym["median_symmetry_error"]
    assert sym["error_ratio_to_base"] == pytest.approx(ratio) and "error_ratio_to_base" not in base


@pytest.mark.extended
@pytest.mark.parametrize("kind", ["mlp", "lstm"])
def test_policy_shift_splits_the_kl_into_its_direct_part_and_the_carrys(kind):
    # Before the update the replay reproduces the rollout (KL 0 at every step). After
    # it, at step 0 both replays start from the rollout's first carry, so the KL and its
    # direct part agree; without a carry they agree at every step. A recurrent network's
    # later steps differ: its replay runs on the carries the new parameters make.
    from nnx_ppo_benchmarks.studies.policy_shift import measure_update

    from nnx_ppo.algorithms.ppo.iteration import (
        init_train_state,
        make_optimizer,
        make_training_iteration,
    )
    from nnx_ppo.networks.factories import make_lstm_actor_critic

    env = EpisodeWrapper(PointMass(), episode_length=50)
    config = PPOConfig(n_envs=4, rollout_length=8, n_minibatches=2, n_epochs=2, learning_rate=1e-2)
    rngs = nnx.Rngs(0)
    if kind == "mlp":
        network = make_mlp_actor_critic(2, 2, (8,), (8,), rngs=rngs)
    else:
        network = make_lstm_actor_critic(2, 2, 8, (8,), (8,), rngs=rngs)
    optimizer = make_optimizer(config)
    graphdef, state = init_train_state(env, network, config, optimizer, jax.random.PRNGKey(0))
    iteration = make_training_iteration(env, graphdef, optimizer, config)
    _, found = jax.jit(lambda s: measure_update(env, graphdef, config, iteration, s))(state)
    kl, direct = np.asarray(found["kl_by_t"]), np.asarray(found["direct_kl_by_t"])
    assert float(found["replay_kl_before"]) < 1e-6
    assert kl.shape == direct.shape == (8,) and kl[0] > 1e-6
    np.testing.assert_allclose(kl[0], direct[0], rtol=1e-4)
    if kind == "mlp":
        np.testing.assert_allclose(kl, direct, rtol=1e-4)
    else:
        assert np.abs(kl[1:] - direct[1:]).max() > 1e-3 * kl.max(), (kl, direct)
    assert set(found["update"]) and all(float(v) > 0 for v in found["update"].values())


def test_the_limits_studys_update_is_the_iterations_and_its_costs_count_flops():
    # The study's update on the study's rollout of a state reproduces the iteration of
    # that state (same keys, same minibatches): it times PPO's own update.
    from nnx_ppo_benchmarks.studies.limits import make_programs, xla_cost

    env = EpisodeWrapper(PointMass(), episode_length=5)
    config = PPOConfig(n_envs=4, rollout_length=6, n_minibatches=2, n_epochs=2, total_steps=24)
    network = make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0))
    p = make_programs(env, network, config, jax.random.PRNGKey(1))
    by_parts, _ = jax.jit(p.update)(p.state, jax.jit(p.rollout)(p.state))
    whole, _ = jax.jit(p.iteration)(p.state)
    moved = jax.tree.map(lambda a, b: np.max(np.abs(a - b)), whole.params, p.state.params)
    assert max(jax.tree.leaves(moved)) > 1e-4  # the update changed the parameters
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
        by_parts.params, whole.params,
    )  # fmt: skip
    assert float(jax.jit(p.env)(p.state.env_state, jax.random.PRNGKey(2))) != 0.0
    # XLA's count for [64, 64] @ [64, 64]: 64 * 64 outputs of 64 multiply-adds, 2 * 64**3.
    square = jnp.ones((64, 64))
    flops, nbytes = xla_cost(lambda x: x @ x, square)
    assert flops == 2 * 64**3 and nbytes >= 2 * square.nbytes
    with pytest.raises(ValueError, match="normalize_values"):
        make_programs(env, network, PPOConfig(n_envs=4, rollout_length=6, n_minibatches=2,
                      total_steps=24, normalize_values=True), jax.random.PRNGKey(1))  # fmt: skip


@pytest.mark.extended
def test_the_limits_study_writes_times_and_roofline_floors(tmp_path):
    # One tiny cell (PointMass, 8 envs, T = 8, 2 epochs x 2 minibatches) with given
    # peaks: each part's steps/s is its 64 env steps over its time, the iteration's
    # floor is the rollout's plus the update's, and each floor is the larger of the
    # FLOPs and bytes terms.
    from nnx_ppo_benchmarks.studies import limits

    out = tmp_path / "limits.jsonl"
    argv = ["--tasks", "pointmass", "--n-envs", "8", "--networks", "mlp_small",
            "--n-minibatches", "2", "--repeats", "1", "--out", str(out)]  # fmt: skip
    assert limits.main([*argv, "--peak-flops", "1e11", "--peak-bandwidth", "2e10"]) == 0
    [record] = (json.loads(line) for line in out.read_text().splitlines())
    assert (record["rollout_length"], record["n_epochs"], record["n_minibatches"]) == (8, 2, 2)
    for part in ("env", "rollout", "update", "iteration"):
        steps_per_s = 64 / (record[f"{part}_ms"] / 1e3)
        assert record[f"{part}_steps_per_s"] == pytest.approx(steps_per_s, rel=1e-2)
    for part in ("env", "rollout", "update"):
        floor = max(record[f"{part}_flops"] / 1e11, record[f"{part}_bytes"] / 2e10) * 1e3
        assert record[f"{part}_floor_ms"] == pytest.approx(floor, rel=1e-3, abs=1e-4)
    # The update replays 8 steps x 8 envs twice, forward and backward: more FLOPs than
    # the rollout's one forward pass over them.
    assert record["update_flops"] > record["rollout_flops"] > record["env_flops"] > 0
    total = record["rollout_floor_ms"] + record["update_floor_ms"]
    assert record["iteration_floor_ms"] == pytest.approx(total, abs=2e-4)
    assert record["peaks"] == [1e11, 2e10] and record["device"] == "cpu"
