"""Configuration of a PPO run: frozen, typed, validated dataclasses.

A run is described by one `TrainConfig`, which groups the algorithm
(`PPOConfig`), periodic evaluation (`EvalConfig`) and video recording
(`VideoConfig`). Every field is checked when the object is built, so a bad value
fails on the line that wrote it, with the numbers involved::

    >>> PPOConfig(n_envs=100, n_minibatches=8)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    ValueError: n_envs=100 is not divisible by n_minibatches=8: ...

Step accounting (``total_steps``): one *env step* is one transition of one environment
(``env.step`` on one unbatched env). An iteration collects
``n_envs * rollout_length`` env steps; a run performs ``n_iterations`` iterations,
``ceil(total_steps / steps_per_iteration)`` rounded up to a whole number of device calls
(``iterations_per_call``), so it never stops short of ``total_steps``. Counters are exact
Python integers on the host (never float32).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Literal

from nnx_ppo.algorithms._config_base import (
    CODE,
    HOST,
    KL,
    LOOP,
    SIZES,
    LoggingLevel,
    LogLevel,
    OnPolicyRun,
    RunConfig,
    check_bool,
    check_choice,
    check_float,
    check_int,
    check_log_level,
    check_optional_int,
    config_to_json,
    fixed,
    host,
    log_level_from_json,
    sweep_fields,
    swept,
    why_fixed,
)
from nnx_ppo.algorithms.symmetry import Symmetry, check_symmetry_option

__all__ = [
    "DistillationConfig",
    "EvalConfig",
    "LogLevel",
    "LoggingLevel",
    "PPOConfig",
    "TrainConfig",
    "VideoConfig",
    "config_from_dict",
    "config_to_dict",
    "config_to_json",
    "sweep_fields",
    "why_fixed",
]

Schedule = Callable[[Any], Any]
"""An optax learning-rate schedule: ``count -> learning rate``."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class PPOConfig(OnPolicyRun):
    """The PPO algorithm: sizes, optimisation, advantages, losses and logging.

    Attributes:
        n_envs: Environments stepped in parallel.
        rollout_length: Steps per environment per iteration (``T``).
        total_steps: Env steps to train for; see the module docstring for the rounding.
            ``0`` trains nothing (useful to evaluate an initial network).
        n_epochs: Passes over each rollout.
        n_minibatches: Minibatches per epoch; each is a set of
            ``n_envs // n_minibatches`` whole environment sequences (of
            ``sequence_length`` steps: ``T / sequence_length`` times as many).
        sequence_length: Replay the rollout in sequences of this many steps (truncated
            backpropagation through time): the rollout keeps the carry of every
            ``sequence_length``-th step, each sequence is replayed from its stored carry
            (the first replay still reproduces the rollout exactly) and minibatches are
            shuffled sets of sequences. Must divide ``rollout_length``; ``None``
            (default): whole rollouts. Without a carry, only the minibatches change.
        learning_rate: A positive float, or an optax schedule ``step -> lr`` where
            ``step`` counts optimizer updates. With ``desired_kl`` it is the initial
            rate and must be a float within the bounds below.
        desired_kl: Adapt the learning rate to the policy's KL per optimizer step
            (rsl_rl's default rule, brax's ``ADAPTIVE_KL``; see
            `nnx_ppo.algorithms.core.schedules`): divided by ``learning_rate_factor`` when
            the KL measured on a minibatch exceeds ``2 * desired_kl``, multiplied by it
            when the KL is positive and below ``desired_kl / 2``. rsl_rl uses ``0.01``.
            ``None`` (default): a fixed rate or schedule.
        target_kl: Stop an iteration's updates early (Stable-Baselines3's ``target_kl``):
            the first minibatch whose KL to the rollout's policy (``actor/approx_kl``,
            measured before its step) exceeds ``1.5 * target_kl`` is not stepped, nor any
            later one of that iteration (``train/updates_taken``). Bounds how far one
            iteration moves the policy whatever ``n_epochs``: a recurrent policy's KL
            grows along its sequences as the update changes its carry. ``None``
            (default): every update is taken.
        learning_rate_factor: The adaptive rule's factor (> 1; rsl_rl and brax: 1.5).
        min_learning_rate: The adaptive rule's lower bound (rsl_rl and brax: 1e-5).
        max_learning_rate: The adaptive rule's upper bound (rsl_rl and brax: 1e-2).
        gae_lambda: GAE ``lambda`` in ``[0, 1]``.
        discounting_factor: Discount ``gamma`` in ``[0, 1]``.
        clip_range: PPO ratio clipping ``epsilon`` (> 0).
        normalize_advantages: Normalise advantages to zero mean and unit variance per
            minibatch (per reward key in ``"per_key"`` mode).
        critic_loss_weight: Weight of the critic MSE in the total loss.
        normalize_values: Train each value head on its value targets standardised by
            running statistics of the targets, and map its outputs back to returns
            before computing advantages (rl_games' ``normalize_value``; see
            `nnx_ppo.algorithms.ppo.value_normalization`). Keeps the critic's error of
            order one whatever the reward scale; use it when the actor and the critic
            share parameters (e.g. graph read-outs used by both ports). The statistics
            are in ``TrainState.value_stats``. Needs ``advantage_estimation="rollout"``.
        value_clip_range: If set, clip the new value to within this distance of the
            rollout's value in the critic loss (PPO2-style, max of the two errors).
        max_grad_norm: If set, clip gradients to this global norm.
        weight_decay: Decoupled weight decay (AdamW) if > 0, else plain Adam.
        adam_eps: Adam's ``eps`` (the denominator's floor, > 0): optax's default
            ``1e-8`` (brax, rsl_rl); purejaxrl, CleanRL and Stable-Baselines3 use
            ``1e-5``, which damps the steps of parameters whose gradients are tiny.
        advantage_mode: For dict rewards: ``"combined"`` sums the per-key advantages
            (each computed with its own value head) and pairs the sum with the total
            log-likelihood; ``"per_key"`` pairs each key's advantage with the same key's
            log-likelihood (the action tree must then have the reward tree's keys).
            Array rewards behave the same in both modes.
        advantage_estimation: When advantages and value targets are computed.
            ``"rollout"``: once per iteration, from the values the critic gave in the
            rollout (standard PPO). ``"minibatch"`` (brax's PPO): in every minibatch,
            from the values its replay computes with the current parameters (no
            gradient through them), so later epochs see targets of the improved critic;
            the rollout then does not evaluate the critic, which saves its forward pass
            (measured on the Benchmarks page). Needs
            ``value_clip_range=None`` (clipping is relative to the rollout's values).
        bootstrap_on_truncation: At a truncated step, bootstrap from the value of the
            true final observation (computed in the rollout, before the reset). If
            False, follow brax: the TD error at a truncated step is zeroed, so that
            step carries no advantage.
        reset_mode: How finished environments restart. ``"cached"`` (brax): every env
            restarts from the state its first reset produced, at no per-step cost
            (with `nnx_ppo.wrappers.EpisodeWrapper`'s ``stagger``, a new start is drawn).
            ``"refresh"``: the same, but the cache is re-drawn with fresh keys once per
            iteration (one batched reset per iteration). ``"fresh"``: every finished
            env gets a newly drawn reset state (a batched reset in every step in which
            any env finished: with staggered starts, almost every step).
        iterations_per_call: Iterations run inside one jitted device call (one
            ``lax.scan``); logging, evaluation and checkpoints happen between calls.
        log_level: Which metric groups to compute (see `LogLevel`).
        symmetry: The task's mirror `Symmetry`, for data augmentation and a mirror
            loss (`nnx_ppo.algorithms.symmetry`); ``None`` (default): none.
    """

    n_envs: int = fixed(256, SIZES)
    rollout_length: int = fixed(20, SIZES)
    total_steps: int = fixed(1_000_000, LOOP)
    n_epochs: int = fixed(4, SIZES)
    n_minibatches: int = fixed(8, SIZES)
    sequence_length: int | None = fixed(None, SIZES)
    learning_rate: float | Schedule = swept(3e-4)
    desired_kl: float | None = fixed(None, KL)
    target_kl: float | None = fixed(None, KL)
    learning_rate_factor: float = fixed(1.5, KL)
    min_learning_rate: float = fixed(1e-5, KL)
    max_learning_rate: float = fixed(1e-2, KL)
    gae_lambda: float = swept(0.95)
    discounting_factor: float = swept(0.99)
    clip_range: float = swept(0.2)
    normalize_advantages: bool = fixed(True, CODE)
    critic_loss_weight: float = swept(0.5)
    normalize_values: bool = fixed(False, CODE)
    value_clip_range: float | None = swept(None)
    max_grad_norm: float | None = swept(None)
    weight_decay: float = swept(0.0)
    adam_eps: float = swept(1e-8)
    advantage_mode: Literal["combined", "per_key"] = fixed("combined", CODE)
    advantage_estimation: Literal["rollout", "minibatch"] = fixed("rollout", CODE)
    bootstrap_on_truncation: bool = fixed(True, CODE)
    reset_mode: Literal["cached", "refresh", "fresh"] = fixed("cached", CODE)
    iterations_per_call: int = fixed(1, SIZES)
    log_level: LogLevel = fixed(LogLevel.DEFAULT, CODE)
    symmetry: Symmetry | None = fixed(None, CODE)

    def __post_init__(self) -> None:
        self._check_run()
        check_log_level(self.log_level)
        self._check_adaptive_kl()
        check_float("gae_lambda", self.gae_lambda, low=0.0, high=1.0)
        check_float("discounting_factor", self.discounting_factor, low=0.0, high=1.0)
        check_float("clip_range", self.clip_range, low=0.0, low_open=True)
        check_bool("normalize_advantages", self.normalize_advantages)
        check_float("critic_loss_weight", self.critic_loss_weight, low=0.0)
        check_bool("normalize_values", self.normalize_values)
        check_float(
            "value_clip_range", self.value_clip_range, low=0.0, low_open=True, optional=True
        )
        check_choice("advantage_mode", self.advantage_mode, ("combined", "per_key"))
        check_choice("advantage_estimation", self.advantage_estimation, ("rollout", "minibatch"))
        check_bool("bootstrap_on_truncation", self.bootstrap_on_truncation)
        check_symmetry_option(self.symmetry, importance_ratio=True)
        check_optional_int("sequence_length", self.sequence_length, 1)
        if self.sequence_length is not None and self.rollout_length % self.sequence_length:
            raise ValueError(
                f"sequence_length={self.sequence_length} does not divide rollout_length="
                f"{self.rollout_length}: pick a divisor of it, or None (whole rollouts)."
            )
        for field, value, why in (
            ("value_clip_range", self.value_clip_range, "needs the rollout's values"),
            ("normalize_values", self.normalize_values or None, "updates its statistics "
             "from the rollout's value targets"),
            ("sequence_length", self.sequence_length, "cuts the rollout into sequences "
             "with no step after the last one's to bootstrap from"),
            ("symmetry", self.symmetry, "trains on mirrored sequences with the real ones' "
             "advantages, computed once per rollout"),
        ):  # fmt: skip
            if self.advantage_estimation == "minibatch" and value is not None:
                raise ValueError(
                    f"{field}={value!r} {why}, which advantage_estimation='minibatch' does "
                    f"not have: set {field} to its default or advantage_estimation='rollout'."
                )

    def _check_adaptive_kl(self) -> None:
        check_float("desired_kl", self.desired_kl, low=0.0, low_open=True, optional=True)
        check_float("target_kl", self.target_kl, low=0.0, low_open=True, optional=True)
        check_float("learning_rate_factor", self.learning_rate_factor, low=1.0, low_open=True)
        check_float("min_learning_rate", self.min_learning_rate, low=0.0, low_open=True)
        check_float("max_learning_rate", self.max_learning_rate, low=0.0, low_open=True)
        if self.min_learning_rate > self.max_learning_rate:
            raise ValueError(
                f"min_learning_rate={self.min_learning_rate} is above "
                f"max_learning_rate={self.max_learning_rate}: the adaptive-KL bounds are "
                "out of order; swap them."
            )
        if self.desired_kl is None:
            return
        if callable(self.learning_rate):
            raise ValueError(
                f"desired_kl={self.desired_kl} adapts the learning rate itself, so "
                f"learning_rate must be a number (the initial rate), not the schedule "
                f"{self.learning_rate!r}; pass a float or set desired_kl=None."
            )
        if not self.min_learning_rate <= self.learning_rate <= self.max_learning_rate:
            raise ValueError(
                f"learning_rate={self.learning_rate} is outside the adaptive-KL bounds "
                f"[min_learning_rate={self.min_learning_rate}, "
                f"max_learning_rate={self.max_learning_rate}]: start inside them or widen "
                "the bounds."
            )


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvalConfig:
    """Periodic evaluation on separate environments.

    **Cost.** One evaluation steps ``n_envs`` environments for ``max_episode_length``
    steps (a fixed-shape scan: finished episodes keep stepping, masked), i.e.
    ``n_envs * max_episode_length`` env steps (128,000 by default) with the network in
    inference mode, plus one compilation the first time. That is about as many env
    steps as 25 training iterations of 256 x 20, but without the gradient updates, so
    it usually costs a few training iterations' worth of time. ``at_start=True`` and
    the final evaluation are two evaluations per run even with ``every_steps=None``;
    with ``every_steps`` set, the share of wall time spent evaluating is roughly
    ``n_envs * max_episode_length / every_steps`` times the cost ratio of an inference
    step to a training step. Shrink ``n_envs`` (the estimate's spread grows) or
    ``max_episode_length``, raise ``every_steps``, or set ``enabled=False`` when
    evaluation shows up in the wall time; the ``throughput/sps`` metric excludes it.

    Attributes:
        enabled: Run evaluations at all.
        every_steps: Evaluate whenever this many env steps have passed since the last
            evaluation (checked between device calls). ``None``: only before training
            and after it.
        n_envs: Episodes evaluated in parallel (one each).
        max_episode_length: Steps per evaluation rollout; an episode that has not ended
            by then is cut there.
        deterministic: Run the network in ``eval()`` mode (samplers return their mean).
        at_start: Also evaluate the untrained network before the first iteration (of
            a fresh run; a resumed run does not evaluate at step 0 again). The run
            option ``initial_eval=`` (nnx-ppo's name, `RunOptions`) overrides it for
            one call.
        randomized: With domain randomization (the trainer's ``randomization_fn``),
            evaluate on ``n_envs`` randomized models drawn afresh from each evaluation's
            key instead of on the environment's nominal model (the default); see
            `nnx_ppo.algorithms.core.randomization`.
    """

    enabled: bool = True
    every_steps: int | None = None
    n_envs: int = 128
    max_episode_length: int = 1000
    deterministic: bool = True
    at_start: bool = True
    randomized: bool = False

    def __post_init__(self) -> None:
        check_bool("enabled", self.enabled)
        if self.every_steps is not None:
            check_int("every_steps", self.every_steps, minimum=1)
        check_int("n_envs", self.n_envs, minimum=1)
        check_int("max_episode_length", self.max_episode_length, minimum=1)
        check_bool("deterministic", self.deterministic)
        check_bool("at_start", self.at_start)
        check_bool("randomized", self.randomized)


