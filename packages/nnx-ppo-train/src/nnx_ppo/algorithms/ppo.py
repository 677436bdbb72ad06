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
import os
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh

from nnx_ppo.algorithms._host_loop import Periodic, evaluation_task, run_calls
from nnx_ppo.algorithms.config import PPOConfig, TrainConfig
from nnx_ppo.algorithms.distributed import (
    check_batch_divisible,
    gather_state,
    resolve_mesh,
    restore_checkpoint,
    state_shardings,
    uses_mesh,
)
from nnx_ppo.algorithms.evaluation import make_evaluator
from nnx_ppo.algorithms.iteration import (
    init_train_state,
    make_optimizer,
    make_train_call,
    make_training_iteration,
    split_network,
)
from nnx_ppo.algorithms.logging import LogFn
from nnx_ppo.algorithms.rollout import _ppo_output, network_step, reset_envs
from nnx_ppo.algorithms.types import TrainState
from nnx_ppo.networks.types import PPONetworkOutput

__all__ = ["CheckpointHook", "TrainResult", "check_env_network", "train_ppo"]


@runtime_checkable
class CheckpointHook(Protocol):
    """What ``train_ppo(..., checkpoint=...)`` calls; implemented by
    `Checkpointer`.

    ``restore`` is called once before training with a freshly initialised state as
    template and returns the state to resume from (or ``None`` to start fresh);
    ``save`` is called after every device call with the new state and the exact env
    step count, with ``final=True`` after the last one (the hook decides whether to
    write; it must write when ``final``). ``save`` must have read (copied) ``state``
    before it returns: the next device call donates the state's buffers. It should not
    write a state whose ``non_finite`` record is set (raise
    `NonFiniteError`).

    In a multi-process run ``restore`` and ``save`` are called on process 0 only, with
    host copies of the state (see `save_checkpoint`);
    an optional ``is_due(step, *, final)`` method lets the other processes skip
    gathering the state when no save is due.
    """

    def restore(self, template: TrainState) -> TrainState | None:
        """The state to resume from, or ``None``."""
        ...

    def save(
        self,
        state: TrainState,
        step: int,
        metrics: Mapping[str, float],
        *,
        final: bool = False,
    ) -> bool | None:
        """Save (or skip, per the hook's own policy) the state at ``step``."""
        ...


@dataclasses.dataclass(frozen=True)
class TrainResult:
    """What `train_ppo` returns.

    Attributes:
        state: The final `TrainState`.
        eval_history: ``[(step, eval_metrics), ...]`` in order.
        metrics: The last logged training metrics (and the last evaluation's), floats.
        total_steps: Env steps trained, an exact ``int``.
    """

    state: TrainState
    eval_history: list[tuple[int, dict[str, float]]]
    metrics: dict[str, float]
    total_steps: int


# --------------------------------------------------------------------------- checks


def _describe(tree: Any) -> str:
    return str(jax.tree.map(lambda x: tuple(x.shape), tree))


