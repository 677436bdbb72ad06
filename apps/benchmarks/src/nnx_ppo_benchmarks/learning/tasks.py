"""The suite's tasks: plain data here, environments built in the child processes.

Every task is run by every implementation through the same code path: the child
builds the unwrapped environment with :func:`make_env` (pure JAX, no nnx-ppo import),
then applies its own library's episode and reward-scaling wrappers, as a user of that
library would.

- ``cartpole``: MuJoCo Playground ``CartpoleBalance`` (``impl="jax"``), full
  observation (cart position, pole cos/sin, cart and pole velocities): the speed
  benchmark's task, where memory is not needed.
- ``cartpole_novel``: the same with both velocity entries removed (3 of 5 entries).
- ``pendulum_novel``: brax ``inverted_pendulum`` (backend ``generalized``) with the
  velocities removed (cart position and pole angle only).
- ``memory_d2`` / ``memory_d6``: this workspace's ``MemoryTask`` (reproduce the cue
  seen 2 or 6 steps ago; a memoryless policy earns 0).
- ``memory_chain``: gymnax's bsuite ``MemoryChain`` (a context bit shown at the first
  step must be reported by a discrete action 10 steps later; +1 or -1), with
  discrete actions. nnx-ppo 0.3.0 has no discrete-action sampler, so only ours runs it.
- ``pendulum`` / ``pendulum_lag``: brax ``inverted_pendulum`` (full observation) without
  and behind a random actuation latency (`nnx_ppo.wrappers.Latency`: each episode's
  action lag drawn in ``[0, 3]`` steps). Each final policy is also evaluated on the
  other task (``cross_eval``): a policy trained without lag, run on the slow plant, and
  the converse. Ours only (nnx-ppo 0.3.0 has no ``Latency``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = [
    "LR_SCHEDULES",
    "TASKS",
    "ObservationMask",
    "Task",
    "lr_schedule",
    "make_env",
    "stagger_steps",
    "staggered",
]


@dataclasses.dataclass(frozen=True)
class Task:
    """One learning problem.

    Attributes:
        name: Key on the command line and in the results.
        description: One line for the report.
        source: ``"playground"``, ``"brax"``, ``"memory"`` or ``"gymnax"``.
        env_name: Environment name within the source.
        keep: Observation entries kept (``None``: all): the velocity mask.
        episode_length: Time limit (training and evaluation).
        total_steps: Training budget in env steps (rounded to whole evaluation
            chunks by the runner).
        n_evals: Evaluations during training (plus one before it).
        discrete: Discrete actions (``CategoricalSampler``).
        options: Keyword arguments of the environment's constructor.
        memory_needed: Whether a memoryless policy is provably or practically limited.
        action_lag: ``(low, high)``: the environment is behind `nnx_ppo.wrappers.Latency`
            with this action lag (drawn per episode); ``None``: no latency.
        cross_eval: Other tasks (same observations and actions) whose evaluation
            environment each final policy is also evaluated on.
    """

    name: str
    description: str
    source: str
    env_name: str
    keep: tuple[int, ...] | None = None
    episode_length: int = 1000
    total_steps: int = 1_024_000
    n_evals: int = 8
    discrete: bool = False
    options: tuple[tuple[str, Any], ...] = ()
    memory_needed: bool = True
    action_lag: tuple[int, int] | None = None
    cross_eval: tuple[str, ...] = ()


TASKS: dict[str, Task] = {
    t.name: t
    for t in (
        Task(
            "cartpole",
            "Playground CartpoleBalance, full observation",
            "playground",
            "CartpoleBalance",
            memory_needed=False,
        ),
        Task(
            "cartpole_novel",
            "Playground CartpoleBalance, velocities removed (obs 3 of 5)",
            "playground",
            "CartpoleBalance",
            keep=(0, 1, 2),
        ),
        Task(
            "pendulum_novel",
            "brax inverted_pendulum, velocities removed (obs 2 of 4)",
            "brax",
            "inverted_pendulum",
            keep=(0, 1),
            total_steps=307_200,
        ),
        *(
            Task(
                f"memory_d{delay}",
                f"MemoryTask: reproduce the cue of {delay} steps ago (episodes of 100)",
                "memory",
                "MemoryTask",
                episode_length=100,
                total_steps=204_800,
                options=(("delay", delay),),
            )
            for delay in (2, 6)
        ),
        Task(
            "memory_chain",
            "gymnax bsuite MemoryChain, memory length 10, discrete actions",
            "gymnax",
            "MemoryChain-bsuite",
            episode_length=100,
            total_steps=204_800,
            discrete=True,
            options=(("memory_length", 10),),
        ),
        Task(
            "pendulum",
            "brax inverted_pendulum, full observation, no latency",
            "brax",
            "inverted_pendulum",
            total_steps=307_200,
            memory_needed=False,
            cross_eval=("pendulum_lag",),
        ),
        Task(
            "pendulum_lag",
            "brax inverted_pendulum behind an action lag of 0-3 steps per episode",
            "brax",
            "inverted_pendulum",
            total_steps=307_200,
            action_lag=(0, 3),
            cross_eval=("pendulum",),
        ),
    )
}
"""Task name -> :class:`Task`."""


# -- environments (child side: these import jax) --------------------------------------


class ObservationMask:
    """Keep only the observation entries ``keep`` (the same wrapper for every
    implementation): ``obs[..., keep]`` after ``reset`` and ``step``.

    Args:
        env: A brax / Playground style environment with vector observations.
        keep: Indices into the last axis of the observation.
    """

    def __init__(self, env: Any, keep: tuple[int, ...]) -> None:
        import jax.numpy as jnp

        self.env = env
        self._keep = jnp.asarray(keep)
        self.observation_size = len(keep)
        self.action_size = env.action_size

    def _mask(self, state: Any) -> Any:
        return state.replace(obs=state.obs[..., self._keep])

    def reset(self, rng: Any) -> Any:
        """Reset and mask."""
        return self._mask(self.env.reset(rng))

    def step(self, state: Any, action: Any) -> Any:
        """Step the full state (the simulator keeps its own copy) and mask."""
        return self._mask(self.env.step(state, action))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)


def _memory_task(options: dict[str, Any]) -> Any:
    """This workspace's ``MemoryTask`` (in nnx-ppo 0.3.0's environment its module is
    loaded from this checkout: it needs only jax and flax)."""
    try:
        from nnx_ppo.envs.memory_task import MemoryTask
    except ModuleNotFoundError:
        import nnx_ppo
        from nnx_ppo_benchmarks.venvs import workspace_root

        nnx_ppo.__path__.append(str(workspace_root() / "packages/nnx-ppo-train/src/nnx_ppo"))
        from nnx_ppo.envs.memory_task import MemoryTask
    return MemoryTask(**options)


def make_env(task: Task) -> Any:
    """The unwrapped (but masked) environment of ``task``."""
    options = dict(task.options)
    if task.source == "playground":
        from mujoco_playground import registry

        env = registry.load(task.env_name, config_overrides={"impl": "jax"})
    elif task.source == "brax":
        from brax import envs

        env = envs.get_environment(task.env_name, backend="generalized")
    elif task.source == "memory":
        env = _memory_task(options)
    elif task.source == "gymnax":
        # The trainer package's adapter (ours only: nnx-ppo 0.3.0 runs no gymnax task).
        from nnx_ppo.envs import GymnaxEnv

        env = GymnaxEnv.make(task.env_name, **options)
    else:
        raise ValueError(f"task {task.name!r}: unknown source {task.source!r}")
    if task.action_lag is not None:
        from nnx_ppo.wrappers import Latency  # ours only (see `runs` in the CLI)

        env = Latency(env, action_lag=task.action_lag)
    return env if task.keep is None else ObservationMask(env, task.keep)


def stagger_steps(task: Task, stagger: bool) -> int:
    """The exclusive upper bound of a training episode's random first step: half the
    episode with ``stagger`` (nnx-ppo 0.3.0's ``EpisodeWrapper`` always does this), else 0.

    With it, a task whose episodes all last ``episode_length`` steps (CartpoleBalance,
    the memory tasks) no longer ends every parallel episode on the same step, so a batch
    mixes every phase of an episode. Evaluations always play whole episodes.
    """
    return task.episode_length // 2 if stagger else 0


def staggered(cell: dict[str, Any]) -> bool:
    """Whether a recorded cell's training episodes had staggered starts (and, for ours,
    fresh reset states). Cells recorded before the option existed have no ``"stagger"``
    key: nnx-ppo 0.3.0's always had both, ours' neither."""
    if "stagger" in cell:
        return bool(cell["stagger"])
    return cell.get("implementation") != "ours"


LR_SCHEDULES = ("constant", "linear")
"""The suite's learning-rate schedules (``--lr-schedule``): the shared rate throughout,
or decayed linearly to 0 at the last update (`nnx_ppo.algorithms.core.schedules.linear_decay`)."""


def lr_schedule(cell: dict[str, Any]) -> str:
    """A recorded cell's learning-rate schedule (`LR_SCHEDULES`); cells recorded before
    the option existed have no ``"lr_schedule"`` key and trained at a constant rate."""
    return str(cell.get("lr_schedule", "constant"))