@dataclasses.dataclass(frozen=True, kw_only=True)
class VideoConfig:
    """Video of a deterministic episode, recorded alongside evaluations.

    Rendering uses the environment's own ``render(trajectory, height=, width=,
    camera=)`` (brax and MuJoCo Playground provide it) and writes MP4 files with
    ``mediapy``.

    Attributes:
        enabled: Record videos.
        every_steps: Record whenever this many env steps have passed since the last
            video. ``None``: only after training.
        episode_length: Steps to record.
        directory: Where ``video_<step>.mp4`` files go; required when enabled.
        width: Frame width in pixels.
        height: Frame height in pixels.
        camera: Camera name passed to ``render`` (``None``: the env's default).
        fps: Frames per second; ``None`` reads ``1 / env.dt`` (30 if the env has no
            ``dt``).
    """

    enabled: bool = False
    every_steps: int | None = None
    episode_length: int = 1000
    directory: str | None = None
    width: int = 320
    height: int = 240
    camera: str | None = None
    fps: float | None = None

    def __post_init__(self) -> None:
        check_bool("enabled", self.enabled)
        if self.every_steps is not None:
            check_int("every_steps", self.every_steps, minimum=1)
        check_int("episode_length", self.episode_length, minimum=1)
        check_int("width", self.width, minimum=1)
        check_int("height", self.height, minimum=1)
        check_float("fps", self.fps, low=0.0, low_open=True, optional=True)
        if self.enabled and self.directory is None:
            raise ValueError(
                "VideoConfig(enabled=True) needs directory=...: the folder the MP4 files "
                "are written to."
            )