def check_env_network(
    env: Any, network: nnx.Module, n_envs: int = 2, *, advantage_mode: str = "combined"
) -> None:
    """Check that ``network`` can drive ``env``, without compiling anything.

    Traces (``jax.eval_shape``) one batched reset, one network call and one batched
    step, and compares the network's output with the environment's expectations.

    Args:
        env: The unbatched environment.
        network: The PPO network.
        n_envs: Batch size used for the check.
        advantage_mode: ``"per_key"`` also requires the action tree to match the reward
            tree.

    Raises:
        TypeError: If the network does not output a ``PPONetworkOutput``.
        ValueError: If the value tree does not match the reward tree, the actions do not
            match ``env.action_size``, or the network or ``env.step`` fails on the
            other's data; the message says which and shows the shapes.
    """
    graphdef, params, network_state = split_network(network)
    key = jax.random.PRNGKey(0)
    try:
        env_state = jax.eval_shape(lambda k: reset_envs(env, k, n_envs), key)
    except Exception as e:
        raise ValueError(f"env.reset failed under jax.vmap: {e}") from e
    try:
        carry = jax.eval_shape(lambda: network.initialize_state(n_envs))
    except Exception as e:
        raise ValueError(f"network.initialize_state({n_envs}) failed: {e}") from e

    def forward(p, s, c, obs):
        return network_step(graphdef, p, s, c, obs)[1]

    try:
        out = jax.eval_shape(forward, params, network_state, carry, env_state.obs)
    except Exception as e:
        raise ValueError(
            "the network failed on the environment's observation (batched shapes "
            f"{_describe(env_state.obs)}): {e}"
        ) from e
    if not isinstance(out.output, PPONetworkOutput):
        _ppo_output(out)  # raises the TypeError
    ppo: PPONetworkOutput = out.output

    reward, values = env_state.reward, ppo.value_estimates
    if jax.tree.structure(values) != jax.tree.structure(reward):  # type: ignore[operator]
        raise ValueError(
            f"the network's value estimates {_describe(values)} do not match the "
            f"environment's reward {_describe(reward)}: PPO needs one value estimate per "
            "reward leaf. Give the value port one head per reward key (e.g. "
            "Parallel({key: Dense(hidden, 1) for key in reward_keys})) or a single head "
            "for an array reward."
        )
    for v, r in zip(jax.tree.leaves(values), jax.tree.leaves(reward), strict=True):
        if v.shape != r.shape:
            raise ValueError(
                f"a value estimate has shape {v.shape} but the reward has {r.shape} "
                f"(batched over n_envs={n_envs}); the value head must output one scalar "
                "per environment ([B] or [B, 1])."
            )
    for ll in jax.tree.leaves(ppo.loglikelihoods):
        if ll.shape != (n_envs,):
            raise ValueError(
                f"a log-likelihood has shape {ll.shape}, expected ({n_envs},): one per "
                "environment (samplers sum over the action's event axes)."
            )

    action_size = getattr(env, "action_size", None)
    actions = ppo.actions
    expected: Any = None
    if isinstance(action_size, int):
        expected = (n_envs, action_size)
        ok = not isinstance(actions, Mapping) and getattr(actions, "shape", None) == expected
    elif isinstance(action_size, Mapping):
        expected = {k: (n_envs, int(v)) for k, v in action_size.items()}
        ok = isinstance(actions, Mapping) and set(actions) == set(expected)
        ok = ok and all(tuple(actions[k].shape) == expected[k] for k in expected)
    else:
        ok = True
    if not ok:
        raise ValueError(
            f"the network's actions {_describe(actions)} do not match the environment's "
            f"action_size={action_size!r} (expected batched shapes {expected}). Size the "
            "action head as 2 * action_size for a NormalTanhSampler (mean and std), with "
            "one sampler per key for dict actions."
        )
    action_tree, reward_tree = jax.tree.structure(ppo.loglikelihoods), jax.tree.structure(reward)
    if advantage_mode == "per_key" and action_tree != reward_tree:  # type: ignore[operator]
        raise ValueError(
            "advantage_mode='per_key' pairs each reward key with the same action key, but "
            f"the actions {_describe(actions)} and the reward {_describe(reward)} have "
            "different trees; use advantage_mode='combined'."
        )
    try:
        jax.eval_shape(jax.vmap(env.step), env_state, actions)
    except Exception as e:
        raise ValueError(
            f"env.step failed on the network's actions {_describe(actions)}: {e}"
        ) from e


# --------------------------------------------------------------------------- video


def _write_video(path: str, frames: Any, fps: float) -> None:
    import mediapy

    mediapy.write_video(path, frames, fps=fps)


