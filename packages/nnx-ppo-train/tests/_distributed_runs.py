"""Training runs for ``test_distributed.py`` and ``test_distillation_distributed.py``,
executed in subprocesses.

The pytest process has one CPU device; these runs need several, or several processes,
which JAX fixes at start-up. Usage::

    XLA_FLAGS=--xla_force_host_platform_device_count=4 python _distributed_runs.py sharded OUT
    python _distributed_runs.py worker PROCESS_ID PORT CHECKPOINT_DIR OUT   # x2 processes
    XLA_FLAGS=--xla_force_host_platform_device_count=4 python _distributed_runs.py distill OUT
    python _distributed_runs.py distill-worker PROCESS_ID PORT CHECKPOINT_DIR OUT  # x2

Results go to ``OUT`` as ``OUT.json`` (facts) and ``OUT-<name>.npz`` (network variables).
The test modules start these runs and read what they wrote with the functions at the
end (`run_on_four_devices`, `run_two_processes`, `load_variables`, `assert_same`,
`assert_resumes_on_two_and_one`, `assert_indivisible_error`).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import traceback
from pathlib import Path

import jax
import numpy as np
from _train_test_helpers import randomize_pendulum, subprocess_env
from flax import nnx

ITERATIONS = 4
N_ENVS, ROLLOUT = 16, 8
STEPS_PER_ITERATION = N_ENVS * ROLLOUT  # 128


def _config(
    iterations: int,
    *,
    reset_mode: str = "cached",
    evaluate: bool = False,
    desired_kl: float | None = None,
):
    from nnx_ppo.algorithms.config import EvalConfig, PPOConfig, TrainConfig

    return TrainConfig(
        ppo=PPOConfig(
            n_envs=N_ENVS,
            rollout_length=ROLLOUT,
            n_minibatches=2,
            n_epochs=2,
            total_steps=iterations * STEPS_PER_ITERATION,
            reset_mode=reset_mode,  # type: ignore[arg-type]
            desired_kl=desired_kl,
            learning_rate=3e-4 if desired_kl is None else 3e-3,
        ),
        eval=EvalConfig(enabled=evaluate, n_envs=8, max_episode_length=12, at_start=False),
    )


def _env():
    from nnx_ppo.envs import PointMass
    from nnx_ppo.wrappers import EpisodeWrapper

    # Episodes of 12 steps end inside the 8-step rollouts: resets are exercised.
    return EpisodeWrapper(PointMass(), episode_length=12)


def _progress_env():
    """PointMass whose reward penalises the distance more as training progresses, and
    that never ends an episode (its last state keeps the last step's count)."""
    from nnx_ppo.algorithms.core.progress import TRAINING_PROGRESS, progress_info
    from nnx_ppo.envs import PointMass

    class Harder(PointMass):
        def reset(self, rng):
            state = super().reset(rng)
            return state.replace(info={**state.info, **progress_info()})

        def step(self, state, action):
            weight = 1.0 + state.info[TRAINING_PROGRESS]
            stepped = super().step(state, action)
            return stepped.replace(reward=weight * stepped.reward)

    return Harder()


def _mlp():
    from nnx_ppo.networks.factories import make_mlp_actor_critic

    return make_mlp_actor_critic(2, 2, (16,), (16,), rngs=nnx.Rngs(0))  # Normalizer first


def _lstm():
    from nnx_ppo.networks.factories import make_lstm_actor_critic

    return make_lstm_actor_critic(2, 2, 8, (8,), (8,), rngs=nnx.Rngs(1))  # Normalizer too


def _pendulum():
    """brax ``inverted_pendulum`` (generalized backend), or ``None`` without brax."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from brax import envs

            return envs.get_environment("inverted_pendulum", backend="generalized")
    except ImportError:
        return None


def _randomized_config():
    from nnx_ppo.algorithms.config import EvalConfig, PPOConfig, TrainConfig

    return TrainConfig(
        ppo=PPOConfig(
            n_envs=N_ENVS, rollout_length=4, n_minibatches=2, n_epochs=1,
            total_steps=2 * N_ENVS * 4,
        ),
        eval=EvalConfig(n_envs=8, max_episode_length=8, at_start=False, randomized=True),
    )  # fmt: skip


def _pendulum_net(env):
    from nnx_ppo.networks.factories import make_mlp_actor_critic

    return make_mlp_actor_critic(
        env.observation_size, env.action_size, (8,), (8,), rngs=nnx.Rngs(0)
    )


def network_variables(network: nnx.Module) -> list[np.ndarray]:
    """Every network variable (keys as their raw data), in a fixed order."""
    leaves = jax.tree.leaves(nnx.state(network))
    return [
        np.asarray(
            jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x
        )
        for x in leaves
    ]


def _save(out: str, name: str, network: nnx.Module) -> None:
    np.savez(f"{out}-{name}.npz", *network_variables(network))


def _join(process_id: int, port: int, out: str) -> dict | None:
    """Join the two-process ``jax.distributed`` run on localhost: the process's first
    facts, or ``None`` (having written why to ``OUT.json``) where this JAX has no CPU
    collectives across processes."""
    try:
        jax.distributed.initialize(
            coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=process_id
        )
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices("collectives work")  # a first CPU collective
    except Exception as e:  # e.g. a JAX without CPU collectives
        Path(f"{out}.json").write_text(json.dumps({"unsupported": f"{type(e).__name__}: {e}"}))
        return None
    return {"process_count": jax.process_count(), "device_count": jax.device_count()}


def sharded(out: str) -> None:
    """4 forced CPU devices: 4 vs 1 device (LSTM, adaptive KL), the error for an
    indivisible n_envs, and a 4-device checkpoint resumed on 2 and on 1 device (the
    MLP + Normalizer on 2 devices vs 1, for every trainer: ``test_trainer_contract.py``)."""
    from nnx_ppo.algorithms.checkpointing.checkpointer import Checkpointer
    from nnx_ppo.algorithms.ppo.train import train_ppo

    facts: dict = {"device_count": jax.device_count()}
    env = _env()
    root = Path(out).parent

    # 1. The reference: one device, ITERATIONS iterations, no checkpoint.
    net = _mlp()
    result = train_ppo(env, net, _config(ITERATIONS, evaluate=True), progress=False, devices=1)
    _save(out, "mlp-1", net)
    facts["mlp-1-eval"] = result.eval_history[-1][1]

    # 2. Four devices, checkpointed halfway and at the end.
    with Checkpointer(
        root / "ckpt4", save_every_steps=ITERATIONS // 2 * STEPS_PER_ITERATION, max_to_keep=None
    ) as ckpt:
        train_ppo(env, _mlp(), _config(ITERATIONS), progress=False, devices=4, checkpoint=ckpt)
        facts["ckpt4-steps"] = ckpt.steps

    # 3. Resume the halfway checkpoint on 2 devices and on 1 device.
    half = ITERATIONS // 2 * STEPS_PER_ITERATION
    for devices in (2, 1):
        directory = root / f"resume{devices}"
        shutil.copytree(root / "ckpt4" / str(half), directory / str(half))
        net = _mlp()
        with Checkpointer(directory) as ckpt:
            train_ppo(
                env, net, _config(ITERATIONS), progress=False, devices=devices, checkpoint=ckpt
            )
            facts[f"resume{devices}-restored"] = ckpt.restored_step
        _save(out, f"resume-{devices}", net)

    # 4. The LSTM network ("fresh" resets: a batched reset inside the sharded scan), on
    #    4 devices and on one device that is not the default one.
    for name, devices in (("4", 4), ("1", [jax.devices()[3]])):
        net = _lstm()
        result = train_ppo(
            env, net, _config(3, reset_mode="fresh"), progress=False, devices=devices
        )
        _save(out, f"lstm-{name}", net)
        facts[f"lstm-{name}-env-devices"] = sorted(
            d.id for d in jax.tree.leaves(result.state.env_state)[0].devices()
        )

    # 5. Adaptive-KL learning rate and an environment whose reward reads the training
    #    progress, on 4 devices and on 1: the same rate, variables and step counts.
    for name, devices in (("4", 4), ("1", 1)):
        net = _mlp()
        rates: list[float] = []

        def record(metrics, step, rates=rates):
            rates.append(metrics["train/learning_rate"])

        result = train_ppo(
            _progress_env(), net, _config(ITERATIONS, desired_kl=1e-3), progress=False,
            devices=devices, log_fn=record,
        )  # fmt: skip
        _save(out, f"adaptive-{name}", net)
        facts[f"adaptive-{name}-rates"] = rates
        facts[f"adaptive-{name}-steps"] = np.asarray(
            jax.device_get(result.state.env_state.info["training_step"])
        ).tolist()

    # 6. n_envs = 16 is not a multiple of n_minibatches * devices = 2 * 3.
    try:
        train_ppo(env, _mlp(), _config(1), progress=False, devices=3)
    except ValueError as e:
        facts["indivisible-error"] = str(e)
    Path(f"{out}.json").write_text(json.dumps(facts))


def randomized(out: str) -> None:
    """4 forced CPU devices: domain randomization on brax inverted_pendulum, per-env
    models sharded with the environments, a redraw inside the iteration, randomized
    evaluation; 4 vs 1 device. Writes no facts for the models without brax."""
    from nnx_ppo.algorithms.ppo.train import train_ppo

    facts: dict = {"device_count": jax.device_count()}
    pendulum = _pendulum()
    if pendulum is not None:
        for name, devices in (("4", 4), ("1", 1)):
            net = _pendulum_net(pendulum)
            result = train_ppo(
                pendulum, net, _randomized_config(), progress=False, devices=devices,
                randomization_fn=randomize_pendulum, redraw_every=1,
            )  # fmt: skip
            _save(out, f"randomized-{name}", net)
            models = result.state.models
            facts[f"randomized-{name}-eval"] = result.eval_history[-1][1]
            facts[f"randomized-{name}-models"] = {
                k: np.asarray(jax.device_get(v)).tolist() for k, v in models.items()
            }
            spec = getattr(models["link/inertia/mass"].sharding, "spec", None)
            facts[f"randomized-{name}-models-sharded"] = spec == jax.sharding.PartitionSpec("data")

    Path(f"{out}.json").write_text(json.dumps(facts))


def worker(process_id: int, port: int, directory: str, out: str) -> None:
    """One of two processes (one CPU device each) of a ``jax.distributed`` run: train
    halfway with a checkpoint, then resume from it to the end."""
    facts = _join(process_id, port, out)
    if facts is None:
        return

    from nnx_ppo.algorithms.checkpointing.checkpointer import Checkpointer
    from nnx_ppo.algorithms.ppo.train import train_ppo

    env = _env()
    logged: list[int] = []
    half = ITERATIONS // 2 * STEPS_PER_ITERATION
    for iterations in (ITERATIONS // 2, ITERATIONS):
        net = _mlp()
        with Checkpointer(directory, save_every_steps=half, max_to_keep=None) as ckpt:
            result = train_ppo(
                env,
                net,
                _config(iterations, evaluate=True),
                progress=False,
                checkpoint=ckpt,
                log_fn=lambda metrics, step: logged.append(step),
            )
        facts[f"restored-{iterations}"] = ckpt.restored_step
    facts["logged"] = logged
    facts["eval"] = result.eval_history[-1][1]
    facts["total_steps"] = result.total_steps
    _save(out, "mlp", net)
    Path(f"{out}.json").write_text(json.dumps(facts))


# --------------------------------------------------------------------------- distillation

DISTILL_ITERATIONS = 4  # two device calls of two iterations each


def _distill_config(*, evaluate: bool = False):
    from nnx_ppo.algorithms.config import EvalConfig
    from nnx_ppo.algorithms.distillation.train import DistillationConfig

    return DistillationConfig(
        n_envs=N_ENVS,
        rollout_length=ROLLOUT,
        n_minibatches=2,
        n_epochs=2,
        learning_rate=1e-2,
        total_steps=DISTILL_ITERATIONS * STEPS_PER_ITERATION,
        value_loss_weight=0.5,  # the teacher's value labels are sharded too
        reset_mode="refresh",  # a batched reset inside the sharded scan
        iterations_per_call=2,
        eval=EvalConfig(enabled=evaluate, n_envs=8, max_episode_length=12, at_start=False),
    )


def _teacher_student():
    """An LSTM teacher (its carry is sharded) and an LSTM student; both start with a
    Normalizer, whose statistics the student updates from the sharded rollout."""
    from nnx_ppo.networks.factories import make_lstm_actor_critic

    teacher = make_lstm_actor_critic(2, 2, 8, (8,), (8,), rngs=nnx.Rngs(1))
    student = make_lstm_actor_critic(2, 2, 6, (8,), (8,), rngs=nnx.Rngs(2))
    return teacher, student


def distill(out: str) -> None:
    """4 forced CPU devices, `train_distillation`: the 4-device state's layout, the error
    for an indivisible n_envs, and a 4-device checkpoint resumed on 2 and on 1 device (2
    devices vs 1, for every trainer: ``test_trainer_contract.py``)."""
    from jax.sharding import PartitionSpec

    from nnx_ppo.algorithms.checkpointing.checkpointer import Checkpointer
    from nnx_ppo.algorithms.distillation.train import train_distillation

    facts: dict = {"device_count": jax.device_count()}
    env = _env()
    root = Path(out).parent
    half = DISTILL_ITERATIONS // 2 * STEPS_PER_ITERATION

    # 1. The reference: one device, no checkpoint.
    teacher, student = _teacher_student()
    result = train_distillation(
        env, teacher, student, _distill_config(evaluate=True), progress=False, devices=1
    )
    _save(out, "student-1", student)
    facts["student-1-eval"] = result.eval_history[-1][1]
    facts["student-1-env-devices"] = len(jax.tree.leaves(result.state.env_state)[0].devices())

    # 2. Four devices, checkpointed halfway and at the end.
    teacher, student = _teacher_student()
    logged: list[int] = []
    with Checkpointer(root / "distill4", save_every_steps=half, max_to_keep=None) as ckpt:
        result = train_distillation(
            env,
            teacher,
            student,
            _distill_config(evaluate=True),
            progress=False,
            devices=4,
            checkpoint=ckpt,
            log_fn=lambda metrics, step: logged.append(step),
        )
        facts["ckpt4-steps"] = ckpt.steps
    _save(out, "teacher-4", teacher)
    facts["student-4-logged"] = logged
    state = result.state
    data = PartitionSpec("data")
    for field in ("env_state", "reset_state", "carry", "teacher_carry", "episodes"):
        leaves = jax.tree.leaves(getattr(state, field))
        facts[f"student-4-{field}-sharded"] = bool(leaves) and all(
            x.sharding.spec == data and {s.data.shape[0] for s in x.addressable_shards} == {4}
            for x in leaves
        )
    facts["student-4-replicated"] = all(
        x.sharding.is_fully_replicated
        for x in jax.tree.leaves((state.params, state.network_state, state.opt_state))
    )
    facts["student-4-network-devices"] = sorted(
        {len(x.devices()) for x in jax.tree.leaves(nnx.state(student))}
    )

    # 3. Resume the halfway checkpoint on 2 devices and on 1 device.
    for devices in (2, 1):
        directory = root / f"distill-resume{devices}"
        shutil.copytree(root / "distill4" / str(half), directory / str(half))
        teacher, student = _teacher_student()
        with Checkpointer(directory) as ckpt:
            result = train_distillation(
                env,
                teacher,
                student,
                _distill_config(),
                progress=False,
                devices=devices,
                checkpoint=ckpt,
            )
            facts[f"resume{devices}-restored"] = ckpt.restored_step
        facts[f"resume{devices}-total-steps"] = result.total_steps
        _save(out, f"student-resume-{devices}", student)

    # 4. n_envs = 16 is not a multiple of n_minibatches * devices = 2 * 3.
    teacher, student = _teacher_student()
    try:
        train_distillation(env, teacher, student, _distill_config(), progress=False, devices=3)
    except ValueError as e:
        facts["indivisible-error"] = str(e)
    Path(f"{out}.json").write_text(json.dumps(facts))


def distill_worker(process_id: int, port: int, directory: str, out: str) -> None:
    """One of two processes (one CPU device each) of a ``jax.distributed``
    `train_distillation` run, checkpointed halfway and at the end."""
    facts = _join(process_id, port, out)
    if facts is None:
        return

    from nnx_ppo.algorithms.checkpointing.checkpointer import Checkpointer
    from nnx_ppo.algorithms.distillation.train import train_distillation

    logged: list[int] = []
    half = DISTILL_ITERATIONS // 2 * STEPS_PER_ITERATION
    teacher, student = _teacher_student()
    with Checkpointer(directory, save_every_steps=half, max_to_keep=None) as ckpt:
        result = train_distillation(
            _env(),
            teacher,
            student,
            _distill_config(evaluate=True),
            progress=False,
            checkpoint=ckpt,
            log_fn=lambda metrics, step: logged.append(step),
        )
    facts["logged"] = logged
    facts["eval"] = result.eval_history[-1][1]
    facts["total_steps"] = result.total_steps
    _save(out, "student", student)
    Path(f"{out}.json").write_text(json.dumps(facts))


# --------------------------------------------------------------------------- the tests' side

# Reduction order differs between 1 and 4 devices (sums of 4 partial sums); after 4
# iterations the variables agree to ~1e-7, far below these bounds.
TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
_THIS = str(Path(__file__).resolve())


def load_variables(out: str | Path, name: str) -> list[np.ndarray]:
    """The network variables a run with the output prefix ``out`` saved under ``name``
    (``OUT-<name>.npz``), in their order."""
    with np.load(f"{out}-{name}.npz") as data:
        return [data[f"arr_{i}"] for i in range(len(data.files))]


def assert_same(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    """Two runs' variables agree (within `TOLERANCE`), and there are some."""
    assert len(a) == len(b) > 0
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x, y, **TOLERANCE)