def _check_host_configs(config: Any, kinds: Mapping[str, type]) -> None:
    for name, cls in kinds.items():
        value = getattr(config, name)
        if not isinstance(value, cls):
            article = "an" if cls.__name__[0] in "AEIOU" else "a"
            raise TypeError(
                f"{name}={value!r} must be {article} {cls.__name__}; build it with "
                f"{cls.__name__}(...)."
            )


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainConfig(RunConfig):
    """Everything `train_ppo` needs besides env and network: a `RunConfig` whose
    ``algorithm`` is ``ppo``.

    Attributes:
        ppo: The algorithm.
        eval: Periodic evaluation.
        video: Video recording.
        seed: Seed of the run's random key (env resets, minibatch shuffling,
            evaluation). Network initialisation is seeded by the ``nnx.Rngs`` the
            network was built with.
        log_every_calls: Call ``log_fn`` after every this many device calls (the last
            call always logs). Reading metrics waits for their call to finish; the
            trainer reads them once the next call is queued (unless an evaluation, a
            video or a checkpoint needs that state), so logging every call costs
            little device time.
    """

    _ALGORITHM = "ppo"
    ppo: PPOConfig = dataclasses.field(default_factory=PPOConfig)
    eval: EvalConfig = host(EvalConfig)
    video: VideoConfig = host(VideoConfig)
    seed: int = fixed(0, "each run has its own: pass them as seeds=[...]")
    log_every_calls: int = fixed(1, HOST)

    def __post_init__(self) -> None:
        _check_host_configs(self, {"ppo": PPOConfig, "eval": EvalConfig, "video": VideoConfig})
        check_int("seed", self.seed, minimum=0)
        check_int("log_every_calls", self.log_every_calls, minimum=1)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DistillationConfig(OnPolicyRun, RunConfig):
    """A distillation run: sizes, optimisation, loss weights, evaluation, videos and
    logging; a `RunConfig` that is its own ``algorithm``.

    Sizes and step accounting are those of `PPOConfig`
    (an iteration collects ``n_envs * rollout_length`` env steps; ``total_steps`` is
    rounded up to whole device calls; counters are exact integers).

    Attributes:
        n_envs: Environments stepped in parallel.
        rollout_length: Steps per environment per iteration (``T``).
        total_steps: Env steps to distill for (``0``: only evaluate).
        n_epochs: Passes over each rollout.
        n_minibatches: Minibatches per epoch; each is a set of
            ``n_envs // n_minibatches`` whole environment sequences.
        learning_rate: A positive float, or an optax schedule ``step -> lr``.
        max_grad_norm: If set, clip gradients to this global norm.
        weight_decay: Decoupled weight decay (AdamW) if > 0, else plain Adam.
        adam_eps: Adam's ``eps`` (the denominator's floor, > 0): optax's default
            ``1e-8`` (brax, rsl_rl); purejaxrl, CleanRL and Stable-Baselines3 use
            ``1e-5``, which damps the steps of parameters whose gradients are tiny.
        value_loss_weight: Weight ``c_v`` of the value-head distillation (half MSE of
            the student's value estimates to the teacher's, summed over heads). ``0``
            (default) distills the policy only and leaves the student's critic alone;
            > 0 needs the teacher's value tree to match the student's.
        regularization_weight: Weight ``c_reg`` of the student's own per-sample
            ``regularization_loss`` (its samplers' entropy bonus, KL terms of
            variational layers...).
        reset_mode: How finished environments restart, as in
            `PPOConfig`: ``"cached"``, ``"refresh"``
            or ``"fresh"``.
        iterations_per_call: Iterations per jitted device call.
        log_level: Which metric groups to compute (see `LogLevel`; ``ACTOR`` has no
            distillation metric).
        symmetry: The task's mirror `Symmetry`, to train a symmetric student
            (`nnx_ppo.algorithms.distillation.train`, "Symmetry"): with ``augment`` the
            student also learns the mirror of the teacher's action on the mirrored
            sequences, replayed from its mirrored carries; with ``mirror_loss_weight``
            the mirror loss as in PPO. Its ``ratio`` must stay ``"behavior"``
            (distillation has no importance ratio). ``None`` (default): none.
        eval: Periodic deterministic evaluation of the student.
        video: Video recording of the student (as `TrainConfig.video`).
        seed: Seed of the run's random key (env resets, minibatch shuffling, eval).
        log_every_calls: Call ``log_fn`` after every this many device calls.

    Raises:
        TypeError: If a field has the wrong type.
        ValueError: If a value is out of range, or ``n_envs`` is not divisible by
            ``n_minibatches``.

    Examples:
        >>> DistillationConfig(n_envs=10, n_minibatches=4)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
            ...
        ValueError: n_envs=10 is not divisible by n_minibatches=4: ...
    """

    n_envs: int = fixed(256, SIZES)
    rollout_length: int = fixed(20, SIZES)
    total_steps: int = fixed(1_000_000, LOOP)
    n_epochs: int = fixed(4, SIZES)
    n_minibatches: int = fixed(8, SIZES)
    learning_rate: float | Schedule = swept(1e-3)
    max_grad_norm: float | None = swept(None)
    weight_decay: float = swept(0.0)
    adam_eps: float = swept(1e-8)
    value_loss_weight: float = fixed(
        0.0, "whether it is 0 selects whether the teacher's values are computed"
    )
    regularization_weight: float = swept(1.0)
    reset_mode: Literal["cached", "refresh", "fresh"] = fixed("cached", CODE)
    iterations_per_call: int = fixed(1, SIZES)
    log_level: LogLevel = fixed(LogLevel.DEFAULT, CODE)
    symmetry: Symmetry | None = fixed(None, CODE)
    eval: EvalConfig = host(EvalConfig)
    video: VideoConfig = host(VideoConfig)
    seed: int = fixed(0, "each run has its own: pass them as seeds=[...]")
    log_every_calls: int = fixed(1, HOST)

    def __post_init__(self) -> None:
        self._check_run()
        check_log_level(self.log_level)
        check_float("value_loss_weight", self.value_loss_weight, low=0.0)
        check_float("regularization_weight", self.regularization_weight, low=0.0)
        check_symmetry_option(self.symmetry, importance_ratio=False)
        _check_host_configs(self, {"eval": EvalConfig, "video": VideoConfig})
        check_int("seed", self.seed, minimum=0)
        check_int("log_every_calls", self.log_every_calls, minimum=1)