def _make_video_recorder(env: Any, graphdef: nnx.GraphDef, config: TrainConfig):
    video = config.video
    if not callable(getattr(env, "render", None)):
        raise ValueError(
            "VideoConfig(enabled=True) needs an environment with render(trajectory, "
            f"height=, width=, camera=) (brax and MuJoCo Playground have one); "
            f"{type(env).__name__} has none."
        )
    fps = video.fps or (1.0 / float(env.dt) if hasattr(env, "dt") else 30.0)
    unwrapped = getattr(env, "unwrapped", env)
    pipeline = type(unwrapped).__module__.startswith("brax")

    @jax.jit
    def trajectory(params, network_state, key):
        model = nnx.merge(graphdef, params, network_state)
        carry = model.initialize_state(1)
        env_state = reset_envs(env, key, 1)

        def video_step(loop, _):
            net_state, env_s, net_carry = loop
            net_state, out = network_step(graphdef, params, net_state, net_carry, env_s.obs)
            next_env = jax.vmap(env.step)(env_s, _ppo_output(out).actions)
            return (net_state, next_env, out.next_state), next_env

        _, states = jax.lax.scan(
            video_step, (network_state, env_state, carry), None, length=video.episode_length
        )
        return states

    def record(params, network_state, key, step: int) -> str:
        states = jax.device_get(trajectory(params, network_state, key))
        frames_in = []
        for t in range(video.episode_length):
            s = jax.tree.map(lambda x, t=t: x[t, 0], states)
            frames_in.append(s.pipeline_state if pipeline else s)
        frames = env.render(frames_in, height=video.height, width=video.width, camera=video.camera)
        assert video.directory is not None
        os.makedirs(video.directory, exist_ok=True)
        path = os.path.join(video.directory, f"video_{step}.mp4")
        _write_video(path, frames, fps)
        return path

    return record


# --------------------------------------------------------------------------- train