def assert_resumes_on_two_and_one(
    facts: dict, out: Path, *, reference: str, resumed: str, half: int
) -> None:
    """The 4-device run checkpointed at ``half`` and at the end (``2 * half``), and its
    halfway checkpoint, resumed on 2 devices and on 1 (saved as ``<resumed>-<devices>``),
    ended with the variables of the uninterrupted one-device run (saved as
    ``reference``)."""
    assert facts["ckpt4-steps"] == [half, 2 * half]
    expected = load_variables(out, reference)
    for devices in (2, 1):
        assert facts[f"resume{devices}-restored"] == half
        assert_same(expected, load_variables(out, f"{resumed}-{devices}"))


def assert_indivisible_error(facts: dict) -> None:
    """The run on 3 devices was refused: 16 envs, 2 minibatches, 3 devices, and the
    multiples of 2 * 3 = 6 around 16 are 18 and 12."""
    assert facts["indivisible-error"].startswith(
        "n_envs=16 is not divisible by n_minibatches=2 * 3 devices = 6"
    )
    assert "Use n_envs=18 or n_envs=12, or fewer devices" in facts["indivisible-error"]


def run_on_four_devices(out: Path, script: str) -> dict:
    """Run ``script`` (``sharded``, ``randomized`` or ``distill``) in a subprocess with 4
    forced host devices, its results under the prefix ``out``: its facts."""
    proc = subprocess.run(
        [sys.executable, _THIS, script, str(out)],
        env=subprocess_env(4),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(Path(f"{out}.json").read_text())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_two_processes(
    script: str,
    tmp_path: Path,
    *,
    reference: list[np.ndarray],
    saved: str,
    total_steps: int,
    template: nnx.Module,
) -> list[dict]:
    """Run ``script`` (``worker`` or ``distill-worker``) as two processes of one CPU
    device each, joined on a free localhost port, and check what such a run must do
    for every trainer: both processes see 2 processes and 2 devices, and end with the
    one-process run's variables ``reference`` (each saved its network as
    ``tmp_path / f"p{i}-<saved>.npz"``) after ``total_steps``; only process 0 logs; it
    checkpointed the gathered state halfway and at the end to ``tmp_path / "ckpt"``,
    and the network loaded from there into ``template`` is ``reference`` too. Returns
    the processes' facts. Skips the test where this JAX has no CPU collectives across
    processes."""
    import pytest

    from nnx_ppo.algorithms.checkpointing.checkpointer import Checkpointer, load_network

    port, directory = _free_port(), tmp_path / "ckpt"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                _THIS,
                script,
                str(i),
                str(port),
                str(directory),
                str(tmp_path / f"p{i}"),
            ],
            env=subprocess_env(None),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in (0, 1)
    ]
    logs = []
    try:
        for proc in procs:
            logs.append(proc.communicate(timeout=600)[0])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    assert all(p.returncode == 0 for p in procs), "\n".join(logs)
    worker = [json.loads((tmp_path / f"p{i}.json").read_text()) for i in (0, 1)]
    if "unsupported" in worker[0]:
        pytest.skip(f"no CPU collectives across processes in this JAX: {worker[0]['unsupported']}")

    assert [(w["process_count"], w["device_count"]) for w in worker] == [(2, 2), (2, 2)]
    for i in (0, 1):
        assert_same(reference, load_variables(tmp_path / f"p{i}", saved))
        assert worker[i]["total_steps"] == total_steps
    assert worker[1]["logged"] == []
    with Checkpointer(directory) as ckpt:
        assert ckpt.steps == [total_steps // 2, total_steps]
    assert_same(reference, network_variables(load_network(directory, template)))
    return worker


if __name__ == "__main__":
    try:
        if sys.argv[1] == "sharded":
            sharded(sys.argv[2])
        elif sys.argv[1] == "randomized":
            randomized(sys.argv[2])
        elif sys.argv[1] == "distill":
            distill(sys.argv[2])
        elif sys.argv[1] == "distill-worker":
            distill_worker(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
        else:
            worker(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
    except BaseException:
        traceback.print_exc()
        sys.exit(1)
