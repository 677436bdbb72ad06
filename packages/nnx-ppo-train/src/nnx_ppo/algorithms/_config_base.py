"""What every algorithm config shares: the on-policy run's validation and step
accounting (`OnPolicyRun`), and the per-field declaration of whether a field may differ
between the runs of one sweep (`sweep_fields`, `why_fixed`; re-exported by
`nnx_ppo.algorithms.config`, where they are documented with the configs)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from nnx_ppo.algorithms._validation import check_choice, check_float, check_int

__all__ = ["OnPolicyRun", "fixed", "host", "sweep_fields", "swept", "why_fixed"]

# --------------------------------------------------------------------------- sweeps

# Every field of an algorithm's config declares whether it may differ between the runs
# of one sweep program (`nnx_ppo.algorithms.sweeps`), and if not, why.
SWEEP = "sweep"
SIZES = "it sizes an array or a loop of the one program all runs share"
CODE = "it selects which code is compiled into the one program all runs share"
LOOP = "all runs share one training loop, so they train for the same steps"
KL = "the adaptive-KL rule is compiled in with constant values"
HOST = "it is a setting of the one host loop every run of a sweep shares; set it on the base config"


def swept(default: Any) -> Any:
    """A field that may differ between runs: it enters the program only as a number."""
    return dataclasses.field(default=default, metadata={SWEEP: None})


def fixed(default: Any, why: str) -> Any:
    """A field every run of a sweep shares, and why."""
    return dataclasses.field(default=default, metadata={SWEEP: why})


def host(factory: Callable[[], Any]) -> Any:
    return dataclasses.field(default_factory=factory, metadata={SWEEP: HOST})


def sweep_fields(config_type: type) -> tuple[str, ...]:
    """The fields of an algorithm config class (`PPOConfig`, `DistillationConfig`) that
    may differ between the runs of one sweep (`nnx_ppo.algorithms.sweeps`): each enters
    the program only as a number in arithmetic, so it can be a traced ``[K]`` input.

    Examples:
        >>> from nnx_ppo.algorithms.config import DistillationConfig
        >>> sweep_fields(DistillationConfig)
        ('learning_rate', 'max_grad_norm', 'weight_decay', 'regularization_weight')
    """
    return tuple(
        f.name for f in dataclasses.fields(config_type) if f.metadata.get(SWEEP, "") is None
    )


def why_fixed(config_type: type, name: str) -> str | None:
    """Why field ``name`` of ``config_type`` is the same in every run of a sweep, or
    ``None`` if it may differ (`sweep_fields`).

    Raises:
        ValueError: If ``name`` is not a field of ``config_type``.

    Examples:
        >>> from nnx_ppo.algorithms.config import PPOConfig
        >>> why_fixed(PPOConfig, "n_envs")
        'it sizes an array or a loop of the one program all runs share'
    """
    for f in dataclasses.fields(config_type):
        if f.name == name:
            return f.metadata.get(SWEEP, "it is not a traced value")
    raise ValueError(f"{name!r} is not a field of {config_type.__name__}.")


# --------------------------------------------------------------------------- configs


class OnPolicyRun:
    """Validation and step accounting shared by `PPOConfig` and
    `DistillationConfig` (each declares the fields itself)."""

    n_envs: int
    rollout_length: int
    total_steps: int
    n_epochs: int
    n_minibatches: int
    learning_rate: Any
    max_grad_norm: float | None
    weight_decay: float
    reset_mode: str
    iterations_per_call: int
    log_level: Any

    def _check_run(self) -> None:
        """Check the fields every on-policy config has (``log_level`` is checked by the
        config, which knows `LogLevel`)."""
        check_int("n_envs", self.n_envs, minimum=1)
        check_int("rollout_length", self.rollout_length, minimum=1)
        check_int("total_steps", self.total_steps, minimum=0)
        check_int("n_epochs", self.n_epochs, minimum=1)
        check_int("n_minibatches", self.n_minibatches, minimum=1)
        check_int("iterations_per_call", self.iterations_per_call, minimum=1)
        if self.n_envs % self.n_minibatches:
            up = -(-self.n_envs // self.n_minibatches) * self.n_minibatches
            divisors = [d for d in range(self.n_minibatches, 0, -1) if self.n_envs % d == 0]
            raise ValueError(
                f"n_envs={self.n_envs} is not divisible by "
                f"n_minibatches={self.n_minibatches}: each minibatch is a set of whole "
                "environment sequences, so n_envs must be a multiple of n_minibatches "
                f"(e.g. n_envs={up} or n_minibatches={divisors[0]})."
            )
        if not callable(self.learning_rate):
            check_float("learning_rate", self.learning_rate, low=0.0, low_open=True)
        check_float("max_grad_norm", self.max_grad_norm, low=0.0, low_open=True, optional=True)
        check_float("weight_decay", self.weight_decay, low=0.0)
        check_choice("reset_mode", self.reset_mode, ("cached", "refresh", "fresh"))

    @property
    def steps_per_iteration(self) -> int:
        """Env steps collected per iteration: ``n_envs * rollout_length``."""
        return self.n_envs * self.rollout_length

    @property
    def minibatch_envs(self) -> int:
        """Environment sequences per minibatch: ``n_envs // n_minibatches``."""
        return self.n_envs // self.n_minibatches

    @property
    def n_iterations(self) -> int:
        """Iterations in the run: enough to reach ``total_steps``, a multiple of
        ``iterations_per_call``."""
        per_call = self.steps_per_iteration * self.iterations_per_call
        return -(-self.total_steps // per_call) * self.iterations_per_call

    @property
    def updates_per_iteration(self) -> int:
        """Optimizer updates per iteration: ``n_epochs * n_minibatches``."""
        return self.n_epochs * self.n_minibatches
