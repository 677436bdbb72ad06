"""The integration matrix: environment families x run features.

`MATRIX` says, for every environment family and run feature, whether the combination
works (``"pass"``) or is refused (``"refused: <reason>"``); `test_cell` is parametrized
from it, one case per cell, and the how-to page ``docs/how-to/feature-matrix.md`` shows
the same table (`test_the_docs_page_shows_this_matrix` keeps the two equal). A passing
cell runs the feature and checks its result; a refused cell checks the named error and
that the training program was not compiled before it.

Cost (CI's budget): one short training run per family (`MatrixRuns.trained`: 4 envs x 4
steps, 4 iterations in 2 device calls, 20-step episodes, 8-unit networks) is shared by
the evaluation, checkpoint, resume, sweep, export and activation cells. A physics
family's training program takes about 40 s to compile on 2 CPU cores and most of its
cells compile another, so the physics families' cells (`EXTENDED`) run in
``nox -s extended``, as do the cells that start processes; the default selection (the
`DICT_OBS` cells) takes about 90 s on 2 cores; two cognitive cells and five pixel
cells (about 35 s) join it. The cognitive sweep (a categorical policy's sweep program,
another compile) runs in ``extended``: the `DICT_OBS` sweep cell checks the sweep in the
default run.

The pixel family (`PIXELS`: gymnax's SpaceInvaders-MinAtar with a conv + LSTM policy)
needs gymnax (the ``gymnax`` extra); its cells are skipped without it. Its export is
checked on a recorded rollout (`record_rollout`) through StableHLO in its cell and
through ONNX in `test_pixel_policy_onnx_parity_on_a_recorded_rollout` (skipped without
nnx-modules' ``onnx`` extra).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _train_test_helpers import (
    LOWERED,
    assert_trees_equal,
    dict_obs_network,
    host,
    jax_programs,
    randomize_cartpole,
    randomize_pendulum,
)
from flax import nnx

from nnx_ppo.algorithms.checkpointing.checkpointer import Checkpointer, load_metadata, load_network
from nnx_ppo.algorithms.config import EvalConfig, LogLevel, PPOConfig, TrainConfig, VideoConfig
from nnx_ppo.algorithms.core.progress import TRAINING_PROGRESS, TRAINING_STEP, progress_info
from nnx_ppo.algorithms.core.randomization import make_randomization, model_holder
from nnx_ppo.algorithms.observe.activations import record_activations_rollout
from nnx_ppo.algorithms.ppo.train import TrainResult, train_ppo
from nnx_ppo.algorithms.sweeps.many import SweepResult, train_many
from nnx_ppo.envs import DictObsEnv, GymnaxEnv
from nnx_ppo.envs.cognitive import PerceptualDecisionMaking
from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.containers import Sequential
from nnx_ppo.networks.conv import ConvEncoder
from nnx_ppo.networks.export import (
    DeterministicPolicy,
    export_policy,
    load_stablehlo,
    read_manifest,
)
from nnx_ppo.networks.factories import make_mlp_actor_critic
from nnx_ppo.networks.feedforward import Dense
from nnx_ppo.networks.recording import extract_activations, with_recording
from nnx_ppo.networks.recurrent import LSTM
from nnx_ppo.networks.sampling_layers import CategoricalSampler
from nnx_ppo.networks.utils import Filter
from nnx_ppo.wrappers import Latency, Wrapper, wrap_for_training

brax_envs = pytest.importorskip("brax.envs")
playground_registry = pytest.importorskip("mujoco_playground").registry

# --------------------------------------------------------------------------- the matrix

BRAX, PLAYGROUND, DICT_OBS = "brax inverted_pendulum", "Playground CartpoleBalance", "DictObsEnv"
COGNITIVE, PIXELS = "PerceptualDecisionMaking", "gymnax SpaceInvaders-MinAtar"
FAMILIES = (BRAX, PLAYGROUND, DICT_OBS, COGNITIVE, PIXELS)
OURS = (DICT_OBS, COGNITIVE)  # no model to randomize (a gymnax game has its EnvParams)
PHYSICS = (BRAX, PLAYGROUND)

EVALUATION = "train + periodic evaluation"
ROUND_TRIP = "checkpoint round trip"
RESUME = "exact resume"
LIGHT = "light checkpoint resume"
SWEEP = "sweep (train_many)"
RANDOMIZATION = "domain randomization"
SWEEP_RANDOMIZATION = "sweep + randomization"
CURRICULUM = "curriculum (training progress)"
EXPORT = "export (StableHLO)"
ACTIVATIONS = "recorded activations"
VIDEO = "video"
LATENCY = "randomized latency (resume; sweep on DictObsEnv)"
FEATURES = (
    EVALUATION, ROUND_TRIP, RESUME, LIGHT, SWEEP, RANDOMIZATION, SWEEP_RANDOMIZATION, CURRICULUM,
    EXPORT, ACTIVATIONS, VIDEO, LATENCY,
)  # fmt: skip

PASS = "pass"
NO_MODEL = "refused: no physics model to randomize"
NO_RENDER = "refused: the environment has no render method"
NO_RENDERER = "refused: cannot render a frame (no OpenGL renderer)"

MATRIX: dict[tuple[str, str], str] = {
    **{(family, feature): PASS for family in FAMILIES for feature in FEATURES},
    **{(family, RANDOMIZATION): NO_MODEL for family in OURS},
    **{(family, SWEEP_RANDOMIZATION): NO_MODEL for family in OURS},
    **{(family, VIDEO): NO_RENDER for family in (*OURS, PIXELS)},
    **{(family, VIDEO): NO_RENDERER for family in PHYSICS},
}
"""``(family, feature) -> "pass" | "refused: <reason>"``: what `test_cell` checks and the
how-to page shows."""

PIXELS_DEFAULT = (EVALUATION, ROUND_TRIP, RESUME, EXPORT, VIDEO)
EXTENDED = (
    {(family, feature) for family in PHYSICS for feature in FEATURES}
    | {(COGNITIVE, feature) for feature in FEATURES if feature not in (RESUME, EXPORT)}
    | {(PIXELS, feature) for feature in FEATURES if feature not in PIXELS_DEFAULT}
)
"""The physics families' cells: run by ``nox -s extended`` (CI runs it after the default
sessions). Each family's shared run compiles a training program with the simulator in
it (about 40 s on 2 CPU cores) and most cells compile another (10 to 40 s each); the
default and floor sessions keep the `DICT_OBS` cells (about 90 s), the cognitive
task's exact resume and export cells, and the pixel family's `PIXELS_DEFAULT`
cells: its shared run (a conv + LSTM program, about 20 s), evaluation, checkpoint
round trip, exact resume (another compile), export and the refused video (the other
cells of both run in ``extended``)."""

DOCS_PAGE = Path(__file__).resolve().parents[3] / "docs" / "how-to" / "feature-matrix.md"

# --------------------------------------------------------------------------- settings

N_ENVS, ROLLOUT_LENGTH, ITERATIONS_PER_CALL = 4, 4, 2
STEPS_PER_ITERATION = N_ENVS * ROLLOUT_LENGTH  # 16
HALF = ITERATIONS_PER_CALL * STEPS_PER_ITERATION  # 32: one device call
TOTAL = 2 * HALF  # 64: four iterations in two device calls
EPISODE_LENGTH = 20
LOG = LogLevel.LOSSES | LogLevel.ACTOR | LogLevel.CRITIC | LogLevel.ROLLOUT  # no wall time
EVAL = EvalConfig(every_steps=HALF, n_envs=2, max_episode_length=EPISODE_LENGTH)
NO_EVAL = EvalConfig(enabled=False)


def train_config(
    name: str, total_steps: int, *, evaluation: EvalConfig = EVAL, log_level: LogLevel = LOG
) -> TrainConfig:
    """Every run of family ``name`` in the matrix: only ``total_steps``, the evaluation and
    the log level differ, and the first two do not change the compiled training program."""
    ppo = PPOConfig(
        n_envs=N_ENVS,
        rollout_length=ROLLOUT_LENGTH,
        n_minibatches=2,
        n_epochs=2,
        total_steps=total_steps,
        learning_rate=3e-3,
        # The default: a finished environment restarts from its cached first reset (with
        # a new staggered start); "fresh" puts a batched reset in every step of the
        # program (a third of a physics family's training compile). A cognitive task
        # draws its trial at reset and needs "fresh" (checked before compiling).
        # test_rollout.py checks the reset modes.
        reset_mode="fresh" if name == COGNITIVE else "cached",
        iterations_per_call=ITERATIONS_PER_CALL,
        log_level=log_level,
    )
    return TrainConfig(ppo=ppo, eval=evaluation, seed=0)


# --------------------------------------------------------------------------- families


@dataclasses.dataclass(frozen=True)
class Family:
    """One environment family: the unwrapped environment, its network factory
    (``make_network(nnx.Rngs(seed))``, as `train_many` calls it) and its randomizer."""

    name: str
    env: Any
    make_network: Callable[[nnx.Rngs], nnx.Module]
    randomization_fn: Callable[..., Any] | None

    def train_env(self, env: Any = None) -> Any:
        """``env`` (default: the family's) wrapped for training: staggered starts."""
        env = self.env if env is None else env
        return wrap_for_training(env, episode_length=EPISODE_LENGTH, stagger=True)

    def eval_env(self, env: Any = None) -> Any:
        """``env`` wrapped for evaluation: whole episodes."""
        env = self.env if env is None else env
        return wrap_for_training(env, episode_length=EPISODE_LENGTH, stagger=False)


def build_family(name: str) -> Family:
    if name == BRAX:
        env = brax_envs.get_environment("inverted_pendulum", backend="generalized")
        randomizer: Callable[..., Any] | None = randomize_pendulum
    elif name == PLAYGROUND:
        env = playground_registry.load("CartpoleBalance", config_overrides={"impl": "jax"})
        randomizer = randomize_cartpole
    elif name == COGNITIVE:  # trials of 14 to 27 steps at dt = 100 ms; discrete actions
        env, randomizer = PerceptualDecisionMaking(dt=100), None
    elif name == PIXELS:
        return Family(
            name, GymnaxEnv.make("SpaceInvaders-MinAtar"), pixel_network, randomize_invaders
        )
    else:
        return Family(name, DictObsEnv(), dict_obs_network, None)
    obs_size, action_size = env.observation_size, env.action_size
    kind = getattr(env, "action_distribution", "normal_tanh")

    def make_network(rngs: nnx.Rngs) -> nnx.Module:
        return make_mlp_actor_critic(
            obs_size, action_size, (8,), (8,), rngs=rngs, action_distribution=kind
        )

    return Family(name, env, make_network, randomizer)


def pixel_network(rngs: nnx.Rngs) -> nnx.Module:
    """The pixel family's conv + LSTM policy: `ConvEncoder.minatar` at 4 channels with an
    8-unit dense layer (it takes `GymnaxEnv`'s flat ``[B, 600]`` observation and reshapes
    it to SpaceInvaders-MinAtar's 10x10x6 grid), an 8-unit LSTM, and a categorical actor
    (4 actions: stay, left, right, fire) and a critic on its output."""
    encoder = ConvEncoder.minatar((10, 10, 6), rngs, channels=(4,), dense=(8,))
    return Sequential(
        [
            encoder,
            LSTM(encoder.out_features, 8, rngs=rngs),
            PPOAdapter(
                action=Sequential([Dense(8, 4, rngs=rngs), CategoricalSampler(rngs)]),
                value=Dense(8, 1, rngs=rngs),
            ),
        ]
    )


def randomize_invaders(params: Any, rng: jax.Array) -> tuple[Any, Any]:
    """SpaceInvaders-MinAtar's alien timing (its `EnvParams`, default 12 and 10 steps):
    the steps between alien moves drawn in ``[8, 16]`` and between alien shots in
    ``[5, 15]``, one draw per key of ``rng`` (``[n_envs, 2]``)."""
    move_keys, shot_keys = jnp.moveaxis(jax.vmap(jax.random.split)(rng), 1, 0)
    move = jax.vmap(lambda key: jax.random.randint(key, (), 8, 17))(move_keys)
    shot = jax.vmap(lambda key: jax.random.randint(key, (), 5, 16))(shot_keys)
    in_axes = jax.tree.map(lambda _: None, params).replace(
        enemy_move_interval=0, enemy_shot_interval=0
    )
    return params.replace(enemy_move_interval=move, enemy_shot_interval=shot), in_axes


class ProgressCurriculum(Wrapper):
    """A curriculum that reads the training progress: the reward is scaled by
    ``1 + training_progress``, and the step reports the progress and step count it read
    as the metrics ``progress`` and ``trained`` (float32)."""

    def reset(self, rng: jax.Array) -> Any:
        state = self.env.reset(rng)
        zero = jnp.zeros((), jnp.float32)
        return state.replace(
            info={**state.info, **progress_info()},
            metrics={**state.metrics, "progress": zero, "trained": zero},
        )

    def step(self, state: Any, action: Any) -> Any:
        progress = state.info[TRAINING_PROGRESS]
        trained = state.info[TRAINING_STEP].astype(jnp.float32)
        state = self.env.step(state, action)
        return state.replace(
            reward=state.reward * (1.0 + progress),
            metrics={**state.metrics, "progress": progress, "trained": trained},
        )


# --------------------------------------------------------------------------- helpers


def trees_differ(a: Any, b: Any) -> bool:
    return any(
        x.shape != y.shape or not np.array_equal(x, y, equal_nan=True)
        for x, y in zip(jax.tree.leaves(host(a)), jax.tree.leaves(host(b)), strict=True)
    )


def step_dirs(directory: Path) -> list[int]:
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def refused_before_compiling(call: Callable[[], Any], error: type[Exception], match: str) -> None:
    """``call()`` raises ``error`` matching ``match``, and compiles nothing first.

    The call runs twice: the first run may compile JAX's one-off eager operations (a
    PRNG key, a parameter initializer), which are cached for the second; a trainer builds
    new programs on every call, so any lowering in the second run means the refusal came
    after compiling (`test_cell`'s resume check shows that a repeated run lowers its
    training program again)."""
    with pytest.raises(error, match=match):
        call()
    with jax_programs(LOWERED) as lowered, pytest.raises(error, match=match):
        call()
    assert lowered == [], f"compiled {lowered} before refusing"


class TeeHook:
    """A checkpoint hook that resumes from ``full`` and saves every state to ``full``
    and to ``light`` (a ``Checkpointer(env_state=False)``), keeping host copies of the
    states ``full`` wrote."""

    def __init__(self, full: Checkpointer, light: Checkpointer) -> None:
        self.full, self.light = full, light
        self.saved: dict[int, Any] = {}

    def restore(self, template: Any) -> Any:
        return self.full.restore(template)

    def save(self, state: Any, step: int, metrics: Mapping[str, float], *, final: bool = False):
        wrote = self.full.save(state, step, metrics, final=final)
        self.light.save(state, step, metrics, final=final)
        if wrote:
            self.saved[step] = host(state)
        return wrote


class RestoreRecorder:
    """A checkpoint hook around a `Checkpointer` that keeps a host copy of the state its
    ``restore`` returned."""

    def __init__(self, inner: Checkpointer) -> None:
        self.inner = inner
        self.restored: Any = None

    def restore(self, template: Any) -> Any:
        state = self.inner.restore(template)
        self.restored = None if state is None else host(state)
        return state

    def save(self, state: Any, step: int, metrics: Mapping[str, float], *, final: bool = False):
        return self.inner.save(state, step, metrics, final=final)


@dataclasses.dataclass
class Trained:
    """A family's shared run: `TOTAL` steps in one go, evaluated every `HALF` steps,
    with full checkpoints in ``directory`` and light ones in ``light_directory`` at
    `HALF` and `TOTAL`."""

    family: Family
    network: nnx.Module
    result: TrainResult
    records: dict[int, dict[str, float]]
    directory: Path
    light_directory: Path
    saved: dict[int, Any]


class MatrixRuns:
    """The module's runs, built on first use and kept (one of each per family). A run
    that failed is not retried: the cells that use it fail at once, naming it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._built: dict[tuple[str, str], Any] = {}

    def _once(self, what: str, name: str, build: Callable[[], Any]) -> Any:
        if (what, name) not in self._built:
            try:
                self._built[what, name] = build()
            except Exception as error:
                self._built[what, name] = error
                raise
        built = self._built[what, name]
        if isinstance(built, Exception):
            raise RuntimeError(f"the {what} run of {name} failed in an earlier cell") from built
        return built

    def family(self, name: str) -> Family:
        return self._once("family", name, lambda: build_family(name))

    def trained(self, name: str) -> Trained:
        return self._once("shared", name, lambda: self._train(name))

    def sweep(self, name: str) -> SweepResult:
        return self._once("sweep", name, lambda: self._sweep(name))

    def rollout(self, name: str) -> Rollout:
        """The shared run's trained network, recorded for `ROLLOUT_STEPS` steps from the
        run's final environment states (see `record_rollout`)."""
        return self._once("rollout", name, lambda: record_rollout(self.trained(name)))

    def curriculum(self, name: str) -> tuple[TrainResult, dict[int, dict[str, float]]]:
        """A run on the family's environment inside `ProgressCurriculum`, logging the
        environment's metrics; the physics families train it on randomized models (their
        `RANDOMIZATION` cell checks the same run)."""
        return self._once("curriculum", name, lambda: self._curriculum(name))

    def _train(self, name: str) -> Trained:
        family = self.family(name)
        root = self.root / re.sub(r"\W+", "_", name)
        config = train_config(name, TOTAL)
        network = family.make_network(nnx.Rngs(0))
        records: dict[int, dict[str, float]] = {}
        with (
            Checkpointer(root / "full", config=config, save_every_steps=HALF) as full,
            Checkpointer(
                root / "light", config=config, save_every_steps=HALF, env_state=False
            ) as light,
        ):
            hook = TeeHook(full, light)
            result = train_ppo(
                family.train_env(), network, config, progress=False,
                eval_env=family.eval_env(), checkpoint=hook,
                log_fn=lambda metrics, step: records.__setitem__(step, dict(metrics)),
            )  # fmt: skip
        return Trained(family, network, result, records, root / "full", root / "light", hook.saved)

    def _sweep(self, name: str) -> SweepResult:
        family = self.family(name)
        return train_many(
            family.train_env(), family.make_network, train_config(name, TOTAL),
            seeds=[0, 1], eval_env=family.eval_env(), progress=False,
        )  # fmt: skip

    def _curriculum(self, name: str) -> tuple[TrainResult, dict[int, dict[str, float]]]:
        family = self.family(name)
        env = ProgressCurriculum(family.env)
        records: dict[int, dict[str, float]] = {}
        result = train_ppo(
            family.train_env(env), family.make_network(nnx.Rngs(0)),
            train_config(name, TOTAL, log_level=LOG | LogLevel.ENV_METRICS), progress=False,
            eval_env=family.eval_env(env), randomization_fn=family.randomization_fn,
            log_fn=lambda metrics, step: records.__setitem__(step, dict(metrics)),
        )  # fmt: skip
        return result, records


ROLLOUT_STEPS = 24


@dataclasses.dataclass(frozen=True)
class Rollout:
    """A recorded rollout of a trained network in ``eval()``, as a deployed control loop
    runs it: ``obs`` ``[T, B, ...]`` (the observation tree step t fed the network),
    ``done`` ``[T, B]`` (the episode ended at step t: the carry was reset after it),
    and the network's ``actions`` and ``values`` (``[T, B, ...]``, ``[T, B]``)."""

    obs: Any
    done: np.ndarray
    actions: Any
    values: np.ndarray


def record_rollout(trained: Trained) -> Rollout:
    """`ROLLOUT_STEPS` steps of the shared run's `N_ENVS` training environments, from
    where its training left them (different points of their games and episodes; a
    deterministic game's fresh resets would all be alike), driven by a copy of the
    trained network in ``eval()`` from its initial carry, called step by step; where an
    episode ended, the environment restarts from a new reset and the carry is reset
    (``reset_state``)."""
    network = nnx.clone(trained.network)
    network.eval()
    env = trained.family.train_env()
    step, reset = jax.jit(jax.vmap(env.step)), jax.jit(jax.vmap(env.reset))
    keys = jax.random.split(jax.random.PRNGKey(5), (ROLLOUT_STEPS, N_ENVS))
    state = trained.result.state.env_state
    carry = network.initialize_state(N_ENVS)
    steps: list[tuple[Any, np.ndarray, Any, np.ndarray]] = []
    for t in range(ROLLOUT_STEPS):
        out = network(carry, state.obs)
        obs, actions = state.obs, out.output.actions
        state = step(state, actions)
        done = np.asarray(state.done).astype(bool)
        state = _where(done, reset(keys[t]), state)
        carry = _where(done, network.reset_state(out.next_state), out.next_state)
        steps.append((host(obs), done, host(actions), np.asarray(out.output.value_estimates)))
    obs, dones, actions, values = zip(*steps, strict=True)
    return Rollout(_stack(obs), np.stack(dones), _stack(actions), np.stack(values))


def _where(done: np.ndarray, new: Any, old: Any) -> Any:
    """``new``'s ``[B, ...]`` leaves where ``done`` (``[B]``), ``old``'s elsewhere."""
    return jax.tree.map(
        lambda n, o: jnp.where(done.reshape(-1, *[1] * (np.ndim(o) - 1)), n, o), new, old
    )


def _stack(trees: Sequence[Any]) -> Any:
    return jax.tree.map(lambda *xs: np.stack(xs), *trees)


def replay_artefact(
    step: Callable[[dict[str, Any]], dict[str, Any]],
    reset: Callable[[dict[str, Any]], dict[str, Any]],
    manifest: Mapping[str, Any],
    rollout: Rollout,
) -> tuple[np.ndarray, np.ndarray]:
    """An exported artefact's ``step`` and ``reset`` (named tensors in and out, as
    ``policy.json`` lists them) run over ``rollout``'s observations and dones, as its
    README's control loop does: the initial carry is ``reset(zeros, done=true)``, the
    carry is reset after every step whose episode ended. Its ``[T, B]`` actions and
    values."""
    zeros = {
        t["name"]: np.zeros((N_ENVS, *t["shape"][1:]), t["dtype"])
        for t in manifest["reset"]["inputs"]
        if t["name"] != "done"
    }
    out = reset({**zeros, "done": np.ones((N_ENVS,), bool)})
    carry = {c["input"]: out[c["output"]] for c in manifest["carry"]}
    (action_name,), (value_name,) = manifest["action"], manifest["value"]
    actions, values = [], []
    for t in range(ROLLOUT_STEPS):
        obs = dict(zip(manifest["observation"], jax.tree.leaves(rollout.obs), strict=True))
        out = step({**{name: x[t] for name, x in obs.items()}, **carry})
        actions.append(np.asarray(out[action_name]))
        values.append(np.asarray(out[value_name]))
        carry = {c["input"]: out[c["output"]] for c in manifest["carry"]}
        out = reset({**carry, "done": rollout.done[t]})
        carry = {c["input"]: out[c["output"]] for c in manifest["carry"]}
    return np.stack(actions), np.stack(values)


def assert_artefact_replays(
    actions: np.ndarray, values: np.ndarray, rollout: Rollout, what: str
) -> None:
    """An artefact's actions over ``rollout`` are the network's, its values within 1e-5."""
    np.testing.assert_array_equal(actions, rollout.actions, err_msg=what)
    np.testing.assert_allclose(values, rollout.values, rtol=0, atol=1e-5, err_msg=what)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> MatrixRuns:
    return MatrixRuns(tmp_path_factory.mktemp("matrix"))


# --------------------------------------------------------------------------- passing cells


def check_evaluation(runs: MatrixRuns, name: str, tmp_path: Path) -> None:
    trained = runs.trained(name)
    result = trained.result
    assert result.total_steps == TOTAL
    # A log at the start (the first evaluation) and after every device call.
    assert sorted(trained.records) == [0, HALF, TOTAL]
    assert [s for s, m in sorted(trained.records.items()) if "loss/total" in m] == [HALF, TOTAL]
    # Evaluations before training, every HALF steps and after training.
    assert [step for step, _ in result.eval_history] == [0, HALF, TOTAL]
    for _, metrics in result.eval_history:
        assert np.isfinite(metrics["eval/episode_reward/mean"])
        length = metrics["eval/episode_length/mean"]
        if name in (BRAX, COGNITIVE, PIXELS):  # the pole falls, a trial ends, the player
            # is shot, before the limit
            assert 1 <= length <= EPISODE_LENGTH
        else:  # these never terminate: every episode runs to the limit
            assert length == EPISODE_LENGTH
    # Training changed the deterministic policy's return (a trial's deterministic
    # outcome, or a Space Invaders episode's, can survive 64 steps of training: there,
    # its parameters changed).
    first, last = result.eval_history[0][1], result.eval_history[-1][1]
    if name in (COGNITIVE, PIXELS):
        assert trees_differ(trained.saved[HALF].params, result.state.params)
    else:
        assert first["eval/episode_reward/mean"] != last["eval/episode_reward/mean"]


def zero_size_paths(tree: Any) -> list[str]:
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return [jax.tree_util.keystr(path) for path, x in leaves if np.size(x) == 0]


def check_round_trip(runs: MatrixRuns, name: str, tmp_path: Path) -> None:
    # The checkpoints the shared run wrote restore the states it saved, bitwise, and the
    # final one's network loads for inference. For the Playground family the
    # environment state is an MJX Data with zero-size leaves (contact.dist (0,),
    # site_xpos (0, 3)): a checkpoint must record them (a fixed data-loss bug).
    trained = runs.trained(name)
    directory = tmp_path / "checkpoints"
    shutil.copytree(trained.directory, directory)
    assert step_dirs(directory) == [HALF, TOTAL]
    assert_trees_equal(trained.saved[TOTAL], trained.result.state)
    with Checkpointer(directory) as ckpt:
        for step in (HALF, TOTAL):
            restored = ckpt.restore(trained.result.state, step=step)
            assert_trees_equal(restored, trained.saved[step])
            assert zero_size_paths(restored) == zero_size_paths(trained.saved[step])
    assert trees_differ(trained.saved[HALF].params, trained.saved[TOTAL].params)
    if name == PLAYGROUND:
        empty = zero_size_paths(trained.saved[TOTAL].env_state)
        assert any("contact" in path for path in empty), empty
    network = load_network(directory, trained.family.make_network(nnx.Rngs(1)))
    assert_trees_equal(nnx.state(network), nnx.state(trained.network))


def check_resume(runs: MatrixRuns, name: str, tmp_path: Path) -> None:
    # Interrupted after HALF steps (the shared run's later checkpoint removed, as if it
    # had been stopped there), then resumed in a new train_ppo call with a new
    # Checkpointer: the whole final state (parameters, optimizer, environment states,
    # carries, key) and the evaluation at TOTAL equal the uninterrupted run's, bitwise.
    # The Playground family's (its MJX state has zero-size leaves) is stopped harder:
    # kill -9 of a training process, resumed in another (`check_resume_after_kill`).
    if name == PLAYGROUND:
        check_resume_after_kill(runs, name, tmp_path)
        return
    trained = runs.trained(name)
    family = trained.family
    directory = tmp_path / "resumed"
    shutil.copytree(trained.directory, directory)
    assert step_dirs(directory) == [HALF, TOTAL]
    shutil.rmtree(directory / str(TOTAL))
    config = train_config(name, TOTAL)
    records: dict[int, dict[str, float]] = {}
    with (
        Checkpointer(directory, config=config, save_every_steps=HALF) as ckpt,
        jax_programs(LOWERED) as lowered,
    ):
        resumed = train_ppo(
            family.train_env(), family.make_network(nnx.Rngs(1)), config, progress=False,
            eval_env=family.eval_env(), checkpoint=ckpt,
            log_fn=lambda metrics, step: records.__setitem__(step, dict(metrics)),
        )  # fmt: skip
        assert ckpt.restored_step == HALF
    assert sorted(records) == [TOTAL]  # it continued from HALF
    assert records[TOTAL] == trained.records[TOTAL]
    assert_trees_equal(resumed.state, trained.result.state)
    assert resumed.eval_history == [e for e in trained.result.eval_history if e[0] > HALF]
    # The compile detector of the refused cells sees a repeated run's training program.
    assert any("train_call" in program for program in lowered), lowered


def check_light(runs: MatrixRuns, name: str, tmp_path: Path) -> None:
    # The shared run also wrote light checkpoints (Checkpointer(env_state=False)). A run
    # resumed from the one at HALF continues at HALF with the saved parameters,
    # optimizer state and key, and restarts the environments from fresh resets.
    trained = runs.trained(name)
    family = trained.family
    directory = tmp_path / "light"
    shutil.copytree(trained.light_directory, directory)
    shutil.rmtree(directory / str(TOTAL))
    meta = load_metadata(directory)
    assert meta["env_state"] is False and meta["step"] == HALF
    config = train_config(name, TOTAL, evaluation=NO_EVAL)
    records: dict[int, dict[str, float]] = {}
    with Checkpointer(directory, config=config, save_every_steps=HALF, env_state=False) as ckpt:
        hook = RestoreRecorder(ckpt)
        result = train_ppo(
            family.train_env(), family.make_network(nnx.Rngs(1)), config, progress=False,
            checkpoint=hook, log_fn=lambda metrics, step: records.__setitem__(step, metrics),
        )  # fmt: skip
        assert ckpt.restored_step == HALF
    saved, restored = trained.saved[HALF], hook.restored
    assert sorted(records) == [TOTAL]
    assert int(restored.iteration) == HALF // STEPS_PER_ITERATION
    for field in ("params", "network_state", "opt_state", "rng", "iteration"):
        assert_trees_equal(getattr(restored, field), getattr(saved, field))
    assert trees_differ(restored.env_state, saved.env_state)  # fresh resets, not saved ones
    assert result.total_steps == TOTAL and step_dirs(directory) == [HALF, TOTAL]
    assert all(np.isfinite(x).all() for x in jax.tree.leaves(host(result.state.params)))
    assert trees_differ(result.state.params, restored.params)  # it trained on


def check_sweep(runs: MatrixRuns, name: str, tmp_path: Path) -> None:
    # Two seeds in one program. Run 0 is the shared run (seed 0, network nnx.Rngs(0)),
    # to float32 rounding (a vmapped program fuses reductions differently); run 1
    # starts from other parameters.
    sweep = runs.sweep(name)
    trained = runs.trained(name)
    assert sweep.total_steps == TOTAL and sweep.seeds == [0, 1]
    for history in sweep.eval_histories:
        assert [step for step, _ in history] == [0, HALF, TOTAL]
        assert all(np.isfinite(m["eval/episode_reward/mean"]) for _, m in history)
    ours = host(sweep.run_state(0).params)
    theirs = host(trained.result.state.params)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(
        sweep.eval_histories[0][0][1]["eval/episode_reward/mean"],
        trained.result.eval_history[0][1]["eval/episode_reward/mean"],
        rtol=1e-4,
    )
    assert trees_differ(sweep.run_state(1).params, sweep.run_state(0).params)


def check_randomization(runs: MatrixRuns, name: str, tmp_path: Path) -> None:
    # The curriculum run of a physics family (or of the gymnax game, whose model is its
    # EnvParams) trains on randomized models: the run's models are those drawn from its
    # seed (train_ppo: the first of three splits of PRNGKey(seed)), one per
    # environment, and the environment's nominal model is back in place afterwards.
    family = runs.family(name)
    holder, attribute = model_holder(family.env)
    nominal = getattr(holder, attribute)
    result, _ = runs.curriculum(name)
    env = family.train_env(ProgressCurriculum(family.env))
    init_key = jax.random.split(jax.random.PRNGKey(0), 3)[0]
    drawn = make_randomization(env, family.randomization_fn, N_ENVS).initial(init_key)
    assert_trees_equal(result.state.models, drawn)
    if name == PIXELS:  # alien timings per environment, in their ranges, not all equal
        moves, shots = (
            np.asarray(result.state.models[field])
            for field in ("enemy_move_interval", "enemy_shot_interval")
        )
        assert moves.shape == shots.shape == (N_ENVS,)
        assert ((moves >= 8) & (moves <= 16)).all() and ((shots >= 5) & (shots <= 15)).all()
        assert len(set(moves.tolist())) > 1 and len(set(shots.tolist())) > 1
    else:  # one pole mass per environment (brax: link 1; Playground: body 2)
        path, pole = ("link/inertia/mass", 1) if name == BRAX else ("body_mass", 2)
        poles = result.state.models[path][:, pole]
        assert len(set(np.asarray(poles).tolist())) == N_ENVS
    assert getattr(holder, attribute) is nominal
    assert all(np.isfinite(m["eval/episode_reward/mean"]) for _, m in result.eval_history)


def check_sweep_randomization(runs: MatrixRuns, name: str, tmp_path: Path) -> None:
    # Two seeds on randomized models in one program, with the curriculum run's settings:
    # each run's models are those its own train_ppo run draws from its seed (bitwise:
    # run 0's are the curriculum run's), and run 0 trains like the curriculum run (seed
    # 0), to float32 rounding.
    family = runs.family(name)
    result, _ = runs.curriculum(name)
    env = ProgressCurriculum(family.env)
    sweep = train_many(
        family.train_env(env), family.make_network,
        train_config(name, TOTAL, log_level=LOG | LogLevel.ENV_METRICS), seeds=[0, 1],
        eval_env=family.eval_env(env), randomization_fn=family.randomization_fn,
        progress=False,
    )  # fmt: skip
    assert_trees_equal(sweep.run_state(0).models, result.state.models)
    init_key = jax.random.split(jax.random.PRNGKey(1), 3)[0]
    drawn = make_randomization(family.train_env(env), family.randomization_fn, N_ENVS).initial(
        init_key
    )
    assert_trees_equal(sweep.run_state(1).models, drawn)
    assert trees_differ(sweep.run_state(1).models, sweep.run_state(0).models)
    ours, theirs = host(sweep.run_state(0).params), host(result.state.params)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    for history in sweep.eval_histories:
        assert [step for step, _ in history] == [0, HALF, TOTAL]
        assert all(np.isfinite(m["eval/episode_reward/mean"]) for _, m in history)


def check_curriculum(runs: MatrixRuns, name: str, tmp_path: Path) -> None:
    # Iteration k steps at rollout steps t = 0..3 with training_step = (4k + t) * 4 envs,
    # mean 16k + 6 over its rollout; device call c runs iterations 2c and 2c + 1 and
    # logs their mean, 32c + 14, and the progress (32c + 14) / 64: what the environment
    # read.
    _, logged = runs.curriculum(name)
    records = {step: metrics for step, metrics in logged.items() if "loss/total" in metrics}
    assert sorted(records) == [HALF, TOTAL]
    for c, step in enumerate(sorted(records)):
        assert records[step]["env/trained"] == 32 * c + 14
        assert records[step]["env/progress"] == pytest.approx((32 * c + 14) / TOTAL, abs=1e-7)


def stimulus_observations(env: Any, n: int) -> Any:
    """``[n, obs]`` observations of ``n`` cognitive trials in their stimulus epoch (noisy,
    different per trial), reached by fixating through the fixation epoch."""
    states = jax.vmap(env.reset)(jax.random.split(jax.random.key(7), n))
    step = jax.jit(jax.vmap(env.step))
    while not (np.asarray(states.info["epoch"]) == env.epoch_index("stimulus")).all():
        states = step(states, jnp.zeros((n,), jnp.int32))
    return states.obs


def fixating(network: nnx.Module) -> nnx.Module:
    """A copy of a categorical MLP actor-critic whose fixation logit leads by 10: its
    trials run past the fixation epoch."""
    network = nnx.clone(network)
    mlp = network.layers[1].action.layers[0]
    bias = mlp.layers[-1].linear.bias
    bias[...] = bias[...].at[0].add(10.0)
    return network


def check_export(runs: MatrixRuns, name: str, tmp_path: Path) -> None:
    # The trained network's deterministic policy, exported to StableHLO and loaded back,
    # gives the JAX network's eval() actions on real observations: the environments'
    # observations at the end of training.
    if name == PIXELS:
        check_pixel_export(runs, name, tmp_path)
        return
    trained = runs.trained(name)
    env, network = trained.family.env, trained.network
    obs = trained.result.state.env_state.obs
    if name == COGNITIVE:  # every trial's first steps show the same fixation cue
        obs = stimulus_observations(env, N_ENVS)
    reference = nnx.clone(network)
    reference.eval()
    expected = reference(reference.initialize_state(N_ENVS), obs).output.actions
    policy = DeterministicPolicy(network, env.observation_size)
    assert policy.carry_names == ()  # a feedforward policy
    _, actions = policy.step({}, obs)  # the pure-JAX step the export serializes
    loaded = load_stablehlo(export_policy(policy, None, tmp_path / "policy"))
    exported = loaded.step(dict(zip(policy.observation_names, jax.tree.leaves(obs), strict=True)))
    leaves = jax.tree.leaves(expected)
    assert len(leaves) == len(policy.action_names) == (2 if name == DICT_OBS else 1)
    for want, ours, exported_name in zip(
        leaves, jax.tree.leaves(actions), policy.action_names, strict=True
    ):
        np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(exported[exported_name], want, rtol=1e-5, atol=1e-6)
    if name == COGNITIVE:  # integer choices: their logits depend on the observation
        logits = (
            reference.layers[1].action.layers[0]((), reference.layers[0]((), obs).output).output
        )
        assert np.std(np.asarray(logits), axis=0).max() > 0
    else:
        assert np.std(np.asarray(leaves[0])) > 0  # the actions depend on the observation


def check_pixel_export(runs: MatrixRuns, name: str, tmp_path: Path) -> None:
    # The trained conv + LSTM policy, exported to StableHLO with its value head and
    # loaded back, replays a recorded rollout of the JAX network (24 steps of the 4
    # training environments, each episode reaching its limit and the carry reset):
    # the same actions at every step and values within 1e-5, through the artefact's
    # own reset. (The same rollout through the ONNX artefact:
    # `test_pixel_policy_onnx_parity_on_a_recorded_rollout`.)
    trained, rollout = runs.trained(name), runs.rollout(name)
    assert rollout.done[:-1].sum() >= 2, rollout.done  # resets inside the rollout
    assert (np.ptp(rollout.values, axis=0) > 0).all()  # every env's value changes
    assert (rollout.values[:, 0] != rollout.values[:, 1]).any()  # the envs differ
    policy = DeterministicPolicy(
        trained.network, trained.family.env.observation_size, include_value=True
    )
    assert len(policy.carry_names) == 2  # the LSTM's c and h
    loaded = load_stablehlo(export_policy(policy, None, tmp_path / "policy", include_value=True))
    actions, values = replay_artefact(loaded.step, loaded.reset, loaded.manifest, rollout)
    assert_artefact_replays(actions, values, rollout, "StableHLO")


def check_activations(runs: MatrixRuns, name: str, tmp_path: Path) -> None:
    # T = 8 steps of B = 2 evaluation episodes of the trained network behind an identity
    # Filter, whose recorded output is the observation each step saw: every activation
    # is [T, B, ...] and finite, and at every step the network's ones equal a direct
    # (unjitted) call of a recording copy on that step's observation, deterministic in
    # eval(), threading its carry as the rollout does (the pixel family's LSTM; the
    # others are feedforward). The rollout does not reset a carry when an episode ends.
    trained = runs.trained(name)
    env, network = trained.family.eval_env(), trained.network
    steps, n_envs = 8, 2
    if name == COGNITIVE:  # fixate through the 8 steps of the (constant) fixation cue
        network, steps = fixating(network), 12
    if name == PIXELS:  # the aliens move (every 12 steps) or shoot (every 10) by then
        steps = 14
    observed = Sequential([Filter(lambda obs: obs), network])
    activations, dones = record_activations_rollout(
        env, observed, n_envs=n_envs, max_episode_length=steps, key=jax.random.PRNGKey(3)
    )
    observations, recorded = activations[0], activations[1]
    leaves = jax.tree.leaves(recorded)
    assert len(leaves) >= 5  # normalizer, actor and critic layers, sampler
    for leaf in jax.tree.leaves(activations):
        assert leaf.shape[:2] == (steps, n_envs)
        assert np.isfinite(np.asarray(leaf, np.float32)).all()
    assert dones.shape == (steps, n_envs) and dones.dtype == jnp.bool_
    assert not np.asarray(dones[0]).any()
    first = jax.tree.map(lambda x: x[0], observations)
    assert trees_differ(first, jax.tree.map(lambda x: x[-1], observations))  # it moved
    recording = with_recording(nnx.clone(network))
    recording.eval()
    carry = recording.initialize_state(n_envs)
    for t in range(steps):
        obs = jax.tree.map(lambda x, t=t: x[t], observations)
        out = recording(carry, obs)
        direct, carry = extract_activations(out.metrics), out.next_state
        assert jax.tree.structure(direct) == jax.tree.structure(recorded)
        for got, want in zip(leaves, jax.tree.leaves(direct), strict=True):
            np.testing.assert_allclose(got[t], want, rtol=1e-5, atol=1e-6, err_msg=f"t={t}")


def check_latency(runs: MatrixRuns, name: str, tmp_path: Path) -> None:
    # Training and evaluation environments behind Latency (action lag 0-2, observation
    # lag 0-1, redrawn at 10% of steps). The lags are environment state: a run stopped
    # at its HALF checkpoint and resumed in a new call ends bitwise as the uninterrupted
    # run, with its evaluations; the environments hold different lags; and run 0 of a
    # two-seed sweep trains like the single run, to float32 rounding. The sweep runs on
    # DictObsEnv only: a physics family's sweep compiles another program with the
    # simulator (about 2 minutes on 2 cores), and the sweep treats the environment
    # state of every family alike (the SWEEP cells).
    family = runs.family(name)
    env = Latency(family.env, action_lag=(0, 2), obs_lag=(0, 1), hold_prob=0.9)
    config = train_config(name, TOTAL)

    def train(directory: Path) -> tuple[TrainResult, Checkpointer]:
        with Checkpointer(directory, config=config, save_every_steps=HALF) as ckpt:
            result = train_ppo(
                family.train_env(env), family.make_network(nnx.Rngs(0)), config,
                progress=False, eval_env=family.eval_env(env), checkpoint=ckpt,
            )  # fmt: skip
        return result, ckpt

    whole, _ = train(tmp_path / "whole")
    assert step_dirs(tmp_path / "whole") == [HALF, TOTAL]
    shutil.copytree(tmp_path / "whole", tmp_path / "resumed")
    shutil.rmtree(tmp_path / "resumed" / str(TOTAL))
    resumed, ckpt = train(tmp_path / "resumed")
    assert ckpt.restored_step == HALF
    assert_trees_equal(resumed.state, whole.state)
    assert resumed.eval_history == [e for e in whole.eval_history if e[0] > HALF]
    lags = np.asarray(whole.state.env_state.info["latency"]["action_lag"])
    assert lags.shape == (N_ENVS,) and len(set(lags.tolist())) > 1, lags
    if name != DICT_OBS:
        return
    sweep = train_many(
        family.train_env(env), family.make_network, config, seeds=[0, 1],
        eval_env=family.eval_env(env), progress=False,
    )  # fmt: skip
    for a, b in zip(
        jax.tree.leaves(host(sweep.run_state(0).params)),
        jax.tree.leaves(host(whole.state.params)),
        strict=True,
    ):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert trees_differ(sweep.run_state(1).env_state, sweep.run_state(0).env_state)


CHECKS: dict[str, Callable[[MatrixRuns, str, Path], None]] = {
    EVALUATION: check_evaluation,
    ROUND_TRIP: check_round_trip,
    RESUME: check_resume,
    LIGHT: check_light,
    SWEEP: check_sweep,
    RANDOMIZATION: check_randomization,
    SWEEP_RANDOMIZATION: check_sweep_randomization,
    CURRICULUM: check_curriculum,
    EXPORT: check_export,
    ACTIVATIONS: check_activations,
    LATENCY: check_latency,
}

# --------------------------------------------------------------------------- refused cells


def refuse_randomization(runs: MatrixRuns, name: str, tmp_path: Path) -> None:
    family = runs.family(name)
    network = family.make_network(nnx.Rngs(0))

    def call() -> Any:
        return train_ppo(
            family.train_env(), network, train_config(name, TOTAL), progress=False,
            eval_env=family.eval_env(), randomization_fn=randomize_pendulum,
        )  # fmt: skip

    refused_before_compiling(call, TypeError, "has no physics model to randomize")


def refuse_sweep_randomization(runs: MatrixRuns, name: str, tmp_path: Path) -> None:
    family = runs.family(name)

    def call() -> Any:
        return train_many(
            family.train_env(), family.make_network, train_config(name, TOTAL), seeds=[0, 1],
            eval_env=family.eval_env(), progress=False, randomization_fn=randomize_pendulum,
        )  # fmt: skip

    refused_before_compiling(call, TypeError, "has no physics model to randomize")


def refuse_video(runs: MatrixRuns, name: str, tmp_path: Path) -> None:
    if name in PHYSICS:
        refuse_video_without_renderer(name, tmp_path)
        return
    family = runs.family(name)
    network = family.make_network(nnx.Rngs(0))
    config = dataclasses.replace(
        train_config(name, TOTAL), video=VideoConfig(enabled=True, directory=str(tmp_path))
    )

    def call() -> Any:
        return train_ppo(
            family.train_env(), network, config, progress=False, eval_env=family.eval_env()
        )

    refused_before_compiling(call, ValueError, r"eval_env is a EpisodeWrapper, which has none")


def refuse_video_without_renderer(name: str, tmp_path: Path) -> None:
    # brax and Playground environments have a render method; check_video_env renders
    # one frame before training, which fails without an OpenGL renderer (no display,
    # MUJOCO_GL unset). It compiles the environment's reset for that frame, but not the
    # training program, and trains nothing. In a process of its own, which tries twice.
    # The process's PATH starts with a folder holding an `ffmpeg` that is never run: the
    # check for a video writer (mediapy's ffmpeg) comes before the frame, and this
    # machine may have none.
    stub = tmp_path / "bin" / "ffmpeg"
    stub.parent.mkdir()
    stub.write_text("#!/bin/sh\necho 'the matrix test never writes a video' >&2\nexit 1\n")
    stub.chmod(0o755)
    out = run_matrix_process("video", name, tmp_path, gl=False, path=stub.parent)
    report = json.loads(out.splitlines()[-1])
    assert report["logged"] == []  # nothing trained
    first, second = report["attempts"]
    for attempt in (first, second):
        assert attempt["error"] == "builtins.ValueError", attempt
        assert "cannot render a frame on this machine" in attempt["message"]
        assert "MUJOCO_GL=egl" in attempt["message"]  # the fix is named
        assert not [p for p in attempt["lowered"] if "train_call" in p], attempt["lowered"]
    # MuJoCo aborts the process at a second attempt to render after a failed one: the
    # second run is refused with the first attempt's error, without rendering.
    assert "not retried" in second["message"]


REFUSALS: dict[str, Callable[[MatrixRuns, str, Path], None]] = {
    RANDOMIZATION: refuse_randomization,
    SWEEP_RANDOMIZATION: refuse_sweep_randomization,
    VIDEO: refuse_video,
}

# --------------------------------------------------------------------------- the cells


def _cells() -> list[Any]:
    cells = []
    for family in FAMILIES:
        for feature in FEATURES:
            marks = [pytest.mark.extended] if (family, feature) in EXTENDED else []
            cell_id = re.sub(r"\W+", "_", f"{family}-{feature}").strip("_")
            cells.append(pytest.param(family, feature, marks=marks, id=cell_id))
    return cells


@pytest.mark.parametrize(("family", "feature"), _cells())
def test_cell(family: str, feature: str, runs: MatrixRuns, tmp_path: Path) -> None:
    if family == PIXELS:
        pytest.importorskip("gymnax")  # the nnx-ppo-train extra GymnaxEnv needs
    status = MATRIX[family, feature]
    check = CHECKS[feature] if status == PASS else REFUSALS[feature]
    check(runs, family, tmp_path)


def test_pixel_policy_onnx_parity_on_a_recorded_rollout(runs: MatrixRuns, tmp_path: Path) -> None:
    # The pixel family's export cell, through ONNX (jax2onnx) and onnxruntime: the
    # trained conv + LSTM policy's artefact replays the recorded rollout with the JAX
    # network's actions at every step and values within 1e-5 (issue 49's acceptance).
    # Needs nnx-modules' onnx extra, which the developer environment has.
    pytest.importorskip("gymnax")
    pytest.importorskip("jax2onnx")
    onnxruntime = pytest.importorskip("onnxruntime")
    trained, rollout = runs.trained(PIXELS), runs.rollout(PIXELS)
    out = export_policy(
        trained.network, trained.family.env.observation_size, tmp_path / "onnx",
        format="onnx", include_value=True,
    )  # fmt: skip
    manifest = read_manifest(out)

    def call(function: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
        session = onnxruntime.InferenceSession(
            str(out / manifest["files"][function]), providers=["CPUExecutionProvider"]
        )
        names = [o.name for o in session.get_outputs()]
        return lambda inputs: dict(zip(names, session.run(None, inputs), strict=True))

    actions, values = replay_artefact(call("step"), call("reset"), manifest, rollout)
    assert_artefact_replays(actions, values, rollout, "ONNX")


def test_every_cell_has_a_status_and_a_check() -> None:
    assert set(MATRIX) == {(f, feature) for f in FAMILIES for feature in FEATURES}
    for (family, feature), status in MATRIX.items():
        assert status == PASS or status.startswith("refused: "), (family, feature)
        assert feature in (CHECKS if status == PASS else REFUSALS), (family, feature)
    assert set(MATRIX) >= EXTENDED


def parse_docs_table(text: str) -> dict[tuple[str, str], str]:
    """The page's table (features as rows, families as columns, cells ``yes`` or
    ``refused: <reason>``) as `MATRIX` data."""
    rows = [line.strip() for line in text.splitlines() if line.strip().startswith("|")]
    assert len(rows) >= 3, "no table on the page"

    def cells(row: str) -> list[str]:
        return [cell.strip().strip("`") for cell in row.strip("|").split("|")]

    header, table = cells(rows[0]), rows[2:]
    assert set(cells(rows[1])) <= {"---", ":---", "---:", ":---:"}
    matrix = {}
    for row in table:
        feature, *statuses = cells(row)
        assert len(statuses) == len(header) - 1, row
        for family, status in zip(header[1:], statuses, strict=True):
            matrix[family, feature] = PASS if status == "yes" else status
    return matrix


def test_the_docs_page_shows_this_matrix() -> None:
    assert parse_docs_table(DOCS_PAGE.read_text()) == MATRIX


# --------------------------------------------------------------------------- processes


def check_resume_after_kill(runs: MatrixRuns, name: str, tmp_path: Path) -> None:
    # A training process (the shared run's program, checkpointing every device call) is
    # killed with SIGKILL after its first checkpoint and resumed in a new process: its
    # final checkpoint holds the shared uninterrupted run's final state, bitwise
    # (environment states, with their zero-size leaves for Playground, included).
    trained = runs.trained(name)
    directory = tmp_path / "checkpoints"
    log = tmp_path / "killed.log"
    with open(log, "w") as output:
        proc = subprocess.Popen(
            _matrix_command("train", name, directory, "slow"),
            stdout=output, stderr=subprocess.STDOUT, env=_process_env(gl=True),
        )  # fmt: skip
    deadline = time.monotonic() + 600
    while not (directory.exists() and step_dirs(directory)):
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, "the training process saved nothing"
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    killed_at = max(step_dirs(directory))
    assert killed_at < TOTAL, "killed too late to test anything"

    out = run_matrix_process("train", name, directory, gl=True, extra=["fast"])
    assert out.splitlines()[-1] == f"DONE {TOTAL} {killed_at}"
    assert step_dirs(directory)[-1] == TOTAL
    with Checkpointer(directory) as ckpt:
        final = ckpt.restore(trained.result.state)
    assert_trees_equal(final, trained.result.state)


def _matrix_command(*args: Any) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), *map(str, args)]


