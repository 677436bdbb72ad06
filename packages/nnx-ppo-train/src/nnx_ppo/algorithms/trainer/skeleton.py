"""The run around the jitted iteration, shared by `train_ppo`, `train_distillation` and
`train_many`.

A trainer describes its algorithm as an `Algorithm`, a small frozen record of what is
particular to it (its state type, and a ``prepare`` function giving the state's extra
fields, the iteration factory and the call's extra arguments), and hands it to `run`
with the run's config (a `RunConfig`: ``config.algorithm``, ``eval``, ``video``,
``seed``, ``log_every_calls``), which does the rest the same way for every algorithm::

    settings = resolve_options("train_ppo", options, env=env)  # the run options
    mesh = set_up(env, settings.eval_env, network, config, ...)  # placement (once),
                                                               # networks vs the envs
    prepared = algorithm.prepare(env, config.algorithm, mesh)  # the algorithm's checks
    graphdef, state = init_state(...)                          # the algorithm's state
    state = resume(settings.checkpoint, state, mesh)           # the checkpoint's
    call = make_train_call(iteration, ...)                     # jitted, donated
    loop = run_calls(state, call, ...)                         # the host loop:
                                                               # evaluation, video,
                                                               # checkpoints, stop
    write_back(network, loop.state, mesh)                      # into the network

An algorithm is written for one run. With ``runs=Runs(...)`` (`train_many`) the same
steps build ``K`` runs in one program: the state gets a leading run axis, the
iteration is vmapped over it with run ``i``'s config holding its own traced values of
the swept fields (`OnPolicyRun.with_values`), the evaluations and videos are taken per
run, and run ``i`` is the run the call would train alone with its own seed, variables
and values. The run options and their resolution are `nnx_ppo.algorithms.trainer.options`
(`Host` is re-exported here).
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

from nnx_ppo.algorithms._config_base import OnPolicyRun, RunConfig
from nnx_ppo.algorithms.config import EvalConfig
from nnx_ppo.algorithms.core.checks import check_env_network, check_reset_mode
from nnx_ppo.algorithms.core.distributed import (
    check_batch_divisible,
    commit_like,
    gather_state,
    replicated_sharding,
    resolve_mesh,
    restore_checkpoint,
    state_shardings,
    uses_mesh,
)
from nnx_ppo.algorithms.core.mirroring import check_symmetry
from nnx_ppo.algorithms.core.phases import with_redraws
from nnx_ppo.algorithms.core.randomization import Randomization, run_randomizations
from nnx_ppo.algorithms.core.rollout import eval_graphdef, split_network
from nnx_ppo.algorithms.core.schedules import Optimization, optimization
from nnx_ppo.algorithms.core.trees import copied
from nnx_ppo.algorithms.observe.evaluation import make_evaluator
from nnx_ppo.algorithms.observe.video import check_video_env, make_video_recorder
from nnx_ppo.algorithms.trainer.host_loop import LoopResult, run_calls
from nnx_ppo.algorithms.trainer.initial_state import init_state
from nnx_ppo.algorithms.trainer.options import Host, RunSettings
from nnx_ppo.algorithms.trainer.run_axis import Runs, init_runs, run_keys, runs_iteration
from nnx_ppo.algorithms.trainer.tasks import evaluation_task, video_task
from nnx_ppo.algorithms.types import Metrics, TrainState

__all__ = [
    "Algorithm",
    "Host",
    "Prepared",
    "RunConfig",
    "RunResult",
    "Runs",
    "evaluator_of",
    "make_train_call",
    "place_run",
    "resume",
    "run",
    "set_up",
    "with_initial_eval",
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


def with_initial_eval(config: EvalConfig, initial_eval: bool | None) -> EvalConfig:
    """``config`` with ``at_start`` set to the run option ``initial_eval`` (nnx-ppo's
    name; ``None``: ``config`` unchanged).

    Raises:
        ValueError: If ``initial_eval=True`` while ``config.enabled`` is false.
    """
    if initial_eval is None:
        return config
    if initial_eval and not config.enabled:
        raise ValueError(
            "initial_eval=True asks for an evaluation at step 0, but the config's "
            "EvalConfig(enabled=False) turns evaluation off; enable it "
            "(EvalConfig(enabled=True, ...)) or leave initial_eval out."
        )
    return dataclasses.replace(config, at_start=initial_eval)


def set_up(
    env: Any,
    eval_env: Any,
    network: nnx.Module,
    config: OnPolicyRun,
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
            ``eval_env`` (or the config's symmetry, `check_symmetry`), or ``env`` draws
            its episodes at reset (a cognitive task) and ``config.reset_mode`` is not
            ``"fresh"``.
    """
    sharded = place_run(devices, mesh, n_envs=config.n_envs, n_minibatches=config.n_minibatches)
    network.train()
    check_reset_mode(env, config.reset_mode)
    check_env_network(env, network, config.n_envs, advantage_mode=advantage_mode)
    if getattr(config, "symmetry", None) is not None:  # its mirrors against env and network
        check_symmetry(env, network, config.symmetry, config.n_envs)
    if eval_env is not env and eval_config.enabled:
        check_env_network(eval_env, network, eval_config.n_envs, env_name="eval_env")
    return sharded


