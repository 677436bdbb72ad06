"""Sweeps (`train_many`): run i of a sweep is its own `train_ppo` (`train_distillation`)
run; results and logs per run; bad input fails before anything is compiled. A sweep's
exact resume, divergence, run options and devices are `test_trainer_contract.py`'s."""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from nnx_ppo.algorithms.config import (
    DistillationConfig,
    EvalConfig,
    LogLevel,
    PPOConfig,
    TrainConfig,
    VideoConfig,
)
from nnx_ppo.algorithms.core.faults import NonFiniteError, healthy, raise_if_non_finite
from nnx_ppo.algorithms.core.logging import PerRun
from nnx_ppo.algorithms.distillation.train import train_distillation
from nnx_ppo.algorithms.observe.evaluation import evaluate
from nnx_ppo.algorithms.ppo.advantages import gae
from nnx_ppo.algorithms.ppo.iteration import make_training_iteration
from nnx_ppo.algorithms.ppo.train import ppo_algorithm, train_ppo
from nnx_ppo.algorithms.sweeps.many import grid, plan_runs, train_many
from nnx_ppo.algorithms.trainer import run_axis as _run_axis
from nnx_ppo.algorithms.types import DistillationState
from nnx_ppo.envs import PointMass
from nnx_ppo.networks.containers import Sequential
from nnx_ppo.networks.factories import make_lstm_actor_critic, make_mlp_actor_critic
from nnx_ppo.networks.utils import Filter
from nnx_ppo.wrappers import EpisodeWrapper

ENV = EpisodeWrapper(PointMass(), episode_length=6)
LOG = LogLevel.LOSSES | LogLevel.ACTOR | LogLevel.CRITIC | LogLevel.ROLLOUT | LogLevel.GRAD_NORM
# 4 envs x 5 steps = 20 env steps per iteration; 3 iterations.
PPO = PPOConfig(
    n_envs=4, rollout_length=5, n_minibatches=2, n_epochs=2, total_steps=60,
    learning_rate=1e-2, log_level=LOG,
)  # fmt: skip
CONFIG = TrainConfig(ppo=PPO, eval=EvalConfig(n_envs=2, max_episode_length=6, every_steps=40))


def mlp(rngs):  # with an observation Normalizer (normalize_obs=True)
    return make_mlp_actor_critic(2, 2, (8,), (8,), rngs=rngs)


def lstm(rngs):
    return make_lstm_actor_critic(2, 2, 8, (8,), (8,), rngs=rngs)


SWEEPS = {
    # Base max_grad_norm=None and weight_decay=0: the overrides switch both on.
    "mlp": (
        mlp,
        {
            "learning_rate": [1e-2, 3e-3, 2e-2, 1e-2],
            "clip_range": [0.2, 0.1, 0.3, 0.2],
            "max_grad_norm": [1.0, 0.5, 0.3, 10.0],
            "weight_decay": [0.0, 1e-3, 1e-2, 0.0],
            "discounting_factor": [0.99, 0.9, 0.95, 0.97],
        },
        2,
    ),
    "lstm": (
        lstm,
        {
            "learning_rate": [1e-2, 3e-3, 1e-2, 2e-2],
            "gae_lambda": [0.95, 0.9, 0.8, 1.0],
            "critic_loss_weight": [0.5, 1.0, 0.25, 2.0],
            "value_clip_range": [0.2, 0.1, 0.5, 0.3],
        },
        3,
    ),
}


def _leaves(tree):
    def host(x):  # typed PRNG keys (the networks' RNG streams) as their raw data
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        return np.asarray(x)

    return [host(x) for x in jax.tree.leaves(tree)]