# --------------------------------------------------------------------------- JSON

_KINDS: dict[str, type] = {
    cls.__name__: cls
    for cls in (TrainConfig, DistillationConfig, PPOConfig, EvalConfig, VideoConfig)
}


def config_to_dict(config: Any) -> dict[str, Any] | None:
    """The JSON data stored for a config (nothing is pickled).

    One of this module's configs is tagged with its ``"kind"`` (``"TrainConfig"``,
    ``"DistillationConfig"``, ...), which `config_from_dict` rebuilds. Dataclasses
    become dicts of their fields; `LogLevel`
    becomes its name (``"DEFAULT"`` or ``"LOSSES|ROLLOUT"``); a callable such as an
    optax learning-rate schedule becomes ``{"callable": "<module>.<qualname>"}`` (a
    description only: it cannot be rebuilt); non-finite floats become ``None``.

    Args:
        config: A `TrainConfig`, a
            `PPOConfig`, another dataclass or
            mapping, or ``None``.

    Returns:
        JSON-serialisable data, or ``None``.

    Examples:
        >>> from nnx_ppo.algorithms.config import PPOConfig
        >>> data = config_to_dict(PPOConfig(n_envs=8, n_minibatches=2))
        >>> data["kind"], data["n_envs"], data["log_level"]
        ('PPOConfig', 8, 'DEFAULT')
    """
    if config is None:
        return None
    data = config_to_json(config)
    if not isinstance(data, dict):
        raise TypeError(
            f"config={config!r} must be a dataclass (e.g. TrainConfig) or a mapping, "
            f"not {type(config).__name__}."
        )
    kind = type(config)
    if kind.__name__ in _KINDS and kind.__module__.endswith("algorithms.config"):
        data = {"kind": kind.__name__, **data}
    return data


