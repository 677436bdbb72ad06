"""The contract every trainer keeps, one suite parametrized over the trainers:
`train_ppo`, `train_distillation` and `train_many` (a PPO sweep and a distillation
sweep, K=2 each; and, ``extended``, a PPO sweep of LSTMs and a distillation sweep of
LSTM students trained with a mirror symmetry, whose mirrored carries are state too).

1. Exact resume: a run that crashed past its last checkpoint, was resumed, stopped by a
   stop request and resumed again ends bit for bit where the uninterrupted run ends
   (state, metrics, JSONL log), building its training program once per call; its final
   checkpoint holds each run's trained network and metrics, addressed by run.
2. Evaluations after a resume: each resumed call evaluates at the steps, and with the
   results, of the uninterrupted run.
3. Divergence: a run that diverges (the finished run continued for one iteration at a
   learning rate of 1e30) raises `NonFiniteError` naming the iteration (and, in a
   sweep, the run) and leaves its last healthy checkpoint as the latest on disk.
4. Run options: a wrong one is refused with a clear error before anything is built.
5. Devices (``extended``): a run on 2 forced host devices equals its 1-device run
   within float32 tolerance; the environments are sharded, the parameters replicated.

One tiny setup for all: PointMass with 6-step episodes (resets inside the 5-step
rollouts), 4 envs, 8-unit networks, 6 iterations of 20 env steps. Each trainer's
uninterrupted run and split run are built once (module fixtures); the calls of one
trainer compile the same programs, which the persistent compilation cache shares.

Run as a script (``XLA_FLAGS=--xla_force_host_platform_device_count=2 python
test_trainer_contract.py OUT``) it trains every trainer on 2 devices and writes the
results to ``OUT.json`` and ``OUT-<trainer>.npz`` (JAX fixes the device count at
start-up, so the test starts it as a subprocess).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _train_test_helpers import (
    COMPILED,
    assert_trees_equal,
    host,
    jax_programs,
    subprocess_env,
)
from flax import nnx
from jax.sharding import PartitionSpec

from nnx_ppo.algorithms.checkpointing.checkpointer import (
    Checkpointer,
    CheckpointMismatchError,
    load_metadata,
    load_network,
)
from nnx_ppo.algorithms.config import (
    DistillationConfig,
    EvalConfig,
    LogLevel,
    PPOConfig,
    TrainConfig,
)
from nnx_ppo.algorithms.core.distributed import make_mesh
from nnx_ppo.algorithms.core.faults import NonFiniteError
from nnx_ppo.algorithms.distillation.train import train_distillation
from nnx_ppo.algorithms.ppo.train import train_ppo
from nnx_ppo.algorithms.sweeps.many import train_many
from nnx_ppo.algorithms.symmetry import Mirror, Symmetry
from nnx_ppo.algorithms.trainer import skeleton as trainer_module
from nnx_ppo.algorithms.types import batch_fields
from nnx_ppo.envs import MemoryTask, PointMass
from nnx_ppo.networks.factories import make_lstm_actor_critic, make_mlp_actor_critic
from nnx_ppo.wrappers import EpisodeWrapper

ENV = EpisodeWrapper(PointMass(), episode_length=6)
# 4 envs x 5 steps = 20 env steps per iteration and per call; 6 iterations of 2 epochs of
# 2 minibatches: 24 optimizer updates.
N_ENVS, ROLLOUT, TOTAL = 4, 5, 120
CALL, UPDATES = N_ENVS * ROLLOUT, TOTAL // (N_ENVS * ROLLOUT) * 2 * 2
# Evaluations when 50 steps have passed since the last one: at 0, 60 and 120 (a period
# that divides neither the call nor the checkpoints'). Checkpoints when the step crosses
# a multiple of 40: 40, 80 and 120.
EVAL = EvalConfig(n_envs=4, max_episode_length=6, every_steps=50)
SAVE_EVERY = 40
LOG = LogLevel.LOSSES | LogLevel.ACTOR | LogLevel.CRITIC | LogLevel.ROLLOUT  # no wall time
RATES = (3e-3, 1e-2)  # the runs' learning rates (a single run: the first)
# A run continued past its end diverges: one more iteration at a learning rate of 1e30
# (the first Adam update moves every parameter by ~1e30), a single run's from its
# schedule, a sweep's last run's from its override. Neither changes the compiled program
# (total_steps is not part of it; a sweep's rates are its inputs).
DIVERGING_RATE = 1e30
CRASH_AT = 60  # the split run's first attempt crashes at its record of step 60


class _Crash(Exception):
    """What the first attempt's ``log_fn`` raises (an error after training, as a
    failing logger or a killed job: the run never reaches its stop or final save)."""


# --------------------------------------------------------------------------- trainers


def _jumps_after_the_run(rate: float) -> Callable[[jax.Array], jax.Array]:
    """A single run's learning-rate schedule: ``rate`` for the run's `UPDATES` updates,
    `DIVERGING_RATE` after them."""
    return lambda count: jnp.where(count < UPDATES, rate, DIVERGING_RATE)


def _ppo_config(rate: Any, total: int) -> TrainConfig:
    ppo = PPOConfig(
        n_envs=N_ENVS, rollout_length=ROLLOUT, n_minibatches=2, n_epochs=2, total_steps=total,
        learning_rate=rate, log_level=LOG,
    )  # fmt: skip
    return TrainConfig(ppo=ppo, eval=EVAL)


def _distillation_config(rate: Any, total: int) -> DistillationConfig:
    return DistillationConfig(
        n_envs=N_ENVS, rollout_length=ROLLOUT, n_minibatches=2, n_epochs=2, total_steps=total,
        learning_rate=rate, value_loss_weight=0.5, log_level=LOG & ~LogLevel.ACTOR, eval=EVAL,
    )  # fmt: skip


def _mlp(rngs: nnx.Rngs) -> nnx.Module:
    """PPO's network: Normalizer -> MLP actor and critic."""
    return make_mlp_actor_critic(2, 2, (8,), (8,), rngs=rngs)