def train_ppo(
    env: Any,
    networks: nnx.Module,
    config: TrainConfig | PPOConfig,
    *,
    log_fn: LogFn | None = None,
    eval_env: Any = None,
    progress: bool | None = None,
    jsonl_path: str | os.PathLike[str] | None = None,
    checkpoint: CheckpointHook | None = None,
    devices: int | Sequence[jax.Device] | None = None,
    mesh: Mesh | None = None,
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
        log_fn: Called as ``log_fn(metrics, step)`` after every ``log_every_calls``
            device calls and after each evaluation (see
            `nnx_ppo.algorithms.logging` for the names).
        eval_env: Environment for evaluation (default: ``env``). Use it to evaluate
            without reward scaling.
        progress: Show a progress bar: ``None`` (default) when the output is a
            terminal, or force ``True`` / ``False``.
        jsonl_path: Also append every log record to this JSONL file.
        checkpoint: A `CheckpointHook`, e.g. a
            `Checkpointer`: training resumes
            from what its ``restore`` returns, and it is offered the state after every
            device call and at the end (``final=True``). ``None`` saves nothing.
            A checkpoint resumes on any device count.
        devices: Devices to train on: ``None`` (default) for all of them
            (``jax.devices()``; one on a plain CPU), an ``int`` for the first that
            many, or a sequence of devices.
        mesh: Instead of ``devices``, a `jax.sharding.Mesh` with a ``"data"``
            axis (see `make_mesh`).

    Returns:
        A `TrainResult`. On several devices its ``state`` is laid out on the
        mesh; ``networks`` gets plain single-device copies.

    Raises:
        NonFiniteError: (`nnx_ppo.algorithms.faults`) If a loss, parameter or
            statistic became NaN or infinite: raised when the host next reads the state
            (at the next log or checkpoint), naming the iteration and the quantity; the
            diverged state is not saved.
        TypeError: If ``config`` is not a config object or the network's output is not a
            ``PPONetworkOutput``.
        ValueError: If the network and the environment do not fit together (checked
            before anything is compiled; see `check_env_network`), if
            ``n_envs`` is not a multiple of ``n_minibatches`` times the number of
            devices, or if ``devices`` / ``mesh`` are invalid (see
            `resolve_mesh`).
    """
    if isinstance(config, PPOConfig):
        config = TrainConfig(ppo=config)
    if not isinstance(config, TrainConfig):
        raise TypeError(
            f"config={config!r} must be a TrainConfig or a PPOConfig, e.g. "
            "TrainConfig(ppo=PPOConfig(n_envs=256))."
        )
    ppo = config.ppo
    eval_env = env if eval_env is None else eval_env
    # One default device and one process: no mesh at all (plain arrays).
    run_mesh = resolve_mesh(devices, mesh)
    sharded = run_mesh if uses_mesh(run_mesh) else None
    if sharded is not None:
        check_batch_divisible(ppo.n_envs, sharded, n_minibatches=ppo.n_minibatches)

    # Check env and network against each other before compiling anything.
    networks.train()
    check_env_network(env, networks, ppo.n_envs, advantage_mode=ppo.advantage_mode)

    # Split once; the jitted iteration works on (graphdef, state) from here on.
    key = jax.random.PRNGKey(config.seed)
    init_key, eval_key, video_key = jax.random.split(key, 3)
    optimizer = make_optimizer(ppo)
    graphdef, state = init_train_state(env, networks, ppo, optimizer, init_key, mesh=sharded)
    if checkpoint is not None:
        restored = restore_checkpoint(checkpoint, state, sharded)
        if restored is not None:
            state = restored
    train_call = make_train_call(
        make_training_iteration(env, graphdef, optimizer, ppo, mesh=sharded),
        ppo.iterations_per_call,
        shardings=None if sharded is None else state_shardings(state, sharded),
    )
    networks.eval()
    try:
        eval_graphdef = split_network(networks)[0]
    finally:
        networks.train()
    deterministic_graphdef = eval_graphdef if config.eval.deterministic else graphdef
    evaluator = (
        make_evaluator(
            eval_env,
            deterministic_graphdef,
            n_envs=config.eval.n_envs,
            max_episode_length=config.eval.max_episode_length,
            mesh=sharded,
        )
        if config.eval.enabled
        else None
    )
    recorder = (
        _make_video_recorder(eval_env, eval_graphdef, config) if config.video.enabled else None
    )

    def record_video(current: TrainState, at_iteration: int, at_step: int) -> None:
        assert recorder is not None
        params, network_state = current.params, current.network_state
        if sharded is not None and jax.process_count() > 1:
            # Process 0 alone records: on local copies of the replicated variables.
            params, network_state = gather_state((params, network_state))
        recorder(params, network_state, jax.random.fold_in(video_key, at_iteration), at_step)

    loop = run_calls(
        state,
        train_call,
        steps_per_iteration=ppo.steps_per_iteration,
        iterations_per_call=ppo.iterations_per_call,
        n_iterations=ppo.n_iterations,
        log_every_calls=config.log_every_calls,
        log_level=ppo.log_level,
        evaluation=evaluation_task(evaluator, eval_key, config.eval),
        video=None
        if recorder is None
        else Periodic(record_video, config.video.every_steps, primary_only=True),
        checkpoint=checkpoint,
        mesh=sharded,
        log_fn=log_fn,
        jsonl_path=jsonl_path,
        progress=progress,
        description="train_ppo",
    )
    state = loop.state

    # Write the trained state back into the user's network (copies: the returned
    # state's buffers may be donated if the caller keeps training from it; off a mesh:
    # plain default-device arrays).
    variables = (state.params, state.network_state)
    if sharded is not None:
        variables = jax.tree.map(jnp.asarray, gather_state(variables))
    nnx.update(networks, *jax.tree.map(jnp.copy, variables))
    networks.train()
    return TrainResult(
        state=state, eval_history=loop.eval_history, metrics=loop.metrics, total_steps=loop.step
    )