def _rebuild(kind: str, data: Mapping[str, Any]) -> Any:
    fields = {k: v for k, v in data.items() if k != "kind"}
    if kind == "TrainConfig":
        return TrainConfig(
            ppo=_rebuild("PPOConfig", fields.pop("ppo", {})),
            eval=EvalConfig(**fields.pop("eval", {})),
            video=VideoConfig(**fields.pop("video", {})),
            **fields,
        )
    if "learning_rate" in fields and isinstance(fields["learning_rate"], Mapping):
        raise ValueError(
            f"the stored learning_rate is a schedule ({fields['learning_rate']['callable']}), "
            "which is described but not stored; set the learning_rate in the data to a "
            "number or rebuild the config with your schedule."
        )
    if "log_level" in fields:
        fields["log_level"] = log_level_from_json(fields["log_level"])
    if isinstance(fields.get("symmetry"), Mapping):
        fields["symmetry"] = Symmetry.from_data(fields["symmetry"])
    if kind == "DistillationConfig":  # checkpoints of before videos have no "video"
        for name, cls in (("eval", EvalConfig), ("video", VideoConfig)):
            if name in fields:
                fields[name] = cls(**fields[name])
    return _KINDS[kind](**fields)


def config_from_dict(data: Mapping[str, Any]) -> Any:
    """Rebuild a config from `config_to_dict` data (e.g.
    ``load_metadata(directory)["config"]``): a `TrainConfig`, a
    `DistillationConfig`, or whichever config its ``"kind"`` names (data without a
    kind, from checkpoints written before kinds were stored, is a ``TrainConfig``).

    Args:
        data: The stored dict.

    Returns:
        The config, validated as usual.

    Raises:
        ValueError: If the learning rate was a schedule (only its name is stored):
            replace it with a number or rebuild the schedule yourself, or if the kind is
            unknown.

    Examples:
        >>> config = TrainConfig(ppo=PPOConfig(n_envs=8, n_minibatches=2), seed=3)
        >>> config_from_dict(config_to_dict(config)) == config
        True
        >>> distill = DistillationConfig(n_envs=8, n_minibatches=2, value_loss_weight=0.5)
        >>> config_from_dict(config_to_dict(distill)) == distill
        True
    """
    kind = data.get("kind", "TrainConfig")
    if kind not in _KINDS:
        raise ValueError(
            f"the stored config is a {kind!r}, which is not one of {sorted(_KINDS)}; "
            "rebuild it yourself from the data."
        )
    return _rebuild(kind, data)