# The LSTM case runs at the latest dependencies only (`heavy`).
@pytest.mark.parametrize(
    "kind", [pytest.param(k, marks=pytest.mark.heavy) if k == "lstm" else k for k in SWEEPS]
)
def test_run_of_a_sweep_equals_its_own_train_ppo_run(kind, tmp_path):
    # K=4 runs, 3 iterations; run `i` against train_ppo with the same seed and values.
    # Tolerance: the same computation, but vmapped and with traced hyperparameters
    # instead of folded constants, so XLA fuses and orders some float32 operations
    # differently; the measured difference after 3 iterations is ~1e-7.
    make_network, overrides, i = SWEEPS[kind]
    seeds = [3, 1, 4, 5]
    records = []
    result = train_many(
        ENV, make_network, CONFIG, seeds=seeds, overrides=overrides, progress=False,
        jsonl_path=tmp_path / "sweep.jsonl",
        log_fn=lambda metrics, step, run: records.append((run, step, dict(metrics))),
    )  # fmt: skip
    assert result.n_runs == 4 and result.seeds == seeds and result.total_steps == 60
    assert [config.ppo.clip_range for config in result.configs] == [
        overrides.get("clip_range", [PPO.clip_range] * 4)[r] for r in range(4)
    ]

    network = make_network(nnx.Rngs(seeds[i]))
    single = train_ppo(ENV, network, result.configs[i], progress=False)
    trained = result.network(i)
    assert type(trained) is type(network)
    for ours, theirs in zip(_leaves(nnx.state(trained)), _leaves(nnx.state(network)), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    # The other runs trained differently (other seeds and values): not a copy of run i.
    other = _leaves(nnx.state(result.network((i + 1) % 4), nnx.Param))
    assert not all(
        np.allclose(a, b)
        for a, b in zip(other, _leaves(nnx.state(network, nnx.Param)), strict=True)
    )
    assert set(result.metrics[i]) == set(single.metrics)
    for name, value in single.metrics.items():
        np.testing.assert_allclose(
            result.metrics[i][name], value, rtol=1e-4, atol=1e-6, err_msg=name
        )
    assert [s for s, _ in result.eval_histories[i]] == [s for s, _ in single.eval_history]
    assert [s for s, _ in single.eval_history] == [0, 40, 60]
    for (_, ours), (_, theirs) in zip(result.eval_histories[i], single.eval_history, strict=True):
        for name, value in theirs.items():
            np.testing.assert_allclose(ours[name], value, rtol=1e-4, atol=1e-6, err_msg=name)

    # Logs: one record per run per log (and evaluation) through log_fn and in the file.
    assert [(run, step) for run, step, _ in records] == [
        (run, step) for step in (0, 20, 40, 60) for run in range(4)
    ]
    lines = [json.loads(line) for line in (tmp_path / "sweep.jsonl").read_text().splitlines()]
    assert [(line["step"], line["run"]) for line in lines] == [
        (step, run) for step in (0, 20, 40, 60) for run in range(4)
    ]
    last = next(line for line in lines if line["step"] == 60 and line["run"] == i)
    assert last["loss/total"] == pytest.approx(result.metrics[i]["loss/total"])
    if "learning_rate" in overrides:
        assert result.metrics[i]["train/learning_rate"] == pytest.approx(
            overrides["learning_rate"][i]
        )

    # The trained network is an ordinary module: evaluate it like run i's own network.
    ours = evaluate(ENV, trained, jax.random.PRNGKey(7), n_envs=2, max_episode_length=6)
    theirs = evaluate(ENV, network, jax.random.PRNGKey(7), n_envs=2, max_episode_length=6)
    np.testing.assert_allclose(
        ours["eval/episode_reward/mean"], theirs["eval/episode_reward/mean"], rtol=1e-4
    )


def test_run_of_a_distillation_sweep_equals_its_own_train_distillation_run(tmp_path):
    # K=3 LSTM students of one MLP teacher, 3 iterations, with per-run learning rates
    # and regularization weights; run i against train_distillation with its seed and
    # values (tolerance as for PPO sweeps: vmapped, traced values).
    teacher = mlp(nnx.Rngs(11))
    config = DistillationConfig(
        n_envs=4, rollout_length=5, n_minibatches=2, n_epochs=2, total_steps=60,
        learning_rate=1e-2, log_level=LOG, eval=CONFIG.eval,
    )  # fmt: skip
    overrides = {"learning_rate": [1e-2, 3e-3, 2e-2], "regularization_weight": [1.0, 0.5, 0.0]}
    result = train_many(
        ENV, lstm, config, seeds=[3, 1, 4], overrides=overrides, teacher=teacher,
        progress=False,
    )  # fmt: skip
    assert isinstance(result.state, DistillationState)
    assert [c.regularization_weight for c in result.configs] == [1.0, 0.5, 0.0]
    i = 1
    student = lstm(nnx.Rngs(result.seeds[i]))
    single = train_distillation(ENV, teacher, student, result.configs[i], progress=False)
    for ours, theirs in zip(
        _leaves(nnx.state(result.network(i))), _leaves(nnx.state(student)), strict=True
    ):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    for name, value in single.metrics.items():
        np.testing.assert_allclose(
            result.metrics[i][name], value, rtol=1e-4, atol=1e-6, err_msg=name
        )
    assert [s for s, _ in result.eval_histories[i]] == [s for s, _ in single.eval_history]
    # The teacher's carry follows the student's episodes: the same resets, same values.
    teacher_carries = zip(
        _leaves(result.run_state(i).teacher_carry), _leaves(single.state.teacher_carry), strict=True
    )
    for ours, theirs in teacher_carries:
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)

    # A distillation field that selects code is named; the teacher goes with its config.
    with pytest.raises(ValueError, match=r"'value_loss_weight'\] cannot differ.*teacher's values"):
        train_many(ENV, lstm, config, seeds=[0, 1], teacher=teacher,
                   overrides={"value_loss_weight": [0.0, 1.0]})  # fmt: skip
    with pytest.raises(TypeError, match="a distillation sweep takes a DistillationConfig"):
        train_many(ENV, lstm, CONFIG, seeds=[0, 1], teacher=teacher)
    with pytest.raises(TypeError, match="a distillation sweep takes a DistillationConfig"):
        train_many(ENV, lstm, config, seeds=[0, 1])
    with pytest.raises(TypeError, match="algorithm='train_ppo' with a teacher"):
        train_many(ENV, lstm, config, seeds=[0, 1], teacher=teacher, algorithm=ppo_algorithm())