def resume(checkpoint: Any, state: Any, mesh: Mesh | None, *, axis: int = 0) -> Any:
    """The state to start from: the checkpoint's (placed like ``state``; ``axis=1`` for
    a sweep's, `restore_checkpoint`), or ``state``. Without a mesh either is committed
    to its device (`commit_like`), so a fresh and a resumed run compile one program:
    the same in-memory and persistent-cache entries."""
    if checkpoint is not None:
        restored = restore_checkpoint(checkpoint, state, mesh, axis=axis)
        if restored is not None:
            return restored
    return state if mesh is not None else commit_like(state, state)


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
    nnx.update(network, *copied(variables))
    network.train()


@dataclasses.dataclass(frozen=True)
class Prepared:
    """What an algorithm adds to a run once it is placed (`Algorithm.prepare`).

    Attributes:
        fields: The training state's fields beyond the shared ones (keyword arguments
            of `init_state`, e.g. the value normalizer's statistics).
        iteration: ``iteration(graphdef, config, optimization, mesh)`` builds the
            jitted body, ``(state, *call_args) -> (state, metrics)``, for one run: its
            algorithm config (in a sweep, holding the run's own traced values of the
            swept fields, `OnPolicyRun.with_values`) and its `Optimization` (built from
            that config).
        call_args: Arguments every device call takes after the state (placed on the
            mesh), e.g. a teacher's variables; shared by the runs of a sweep.
    """

    fields: dict[str, Any]
    iteration: Callable[
        [nnx.GraphDef, Any, Optimization, Mesh | None], Callable[..., tuple[Any, Any]]
    ]
    call_args: tuple[Any, ...] = ()


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """An on-policy algorithm as `run` takes it: a frozen record, not a class to extend.

    Attributes:
        name: The trainer's name (the progress bar's label).
        prepare: ``prepare(env, config, mesh) -> Prepared``, with the run's algorithm
            config (``config.algorithm`` of the `RunConfig`), called after the shared
            checks and the placement and before anything is built: the algorithm's own
            checks (raise there) and what it adds to the run.
        state_type: The training state's class.
    """

    name: str
    prepare: Callable[[Any, Any, Mesh | None], Prepared]
    state_type: type = TrainState