def _lstm(rngs: nnx.Rngs) -> nnx.Module:
    """`train_distillation`'s student: Normalizer -> LSTM -> actor and critic heads (a
    distillation sweep's students are MLPs, whose programs compile faster)."""
    return make_lstm_actor_critic(2, 2, 8, (8,), (8,), rngs=rngs)


def _teacher() -> nnx.Module:
    """The teacher of every distillation run: an LSTM too, so its carry is state."""
    return make_lstm_actor_critic(2, 2, 8, (8,), (8,), rngs=nnx.Rngs(11))


@dataclasses.dataclass
class Outcome:
    """A trainer's result, runs listed (one for `train_ppo` / `train_distillation`);
    ``result`` is what the trainer returned."""

    result: Any
    state: Any
    eval_histories: list[list[tuple[int, dict[str, float]]]]
    metrics: list[dict[str, float]]
    total_steps: int
    stopped: bool
    networks: list[nnx.Module]


def _total(diverge: bool) -> int:
    return TOTAL + CALL if diverge else TOTAL


def _sweep_rates(diverge: bool) -> dict[str, list[float]]:
    return {"learning_rate": [RATES[0], DIVERGING_RATE if diverge else RATES[1]]}


def _single(result: Any, network: nnx.Module) -> Outcome:
    return Outcome(
        result, result.state, [result.eval_history], [result.metrics], result.total_steps,
        result.stopped, [network],
    )  # fmt: skip


def _sweep(result: Any) -> Outcome:
    networks = [result.network(i) for i in range(result.n_runs)]
    return Outcome(
        result, result.state, result.eval_histories, result.metrics, result.total_steps,
        result.stopped, networks,
    )  # fmt: skip


Factory = Callable[[nnx.Rngs], nnx.Module]


def _run_ppo(env: Any, make: Factory, diverge: bool, **options: Any) -> Outcome:
    network = make(nnx.Rngs(0))
    config = _ppo_config(_jumps_after_the_run(RATES[0]), _total(diverge))
    return _single(train_ppo(env, network, config, **options), network)


