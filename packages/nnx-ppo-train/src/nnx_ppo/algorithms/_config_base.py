"""What every algorithm config shares: the on-policy run's validation and step
accounting (`OnPolicyRun`), one run's values of its sweepable fields
(`OnPolicyRun.with_values`), the shape of a run's config (`RunConfig`: ``algorithm``,
``eval``, ``video``, ``seed``, ``log_every_calls`` and `RunConfig.with_run`), and the
per-field declaration of whether a field may differ between the runs of one sweep
(`sweep_fields`, `why_fixed`; re-exported by `nnx_ppo.algorithms.config`, where they
are documented with the configs), and the argument checkers of the configs and entry
points (`check_int`, ...: ``TypeError`` for a wrong type, ``ValueError`` for a value
out of range, each naming the argument and its value)."""

from __future__ import annotations

import copy
import dataclasses
import enum
import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any, Self

__all__ = [
    "LogLevel",
    "LoggingLevel",
    "OnPolicyRun",
    "RunConfig",
    "check_bool",
    "check_choice",
    "check_float",
    "check_int",
    "check_log_level",
    "check_optional_int",
    "check_swept",
    "config_to_json",
    "fixed",
    "host",
    "log_level_from_json",
    "sweep_fields",
    "swept",
    "why_fixed",
]

# --------------------------------------------------------------------------- sweeps

# Every field of an algorithm's config declares whether it may differ between the runs
# of one sweep program (`nnx_ppo.algorithms.sweeps.many`), and if not, why.
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
    may differ between the runs of one sweep (`nnx_ppo.algorithms.sweeps.many`): each enters
    the program only as a number in arithmetic, so it can be a traced ``[K]`` input.

    Examples:
        >>> from nnx_ppo.algorithms.config import DistillationConfig
        >>> sweep_fields(DistillationConfig)
        ('learning_rate', 'max_grad_norm', 'weight_decay', 'adam_eps', 'regularization_weight')
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


def check_swept(config_type: type, name: Any, where: str) -> None:
    """Check that field ``name`` of ``config_type`` may differ between the runs of a
    sweep (`sweep_fields`); ``where`` names it in the message (e.g.
    ``"overrides['n_envs']"``).

    Raises:
        ValueError: If ``name`` is ``"seed"``, not a field, or a field every run shares
            (the message says why, `why_fixed`).
    """
    swept = sweep_fields(config_type)
    if name == "seed":
        raise ValueError(f"{where}: give the runs' seeds as seeds=[...] instead.")
    if name not in {f.name for f in dataclasses.fields(config_type)}:
        raise ValueError(
            f"{where} is not a {config_type.__name__} field; the fields that can differ "
            f"between the runs of a sweep are {', '.join(swept)}."
        )
    if name not in swept:
        raise ValueError(
            f"{where} cannot differ between the runs of one program: "
            f"{why_fixed(config_type, name)}. Train one sweep per value of {name}, or vary "
            f"one of {', '.join(swept)}."
        )


# --------------------------------------------------------------------------- configs


