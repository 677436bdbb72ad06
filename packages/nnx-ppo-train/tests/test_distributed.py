"""Scale-out (nnx_ppo.algorithms.core.distributed): meshes and placement, sharded vs
one-device training (LSTM, adaptive KL, domain randomization), checkpoints across device
counts, and a two-process ``jax.distributed`` run. That every trainer trains on 2
devices like on one is ``test_trainer_contract.py``'s.

The pytest process has a single CPU device, so runs on several devices or processes are
subprocesses (``_distributed_runs.py``): one with 4 forced host devices
(``XLA_FLAGS=--xla_force_host_platform_device_count=4``) and a pair of processes joined
by ``jax.distributed.initialize`` on localhost. Both train the same tiny PPO setup (16
PointMass envs, 8-step rollouts, 2 minibatches, 2 epochs, 4 iterations), so the
one-device run of the first is the reference for everything.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _distributed_runs import (
    assert_indivisible_error,
    assert_resumes_on_two_and_one,
    assert_same,
    load_variables,
    run_on_four_devices,
    run_two_processes,
)
from flax import nnx
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from nnx_ppo.algorithms.checkpointing.checkpointer import Checkpointer
from nnx_ppo.algorithms.config import PPOConfig
from nnx_ppo.algorithms.core.distributed import (
    check_batch_divisible,
    gather_state,
    make_mesh,
    process_env_slice,
    resolve_mesh,
    shard_state,
    state_shardings,
)
from nnx_ppo.algorithms.ppo.iteration import init_train_state, make_optimizer
from nnx_ppo.envs import PointMass
from nnx_ppo.networks.factories import make_mlp_actor_critic
from nnx_ppo.wrappers import EpisodeWrapper

STEPS_PER_ITERATION = 16 * 8


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    """The 4-device script, run once: ``(facts, output prefix)``."""
    out = tmp_path_factory.mktemp("sharded") / "out"
    return run_on_four_devices(out, "sharded"), out


@pytest.fixture(scope="module")
def randomized(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    """The 4-device domain-randomization script (brax), run once."""
    out = tmp_path_factory.mktemp("randomized") / "out"
    return run_on_four_devices(out, "randomized"), out


# --------------------------------------------------------------------------- in-process


def test_make_mesh_uses_all_devices_by_default() -> None:
    mesh = make_mesh()
    assert mesh.axis_names == ("data",)
    assert list(mesh.devices.flat) == jax.devices()
    assert resolve_mesh().devices.tolist() == mesh.devices.tolist()
    assert resolve_mesh(mesh=mesh) is mesh


@pytest.mark.parametrize(
    ("devices", "error", "match"),
    [
        (0, ValueError, "devices=0 must be between 1 and the number of devices"),
        (jax.device_count() + 1, ValueError, "must be between 1"),
        (True, TypeError, "devices=True must be an int"),
        ("cpu", TypeError, "not a str"),
        ([], ValueError, "devices=\\[\\] is empty"),
        (jax.devices() * 2, ValueError, "lists a device twice"),
    ],
)
def test_make_mesh_rejects_bad_devices(devices, error, match) -> None:
    with pytest.raises(error, match=match):
        make_mesh(devices)


def test_resolve_mesh_rejects_bad_meshes() -> None:
    with pytest.raises(ValueError, match="not both"):
        resolve_mesh(1, make_mesh())
    with pytest.raises(ValueError, match="no 'data' axis"):
        resolve_mesh(mesh=Mesh(np.array(jax.devices()), ("batch",)))
    with pytest.raises(TypeError, match=r"must be a jax\.sharding\.Mesh"):
        resolve_mesh(mesh="data")  # type: ignore[arg-type]


def test_check_batch_divisible_names_the_numbers_and_the_fix() -> None:
    # 16 envs, 2 minibatches, 4 devices: each minibatch has 8 envs, 2 per device.
    check_batch_divisible(16, 4, n_minibatches=2)
    # 12 envs: minibatches of 6 cannot be split over 4 devices; the multiples of
    # 2 * 4 = 8 around 12 are 16 and 8.
    with pytest.raises(ValueError) as info:
        check_batch_divisible(12, 4, n_minibatches=2)
    message = str(info.value)
    assert "n_envs=12 is not divisible by n_minibatches=2 * 4 devices = 8" in message
    assert "n_envs=16 or n_envs=8" in message
    # 3 envs on 4 devices: the only fix upwards is 4 (no positive multiple below).
    with pytest.raises(ValueError, match=r"by 4 devices = 4: .* Use n_envs=4, or fewer"):
        check_batch_divisible(3, 4)


def test_process_env_slice_is_everything_with_one_process() -> None:
    assert process_env_slice(8, make_mesh()) == slice(0, 8)


@pytest.fixture(scope="module")
def one_device_states():
    """A TrainState initialised plainly and on a one-device mesh."""
    env = EpisodeWrapper(PointMass(), episode_length=12)
    config = PPOConfig(n_envs=4, rollout_length=4, n_minibatches=2)
    optimizer = make_optimizer(config)
    mesh = make_mesh(1)
    key = jax.random.PRNGKey(3)
    net = make_mlp_actor_critic(2, 2, (8,), (8,), rngs=nnx.Rngs(0))
    _, plain = init_train_state(env, net, config, optimizer, key)
    _, placed = init_train_state(env, net, config, optimizer, key, mesh=mesh)
    return plain, placed, mesh


def _raw(x):
    return np.asarray(jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x)


def test_init_on_a_mesh_places_the_state_without_changing_it(one_device_states) -> None:
    plain, placed, mesh = one_device_states
    # Same values, including the RNG stream keys (typed key arrays) and the env reset.
    for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(placed), strict=True):
        np.testing.assert_array_equal(_raw(a), _raw(b))
    # Batch fields are sharded along "data", the rest replicated.
    env_leaf = jax.tree.leaves(placed.env_state)[0]
    assert env_leaf.sharding.spec == P("data")
    assert jax.tree.leaves(placed.episodes)[0].sharding.spec == P("data")
    assert jax.tree.leaves(placed.reset_state)[0].sharding.spec == P("data")
    for field in (placed.params, placed.network_state, placed.opt_state, placed.rng):
        assert all(x.sharding.spec == P() for x in jax.tree.leaves(field))
    shardings = state_shardings(placed, mesh)
    assert jax.tree.leaves(shardings.env_state) == [
        x.sharding for x in jax.tree.leaves(placed.env_state)
    ]
    assert shardings.iteration.spec == P()


def test_gather_and_shard_state_round_trip(one_device_states) -> None:
    _, placed, mesh = one_device_states
    host = gather_state(placed)
    leaves = jax.tree.leaves(host)
    # Host copies: NumPy arrays, except typed keys (single-device key arrays).
    assert all(
        isinstance(x, np.ndarray) or jnp.issubdtype(x.dtype, jax.dtypes.prng_key) for x in leaves
    )
    again = shard_state(host, mesh)
    for a, b in zip(jax.tree.leaves(placed), jax.tree.leaves(again), strict=True):
        np.testing.assert_array_equal(_raw(a), _raw(b))
        assert a.sharding == b.sharding


def test_checkpointer_is_due_follows_save_every_steps(tmp_path: Path) -> None:
    # Every 100 steps: 99 has not crossed a multiple of 100 since step 0, 100 has;
    # final always saves.
    with Checkpointer(tmp_path, save_every_steps=100) as ckpt:
        assert not ckpt.is_due(99)
        assert ckpt.is_due(100)
        assert ckpt.is_due(99, final=True)


# --------------------------------------------------------------------------- 4 devices


@pytest.mark.heavy
def test_four_devices_train_like_one_with_lstm(sharded) -> None:
    facts, out = sharded
    assert_same(load_variables(out, "lstm-1"), load_variables(out, "lstm-4"))
    # devices=[device 3]: the whole run lives on that device, not on the default one.
    assert (facts["lstm-4-env-devices"], facts["lstm-1-env-devices"]) == ([0, 1, 2, 3], [3])


@pytest.mark.heavy
def test_adaptive_kl_and_progress_are_the_same_on_four_devices_and_one(sharded) -> None:
    """The KL of each minibatch is averaged over the four devices' shares, so the
    adapted rate follows the one-device run; the progress count is exact everywhere."""
    facts, out = sharded
    one, four = facts["adaptive-1-rates"], facts["adaptive-4-rates"]
    assert len(one) == len(four) == 4 and len(set(one)) > 1  # the rate moved
    np.testing.assert_allclose(four, one, rtol=1e-5)
    assert_same(load_variables(out, "adaptive-1"), load_variables(out, "adaptive-4"))
    # The last step of the run: iteration 3, rollout step 7, 16 envs.
    last = (3 * 8 + 7) * 16
    assert facts["adaptive-1-steps"] == facts["adaptive-4-steps"] == [last] * 16


@pytest.mark.extended
def test_domain_randomization_is_the_same_on_four_devices_and_one(randomized) -> None:
    """brax inverted_pendulum with per-env models (pole mass, joint damping) redrawn every
    iteration and a randomized evaluation: the models are sharded with the
    environments and equal the one-device run's; so do the variables and the return."""
    facts, out = randomized
    if "randomized-1-models" not in facts:
        pytest.skip("needs brax")
    assert facts["randomized-4-models-sharded"] and not facts["randomized-1-models-sharded"]
    one, four = facts["randomized-1-models"], facts["randomized-4-models"]
    assert sorted(one) == ["dof/damping", "link/inertia/mass"]
    for name in one:
        np.testing.assert_array_equal(np.asarray(four[name]), np.asarray(one[name]))
    assert len({row[1] for row in one["link/inertia/mass"]}) == 16  # one per env
    assert_same(load_variables(out, "randomized-1"), load_variables(out, "randomized-4"))
    for name, value in facts["randomized-1-eval"].items():
        np.testing.assert_allclose(facts["randomized-4-eval"][name], value, rtol=1e-5)