def _run_distillation(env: Any, make: Factory, diverge: bool, **options: Any) -> Outcome:
    student = make(nnx.Rngs(0))
    config = _distillation_config(_jumps_after_the_run(RATES[0]), _total(diverge))
    return _single(train_distillation(env, _teacher(), student, config, **options), student)


def _run_ppo_sweep(env: Any, make: Factory, diverge: bool, **options: Any) -> Outcome:
    config = _ppo_config(RATES[0], _total(diverge))
    result = train_many(env, make, config, seeds=[0, 1], overrides=_sweep_rates(diverge), **options)
    return _sweep(result)


def _run_ppo_symmetry_sweep(env: Any, make: Factory, diverge: bool, **options: Any) -> Outcome:
    # PointMass mirrored in x; augmentation and a mirror loss.
    flip_x = Mirror.from_signs(-1, 1)
    symmetry = Symmetry(observation=flip_x, action=flip_x, mirror_loss_weight=0.1)
    config = _ppo_config(RATES[0], _total(diverge))
    config = dataclasses.replace(config, ppo=dataclasses.replace(config.ppo, symmetry=symmetry))
    result = train_many(env, make, config, seeds=[0, 1], overrides=_sweep_rates(diverge), **options)
    return _sweep(result)


def _run_distillation_sweep(env: Any, make: Factory, diverge: bool, **options: Any) -> Outcome:
    config = _distillation_config(RATES[0], _total(diverge))
    result = train_many(
        env, make, config, seeds=[0, 1], overrides=_sweep_rates(diverge), teacher=_teacher(),
        **options,
    )  # fmt: skip
    return _sweep(result)


@dataclasses.dataclass(frozen=True)
class Trainer:
    """A trainer as the contract sees it.

    Attributes:
        id: The test id.
        function: The trainer's name, as its messages give it.
        runs: The runs it trains (K).
        run: ``run(env, make, diverge, **options) -> Outcome``: trains the networks
            ``make(nnx.Rngs(seed))`` of seed 0 (a sweep: 0 and 1); ``diverge``: for one
            iteration more, at `DIVERGING_RATE` (a sweep: its last run).
        network: The factory of a run's network (any seed).
    """

    id: str
    function: str
    runs: int
    run: Callable[..., Outcome]
    network: Factory

    def train(
        self, *, env: Any = ENV, make: Factory | None = None, diverge: bool = False,
        **options: Any,
    ) -> Outcome:  # fmt: skip
        options.setdefault("progress", False)
        return self.run(env, make or self.network, diverge, **options)

    @property
    def diverging_run(self) -> int | None:
        """The run a divergence names: the last of a sweep, ``None`` for one run."""
        return self.runs - 1 if self.function == "train_many" else None

    def which(self, run: int) -> dict[str, int]:
        """`load_network`'s arguments for run ``run`` of this trainer's checkpoints."""
        return {"run": run} if self.function == "train_many" else {}


TRAINERS = [
    Trainer("ppo", "train_ppo", 1, _run_ppo, _mlp),
    Trainer("distillation", "train_distillation", 1, _run_distillation, _lstm),
    Trainer("ppo_sweep", "train_many", 2, _run_ppo_sweep, _mlp),
    Trainer("distillation_sweep", "train_many", 2, _run_distillation_sweep, _mlp),
    Trainer("ppo_symmetry_sweep", "train_many", 2, _run_ppo_symmetry_sweep, _lstm),
]
# run by the extended session only. A distillation sweep with a symmetry is not a
# trainer of its own here (~85 s of CI for it): the sweep's run axis is the same for
# every config, and a symmetric student's exact replay and bitwise resume are
# test_distillation_symmetry.py's.
EXTENDED = {"ppo_symmetry_sweep"}


@pytest.fixture(
    scope="module",
    params=[
        pytest.param(t, id=t.id, marks=[pytest.mark.extended] if t.id in EXTENDED else [])
        for t in TRAINERS
    ],
)
def trainer(request: pytest.FixtureRequest) -> Trainer:
    return request.param


# --------------------------------------------------------------------------- runs


def _step_dirs(directory: Path) -> list[int]:
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def _stop_after(calls: int) -> Callable[[], bool]:
    """A stop request that answers true from its ``calls``-th question on (it is asked
    after every device call)."""
    asked = itertools.count(1)
    return lambda: next(asked) >= calls