def test_a_sweep_trains_the_algorithm_it_is_given():
    # A variant of PPO: ppo_algorithm's record whose iteration estimates zero advantages.
    # Every run's policy loss is then exactly -min(r * 0, clip(r) * 0) = 0, which PPO's
    # is not (test_iteration.py).
    def zero_advantages(*args, **kwargs):
        advantages, targets = gae(*args, **kwargs)
        return jnp.zeros_like(advantages), targets

    ppo = ppo_algorithm()

    def prepare(env, config, mesh):
        def iteration(graphdef, run, own, mesh):
            return make_training_iteration(
                env, graphdef, own.optimizer, run, mesh=mesh, learning_rate=own.learning_rate,
                advantage_fn=zero_advantages,
            )  # fmt: skip

        return dataclasses.replace(ppo.prepare(env, config, mesh), iteration=iteration)

    variant = dataclasses.replace(ppo, prepare=prepare)
    config = TrainConfig(ppo=PPO, eval=EvalConfig(enabled=False))
    result = train_many(ENV, mlp, config, seeds=[0, 1], algorithm=variant, progress=False)
    assert [m["loss/policy"] for m in result.metrics] == [0.0, 0.0]
    with pytest.raises(TypeError, match="algorithm='ppo' must be an Algorithm record"):
        train_many(ENV, mlp, config, seeds=[0, 1], algorithm="ppo")