class LogLevel(enum.Flag):
    """Which groups of metrics an iteration computes and returns (combine with ``|``).

    Disabled groups are not computed at all: they are dropped before compilation, so
    XLA removes the work. The metric names of each group are listed in
    `nnx_ppo.algorithms.core.logging`.
    """

    NONE = 0
    LOSSES = enum.auto()
    """``loss/*``: total, policy, critic and regularization losses."""
    ACTOR = enum.auto()
    """``actor/*``: clip fraction, approximate KL, entropy estimate, advantages."""
    CRITIC = enum.auto()
    """``critic/*``: explained variance, value and target statistics."""
    ROLLOUT = enum.auto()
    """``rollout/*``: episode return and length of episodes finished in the rollout."""
    ENV_METRICS = enum.auto()
    """``env/*``: the environment's own ``state.metrics``, averaged over the rollout."""
    NETWORK_METRICS = enum.auto()
    """``network/*``: the ``metrics`` dicts the network emits, averaged over replay."""
    GRAD_NORM = enum.auto()
    """``train/grad_norm``: global gradient norm before clipping."""
    WEIGHTS = enum.auto()
    """``train/param_norm``: global norm of the trainable parameters."""
    THROUGHPUT = enum.auto()
    """``throughput/*``: env steps per second and wall time (measured on the host)."""
    DIAGNOSTICS = enum.auto()
    """``diagnostics/nonfinite_*``: how many env steps had a non-finite reward,
    observation, action or next observation, and how many optimizer updates a
    non-finite gradient. It also changes one thing the rollout does: an environment
    whose next observation is non-finite is counted, treated as terminated at that step
    (no value bootstrap from it) and restarted by the auto-reset, so the run continues
    and the non-finite values never reach the network or its statistics. Without
    ``DIAGNOSTICS`` the rollout is compiled exactly as before (such an observation
    would reach the network, and the run stop with a ``NonFiniteError``). Not part of
    ``ALL``: opt in explicitly."""

    ROLLOUT_OBS = enum.auto()
    """``rollout_obs/*``: mean and standard deviation of each observation leaf over the
    rollout's steps and environments (what the network saw, before its normalizer):
    ``rollout_obs/mean`` and ``rollout_obs/std`` for an array observation,
    ``rollout_obs/<key>/mean`` ... for a dict (nnx-ppo's group name)."""
    ACTOR_EXTRA = ACTOR
    """nnx-ppo's name of ``ACTOR`` (the same flag)."""
    CRITIC_EXTRA = CRITIC
    """nnx-ppo's name of ``CRITIC`` (the same flag)."""
    ROLLOUT_STATS = ROLLOUT
    """nnx-ppo's name of ``ROLLOUT`` (the same flag)."""

    DEFAULT = LOSSES | ACTOR | CRITIC | ROLLOUT | THROUGHPUT
    ALL = (
        LOSSES | ACTOR | CRITIC | ROLLOUT | ROLLOUT_OBS | ENV_METRICS | NETWORK_METRICS
        | GRAD_NORM | WEIGHTS | THROUGHPUT
    )  # fmt: skip


LoggingLevel = LogLevel
"""nnx-ppo's name of `LogLevel`, accepted as an alias (the same class). nnx-ppo's group
names are aliases of this library's (``ACTOR_EXTRA`` is ``ACTOR``, ``CRITIC_EXTRA``
``CRITIC``, ``ROLLOUT_STATS`` ``ROLLOUT``); ``ROLLOUT_OBS`` and ``DIAGNOSTICS`` mean
what nnx-ppo's do."""


def check_log_level(value: Any) -> None:
    if not isinstance(value, LogLevel):
        raise TypeError(
            f"log_level={value!r} must be a LogLevel flag, e.g. "
            "LogLevel.DEFAULT or LogLevel.LOSSES | LogLevel.ROLLOUT."
        )


def log_level_from_json(value: Any) -> LogLevel:
    """The `LogLevel` stored as ``config_to_json`` writes it (its name, ``"DEFAULT"`` or
    ``"LOSSES|ROLLOUT"``) or as an int (older checkpoints)."""
    if isinstance(value, int):
        return LogLevel(value)
    level = LogLevel.NONE
    for part in str(value).split("|"):
        level |= LogLevel[part]
    return level


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
    adam_eps: float
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
        check_float("adam_eps", self.adam_eps, low=0.0, low_open=True)
        check_choice("reset_mode", self.reset_mode, ("cached", "refresh", "fresh"))

    def with_values(self, values: Mapping[str, Any]) -> Self:
        """This config with its sweepable fields named in ``values`` holding those
        values, which may be traced ``[]`` arrays: one run of a sweep inside the
        program that vmaps the runs (`nnx_ppo.algorithms.sweeps.many`). The algorithm reads
        them as it reads any config value, so it is written for one run.

        The values are not validated here (they may be traced): a sweep validates each
        run's concrete values first (`RunConfig.with_run`).

        Raises:
            ValueError: If a name is not a field that may differ between runs.

        Examples:
            >>> import jax.numpy as jnp
            >>> from nnx_ppo.algorithms.config import PPOConfig
            >>> ppo = PPOConfig(n_envs=8, n_minibatches=2)
            >>> ppo.with_values({"clip_range": jnp.float32(0.1)}).clip_range
            Array(0.1, dtype=float32)
        """
        for name in values:
            check_swept(type(self), name, f"values[{name!r}]")
        run = copy.copy(self)  # no __post_init__: the values may be traced
        for name, value in values.items():
            object.__setattr__(run, name, value)
        return run

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


