"""``train_ppo``: PPO for stateful NNX networks on batched JAX environments.

Examples:
    >>> from flax import nnx
    >>> from nnx_ppo.algorithms.config import EvalConfig, PPOConfig, TrainConfig
    >>> from nnx_ppo.envs import PointMass
    >>> from nnx_ppo.networks.factories import make_mlp_actor_critic
    >>> from nnx_ppo.wrappers import EpisodeWrapper
    >>> env = EpisodeWrapper(PointMass(), episode_length=20)
    >>> nets = make_mlp_actor_critic(2, 2, (16,), (16,), rngs=nnx.Rngs(0))
    >>> config = TrainConfig(
    ...     ppo=PPOConfig(n_envs=8, rollout_length=10, n_minibatches=2, total_steps=160),
    ...     eval=EvalConfig(n_envs=4, max_episode_length=20),
    ... )
    >>> result = train_ppo(env, nets, config, progress=False)
    >>> result.total_steps, [step for step, _ in result.eval_history]
    (160, [0, 160])

After training, ``nets`` holds the trained parameters and statistics: call
``nets.eval()`` and run it.

By default a run uses every device (``devices=None``): the environments are sharded
over them and the parameters replicated (see `nnx_ppo.algorithms.distributed`).
On a plain CPU that is a single device, and nothing is sharded.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Unpack

import jax
from flax import nnx

from nnx_ppo.algorithms._host_loop import Periodic
from nnx_ppo.algorithms.checks import check_env_network
from nnx_ppo.algorithms.config import PPOConfig, TrainConfig
from nnx_ppo.algorithms.distributed import gather_state
from nnx_ppo.algorithms.hooks import CheckpointHook
from nnx_ppo.algorithms.iteration import (
    make_optimizer,
    make_training_iteration,
    ppo_state_fields,
)
from nnx_ppo.algorithms.logging import LogFn
from nnx_ppo.algorithms.options import RunOptions, resolve_options
from nnx_ppo.algorithms.phases import init_state, with_redraws
from nnx_ppo.algorithms.randomization import run_randomizations
from nnx_ppo.algorithms.rollout import eval_graphdef
from nnx_ppo.algorithms.trainer import (
    RunResult,
    as_train_config,
    compile_call,
    drive,
    evaluation_of,
    resume,
    set_up,
    write_back,
)
from nnx_ppo.algorithms.types import TrainState
from nnx_ppo.algorithms.video import check_video_env, make_video_recorder

# CheckpointHook and check_env_network live in their own modules (hooks, checks) and
# are re-exported here, where they have always been importable from.
__all__ = ["CheckpointHook", "TrainResult", "check_env_network", "train_ppo"]


@dataclasses.dataclass(frozen=True)
class TrainResult(RunResult):
    """What `train_ppo` returns (the fields of `RunResult`).

    Attributes:
        state: The final `TrainState`.
        eval_history: ``[(step, eval_metrics), ...]`` of the evaluations this call ran,
            in order (see `RunResult`).
        metrics: The last logged training metrics (and the last evaluation's), floats.
        total_steps: Env steps trained, an exact ``int``.
    """


def train_ppo(
    env: Any,
    networks: nnx.Module,
    config: TrainConfig | PPOConfig,
    **options: Unpack[RunOptions[LogFn]],
) -> TrainResult:
    """Train a stateful PPO network.

    The network is split once; each device call runs ``iterations_per_call`` jitted
    iterations (rollout, advantages, epochs of minibatch updates, statistics update;
    see `nnx_ppo.algorithms.iteration`) on the donated training state. Between
    calls the host logs, evaluates and checkpoints. At the end the trained state is
    written back into ``networks`` (left in ``train()`` mode).

    On several devices (``devices`` / ``mesh``) the environments, carries and rollout
    are sharded along the mesh's ``"data"`` axis and the parameters, optimizer state
    and statistics replicated; gradients and statistics are reduced across devices,
    so the result equals a one-device run up to floating-point reduction order (see
    `nnx_ppo.algorithms.distributed`). After ``jax.distributed.initialize()``
    the run spans every process's devices; each process steps its own environments,
    and only process 0 calls ``log_fn``, writes ``jsonl_path``, shows the progress
    bar, records videos and has ``checkpoint`` write (every process must call
    ``train_ppo`` with the same arguments).

    Args:
        env: An unbatched environment with ``reset(key)`` and ``step(state, action)``
            (ours, brax's or MuJoCo Playground's), wrapped in
            `EpisodeWrapper` for a time limit. Truncation is
            read from ``state.info["truncation"]``.
        networks: A `StatefulModule` whose output is a
            `PPONetworkOutput`, e.g. from
            `make_mlp_actor_critic`.
        config: A `TrainConfig`, or a bare
            `PPOConfig` (default evaluation).
        **options: The run options, `RunOptions`: ``log_fn``, ``eval_env``,
            ``progress``, ``jsonl_path``, ``checkpoint``, ``devices``, ``mesh``,
            ``randomization_fn`` and ``redraw_every`` (each documented there with its
            default), e.g. ``train_ppo(env, networks, config, log_fn=writer,
            progress=False)``.

    Returns:
        A `TrainResult`. On several devices its ``state`` is laid out on the
        mesh; ``networks`` gets plain single-device copies.

    Raises:
        NonFiniteError: (`nnx_ppo.algorithms.faults`) If a loss, parameter or
            statistic became NaN or infinite: raised when the host next reads the state
            (at the next log or checkpoint), naming the iteration and the quantity; the
            diverged state is not saved.
        TypeError: If ``config`` is not a config object, the network's output is not a
            ``PPONetworkOutput``, an option is not a run option (`resolve_options`),
            or ``log_fn``, ``progress``, ``jsonl_path`` or ``checkpoint`` is of the
            wrong kind (a path as ``checkpoint`` is answered with the
            ``Checkpointer(...)`` to pass; see `check_run_arguments`).
        ValueError: If the network does not fit ``env`` or ``eval_env`` (checked
            before anything is compiled; see `check_env_network`), if ``eval_env``
            cannot render a requested video, if
            ``n_envs`` is not a multiple of ``n_minibatches`` times the number of
            devices, if ``devices`` / ``mesh`` are invalid (see
            `resolve_mesh`), or if ``randomization_fn`` does not fit ``env``'s model
            (see `make_randomization`; an environment without a model is a
            ``TypeError``).
    """
    config = as_train_config(config)
    ppo = config.ppo

    # Every argument, the placement and the networks, before anything is compiled.
    run = resolve_options("train_ppo", options, env=env)
    eval_env = run.eval_env
    sharded = set_up(
        env, eval_env, networks, ppo, config.eval,
        devices=run.devices, mesh=run.mesh, advantage_mode=ppo.advantage_mode,
    )  # fmt: skip
    if config.video.enabled:
        check_video_env(eval_env, video=config.video)
    randomization, eval_randomization = run_randomizations(
        env, eval_env, run.randomization_fn, ppo.n_envs, config.eval,
        redraw_every=run.redraw_every,
    )  # fmt: skip

    # Split once; the jitted iteration works on (graphdef, state) from here on.
    key = jax.random.PRNGKey(config.seed)
    init_key, eval_key, video_key = jax.random.split(key, 3)
    optimizer = make_optimizer(ppo)
    graphdef, state = init_state(
        env, networks, optimizer, init_key,
        n_envs=ppo.n_envs, reset_mode=ppo.reset_mode, mesh=sharded,
        randomization=randomization, **ppo_state_fields(env, ppo),
    )  # fmt: skip
    state = resume(run.checkpoint, state, sharded)
    iteration = make_training_iteration(env, graphdef, optimizer, ppo, mesh=sharded)
    iteration = with_redraws(iteration, env, randomization, ppo.reset_mode, sharded)
    train_call = compile_call(iteration, state, ppo, sharded)
    video = None
    if config.video.enabled:
        recorder = make_video_recorder(eval_env, eval_graphdef(networks), config.video)

        def record_video(current: TrainState, at_iteration: int, at_step: int) -> None:
            params, network_state = current.params, current.network_state
            if sharded is not None and jax.process_count() > 1:
                # Process 0 alone records: on local copies of the replicated variables.
                params, network_state = gather_state((params, network_state))
            recorder(params, network_state, jax.random.fold_in(video_key, at_iteration), at_step)

        video = Periodic(record_video, config.video.every_steps, primary_only=True)

    evaluation = evaluation_of(
        eval_env, networks, graphdef, config.eval, eval_key, sharded,
        run_steps=ppo.n_iterations * ppo.steps_per_iteration, randomization=eval_randomization,
    )  # fmt: skip
    loop = drive(
        state, train_call, ppo, run, log_every_calls=config.log_every_calls,
        evaluation=evaluation, video=video, mesh=sharded, description="train_ppo",
    )  # fmt: skip
    write_back(networks, loop.state, sharded)
    return TrainResult(loop.state, loop.eval_history, loop.metrics, loop.step, loop.stopped)