def _process_env(*, gl: bool, path: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("JAX_PLATFORMS", "cpu")
    if not gl:  # no display and no offscreen OpenGL: MuJoCo cannot create a renderer
        for name in ("MUJOCO_GL", "PYOPENGL_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY"):
            env.pop(name, None)
    if path is not None:
        env["PATH"] = f"{path}{os.pathsep}{env.get('PATH', '')}"
    return env


def run_matrix_process(
    what: str,
    name: str,
    directory: Path,
    *,
    gl: bool,
    path: Path | None = None,
    extra: list[str] | None = None,
) -> str:
    """Run this file as a script (`_process_main`); its stdout."""
    proc = subprocess.run(
        _matrix_command(what, name, directory, *(extra or [])),
        capture_output=True, text=True, env=_process_env(gl=gl, path=path), timeout=600,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout


def _process_main(what: str, name: str, directory: str, *extra: str) -> None:
    """``train``: the shared run's training program to `TOTAL` steps, checkpointing every
    device call (``slow``: one second per log, to leave time for a kill), printing
    ``DONE <steps> <restored step>``. ``video``: two runs with a video, printing the steps
    logged and each attempt's lowered programs and error as JSON."""
    family = build_family(name)
    network = family.make_network(nnx.Rngs(0))
    logged: list[int] = []

    def log_fn(metrics: Any, step: int) -> None:
        logged.append(step)
        if "slow" in extra:
            time.sleep(1.0)

    if what == "train":
        config = train_config(name, TOTAL, evaluation=NO_EVAL)
        with Checkpointer(directory, config=config, save_every_steps=HALF) as ckpt:
            result = train_ppo(
                family.train_env(), network, config, progress=False, checkpoint=ckpt,
                log_fn=log_fn,
            )  # fmt: skip
            print("DONE", result.total_steps, ckpt.restored_step, flush=True)
        return
    video = VideoConfig(enabled=True, directory=directory, episode_length=4, width=32, height=24)
    config = dataclasses.replace(train_config(name, HALF, evaluation=NO_EVAL), video=video)
    reports = []
    for _ in range(2):  # a second attempt in the same process is refused the same way
        report: dict[str, Any] = {"error": None, "message": ""}
        with jax_programs(LOWERED) as lowered:
            try:
                train_ppo(family.train_env(), network, config, progress=False, log_fn=log_fn)
            except Exception as error:  # reported to the test, which checks it
                module = type(error).__module__.split(".")[0]
                report = {"error": f"{module}.{type(error).__name__}", "message": str(error)}
        reports.append({**report, "lowered": lowered})
    print(json.dumps({"logged": logged, "attempts": reports}), flush=True)


if __name__ == "__main__":
    _process_main(*sys.argv[1:])