def test_bad_input_fails_before_anything_is_compiled(monkeypatch):
    def compiled(*args, **kwargs):
        raise AssertionError("the sweep got as far as building its state")

    monkeypatch.setattr(_run_axis, "init_state", compiled)

    def fails(error, match, make_network=mlp, config=CONFIG, **kwargs):
        kwargs.setdefault("seeds", [0, 1])
        with pytest.raises(error, match=match):
            train_many(ENV, make_network, config, progress=False, **kwargs)

    fails(ValueError, r"seeds=\[\] gives no run", seeds=[])
    fails(TypeError, r"seeds=4 must be a list of ints.*range\(5\)", seeds=4)
    fails(TypeError, r"-1 is not a non-negative int seed", seeds=[0, -1])
    fails(
        ValueError,
        r"different lengths \(2 seeds; learning_rate: 2, clip_range: 3\)",
        overrides={"learning_rate": [1e-3, 1e-2], "clip_range": [0.1, 0.2, 0.3]},
    )
    fails(
        ValueError,
        r"\['learning_rat'\] is not a PPOConfig field",
        overrides={"learning_rat": [1, 2]},
    )
    fails(
        ValueError,
        r"'n_envs'\] cannot differ.*sizes an array or a loop",
        overrides={"n_envs": [4, 8]},
    )
    fails(ValueError, r"'normalize_advantages'\] cannot differ.*selects which code",
          overrides={"normalize_advantages": [True, False]})  # fmt: skip
    fails(
        ValueError,
        r"'desired_kl'\] cannot differ.*adaptive-KL",
        overrides={"desired_kl": [0.01, 0.02]},
    )
    fails(ValueError, r"overrides\['seed'\]: give the runs' seeds", overrides={"seed": [0, 1]})
    fails(
        ValueError, r"'eval'\]: the TrainConfig's eval is shared", overrides={"eval": [None, None]}
    )
    fails(
        ValueError,
        r"run 1 \(seed 1, \{'clip_range': -0.1\}\): clip_range=-0.1 must be > 0",
        overrides={"clip_range": [0.2, -0.1]},
    )
    fails(TypeError, r"run 0 \(seed 0.*gae_lambda='high' must be a real number",
          overrides={"gae_lambda": ["high", 0.9]})  # fmt: skip
    fails(
        ValueError,
        r"run 1 .*learning-rate schedule is Python code",
        overrides={"learning_rate": [1e-3, optax.linear_schedule(1e-3, 0.0, 100)]},
    )
    fails(ValueError, r"run 0 .*max_grad_norm=None removes a term",
          overrides={"max_grad_norm": [None, 1.0]})  # fmt: skip
    fails(
        ValueError,
        r"run 1 .*learning_rate=0.1 is outside the adaptive-KL bounds",  # validated per run
        config=TrainConfig(ppo=PPOConfig(n_envs=4, n_minibatches=2, desired_kl=0.01)),
        overrides={"learning_rate": [1e-3, 1e-1]},
    )

    # The factory must build one structure: a hidden width that depends on the seed is
    # named with the variable and both seeds; a sampler constant (entropy weight) too.
    sizes = iter([8, 9])
    fails(
        ValueError,
        r"make_network\(nnx.Rngs\(1\)\) built a network of another structure than for "
        r"seed 0: params 'layers/1/action/layers/0/layers/0/linear/bias' is shape \(9,\), "
        r"float32 there and shape \(8,\), float32 for seed 0",
        make_network=lambda rngs: make_mlp_actor_critic(2, 2, (next(sizes),), (8,), rngs=rngs),
    )
    weights = iter([1e-2, 1e-3])
    fails(
        ValueError,
        r"make_network\(nnx.Rngs\(1\)\).*static structure differs.*entropy_weight",
        make_network=lambda rngs: make_mlp_actor_critic(
            2, 2, (8,), (8,), rngs=rngs, entropy_weight=next(weights)
        ),
    )
    fails(TypeError, r"make_network\(nnx.Rngs\(0\)\) returned dict", make_network=lambda rngs: {})
    # A factory that builds a new (equal) function per call is one structure: it gets
    # as far as building the state.
    with pytest.raises(AssertionError, match="got as far as building its state"):
        train_many(
            ENV,
            lambda rngs: Sequential([Filter(lambda x: x), mlp(rngs)]),
            CONFIG,
            seeds=[0, 1],
            progress=False,
        )
    # A sweep records videos like its runs: an environment without a renderer is named.
    video = TrainConfig(ppo=PPO, video=VideoConfig(enabled=True, directory="videos"))
    fails(ValueError, r"needs an environment with render.*EpisodeWrapper", config=video)


def test_plan_runs_grid_and_per_run_sinks():
    runs = grid(seeds=[0, 1, 2], learning_rate=[1e-3, 3e-4])
    seeds = runs.pop("seeds")
    configs = plan_runs(PPO, seeds, runs)
    assert [(c.seed, c.ppo.learning_rate) for c in configs] == [
        (0, 1e-3), (0, 3e-4), (1, 1e-3), (1, 3e-4), (2, 1e-3), (2, 3e-4)
    ]  # fmt: skip
    assert all(c.ppo.n_envs == PPO.n_envs for c in configs)
    with pytest.raises(TypeError, match="grid: seeds=3 must be a list"):
        grid(seeds=3)

    closed = []

    class Sink:
        def __init__(self, run):
            self.run, self.seen = run, []

        def __call__(self, metrics, step):
            self.seen.append((step, metrics["x"]))

        def close(self):
            closed.append(self.run)

    log = PerRun(Sink)
    log({"x": 1.0}, 5, 1)
    log({"x": 2.0}, 5, 0)
    log({"x": 3.0}, 10, 1)
    assert log.sinks[1].seen == [(5, 1.0), (10, 3.0)] and log.sinks[0].seen == [(5, 2.0)]
    log.close()
    assert sorted(closed) == [0, 1]


def test_a_diverged_run_is_named():
    # The NaN/inf record of a sweep has a run axis: the first diverged run is reported.
    record = jax.tree.map(lambda *x: np.stack(x), healthy(), healthy(), healthy())
    record = record.replace(
        iteration=np.array([0, 5, 3], np.int32),
        quantity=np.array([-1, 1, 0], np.int32),
        value=np.array([0.0, np.inf, np.nan], np.float32),
    )
    with pytest.raises(NonFiniteError, match=r"params became inf in run 1, iteration 5") as e:
        raise_if_non_finite(record, 100)
    assert e.value.run == 1 and e.value.iteration == 5
    raise_if_non_finite(healthy())  # a single run: no run named
