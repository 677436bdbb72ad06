"""The control suite's tasks and the settings each is trained with (plain data).

Every task is trained by every implementation with the same network and the same
:class:`~nnx_ppo_benchmarks.settings.PPOSettings`. Where MuJoCo Playground publishes
brax-PPO settings for a task (``mujoco_playground.config.dm_control_suite_params
.brax_ppo_config(name)``) the learning hyperparameters are Playground's: discount,
learning rate, entropy cost, reward scaling, observation normalisation, episode length,
unroll length and epochs per rollout (``num_updates_per_batch``). Only the sizes change,
so that a run fits on a small machine: the number of environments, the minibatches
(one rollout per environment per iteration, as in the side-by-side benchmark) and the
step budget are the suite's own, the same for every task and implementation.

brax's own environments (``brax/<name>``, backend ``generalized``) have no published
per-task PPO settings in brax 0.14.2; they get one documented common setting,
:data:`BRAX_COMMON`: Playground's dm_control default (the value every dm_control task
above shares except ``FingerSpin``'s discount). No task's settings are tuned per
implementation.

Partially observed variants (``CartpoleBalance/masked``: the velocities removed;
``.../masked-history4``: the same with the last 4 observations stacked, the memoryless
baseline) train with their task's settings; they are not in :data:`DEFAULT_TASKS`
(see :mod:`.variants`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from nnx_ppo_benchmarks.settings import PPOSettings, is_brax_env
from nnx_ppo_benchmarks.suite.variants import VARIANTS, VELOCITY_LAST, base_task

__all__ = [
    "BRAX_COMMON",
    "CONTROL_TASKS",
    "DEFAULT_TASKS",
    "SuiteTask",
    "playground_settings",
    "task_settings",
]


@dataclasses.dataclass(frozen=True)
class SuiteTask:
    """One task of the control suite.

    Attributes:
        env_name: MuJoCo Playground environment (``impl="jax"``) or ``brax/<name>``;
            also the task's key on the command line and in the results.
        description: One line for the report.
        kind: ``"balance"`` (cheap, a first check that learning happens) or
            ``"locomotion"`` / ``"swing-up"`` / ``"manipulation"``.
        variant: ``None`` (the full observation) or a key of
            :data:`~nnx_ppo_benchmarks.suite.variants.VARIANTS` (``env_name`` is then
            ``<task>/<variant>``).
    """

    env_name: str
    description: str
    kind: str
    variant: str | None = None


_FULL = (
    SuiteTask("CartpoleBalance", "dm_control cart-pole, keep the pole up", "balance"),
    SuiteTask("PendulumSwingup", "dm_control pendulum, swing up and hold", "swing-up"),
    SuiteTask("AcrobotSwingup", "dm_control acrobot, swing up (sparse-ish)", "swing-up"),
    SuiteTask("CheetahRun", "dm_control half-cheetah, run forward", "locomotion"),
    SuiteTask("WalkerWalk", "dm_control planar walker, walk", "locomotion"),
    SuiteTask("HopperHop", "dm_control hopper, hop forward", "locomotion"),
    SuiteTask("FingerSpin", "dm_control finger, spin the body", "manipulation"),
    SuiteTask("ReacherHard", "dm_control reacher, small target", "manipulation"),
    SuiteTask("brax/hopper", "brax hopper (generalized), hop forward", "locomotion"),
    SuiteTask("brax/halfcheetah", "brax half-cheetah (generalized), run", "locomotion"),
    SuiteTask("brax/walker2d", "brax walker2d (generalized), walk", "locomotion"),
    SuiteTask("brax/ant", "brax ant (generalized), run", "locomotion"),
)
_BY_NAME = {t.env_name: t for t in _FULL}

CONTROL_TASKS: dict[str, SuiteTask] = {
    **_BY_NAME,
    **{
        f"{name}/{variant}": SuiteTask(
            f"{name}/{variant}",
            f"{_BY_NAME[name].description}; {description}",
            _BY_NAME[name].kind,
            variant,
        )
        for name in VELOCITY_LAST
        for variant, (description, _) in VARIANTS.items()
    },
}
"""The suite, cheapest first, then the partially observed variants (``--tasks`` picks)."""

DEFAULT_TASKS = tuple(t.env_name for t in _FULL)
"""What the suite runs without ``--tasks``: every task, full observation."""

BRAX_COMMON: dict[str, Any] = {
    "discounting": 0.995,
    "learning_rate": 1e-3,
    "entropy_cost": 1e-2,
    "reward_scaling": 10.0,
    "normalize_observations": True,
    "episode_length": 1000,
    "unroll_length": 30,
    "num_updates_per_batch": 16,
}
"""The one common setting of the brax environments (Playground's dm_control default)."""

_KEYS = {
    "discounting": "discounting",
    "learning_rate": "learning_rate",
    "entropy_cost": "entropy_cost",
    "reward_scaling": "reward_scaling",
    "normalize_observations": "normalize_observations",
    "episode_length": "episode_length",
    "unroll_length": "rollout_length",
    "num_updates_per_batch": "n_epochs",
}
"""Playground / brax ``ppo.train`` keyword -> :class:`PPOSettings` field."""


def playground_settings(env_name: str) -> dict[str, Any]:
    """Playground's published brax-PPO settings of ``env_name`` (the learning
    hyperparameters of :data:`_KEYS` only), read from the installed
    ``mujoco_playground``, or :data:`BRAX_COMMON` for a ``brax/<name>`` task; a
    variant's are its task's."""
    env_name = base_task(env_name)
    if is_brax_env(env_name):
        return dict(BRAX_COMMON)
    from mujoco_playground.config import dm_control_suite_params

    config = dm_control_suite_params.brax_ppo_config(env_name)
    if config.get("action_repeat", 1) != 1:
        raise ValueError(
            f"{env_name}: Playground's settings use action_repeat={config['action_repeat']}, "
            "which the harness does not implement; pick another task"
        )
    return {key: config[key] for key in _KEYS}


def task_settings(
    env_name: str, *, n_envs: int, n_minibatches: int, published: dict[str, Any] | None = None
) -> PPOSettings:
    """The :class:`PPOSettings` every implementation trains ``env_name`` with.

    Args:
        env_name: A key of :data:`CONTROL_TASKS` (or any Playground / ``brax/`` name).
        n_envs: Parallel environments (the suite's size, not Playground's 2048).
        n_minibatches: Minibatches per epoch (one rollout per environment per iteration).
        published: The settings to use instead of :func:`playground_settings` (tests).

    Example:
        >>> s = task_settings("brax/hopper", n_envs=64, n_minibatches=4)
        >>> (s.n_envs, s.rollout_length, s.n_epochs, s.discounting)
        (64, 30, 16, 0.995)
    """
    if n_envs % n_minibatches:
        raise ValueError(
            f"n_envs={n_envs} must be divisible by n_minibatches={n_minibatches} "
            "(one rollout per environment per iteration)"
        )
    values = playground_settings(env_name) if published is None else published
    fields = {_KEYS[key]: values[key] for key in _KEYS}
    fields["reward_scaling"] = float(fields["reward_scaling"])
    return PPOSettings(n_envs=n_envs, n_minibatches=n_minibatches, **fields)