def _crash_at(step_reached: int) -> Callable[..., None]:
    def log_fn(metrics: dict[str, float], step: int, *run: int) -> None:
        if step >= step_reached:
            raise _Crash(step)

    return log_fn


def _jsonl_steps(path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


@dataclasses.dataclass
class Full:
    outcome: Outcome
    jsonl: Path


@pytest.fixture(scope="module")
def full(trainer: Trainer, tmp_path_factory: pytest.TempPathFactory) -> Full:
    """The uninterrupted run (no checkpoint)."""
    jsonl = tmp_path_factory.mktemp(f"{trainer.id}-full") / "full.jsonl"
    return Full(trainer.train(jsonl_path=jsonl), jsonl)


@dataclasses.dataclass
class Split:
    directory: Path
    jsonl: Path
    crashed: dict[str, Any]  # what the first attempt left behind
    stopped: Outcome
    resumed: Outcome
    restored: list[int | None]  # the steps the second and third attempts resumed from
    compiled: list[int]  # the training programs each of them built


@pytest.fixture(scope="module")
def split(trainer: Trainer, tmp_path_factory: pytest.TempPathFactory) -> Split:
    """The same run in three attempts, each with a fresh network and `Checkpointer` on
    one directory: the first crashes at its record of step 60 (past the checkpoint at
    40); the second resumes from 40 and is stopped after 3 calls (at 100: a checkpoint
    there, nothing else due); the third resumes from 100 and finishes."""
    root = tmp_path_factory.mktemp(f"{trainer.id}-split")
    directory, jsonl = root / "checkpoints", root / "split.jsonl"

    def checkpointer() -> Checkpointer:
        return Checkpointer(directory, save_every_steps=SAVE_EVERY, max_to_keep=None)

    with checkpointer() as ckpt, pytest.raises(_Crash):
        trainer.train(checkpoint=ckpt, jsonl_path=jsonl, log_fn=_crash_at(CRASH_AT))
    crashed = {"steps": _step_dirs(directory), "jsonl": _jsonl_steps(jsonl)}
    restored, compiled, outcomes = [], [], []
    for stop in (_stop_after(3), None):
        with checkpointer() as ckpt, jax_programs(COMPILED) as programs:
            outcomes.append(trainer.train(checkpoint=ckpt, jsonl_path=jsonl, stop=stop))
        restored.append(ckpt.restored_step)
        compiled.append(programs.count("jit(train_call)"))
    return Split(directory, jsonl, crashed, *outcomes, restored, compiled)


# --------------------------------------------------------------------------- 1. resume


def test_a_crashed_stopped_and_resumed_run_ends_bitwise_as_the_uninterrupted_one(
    trainer: Trainer, full: Full, split: Split
) -> None:
    # The first attempt wrote its checkpoint at 40 and log records up to its crash at
    # 60: the second resumed from 40 (dropping the records after it) and stopped after
    # 3 calls with a checkpoint at 100, where the third resumed.
    assert split.crashed["steps"] == [40]
    assert split.crashed["jsonl"][-1] == CRASH_AT
    assert split.restored == [40, 100]
    # A restored state is placed like a fresh one: the training program is built once.
    assert split.compiled == [1, 1]
    assert split.stopped.stopped and split.stopped.total_steps == 100
    assert not split.resumed.stopped and split.resumed.total_steps == TOTAL
    assert _step_dirs(split.directory) == [40, 80, 100, 120]

    reference = full.outcome
    assert not reference.stopped and reference.total_steps == TOTAL
    assert_trees_equal(split.resumed.state, reference.state)
    assert split.resumed.metrics == reference.metrics
    assert len(reference.metrics) == trainer.runs and "loss/total" in reference.metrics[0]
    # The log, line for line and bit for bit (one line per run per record in a sweep).
    assert split.jsonl.read_text() == full.jsonl.read_text()
    # The final checkpoint holds every run's trained network.
    for run in range(trainer.runs):
        template = trainer.network(nnx.Rngs(99))
        with pytest.raises(AssertionError):  # the template's own values differ
            assert_trees_equal(nnx.state(template), nnx.state(reference.networks[run]))
        loaded = load_network(split.directory, template, **trainer.which(run))
        assert_trees_equal(nnx.state(loaded), nnx.state(reference.networks[run]))


def test_the_final_checkpoint_and_the_result_address_the_runs(
    trainer: Trainer, full: Full, split: Split
) -> None:
    meta = load_metadata(split.directory)
    assert (meta["step"], meta["iteration"]) == (TOTAL, 6)
    result = full.outcome.result
    if trainer.runs == 1:
        assert meta["metrics"]["loss/total"] == full.outcome.metrics[0]["loss/total"]
        return
    # A sweep's metadata has every run's metrics; its runs are addressed by index.
    for run in range(trainer.runs):
        name = f"run_{run}/loss/total"
        assert meta["metrics"][name] == full.outcome.metrics[run]["loss/total"]
        # One run's state without the run axis, as its own run would hold it.
        alone = result.run_state(run)
        assert int(alone.iteration) == 6
        stacked = jax.tree.leaves(host(result.state))
        for ours, theirs in zip(jax.tree.leaves(host(alone)), stacked, strict=True):
            np.testing.assert_array_equal(ours, theirs[run])
    with pytest.raises(IndexError, match="run=2 is not a run of this sweep"):
        result.network(2)


def test_loading_a_run_the_checkpoint_does_not_hold_is_refused_by_name(
    trainer: Trainer, split: Split
) -> None:
    template = trainer.network(nnx.Rngs(0))
    if trainer.runs > 1:
        with pytest.raises(IndexError, match=r"run=2 is not a run of the sweep .* has 2 runs"):
            load_network(split.directory, template, run=2)
        return
    # A single run's checkpoint has no run axis (its first array, the Normalizer's
    # count, is (2,): not a run axis of 2, since the template's own is (2,) too).
    with pytest.raises(CheckpointMismatchError, match=r"a single run's .*load it without run=0"):
        load_network(split.directory, template, run=0)


# --------------------------------------------------------------------------- 2. evaluations


def test_resumed_calls_evaluate_where_the_uninterrupted_run_does(
    trainer: Trainer, full: Full, split: Split
) -> None:
    for run in range(trainer.runs):
        reference = full.outcome.eval_histories[run]
        assert [step for step, _ in reference] == [0, 60, 120]
        # The first attempt evaluated at 0 (its records are in the log); from the
        # resume at 40 on, the two later calls evaluated at 60 and 120 with the same
        # results: the earlier history followed by the resumed one is the reference.
        stopped = split.stopped.eval_histories[run]
        resumed = split.resumed.eval_histories[run]
        assert [step for step, _ in stopped] == [60] and [step for step, _ in resumed] == [120]
        assert reference[:1] + stopped + resumed == reference
        assert "eval/episode_reward/mean" in reference[-1][1]


# --------------------------------------------------------------------------- 3. divergence


def test_a_diverging_run_names_where_and_keeps_the_last_healthy_checkpoint(
    trainer: Trainer, full: Full, split: Split, tmp_path: Path
) -> None:
    # The split run's last checkpoints, continued for one iteration at a learning rate
    # of 1e30 (a sweep: its last run): iteration 7 (steps 120 -> 140) diverges. A
    # checkpoint is due after every call; none may be written after 120.
    directory = tmp_path / "checkpoints"
    for step in (100, 120):
        shutil.copytree(split.directory / str(step), directory / str(step))
    with (
        Checkpointer(directory, save_every_steps=CALL, max_to_keep=None) as ckpt,
        pytest.raises(NonFiniteError) as info,
    ):
        trainer.train(diverge=True, checkpoint=ckpt)
    assert ckpt.restored_step == TOTAL
    error = info.value
    assert (error.iteration, error.run, error.step) == (7, trainer.diverging_run, TOTAL + CALL)
    where = "iteration 7" if error.run is None else f"run {error.run}, iteration 7"
    assert f"became {error.value} in {where}" in str(error)
    assert not np.isfinite(error.value)

    assert sorted(p.name for p in directory.iterdir()) == ["100", "120"]  # nor a partial one
    assert load_metadata(directory)["step"] == TOTAL
    # The latest checkpoint holds the healthy trained networks.
    for run in range(trainer.runs):
        latest = load_network(directory, trainer.network(nnx.Rngs(99)), **trainer.which(run))
        assert_trees_equal(nnx.state(latest), nnx.state(full.outcome.networks[run]))


# --------------------------------------------------------------------------- 4. options

BAD_EVAL_ENV = EpisodeWrapper(MemoryTask(cue_size=3), episode_length=6)  # [3] observations


class NotAnEnv:
    """Any use of it as an environment fails: a trainer that reaches its checks (let
    alone builds anything) raises this error, not the option's."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the environment was used ({name}) before the options were checked")


# case: (options, error, message; stage). The stage is where the option is checked:
# "resolve": with the other options, before the environment or a sweep's networks are
# touched; "placement": before the environment is used; "env": against the environment.
OPTION_ERRORS: dict[str, tuple[Callable[[], dict[str, Any]], type[Exception], str, str]] = {
    "unknown": (
        lambda: {"progres": False},
        TypeError,
        r"^{function}\(\) got an unknown run option 'progres' \(did you mean 'progress'\?\)",
        "resolve",
    ),
    "log_fn": (
        lambda: {"log_fn": "metrics.jsonl"},
        TypeError,
        r"log_fn='metrics.jsonl' is not callable",
        "resolve",
    ),
    "progress": (
        lambda: {"progress": "yes"},
        TypeError,
        r"progress='yes' must be True, False or None",
        "resolve",
    ),
    "jsonl_path": (lambda: {"jsonl_path": 3}, TypeError, r"jsonl_path=3 must be a path", "resolve"),
    "checkpoint_str": (
        lambda: {"checkpoint": "runs/x"},
        TypeError,
        r"checkpoint='runs/x' is a path, not a checkpoint hook; "
        r"pass checkpoint=Checkpointer\('runs/x'",
        "resolve",
    ),
    "checkpoint_path": (
        lambda: {"checkpoint": Path("runs/x")},
        TypeError,
        r"is a path, not a checkpoint hook; pass checkpoint=Checkpointer\('runs/x'",
        "resolve",
    ),
    "checkpoint_object": (
        lambda: {"checkpoint": object()},
        TypeError,
        r"checkpoint=<object .*> is not a checkpoint hook",
        "resolve",
    ),
    "stop": (
        lambda: {"stop": True},
        TypeError,
        r"stop=True is not callable.*StopOnSignal",
        "resolve",
    ),
    "tasks": (
        lambda: {"tasks": print},
        TypeError,
        r"tasks=.* must be a list of Periodic tasks",
        "resolve",
    ),
    "devices_and_mesh": (
        lambda: {"devices": 1, "mesh": make_mesh()},
        ValueError,
        r"pass devices=\.\.\. or mesh=\.\.\., not both",
        "placement",
    ),
    "devices": (
        lambda: {"devices": jax.device_count() + 1},
        ValueError,
        r"devices=\d+ must be between 1 and the number of devices",
        "placement",
    ),
    "eval_env": (
        lambda: {"eval_env": BAD_EVAL_ENV},
        ValueError,
        r"failed on eval_env's observation .*\(4, 3\)",
        "env",
    ),
}


@pytest.mark.parametrize("case", list(OPTION_ERRORS))
def test_a_wrong_run_option_is_refused_before_anything_is_built(
    trainer: Trainer, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreachable(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the training state was built before the options were checked")

    # The first step that builds (and compiles) anything, for one run and for K.
    monkeypatch.setattr(trainer_module, "init_state", unreachable)
    monkeypatch.setattr(trainer_module, "init_runs", unreachable)
    options, error, match, stage = OPTION_ERRORS[case]
    built: list[int] = []

    def make(rngs: nnx.Rngs) -> nnx.Module:
        built.append(1)
        return trainer.network(rngs)

    env = ENV if stage == "env" else NotAnEnv()
    with pytest.raises(error, match=match.replace("{function}", trainer.function)):
        trainer.train(env=env, make=make, **options())
    if stage == "resolve":  # one run's network is the caller's; a sweep builds its own
        assert len(built) == (1 if trainer.runs == 1 else 0)


# --------------------------------------------------------------------------- 5. devices

# Reduction order differs between 1 and 2 devices (sums of 2 partial sums): after 6
# iterations the states agree to ~1e-7, far below these bounds.
TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}


def _two_device_runs(out: str) -> None:
    """Train every trainer on 2 devices; write the states, records and layouts."""
    assert jax.device_count() == 2, jax.devices()
    facts: dict[str, Any] = {}
    for spec in TRAINERS:
        outcome = spec.train(devices=2)
        state = outcome.state
        np.savez(f"{out}-{spec.id}.npz", *jax.tree.leaves(host(state)))
        data = PartitionSpec("data") if spec.runs == 1 else PartitionSpec(None, "data")
        batch = [x for f in batch_fields(state) for x in jax.tree.leaves(getattr(state, f))]
        facts[spec.id] = {
            "eval_histories": outcome.eval_histories,
            "metrics": outcome.metrics,
            "total_steps": outcome.total_steps,
            "batch_leaves": len(batch),
            "batch_sharded": all(x.sharding.spec == data for x in batch),
            "params_replicated": all(
                x.sharding.is_fully_replicated for x in jax.tree.leaves(state.params)
            ),
            "network_devices": sorted(
                {len(x.devices()) for n in outcome.networks for x in jax.tree.leaves(nnx.state(n))}
            ),
        }
    Path(f"{out}.json").write_text(json.dumps(facts))


@pytest.fixture(scope="module")
def two_devices(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    """Every trainer on 2 forced host devices, in one subprocess: ``(facts, prefix)``."""
    out = str(tmp_path_factory.mktemp("two_devices") / "out")
    proc = subprocess.run(
        [sys.executable, __file__, out],
        env=subprocess_env(2),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return json.loads(Path(f"{out}.json").read_text()), out


@pytest.mark.extended
def test_two_devices_train_like_one(
    trainer: Trainer, full: Full, two_devices: tuple[dict[str, Any], str]
) -> None:
    facts, out = two_devices
    two = facts[trainer.id]
    # Environments (and carries, episode statistics...) split 2 ways, parameters
    # replicated; the networks handed back are plain one-device copies.
    assert two["batch_leaves"] > 0 and two["batch_sharded"]
    assert two["params_replicated"]
    assert two["network_devices"] == [1]

    one = full.outcome
    # Training moved every run's network: the comparison is not of untouched networks.
    for run, network in enumerate(one.networks):
        fresh = jax.tree.leaves(nnx.state(trainer.network(nnx.Rngs(run)), nnx.Param))
        trained = jax.tree.leaves(nnx.state(network, nnx.Param))
        pairs = zip(trained, fresh, strict=True)
        assert any(not np.allclose(a, b, **TOLERANCE) for a, b in pairs)
    with np.load(f"{out}-{trainer.id}.npz") as data:
        leaves = [data[f"arr_{i}"] for i in range(len(data.files))]
    reference = jax.tree.leaves(host(one.state))
    assert len(leaves) == len(reference) > 0
    for x, y in zip(leaves, reference, strict=True):
        np.testing.assert_allclose(x, y, **TOLERANCE)
    assert two["total_steps"] == one.total_steps == TOTAL
    for ours, theirs in zip(two["metrics"], one.metrics, strict=True):
        assert set(ours) == set(theirs)
        for name, value in theirs.items():
            np.testing.assert_allclose(ours[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    for ours, theirs in zip(two["eval_histories"], one.eval_histories, strict=True):
        assert [step for step, _ in ours] == [step for step, _ in theirs] == [0, 60, 120]
        for (_, a), (_, b) in zip(ours, theirs, strict=True):
            assert set(a) == set(b)
            for name, value in b.items():
                np.testing.assert_allclose(a[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


if __name__ == "__main__":  # not at import: pytest's --doctest-modules imports this file
    _two_device_runs(sys.argv[1])
