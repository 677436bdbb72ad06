"""Checkpointing: exact resume, kill-and-resume, inference load, errors, NaN stop.

One tiny configuration (4 envs x 4 steps = 16 env steps per iteration, 8-step episodes
so carries are reset inside rollouts) is shared by every trained test, so the jitted
iteration compiles once per network kind (the persistent compilation cache serves the
rest).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from _train_test_helpers import (
    COMPILED,
    TINY_LOG,
    assert_trees_equal,
    host,
    jax_programs,
    tiny_config,
)
from flax import nnx

from nnx_ppo.algorithms.checkpointing.checkpointer import (
    Checkpointer,
    CheckpointMismatchError,
    CorruptedCheckpointError,
    CorruptedCheckpointWarning,
    UnsavableStateError,
    config_from_dict,
    config_to_dict,
    load_metadata,
    load_network,
)
from nnx_ppo.algorithms.config import EvalConfig, LogLevel, PPOConfig, TrainConfig
from nnx_ppo.algorithms.core.faults import NonFiniteError
from nnx_ppo.algorithms.ppo.iteration import init_train_state, make_optimizer
from nnx_ppo.algorithms.ppo.train import CheckpointHook, train_ppo
from nnx_ppo.envs import PointMass
from nnx_ppo.networks.factories import make_mlp_actor_critic
from nnx_ppo.wrappers import EpisodeWrapper, Wrapper

STEPS_PER_ITERATION = 16  # n_envs * rollout_length
ENV = EpisodeWrapper(PointMass(), episode_length=8)


def mlp(seed: int = 0, hidden: int = 8) -> nnx.Module:
    return make_mlp_actor_critic(2, 2, (hidden,), (hidden,), rngs=nnx.Rngs(seed))


def template_state(network: nnx.Module, config: TrainConfig):
    optimizer = make_optimizer(config.ppo)
    return init_train_state(ENV, network, config.ppo, optimizer, jax.random.PRNGKey(1))[1]


def step_dirs(directory: Path) -> list[int]:
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def train(network, config, directory=None, records=None, **checkpointer):
    """train_ppo with an optional Checkpointer; returns (result, restored_step)."""

    def log_fn(metrics, step):
        if records is not None:
            records[step] = dict(metrics)

    if directory is None:
        return train_ppo(ENV, network, config, progress=False, log_fn=log_fn), None
    with Checkpointer(directory, config=config, **checkpointer) as ckpt:
        result = train_ppo(ENV, network, config, progress=False, log_fn=log_fn, checkpoint=ckpt)
        return result, ckpt.restored_step


# --------------------------------------------------------------------------- trained run


@pytest.fixture(scope="module")
def mlp_run(tmp_path_factory):
    """An MLP trained 96 steps (6 iterations) with checkpoints at 48 and 96."""
    directory = tmp_path_factory.mktemp("mlp_run") / "checkpoints"
    network = mlp()
    records: dict[int, dict[str, float]] = {}
    result, _ = train(network, tiny_config(96), directory, records, save_every_steps=48)
    return directory, network, result, records


def test_the_run_saved_where_its_policy_says(mlp_run):
    directory, _, _, records = mlp_run
    # save_every_steps=48 with 16-step calls: 48 and 96 cross multiples of 48; 96 is
    # also the final save.
    assert step_dirs(directory) == [48, 96]
    meta = load_metadata(directory)
    assert meta["step"] == 96 and meta["iteration"] == 6
    assert meta["metrics"]["loss/total"] == records[96]["loss/total"]
    assert config_from_dict(meta["config"]) == tiny_config(96)
    assert meta["versions"]["nnx-ppo-train"] is not None
    json.dumps(meta, allow_nan=False)  # plain JSON data, no NaN
    with Checkpointer(directory) as ckpt:
        assert isinstance(ckpt, CheckpointHook)


def test_a_resume_past_a_damaged_checkpoint_is_bitwise_exact_and_replaces_it(mlp_run, tmp_path):
    # Train 2N = 96 steps in one go (with a checkpoint at N = 48), then continue the
    # run in a second train_ppo call, which finds its step 96 damaged (as after a
    # crash), skips it with a warning and resumes from 48: parameters, optimizer state,
    # everything else in the state, and the metrics logged at step 96 must be bitwise
    # identical, and the damaged step replaced. (Exact resume of every trainer, a
    # recurrent network's too: test_trainer_contract.py.)
    config = tiny_config(96)
    source, _, reference, reference_records = mlp_run
    resumed_dir = tmp_path / "resumed"
    shutil.copytree(source, resumed_dir)
    shutil.rmtree(resumed_dir / "96" / "network")  # damaged: falls back to 48
    records: dict[int, dict[str, float]] = {}
    with (
        pytest.warns(CorruptedCheckpointWarning, match="step 96"),
        jax_programs(COMPILED) as compiled,
    ):
        resumed, restored_step = train(mlp(), config, resumed_dir, records, save_every_steps=48)

    # Once: a restored state is placed like a fresh one (a mix of committed and
    # uncommitted arrays compiled the training program a second time at its next call).
    assert compiled.count("jit(train_call)") == 1
    assert restored_step == 48
    assert list(records) == [64, 80, 96]  # it continued from 48, not from 0
    assert records[96] == reference_records[96]
    assert_trees_equal(resumed.state, reference.state)
    assert int(resumed.state.iteration) == 6
    # The damaged step 96 was replaced by the resumed run's and loads.
    assert step_dirs(resumed_dir) == [48, 96]
    assert_trees_equal(
        nnx.state(load_network(resumed_dir, mlp(), step=96)),
        nnx.state(load_network(source, mlp(), step=96)),
    )


def _zero_size_paths(tree) -> list[str]:
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return [jax.tree_util.keystr(p) for p, x in leaves if hasattr(x, "size") and x.size == 0]


def _mjx_like_state(key: jax.Array) -> dict:
    """One environment's state laid out like a CartpoleBalance MJX Data: a nonzero leaf
    drawn from ``key`` beside zero-size ones of every kind (float ``contact.dist`` (0,),
    int ``contact.geom`` (0, 2), bool, ``site_xpos`` (0, 3))."""
    return {
        "qpos": jax.random.normal(key, (2,)),
        "contact": {
            "dist": jnp.zeros((0,)),
            "geom": jnp.zeros((0, 2), jnp.int32),
            "active": jnp.zeros((0,), bool),
        },
        "site_xpos": jnp.zeros((0, 3)),
    }


@pytest.mark.parametrize(
    "impl",
    [
        # The checkpointer on an MJX-like state, without MuJoCo: the default run. The
        # real Playground states (their reset compiles an MJX program, ~10 s on 2
        # cores) are the extended cases and the feature matrix's Playground cells.
        "synthetic",
        pytest.param("jax", marks=pytest.mark.extended),
        pytest.param("warp", marks=pytest.mark.extended),
    ],
)
def test_zero_size_leaves_round_trip_exactly(impl, tmp_path):
    # A MuJoCo Playground environment state (an MJX Data) holds zero-size arrays
    # (contact.dist (n, 0), site_xpos (n, 0, 3), ...) that orbax refuses to write: the
    # README's CartpoleBalance run used to crash at its final checkpoint. Zero-size
    # leaves of every kind (float, int, bool, PRNG keys) restore with their shapes and
    # dtypes, and every other leaf bit for bit. Both MJX implementations (the MuJoCo
    # Warp one runs its kernels on the CPU here, slowly: an extended test).
    if impl == "synthetic":
        reset = jax.vmap(_mjx_like_state)
    else:
        if impl == "warp":
            pytest.importorskip("warp")
        registry = pytest.importorskip("mujoco_playground").registry
        env = registry.load("CartpoleBalance", config_overrides={"impl": impl})
        reset = jax.jit(jax.vmap(env.reset))

    def with_env(key):
        template = template_state(mlp(), tiny_config(16))
        extra = {"keys": jax.random.split(jax.random.key(3), 0), "flags": jnp.zeros((4, 0), bool)}
        return template.replace(env_state=(reset(jax.random.split(key, 4)), extra))

    saved, other = with_env(jax.random.key(0)), with_env(jax.random.key(1))
    empties = _zero_size_paths(saved)
    assert any("contact" in p for p in empties) and any("keys" in p for p in empties)
    with pytest.raises(AssertionError):  # the second template differs: the test can fail
        assert_trees_equal(saved.env_state, other.env_state)
    expected = host(saved)
    with Checkpointer(tmp_path / "c") as ckpt:
        assert ckpt.save(saved, 16, {}, final=True)
    with Checkpointer(tmp_path / "c") as ckpt:
        restored = ckpt.restore(other)
    assert_trees_equal(restored, expected)
    assert _zero_size_paths(restored) == empties
    records = load_metadata(tmp_path / "c")["arrays"]["train"]
    assert all(r["key"] is None for r in records if 0 in r["shape"])


def test_an_unsavable_state_is_an_error_before_anything_is_written(tmp_path):
    # Checkpointer.restore, which every trainer calls before compiling, probes the
    # state: a leaf orbax cannot store is named there, not at the end of training.
    template = template_state(mlp(), tiny_config(16))
    bad = template.replace(env_state={"obs": template.env_state.obs, "label": np.array(["a"])})
    with Checkpointer(tmp_path / "c", resume=False) as ckpt:
        unsavable = r"'env_state/label' \(\(1,\) <U1\) is not a numeric array"
        with pytest.raises(UnsavableStateError, match=unsavable):
            ckpt.restore(bad)
        assert ckpt.restore(template) is None  # a good state passes (resume=False: None)
    assert list((tmp_path / "c").iterdir()) == []  # no checkpoint, no probe left behind


def test_light_checkpoints_hold_no_environment_state(tmp_path):
    # env_state=False: no environment fields are saved; a restore gives the saved
    # parameters and optimizer state with fresh resets, with the same n_envs. (A run
    # resumed from a light checkpoint continues from its step and trains on: the feature
    # matrix's light-checkpoint cells, test_matrix.py, DictObsEnv's in the default run.)
    directory = tmp_path / "light"
    first, _ = train(mlp(), tiny_config(48), directory, env_state=False)
    meta = load_metadata(directory)
    assert meta["env_state"] is False and meta["n_envs"] == 4
    saved_paths = [r["path"] for r in meta["arrays"]["train"]]
    assert not [p for p in saved_paths if p.split("/")[0] in ("env_state", "carry", "episodes")]
    assert any(p.startswith("opt_state/") for p in saved_paths)

    template = template_state(mlp(seed=5), tiny_config(96))
    with Checkpointer(directory) as ckpt:  # the checkpoint's kind decides, not the default
        restored = ckpt.restore(template)
    assert_trees_equal(restored.params, first.state.params)
    assert_trees_equal(restored.opt_state, first.state.opt_state)
    assert_trees_equal(restored.env_state, template.env_state)  # fresh resets
    assert int(restored.iteration) == 3

    wider = TrainConfig(
        ppo=PPOConfig(n_envs=8, rollout_length=4, n_minibatches=2, total_steps=96),
        eval=EvalConfig(enabled=False),
    )
    with (
        Checkpointer(directory, env_state=False) as ckpt,
        pytest.raises(CheckpointMismatchError, match=r"n_envs=4.*n_envs=8.*Resume with"),
    ):
        ckpt.restore(template_state(mlp(), wider))


def test_load_network_reproduces_the_deterministic_actions(mlp_run):
    directory, trained, _, _ = mlp_run
    template = mlp(seed=7)  # same architecture, other initial weights and RNG state
    obs = jax.random.normal(jax.random.PRNGKey(3), (5, 2))

    def actions(network):
        network.eval()
        out = network(network.initialize_state(5), obs)
        return np.asarray(out.output.actions)

    before = actions(template)
    assert not np.array_equal(before, actions(trained))  # the test can fail
    loaded = load_network(directory, template)
    assert loaded is template
    np.testing.assert_array_equal(actions(template), actions(trained))
    # Normalizer statistics are restored too, not only parameters.
    assert_trees_equal(nnx.state(template), nnx.state(trained))


def test_template_mismatch_names_the_variable_and_shapes(mlp_run):
    directory = mlp_run[0]
    with pytest.raises(CheckpointMismatchError) as info:
        load_network(directory, mlp(hidden=16))
    message = str(info.value)
    # make_mlp_actor_critic = Sequential([Normalizer, PPOAdapter]); the first variable
    # that differs (paths in sorted order) is the first actor layer's bias, `hidden` wide.
    assert "'params/layers/1/action/layers/0/layers/0/linear/bias'" in message
    assert "(16,) float32 in the template but (8,) float32 in the checkpoint" in message
    assert "step 96" in message and "same constructor arguments" in message
    assert isinstance(info.value, ValueError)

    no_normalizer = make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0), normalize_obs=False)
    with pytest.raises(CheckpointMismatchError, match=r"template lacks|has no such variable"):
        load_network(directory, no_normalizer)


def test_resuming_with_another_config_is_a_clear_error(mlp_run, tmp_path):
    directory = tmp_path / "c"
    shutil.copytree(mlp_run[0], directory)
    config = TrainConfig(
        ppo=PPOConfig(n_envs=8, rollout_length=4, n_minibatches=2, log_level=TINY_LOG),
        eval=EvalConfig(enabled=False),
    )
    with Checkpointer(directory) as ckpt, pytest.raises(CheckpointMismatchError) as info:
        ckpt.restore(template_state(mlp(), config))
    # The first env-batched array of the train item: the optimizer state comes first
    # and matches, the environment state does not.
    assert "env_state/" in str(info.value)
    assert "(8, 2) float32 in the template but (4, 2) float32" in str(info.value)
    assert "network and config the run was started with" in str(info.value)


# --------------------------------------------------------------------------- corruption


def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _damage(step_dir: Path, how: str) -> None:
    if how == "missing item":
        shutil.rmtree(step_dir / "train")
    elif how == "missing metadata":
        (step_dir / "meta" / "metadata").unlink()
    elif how == "garbled metadata":
        (step_dir / "meta" / "metadata").write_text("{not json")
    elif how == "flipped data bytes":
        # The largest data file of the network item (the arrays themselves).
        files = [p for p in (step_dir / "network").rglob("*") if p.is_file()]
        _flip_byte(max(files, key=lambda p: p.stat().st_size))
    elif how == "truncated data":
        files = [p for p in (step_dir / "network").rglob("*") if p.is_file()]
        big = max(files, key=lambda p: p.stat().st_size)
        big.write_bytes(big.read_bytes()[: big.stat().st_size // 2])


DAMAGES = ["missing item", "missing metadata", "garbled metadata", "flipped data bytes",
           "truncated data"]  # fmt: skip


@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_checkpoint_is_skipped_with_a_warning(how, mlp_run, tmp_path):
    directory = tmp_path / "c"
    shutil.copytree(mlp_run[0], directory)
    _damage(directory / "96", how)
    config = tiny_config(96)
    with Checkpointer(mlp_run[0]) as ckpt:
        expected = ckpt.restore(template_state(mlp(), config), step=48)

    with Checkpointer(directory) as ckpt:
        with pytest.warns(CorruptedCheckpointWarning, match="step 96.*skipping"):
            restored = ckpt.restore(template_state(mlp(), config))
        assert ckpt.restored_step == 48
    assert restored is not None and expected is not None
    assert_trees_equal(restored, expected)

    if how != "missing item":  # the network item itself is readable then
        with pytest.warns(CorruptedCheckpointWarning, match="step 96"):
            load_network(directory, mlp())
        with pytest.raises(CorruptedCheckpointError, match=r"step 96.*available: \[48, 96\]"):
            load_network(directory, mlp(), step=96)


def test_no_readable_checkpoint_starts_afresh_with_a_warning(mlp_run, tmp_path):
    directory = tmp_path / "c"
    shutil.copytree(mlp_run[0], directory)
    for step in (48, 96):
        _damage(directory / str(step), "garbled metadata")
    with Checkpointer(directory) as ckpt, pytest.warns(CorruptedCheckpointWarning) as record:
        assert ckpt.restore(template_state(mlp(), tiny_config(96))) is None
    assert [str(w.message) for w in record][-1].startswith("no readable checkpoint")
    with pytest.raises(CorruptedCheckpointError, match="no checkpoint"), warnings.catch_warnings():
        warnings.simplefilter("ignore", CorruptedCheckpointWarning)
        load_network(directory, mlp())


def test_missing_directory_and_step_errors(mlp_run, tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint directory"):
        load_network(tmp_path / "nowhere", mlp())
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no finished checkpoint"):
        load_network(tmp_path / "empty", mlp())
    with pytest.raises(FileNotFoundError, match=r"no checkpoint at step 50.*\[48, 96\]"):
        load_network(mlp_run[0], mlp(), step=50)


# --------------------------------------------------------------------------- policy


def test_resume_false_refuses_a_directory_with_checkpoints(mlp_run, tmp_path):
    with pytest.raises(FileExistsError, match=r"steps \[48, 96\].*resume=True"):
        Checkpointer(mlp_run[0], resume=False)
    # Leftovers of an unfinished save are not a run: they are cleaned up.
    leftover = tmp_path / "c" / "16.orbax-checkpoint-tmp-1234"
    leftover.mkdir(parents=True)
    with Checkpointer(tmp_path / "c", resume=False) as ckpt:
        assert ckpt.steps == [] and not leftover.exists()
        assert ckpt.restore(template_state(mlp(), tiny_config(16))) is None


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"save_every_steps": 0}, ValueError, "save_every_steps=0 must be >= 1"),
        ({"max_to_keep": 1.5}, TypeError, "max_to_keep=1.5 must be an int"),
        ({"keep_every_steps": -3}, ValueError, "keep_every_steps=-3"),
        ({"async_save": 1}, TypeError, "async_save=1 must be a bool"),
        ({"env_state": "no"}, TypeError, "env_state='no' must be a bool"),
        ({"config": 3}, TypeError, "config=3 must be a dataclass"),
    ],
)
def test_constructor_validation(kwargs, error, match, tmp_path):
    with pytest.raises(error, match=match):
        Checkpointer(tmp_path / "c", **kwargs)


def test_save_policy_and_retention(tmp_path):
    # Saves are offered after every 16-step call. save_every_steps=40: a checkpoint when
    # the step crosses a multiple of 40: 48 (40), 80, 128 (120), 160, 208 (200), 240.
    # max_to_keep=2 keeps the two latest; keep_every_steps=100 also keeps the earliest
    # checkpoint in each of [0, 100), [100, 200), [200, 300): 48, 128, 208.
    config = tiny_config(256)
    state = template_state(mlp(), config)
    with Checkpointer(
        tmp_path / "c", save_every_steps=40, max_to_keep=2, keep_every_steps=100
    ) as ckpt:
        written = [s for s in range(16, 257, 16) if ckpt.save(state, s, {})]
        assert written == [48, 80, 128, 160, 208, 240]
        assert not ckpt.save(state, 256, {})  # not due
        assert ckpt.save(state, 256, {}, final=True)  # the end always saves
        assert ckpt.steps == [48, 128, 208, 240, 256]


def test_existing_steps_are_skipped_or_replaced(tmp_path):
    config = tiny_config(64)
    state = template_state(mlp(), config)
    with Checkpointer(tmp_path / "c", save_every_steps=16, max_to_keep=None) as ckpt:
        for step in (16, 32, 48):
            assert ckpt.save(state, step, {"x": float(step)})
    # Resume explicitly from 16: saving 16 again is skipped (it holds this state);
    # 32 and 48 belong to the abandoned continuation and are replaced.
    with Checkpointer(tmp_path / "c", save_every_steps=16, max_to_keep=None) as ckpt:
        ckpt.restore(state, step=16)
        assert not ckpt.save(state, 16, {}, final=True)
        assert ckpt.save(state, 32, {"x": -1.0})
        assert ckpt.steps == [16, 32]
    assert load_metadata(tmp_path / "c", 32)["metrics"] == {"x": -1.0}


@pytest.mark.parametrize("async_save", [False, True])
def test_save_copies_the_state_before_returning(async_save, tmp_path):
    # train_ppo donates the state's buffers to the next device call right after save()
    # returns. Deleting the buffers right away must not affect what is written.
    config = tiny_config(16)
    state = template_state(mlp(), config)
    expected = host(state)
    with Checkpointer(tmp_path / "c", async_save=async_save) as ckpt:
        assert not ckpt.save(state, 16, {})  # save_every_steps=None: only at the end
        assert ckpt.save(state, 16, {"loss": float("nan")}, final=True)
        for leaf in jax.tree.leaves(state):
            leaf.delete()
    with Checkpointer(tmp_path / "c") as ckpt:
        restored = ckpt.restore(template_state(mlp(), config))
    assert_trees_equal(restored, expected)
    assert load_metadata(tmp_path / "c")["metrics"] == {"loss": None}  # JSON has no NaN


def test_config_json_round_trip_and_schedules():
    config = TrainConfig(
        ppo=PPOConfig(n_envs=8, n_minibatches=4, log_level=LogLevel.LOSSES | LogLevel.GRAD_NORM),
        eval=EvalConfig(every_steps=100),
        seed=5,
    )
    data = config_to_dict(config)
    assert data is not None and data["ppo"]["log_level"] == "LOSSES|GRAD_NORM"
    assert config_from_dict(json.loads(json.dumps(data))) == config
    scheduled = PPOConfig(learning_rate=optax.linear_schedule(1e-3, 0.0, 100))
    stored = config_to_dict(scheduled)
    assert stored is not None and set(stored["learning_rate"]) == {"callable"}
    with pytest.raises(ValueError, match="learning_rate is a schedule"):
        config_from_dict({"ppo": stored})


# --------------------------------------------------------------------------- NaN


class NaNRewardAt(Wrapper):
    """Emits a NaN reward on the step where ``info["steps"]`` reaches ``at_step``."""

    def __init__(self, env, at_step: int):
        super().__init__(env)
        self.at_step = at_step

    def step(self, state, action):
        state = self.env.step(state, action)
        hit = state.info["steps"] == self.at_step
        return state.replace(reward=jnp.where(hit, jnp.nan, state.reward))


def test_a_nan_reward_seen_first_by_the_checkpointer_keeps_the_last_good_checkpoint(tmp_path):
    # Per-env step 41 (no episode ends: the limit is 100) falls in iteration 11, which
    # collects per-env steps 41..44. Checkpoints every 32 env steps (2 iterations):
    # 32, 64, ..., 160 (iteration 10) are good. With log_every_calls=5 the host logs only
    # after iterations 5, 10 and 15, so the checkpointer reads the NaN record first, when
    # it is about to save at step 192 (iteration 12): the record names iteration 11, and
    # nothing after 160 is written. (A divergence the log sees first, for every trainer:
    # test_trainer_contract.py.)
    env = NaNRewardAt(EpisodeWrapper(PointMass(), episode_length=100), at_step=41)
    config = tiny_config(256, log_every_calls=5)
    directory = tmp_path / "c"
    with (
        Checkpointer(directory, save_every_steps=32, max_to_keep=2) as ckpt,
        pytest.raises(NonFiniteError) as info,
    ):
        train_ppo(env, mlp(), config, progress=False, checkpoint=ckpt)
    error = info.value
    assert (error.iteration, error.quantity) == (11, "loss/total")
    assert np.isnan(error.value)
    assert error.step == 192
    assert "loss/total became nan in iteration 11" in str(error)
    assert step_dirs(directory) == [128, 160]
    network = load_network(directory, mlp())
    assert all(np.isfinite(x).all() for x in jax.tree.leaves(nnx.state(network, nnx.Param)))
    with Checkpointer(directory) as ckpt:
        state = ckpt.restore(template_state(mlp(), config))
    assert state is not None and int(state.iteration) == 10
    assert int(state.non_finite.iteration) == 0


# --------------------------------------------------------------------------- kill


KILL_SCRIPT = """
import sys
from flax import nnx
from nnx_ppo.algorithms.checkpointing.checkpointer import Checkpointer
from nnx_ppo.algorithms.config import EvalConfig, LogLevel, PPOConfig, TrainConfig
from nnx_ppo.algorithms.ppo.train import train_ppo
from nnx_ppo.envs import PointMass
from nnx_ppo.networks.factories import make_mlp_actor_critic
from nnx_ppo.wrappers import EpisodeWrapper

