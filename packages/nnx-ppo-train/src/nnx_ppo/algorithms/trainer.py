"""The run around the jitted iteration, shared by `train_ppo`, `train_distillation` and
`train_many`.

A trainer describes its algorithm as an `Algorithm`, a small frozen record of what is
particular to it (its config, its state type, and a ``prepare`` function giving the
state's extra fields, the iteration factory and the call's extra arguments), and hands
it to `run`, which does the rest the same way for every algorithm::

    settings = resolve_options("train_ppo", options, env=env)  # the run options
    mesh = set_up(env, settings.eval_env, network, config, ...)  # placement (once),
                                                               # networks vs the envs
    prepared = algorithm.prepare(env, mesh)                    # the algorithm's checks
    graphdef, state = init_state(...)                          # the algorithm's state
    state = resume(settings.checkpoint, state, mesh)           # the checkpoint's
    call = make_train_call(iteration, ...)                     # jitted, donated
    loop = drive(state, call, config, settings, ...)           # the host loop:
                                                               # evaluation, video,
                                                               # checkpoints, stop
    write_back(network, loop.state, mesh)                      # into the network

With ``runs=Runs(...)`` (`train_many`) the same steps build ``K`` runs in one program:
the state gets a leading run axis, the iteration, evaluation and videos are vmapped or
taken per run, and run ``i`` is the run the call would train alone with its own seed,
variables and values. The run options and their resolution are
`nnx_ppo.algorithms.options` (`Host` is re-exported here).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh

from nnx_ppo.algorithms._host_loop import LoopResult, evaluation_task, run_calls
from nnx_ppo.algorithms._run_axis import (
    Runs,
    init_runs,
    resume_runs,
    run_keys,
    runs_evaluation,
    runs_iteration,
    runs_video,
    sweep_shardings,
)
from nnx_ppo.algorithms.checks import check_env_network, check_reset_mode
from nnx_ppo.algorithms.config import EvalConfig, PPOConfig, TrainConfig, VideoConfig
from nnx_ppo.algorithms.distributed import (
    check_batch_divisible,
    gather_state,
    resolve_mesh,
    restore_checkpoint,
    state_shardings,
    uses_mesh,
)
from nnx_ppo.algorithms.evaluation import make_evaluator
from nnx_ppo.algorithms.hooks import Periodic
from nnx_ppo.algorithms.iteration import make_train_call
from nnx_ppo.algorithms.options import Host, RunSettings
from nnx_ppo.algorithms.phases import OnPolicyConfig, init_state, with_redraws
from nnx_ppo.algorithms.randomization import Randomization, run_randomizations
from nnx_ppo.algorithms.rollout import eval_graphdef, split_network
from nnx_ppo.algorithms.schedules import Optimization, optimization
from nnx_ppo.algorithms.types import TrainState
from nnx_ppo.algorithms.video import check_video_env, make_video_recorder

__all__ = [
    "Algorithm",
    "Host",
    "Prepared",
    "RunResult",
    "Runs",
    "as_train_config",
    "drive",
    "evaluator_of",
    "place_run",
    "resume",
    "run",
    "set_up",
    "write_back",
]


def place_run(
    devices: int | Sequence[jax.Device] | None,
    mesh: Mesh | None,
    *,
    n_envs: int,
    n_minibatches: int,
) -> Mesh | None:
    """The run's placement, decided once: a mesh, or ``None`` for one default device
    and one process (plain, unsharded arrays).

    Raises:
        ValueError: If ``devices`` / ``mesh`` are invalid (`resolve_mesh`) or
            ``n_envs`` is not a multiple of ``n_minibatches`` times the number of
            devices (`check_batch_divisible`).
    """
    run_mesh = resolve_mesh(devices, mesh)
    if not uses_mesh(run_mesh):
        return None
    check_batch_divisible(n_envs, run_mesh, n_minibatches=n_minibatches)
    return run_mesh


@dataclasses.dataclass(frozen=True)
class RunResult:
    """What a trainer returns (`TrainResult`, `DistillationResult`).

    Attributes:
        state: The final training state.
        eval_history: ``[(step, eval_metrics), ...]`` of the evaluations this call ran,
            in order. A resumed run evaluates at the steps the uninterrupted run does,
            so the earlier attempt's evaluations up to the resume step followed by these
            are the uninterrupted run's history.
        metrics: The last logged training metrics (and the last evaluation's), floats.
        total_steps: Env steps trained, an exact ``int``.
        stopped: Whether the run's ``stop`` request ended it before ``total_steps`` of
            the config (a checkpoint of this state was written; resume to continue).
    """

    state: Any
    eval_history: list[tuple[int, dict[str, float]]]
    metrics: dict[str, float]
    total_steps: int
    stopped: bool = False


def as_train_config(config: TrainConfig | PPOConfig) -> TrainConfig:
    """``config`` as a `TrainConfig`: a bare `PPOConfig` gets the default evaluation,
    video and logging settings.

    Raises:
        TypeError: If ``config`` is neither.

    Examples:
        >>> as_train_config(PPOConfig(n_envs=8, n_minibatches=2)).eval.enabled
        True
    """
    if isinstance(config, PPOConfig):
        config = TrainConfig(ppo=config)
    if not isinstance(config, TrainConfig):
        raise TypeError(
            f"config={config!r} must be a TrainConfig or a PPOConfig, e.g. "
            "TrainConfig(ppo=PPOConfig(n_envs=256))."
        )
    return config


def set_up(
    env: Any,
    eval_env: Any,
    network: nnx.Module,
    config: OnPolicyConfig,
    eval_config: EvalConfig,
    *,
    devices: int | Sequence[jax.Device] | None,
    mesh: Mesh | None,
    advantage_mode: str = "combined",
) -> Mesh | None:
    """Place the run (`place_run`) and check ``network`` (switched to ``train()``)
    against ``env`` and, if it is another environment and evaluation is on, against
    ``eval_env`` (`check_env_network`, with ``eval_env`` named in the messages), before
    anything is compiled.

    Returns:
        The run's mesh, or ``None`` (one default device).

    Raises:
        ValueError: If the placement is invalid, the network does not fit ``env`` or
            ``eval_env``, or ``env`` draws its episodes at reset (a cognitive task)
            and ``config.reset_mode`` is not ``"fresh"``.
    """
    sharded = place_run(devices, mesh, n_envs=config.n_envs, n_minibatches=config.n_minibatches)
    network.train()
    check_reset_mode(env, config.reset_mode)
    check_env_network(env, network, config.n_envs, advantage_mode=advantage_mode)
    if eval_env is not env and eval_config.enabled:
        check_env_network(eval_env, network, eval_config.n_envs, env_name="eval_env")
    return sharded


def drive(
    state: Any,
    train_call: Callable[[Any], tuple[Any, Any]],
    config: OnPolicyConfig,
    host: Host,
    *,
    log_every_calls: int,
    tasks: Sequence[Periodic | None],
    mesh: Mesh | None,
    description: str,
    runs: int | None = None,
) -> LoopResult:
    """`run_calls` with the run's sizes from ``config``, its host-side options from
    ``host`` (a `Host`, e.g. the `RunSettings` of `resolve_options`) and its periodic
    ``tasks`` (``None`` entries skipped) followed by the host's own (``tasks=``);
    ``runs``: a sweep's run count (`nnx_ppo.algorithms.sweeps`)."""
    return run_calls(
        state,
        train_call,
        steps_per_iteration=config.steps_per_iteration,
        iterations_per_call=config.iterations_per_call,
        n_iterations=config.n_iterations,
        log_every_calls=log_every_calls,
        log_level=config.log_level,
        tasks=[task for task in (*tasks, *host.tasks) if task is not None],
        checkpoint=host.checkpoint,
        mesh=mesh,
        log_fn=host.log_fn,
        jsonl_path=host.jsonl_path,
        progress=host.progress,
        description=description,
        runs=runs,
        stop=host.stop,
    )


def resume(checkpoint: Any, state: Any, mesh: Mesh | None) -> Any:
    """The state to start from: the checkpoint's (placed like ``state``), or ``state``."""
    if checkpoint is None:
        return state
    restored = restore_checkpoint(checkpoint, state, mesh)
    return state if restored is None else restored


def evaluator_of(
    eval_env: Any,
    network: nnx.Module,
    graphdef: nnx.GraphDef,
    config: EvalConfig,
    mesh: Mesh | None,
    *,
    run_steps: int | None = None,
    randomization: Randomization | None = None,
) -> Callable[[Any, Any, jax.Array], Any] | None:
    """The evaluator of a run, ``evaluator(params, network_state, key) -> metrics``
    (`make_evaluator`; ``None`` if evaluation is disabled): the network's
    ``eval()``-mode graph if ``config.deterministic``, else its training ``graphdef``.
    An environment that reads the training progress sees ``run_steps`` (the steps the
    run trains for) as ``training_step`` and progress 1.0. With ``randomization`` (for
    ``eval_env`` and ``config.n_envs``; pass it only with ``config.randomized``) each
    evaluation draws fresh randomized models."""
    if not config.enabled:
        return None
    return make_evaluator(
        eval_env,
        eval_graphdef(network) if config.deterministic else graphdef,
        n_envs=config.n_envs,
        max_episode_length=config.max_episode_length,
        mesh=mesh,
        training_step=run_steps,
        randomization=randomization,
    )


def write_back(network: nnx.Module, state: Any, mesh: Mesh | None) -> None:
    """Write a state's ``params`` and ``network_state`` into ``network`` (left in
    ``train()`` mode).

    Copies: the state's buffers may be donated if the caller keeps training from it.
    Off a mesh they are plain default-device arrays; on a mesh, gathered host copies.
    """
    variables = (state.params, state.network_state)
    if mesh is not None:
        variables = jax.tree.map(jnp.asarray, gather_state(variables))
    nnx.update(network, *jax.tree.map(jnp.copy, variables))
    network.train()


@dataclasses.dataclass(frozen=True)
class Prepared:
    """What an algorithm adds to a run once it is placed (`Algorithm.prepare`).

    Attributes:
        fields: The training state's fields beyond the shared ones (keyword arguments
            of `init_state`, e.g. the value normalizer's statistics).
        iteration: ``iteration(graphdef, optimization, mesh)`` builds the jitted body,
            ``(state, *call_args) -> (state, metrics)``, from the run's `Optimization`
            (its optimizer, learning-rate rule and, in a sweep, its own values of the
            swept config fields).
        call_args: Arguments every device call takes after the state (placed on the
            mesh), e.g. a teacher's variables; shared by the runs of a sweep.
    """

    fields: dict[str, Any]
    iteration: Callable[[nnx.GraphDef, Optimization, Mesh | None], Callable[..., tuple[Any, Any]]]
    call_args: tuple[Any, ...] = ()


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """An on-policy algorithm as `run` takes it: a frozen record, not a class to extend.

    Attributes:
        name: The trainer's name (the progress bar's label).
        config: Its `OnPolicyConfig` (sizes, optimizer, reset mode).
        prepare: ``prepare(env, mesh) -> Prepared``, called after the shared checks and
            the placement and before anything is built: the algorithm's own checks
            (raise there) and what it adds to the run.
        state_type: The training state's class.
        advantage_mode: What `check_env_network` checks the network's value heads for.
    """

    name: str
    config: OnPolicyConfig
    prepare: Callable[[Any, Mesh | None], Prepared]
    state_type: type = TrainState
    advantage_mode: str = "combined"


def run(
    algorithm: Algorithm,
    env: Any,
    network: nnx.Module,
    settings: RunSettings,
    *,
    eval_config: EvalConfig,
    seed: int,
    log_every_calls: int,
    video: VideoConfig | None = None,
    runs: Runs | None = None,
) -> LoopResult:
    """Train ``network`` with ``algorithm`` on ``env``: set up, place, build the state,
    resume, compile, drive the host loop (evaluation, video, checkpoints, stop
    requests) and write the trained variables back into ``network``.

    Args:
        algorithm: The `Algorithm`.
        env: The training environment.
        network: The network to train (updated in place at the end); with ``runs``, the
            first run's, the template of every run's (checks, graph, evaluation).
        settings: The resolved run options (`resolve_options`).
        eval_config: The periodic evaluation.
        seed: The run's seed: split into the keys of the initial state, the
            evaluations and (with ``video``) the videos. With ``runs``, each run's own
            seed is split so instead.
        log_every_calls: Log every this many device calls.
        video: The videos of the run (``None``: the algorithm records none).
        runs: ``K`` runs in one program (`Runs`, from `nnx_ppo.algorithms.sweeps`):
            the state gets a leading run axis and the iteration is vmapped over it;
            run ``i`` is the run this call would train alone with ``runs.seeds[i]``,
            the ``i``-th variables and values. ``network`` is not updated.

    Returns:
        The host loop's `LoopResult` (with ``runs``, per-run records).

    Raises:
        ValueError: With ``runs``, if the run spans several processes.
    """
    config = algorithm.config
    eval_env = settings.eval_env
    # Every argument, the placement and the networks, before anything is compiled.
    sharded = set_up(
        env, eval_env, network, config, eval_config,
        devices=settings.devices, mesh=settings.mesh, advantage_mode=algorithm.advantage_mode,
    )  # fmt: skip
    if runs is not None and sharded is not None and jax.process_count() > 1:
        raise ValueError(
            f"{algorithm.name} runs in one process; this is process {jax.process_index()} "
            f"of {jax.process_count()} (jax.distributed). Train the sweep on one host's "
            "devices."
        )
    prepared = algorithm.prepare(env, sharded)
    records = video is not None and video.enabled
    if records:
        check_video_env(eval_env, video=video)
    randomization, eval_randomization = run_randomizations(
        env, eval_env, settings.randomization_fn, config.n_envs, eval_config,
        redraw_every=settings.redraw_every,
    )  # fmt: skip
    evaluator_for = functools.partial(
        evaluator_of, eval_env, network, config=eval_config, mesh=sharded,
        run_steps=config.n_iterations * config.steps_per_iteration,
        randomization=eval_randomization,
    )  # fmt: skip
    call_args = prepared.call_args
    n_keys = 2 if video is None else 3

    if runs is None:
        # Split once; the jitted iteration works on (graphdef, state) from here on.
        init_key, eval_key, *video_key = jax.random.split(jax.random.PRNGKey(seed), n_keys)
        own = optimization(config)
        graphdef, state = init_state(
            env, network, own.optimizer, init_key,
            n_envs=config.n_envs, reset_mode=config.reset_mode, mesh=sharded,
            state_type=algorithm.state_type, randomization=randomization, **prepared.fields,
        )  # fmt: skip
        state = resume(settings.checkpoint, state, sharded)
        shardings = None if sharded is None else state_shardings(state, sharded)
        iteration = with_redraws(
            prepared.iteration(graphdef, own, sharded), env, randomization, config.reset_mode,
            sharded,
        )  # fmt: skip
        evaluation = evaluation_task(evaluator_for(graphdef), eval_key, eval_config)
    else:
        init_key, eval_key, *video_key = run_keys(runs.seeds, n_keys)
        graphdef = split_network(network)[0]
        state = init_runs(
            env, graphdef, runs, config, init_key, state_type=algorithm.state_type,
            randomization=randomization, fields=prepared.fields,
        )  # fmt: skip
        shardings = None if sharded is None else sweep_shardings(state, sharded)
        if shardings is not None:
            state = jax.device_put(state, shardings)
        state = resume_runs(settings.checkpoint, state, shardings)
        iteration = runs_iteration(
            lambda own: prepared.iteration(graphdef, own, sharded), config, env,
            randomization, sharded, len(call_args),
        )  # fmt: skip
        call_args = (dict(runs.hyperparameters), *call_args)
        evaluation = runs_evaluation(evaluator_for(graphdef), eval_key, runs.count, eval_config)
    train_call = make_train_call(
        iteration, config.iterations_per_call, shardings=shardings, n_args=len(call_args)
    )
    recording = None
    if records:
        assert video is not None
        recorder = make_video_recorder(eval_env, eval_graphdef(network), video)
        if runs is None:
            recording = _video_task(recorder, video, video_key[0], sharded)
        else:
            recording = runs_video(recorder, video_key[0], runs.count, video)
    loop = drive(
        state, lambda current: train_call(current, *call_args), config, settings,
        log_every_calls=log_every_calls, tasks=(evaluation, recording), mesh=sharded,
        description=algorithm.name, runs=None if runs is None else runs.count,
    )  # fmt: skip
    if runs is None:
        write_back(network, loop.state, sharded)
    return loop


def _video_task(
    recorder: Callable[..., str], video: VideoConfig, key: jax.Array, mesh: Mesh | None
) -> Periodic:
    """The run's videos as a `Periodic` (process 0): one episode of the state's
    variables, with ``key`` folded with the iteration."""

    def record(current: Any, at_iteration: int, at_step: int) -> None:
        params, network_state = current.params, current.network_state
        if mesh is not None and jax.process_count() > 1:
            # Process 0 alone records: on local copies of the replicated variables.
            params, network_state = gather_state((params, network_state))
        recorder(params, network_state, jax.random.fold_in(key, at_iteration), at_step)

    return Periodic(record, video.every_steps, primary_only=True)