class RunConfig:
    """The shape every run's config has (`TrainConfig`, `DistillationConfig`): the
    algorithm's config (``algorithm``, the fields its iteration reads), and the run's
    evaluation (``eval``), videos (``video``), ``seed`` and ``log_every_calls``, which
    `nnx_ppo.algorithms.trainer.skeleton.run` reads."""

    _ALGORITHM: str | None = None  # the field holding the algorithm's config; None: self
    eval: Any
    video: Any
    seed: int
    log_every_calls: int

    @property
    def algorithm(self) -> Any:
        """The algorithm's config: the `OnPolicyRun` whose fields the iteration reads
        (``TrainConfig.ppo``; a `DistillationConfig` is its own)."""
        return self if self._ALGORITHM is None else getattr(self, self._ALGORITHM)

    def with_run(self, seed: int, values: Mapping[str, Any] | None = None) -> Self:
        """Run ``seed``'s own config in a sweep: this config with ``seed`` and the
        algorithm's sweepable fields set to ``values`` (numbers), validated as any
        config is when built.

        Raises:
            TypeError: If a value has the wrong type.
            ValueError: If a name is not a field that may differ between runs, a value
                is out of range, or a value is a schedule or ``None`` (each run needs a
                number in the one program they share).

        Examples:
            >>> from nnx_ppo.algorithms.config import PPOConfig, TrainConfig
            >>> base = TrainConfig(ppo=PPOConfig(n_envs=8, n_minibatches=2))
            >>> run = base.with_run(3, {"clip_range": 0.1})
            >>> run.seed, run.algorithm.clip_range
            (3, 0.1)
        """
        values = dict(values or {})
        for name, value in values.items():
            where = f"values[{name!r}]"
            check_swept(type(self.algorithm), name, where)
            if callable(value):
                raise ValueError(
                    f"{where}: a learning-rate schedule is Python code compiled into the "
                    "one program, so it cannot differ between runs; give every run a "
                    "float, or put the schedule in the base config."
                )
            if value is None:
                raise ValueError(
                    f"{name}=None removes a term of the one program all runs share; "
                    f"give every run a number for {name}, or leave it out."
                )
        if self._ALGORITHM is None:
            return dataclasses.replace(self, seed=seed, **values)  # type: ignore[type-var]
        algorithm = dataclasses.replace(self.algorithm, **values)
        return dataclasses.replace(self, seed=seed, **{self._ALGORITHM: algorithm})  # type: ignore[type-var]


# ------------------------------------------------------------------ argument checks
def check_int(name: str, value: Any, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{name}={value!r} must be an int (got {type(value).__name__}); "
            f"pass a whole number >= {minimum}."
        )
    if int(value) < minimum:
        raise ValueError(f"{name}={value} must be >= {minimum}.")


def check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name}={value!r} must be a bool (True or False).")


def check_float(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    optional: bool = False,
) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        hint = " or None" if optional else ""
        raise TypeError(f"{name}={value!r} must be a real number{hint}.")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{name}={value} must be finite.")
    if low is not None and (number <= low if low_open else number < low):
        bound = ">" if low_open else ">="
        raise ValueError(f"{name}={value} must be {bound} {low}.")
    if high is not None and number > high:
        raise ValueError(f"{name}={value} must be <= {high}.")


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not one of {', '.join(map(repr, choices))}.")


def check_optional_int(name: str, value: Any, minimum: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}={value!r} must be an int >= {minimum} or None.")
    if value < minimum:
        raise ValueError(f"{name}={value} must be >= {minimum} (or None).")


# --------------------------------------------------------------------------- JSON


def config_to_json(value: Any) -> Any:
    """JSON data for a config value (see `config_to_dict`)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: config_to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Flag):
        return value.name if value.name is not None else int(value.value)
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, bool | int | str) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): config_to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [config_to_json(v) for v in value]
    if callable(value):  # e.g. an optax schedule: described, not stored
        name = getattr(value, "__qualname__", None) or type(value).__qualname__
        return {"callable": f"{getattr(value, '__module__', '?')}.{name}"}
    return repr(value)
