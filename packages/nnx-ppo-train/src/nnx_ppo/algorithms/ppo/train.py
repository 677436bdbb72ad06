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
over them and the parameters replicated (see `nnx_ppo.algorithms.core.distributed`).
On a plain CPU that is a single device, and nothing is sharded.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Unpack

from flax import nnx

from nnx_ppo.algorithms.config import PPOConfig, TrainConfig
from nnx_ppo.algorithms.core.checks import check_env_network
from nnx_ppo.algorithms.core.hooks import CheckpointHook
from nnx_ppo.algorithms.core.logging import LogFn
from nnx_ppo.algorithms.core.schedules import Optimization
from nnx_ppo.algorithms.ppo.iteration import make_training_iteration, ppo_state_fields
from nnx_ppo.algorithms.trainer.options import RunOptions, resolve_options
from nnx_ppo.algorithms.trainer.skeleton import Algorithm, Prepared, RunResult, run
from nnx_ppo.algorithms.types import TrainState

# CheckpointHook and check_env_network live in their own modules (hooks, checks) and
# are re-exported here, where they have always been importable from.
__all__ = [
    "CheckpointHook",
    "TrainResult",
    "as_train_config",
    "check_env_network",
    "ppo_algorithm",
    "train_ppo",
]


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
    see `nnx_ppo.algorithms.ppo.iteration`) on the donated training state. Between
    calls the host logs, evaluates and checkpoints. At the end the trained state is
    written back into ``networks`` (left in ``train()`` mode).

    On several devices (``devices`` / ``mesh``) the environments, carries and rollout
    are sharded along the mesh's ``"data"`` axis and the parameters, optimizer state
    and statistics replicated; gradients and statistics are reduced across devices,
    so the result equals a one-device run up to floating-point reduction order (see
    `nnx_ppo.algorithms.core.distributed`). After ``jax.distributed.initialize()``
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
        NonFiniteError: (`nnx_ppo.algorithms.core.faults`) If a loss, parameter or
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
    settings = resolve_options("train_ppo", options, env=env)
    loop = run(ppo_algorithm(), env, networks, config, settings)
    return TrainResult(loop.state, loop.eval_history, loop.metrics, loop.step, loop.stopped)


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


def ppo_algorithm() -> Algorithm:
    """PPO as `trainer.run` takes it: the `TrainState` with ``value_stats`` if the run's
    config normalizes the values, and `make_training_iteration` for one run's config
    and `Optimization`.

    Examples:
        >>> ppo_algorithm().name
        'train_ppo'
    """

    def prepare(env: Any, config: PPOConfig, mesh: Any) -> Prepared:
        def iteration(graphdef: nnx.GraphDef, run: PPOConfig, own: Optimization, mesh: Any) -> Any:
            return make_training_iteration(
                env, graphdef, own.optimizer, run, mesh=mesh, learning_rate=own.learning_rate
            )

        return Prepared(fields=ppo_state_fields(env, config), iteration=iteration)

    return Algorithm("train_ppo", prepare, state_type=TrainState)