@pytest.mark.heavy
def test_checkpoint_from_four_devices_resumes_on_two_and_one(sharded) -> None:
    facts, out = sharded
    half = 2 * STEPS_PER_ITERATION
    assert_resumes_on_two_and_one(facts, out, reference="mlp-1", resumed="resume", half=half)


@pytest.mark.heavy
def test_indivisible_n_envs_is_a_clear_error(sharded) -> None:
    assert_indivisible_error(sharded[0])


# --------------------------------------------------------------------------- 2 processes


@pytest.mark.extended
def test_two_processes_match_one_process(sharded, tmp_path: Path) -> None:
    facts, out = sharded
    half = 2 * STEPS_PER_ITERATION
    worker = run_two_processes(
        "worker",
        tmp_path,
        reference=load_variables(out, "mlp-1"),
        saved="mlp",
        total_steps=2 * half,
        template=make_mlp_actor_critic(2, 2, (16,), (16,), rngs=nnx.Rngs(5)),
    )
    for i in (0, 1):
        for name, value in facts["mlp-1-eval"].items():
            np.testing.assert_allclose(worker[i]["eval"][name], value, rtol=1e-5)
    # Only process 0 logs, and restores (then broadcasts): the second run resumed.
    assert worker[0]["logged"] == [STEPS_PER_ITERATION * i for i in (1, 2, 3, 4)]
    assert (worker[0]["restored-4"], worker[1]["restored-4"]) == (half, None)