directory, total = sys.argv[1], int(sys.argv[2])
log = LogLevel.LOSSES | LogLevel.ACTOR | LogLevel.CRITIC | LogLevel.ROLLOUT
config = TrainConfig(
    ppo=PPOConfig(n_envs=4, rollout_length=4, n_minibatches=2, n_epochs=2,
                  total_steps=total, learning_rate=3e-3, log_level=log),
    eval=EvalConfig(enabled=False),
)
network = make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0))
env = EpisodeWrapper(PointMass(), episode_length=8)
with Checkpointer(directory, config=config, save_every_steps=16, max_to_keep=2) as ckpt:
    result = train_ppo(env, network, config, progress=False, checkpoint=ckpt)
    print("DONE", result.total_steps, ckpt.restored_step, flush=True)
"""


def _launch(script: Path, directory: Path, total: int, env: dict[str, str], log: Path):
    """Start the training script; its stdout and stderr go to ``log``."""
    with open(log, "a") as output:
        return subprocess.Popen(
            [sys.executable, str(script), str(directory), str(total)],
            stdout=output,
            stderr=subprocess.STDOUT,
            env=env,
        )


def _wait_until(predicate, proc, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"the training process exited early ({proc.returncode})")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("the training process made no progress")
        time.sleep(0.002)


def _saving(directory: Path) -> bool:
    return any(".orbax-checkpoint-tmp" in p.name for p in directory.iterdir())


def _check_every_checkpoint_loads(directory: Path, config: TrainConfig) -> None:
    steps = step_dirs(directory)
    with Checkpointer(directory) as ckpt:  # also cleans up what the kill left behind
        for step in steps:
            state = ckpt.restore(template_state(mlp(), config), step=step)
            assert state is not None and int(state.iteration) * STEPS_PER_ITERATION == step
    for step in steps:
        load_network(directory, mlp(seed=1), step=step)


def _kill_and_resume(tmp_path: Path, n_kills: int, total: int, seed: int) -> None:
    script = tmp_path / "train.py"
    script.write_text(KILL_SCRIPT)
    directory, log = tmp_path / "checkpoints", tmp_path / "stderr.log"
    env = dict(os.environ)
    env.setdefault("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "jax_cache"))
    env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    config = tiny_config(total)
    rng = random.Random(seed)
    interrupted_saves = 0

    for kill in range(n_kills):
        before = step_dirs(directory) if directory.exists() else []
        proc = _launch(script, directory, total, env, log)
        # Wait until this run has saved at least once (it resumed and progressed).
        _wait_until(lambda b=before: directory.exists() and step_dirs(directory) != b, proc)
        if kill % 2 == 0:  # kill while orbax is writing a checkpoint
            _wait_until(lambda: _saving(directory), proc)
        else:  # kill at a random moment
            time.sleep(rng.uniform(0.0, 0.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL
        interrupted_saves += _saving(directory)
        assert step_dirs(directory), "a run that saved must leave a finished checkpoint"
        _check_every_checkpoint_loads(directory, config)

    # Kills within a few ms of a save starting leave its unfinished folder (a save
    # takes tens of ms): make sure the test did interrupt saves.
    assert interrupted_saves >= 1
    latest = max(step_dirs(directory))
    assert latest < total, "the kills came too late to test anything; lower the delays"
    log.write_text("")
    proc = _launch(script, directory, total, env, log)
    proc.wait(timeout=300)
    assert proc.returncode == 0, log.read_text()[-3000:]
    done = [line.split() for line in log.read_text().splitlines() if line.startswith("DONE")]
    assert done == [["DONE", str(total), str(latest)]]
    _check_every_checkpoint_loads(directory, config)
    assert not [p for p in directory.iterdir() if not p.name.isdigit()]  # no leftovers

    # Killed and resumed n_kills times == trained in one go, bit for bit.
    reference = mlp()
    train(reference, config)
    assert_trees_equal(nnx.state(load_network(directory, mlp(seed=1))), nnx.state(reference))


@pytest.mark.slow  # the default run resumes in new processes (test_preemption)
def test_kill_and_resume_many_times(tmp_path):
    # Six kills: three while orbax writes a checkpoint, three at random moments (each
    # kill costs a process start, ~7 s on 2 cores; a 3-kill variant in `extended` ran
    # the same path again and was folded into this one).
    _kill_and_resume(tmp_path, n_kills=6, total=1600, seed=1)