def run(
    algorithm: Algorithm,
    env: Any,
    network: nnx.Module,
    config: RunConfig,
    settings: RunSettings,
    *,
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
        config: The run's `RunConfig` (`TrainConfig`, `DistillationConfig`): its
            ``algorithm`` config (sizes, optimizer, reset mode; its ``advantage_mode``,
            if it has one, is what the network's value heads are checked for), its
            ``eval``, ``video`` and ``log_every_calls``, and its ``seed``, split into
            the keys of the initial state, the evaluations and the videos. With
            ``runs``, the first run's: each run's own seed is split so instead.
        settings: The resolved run options (`resolve_options`).
        runs: ``K`` runs in one program (`Runs`, from `nnx_ppo.algorithms.sweeps.many`):
            the state gets a leading run axis and the iteration is vmapped over it;
            run ``i`` is the run this call would train alone with ``runs.seeds[i]``,
            the ``i``-th variables and values. ``network`` is not updated.

    Returns:
        The host loop's `LoopResult` (with ``runs``, per-run records).

    Raises:
        ValueError: With ``runs``, if the run spans several processes.
    """
    algo, eval_config, video = config.algorithm, config.eval, config.video
    eval_config = with_initial_eval(eval_config, settings.initial_eval)
    eval_env = settings.eval_env
    # Every argument, the placement and the networks, before anything is compiled.
    sharded = set_up(
        env, eval_env, network, algo, eval_config,
        devices=settings.devices, mesh=settings.mesh,
        advantage_mode=getattr(algo, "advantage_mode", "combined"),
    )  # fmt: skip
    if runs is not None and sharded is not None and jax.process_count() > 1:
        raise ValueError(
            f"{algorithm.name} runs in one process; this is process {jax.process_index()} "
            f"of {jax.process_count()} (jax.distributed). Train the sweep on one host's "
            "devices."
        )
    prepared = algorithm.prepare(env, algo, sharded)
    if video.enabled:
        check_video_env(eval_env, video=video)
    randomization, eval_randomization = run_randomizations(
        env, eval_env, settings.randomization_fn, algo.n_envs, eval_config,
        redraw_every=settings.redraw_every,
    )  # fmt: skip
    evaluator_for = functools.partial(
        evaluator_of, eval_env, network, config=eval_config, mesh=sharded,
        run_steps=algo.n_iterations * algo.steps_per_iteration,
        randomization=eval_randomization,
    )  # fmt: skip
    call_args = prepared.call_args
    count = None if runs is None else runs.count

    if runs is None:
        # Split once; the jitted iteration works on (graphdef, state) from here on.
        init_key, eval_key, video_key = jax.random.split(jax.random.PRNGKey(config.seed), 3)
        own = optimization(algo)
        graphdef, state = init_state(
            env, network, own.optimizer, init_key,
            n_envs=algo.n_envs, reset_mode=algo.reset_mode, mesh=sharded,
            state_type=algorithm.state_type, randomization=randomization, **prepared.fields,
        )  # fmt: skip
        iteration = with_redraws(
            prepared.iteration(graphdef, algo, own, sharded), env, randomization,
            algo.reset_mode, sharded,
        )  # fmt: skip
    else:
        # The same with a leading run axis: run i's keys, variables and values.
        init_key, eval_key, video_key = run_keys(runs.seeds, 3)
        graphdef = split_network(network)[0]
        state = init_runs(
            env, graphdef, runs, algo, init_key, state_type=algorithm.state_type,
            randomization=randomization, fields=prepared.fields,
        )  # fmt: skip
        if sharded is not None:
            state = jax.device_put(state, state_shardings(state, sharded, axis=1))
        iteration = runs_iteration(
            lambda run_config, own: prepared.iteration(graphdef, run_config, own, sharded),
            algo, env, randomization, sharded, len(call_args),
        )  # fmt: skip
        call_args = (dict(runs.values), *call_args)
    axis = 0 if runs is None else 1
    state = resume(settings.checkpoint, state, sharded, axis=axis)
    shardings = None if sharded is None else state_shardings(state, sharded, axis=axis)
    train_call = make_train_call(
        iteration, algo.iterations_per_call, shardings=shardings, n_args=len(call_args)
    )
    evaluation = evaluation_task(evaluator_for(graphdef), eval_key, eval_config, count)
    recording = None
    if video.enabled:
        recorder = make_video_recorder(eval_env, eval_graphdef(network), video)
        recording = video_task(recorder, video, video_key, sharded, count)
    loop = run_calls(
        state,
        lambda current: train_call(current, *call_args),
        steps_per_iteration=algo.steps_per_iteration,
        iterations_per_call=algo.iterations_per_call,
        n_iterations=algo.n_iterations,
        log_every_calls=config.log_every_calls,
        log_level=algo.log_level,
        tasks=[task for task in (evaluation, recording, *settings.tasks) if task is not None],
        checkpoint=settings.checkpoint,
        mesh=sharded,
        log_fn=settings.log_fn,
        jsonl_path=settings.jsonl_path,
        progress=settings.progress,
        description=algorithm.name,
        runs=count,
        stop=settings.stop,
    )
    if runs is None:
        write_back(network, loop.state, sharded)
    return loop


_PER_EPISODE = ("rollout/episode_reward", "rollout/episode_length")


def _aggregate(metrics: Metrics) -> Metrics:
    """Combine ``[K]``-stacked iteration metrics: means, except that episode counts and
    the ``diagnostics/*`` counts add up, per-episode means are weighted by the number
    of episodes of each iteration, and the learning rate is the last iteration's."""
    out = {
        k: jnp.sum(v, axis=0) if k.startswith("diagnostics/") else jnp.mean(v, axis=0)
        for k, v in metrics.items()
    }
    if "train/learning_rate" in metrics:  # the rate the call ended with
        out["train/learning_rate"] = metrics["train/learning_rate"][-1]
    if "rollout/episodes" in metrics:
        # Summed over the iterations only: a sweep's metrics are [K_iterations, runs].
        counts = metrics["rollout/episodes"]
        total = jnp.sum(counts, axis=0)
        out["rollout/episodes"] = total
        for name in _PER_EPISODE:
            if name in metrics:
                weighted = jnp.sum(jnp.where(counts > 0, metrics[name] * counts, 0.0), axis=0)
                out[name] = jnp.where(total > 0, weighted / jnp.maximum(total, 1.0), jnp.nan)
    return out


def make_train_call(
    training_iteration: Callable[..., tuple[Any, Metrics]],
    iterations_per_call: int = 1,
    *,
    shardings: Any = None,
    n_args: int = 0,
) -> Callable[..., tuple[Any, Metrics]]:
    """Jit ``iterations_per_call`` iterations into one device call, donating the state.

    Args:
        training_iteration: From `make_training_iteration`:
            ``training_iteration(state, *args) -> (state, metrics)``.
        iterations_per_call: Iterations per call (a ``lax.scan`` if > 1).
        shardings: The state's shardings on a mesh
            (`state_shardings`): the call takes and
            returns the state laid out so, takes ``args`` replicated, and returns
            replicated metrics. ``None``: wherever the state is.
        n_args: The number of arguments after the state (not donated, e.g. the
            teacher's variables in distillation: inputs, not baked-in constants).

    Returns:
        ``train_call(state, *args) -> (state, metrics)``; the metrics are averaged over
        the call's iterations (``rollout/episodes`` is summed and the per-episode means
        are weighted by it). The input state's buffers are donated: do not reuse it.
    """

    def train_call(state: Any, *args: Any) -> tuple[Any, Metrics]:
        if iterations_per_call == 1:
            return training_iteration(state, *args)
        state, metrics = jax.lax.scan(
            lambda s, _: training_iteration(s, *args), state, None, length=iterations_per_call
        )
        return state, _aggregate(metrics)

    if shardings is None:
        return jax.jit(train_call, donate_argnums=0)
    replicated = replicated_sharding(jax.tree.leaves(shardings)[0].mesh)
    return jax.jit(
        train_call,
        donate_argnums=0,
        in_shardings=(shardings, *[replicated] * n_args),
        out_shardings=(shardings, replicated),
    )
