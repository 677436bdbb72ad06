"""The trial machinery every cognitive task shares: `CognitiveTask` and `Duration`.

A trial is a sequence of named epochs (fixation, stimulus, delay, decision, ...) whose
durations are given in milliseconds; ``dt`` (ms per step) is a parameter. One episode
is one trial: it ends (a termination) when the agent decides, breaks fixation, or the
last epoch runs out. A task subclass says only what is specific to it: its channels,
actions, epochs, condition table, the epoch durations and the mean input per epoch.

Noise: a noisy channel shows ``mean + sigma / sqrt(dt) * N(0, 1)`` at every step
(``sigma`` in ``ms ** 0.5``, as in Song, Yang & Wang 2017's tasks), so evidence summed
over an epoch of ``D`` ms, ``sum_t obs_t * dt``, has mean ``mean * D`` and standard
deviation ``sigma * sqrt(D)`` whatever ``dt``: the signal-to-noise ratio of a stimulus
does not depend on the time step.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from collections.abc import Mapping
from typing import Any, ClassVar, TypedDict

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from numpy.typing import ArrayLike

from nnx_ppo.envs._helpers import check_bool, check_float
from nnx_ppo.envs.base import Env, State

__all__ = ["CognitiveTask", "Duration", "Outcome", "TaskOptions", "TrialState"]


class Outcome:
    """How a trial ended, as ``info["outcome"]`` (int32) reports it.

    ``ONGOING`` (0) while the trial runs; then ``CORRECT`` (1), ``WRONG`` (2),
    ``ABORTED`` (3, fixation broken: a choice outside the response epochs) or
    ``NO_DECISION`` (4, the trial ran out without a choice; for a task whose answer is
    to withhold, e.g. a no-go trial, that is ``CORRECT``).
    """

    ONGOING = 0
    CORRECT = 1
    WRONG = 2
    ABORTED = 3
    NO_DECISION = 4
    NAMES: ClassVar[tuple[str, ...]] = ("ongoing", "correct", "wrong", "aborted", "no_decision")


@dataclasses.dataclass(frozen=True)
class Duration:
    """How long an epoch lasts, in milliseconds: fixed or drawn per trial.

    Drawn durations are floored to whole steps (multiples of ``dt``), as in pyrl.

    Attributes:
        kind: ``"fixed"``, ``"uniform"`` or ``"truncated_exponential"``.
        low: The fixed duration, or the lower bound.
        high: The upper bound (``= low`` for a fixed duration).
        mean: The exponential's mean (``truncated_exponential`` only): the duration is
            ``low + x`` with ``x`` exponential of this mean, conditioned on
            ``low + x < high`` (the distribution pyrl's rejection sampler draws).
    """

    kind: str
    low: float
    high: float
    mean: float = 0.0

    @classmethod
    def fixed(cls, ms: float) -> Duration:
        """A fixed duration of ``ms`` milliseconds (``>= 0``)."""
        ms = check_float("Duration.fixed", "ms", ms, allow_zero=True, meaning="epoch duration")
        return cls("fixed", ms, ms)

    @classmethod
    def uniform(cls, low: float, high: float) -> Duration:
        """Uniform in ``[low, high]`` milliseconds."""
        low = check_float("Duration.uniform", "low", low, allow_zero=True, meaning="ms")
        high = check_float("Duration.uniform", "high", high, allow_zero=True, meaning="ms")
        if high < low:
            raise ValueError(f"Duration.uniform: high={high!r} must be >= low={low!r}.")
        return cls("uniform", low, high)

    @classmethod
    def truncated_exponential(cls, mean: float, low: float, high: float) -> Duration:
        """``low + Exponential(mean)``, truncated below ``high`` milliseconds."""
        owner = "Duration.truncated_exponential"
        mean = check_float(owner, "mean", mean, allow_zero=False, meaning="ms")
        low = check_float(owner, "low", low, allow_zero=True, meaning="ms")
        high = check_float(owner, "high", high, allow_zero=False, meaning="ms")
        if high <= low:
            raise ValueError(f"{owner}: high={high!r} must be > low={low!r}.")
        return cls("truncated_exponential", low, high, mean)

    def sample(self, key: jax.Array) -> jax.Array:
        """One draw in ms (float32 ``[]``, not yet floored to steps)."""
        if self.kind == "fixed":
            return jnp.asarray(self.low, jnp.float32)
        u = jax.random.uniform(key, (), jnp.float32)
        if self.kind == "uniform":
            return self.low + u * (self.high - self.low)
        # Inverse CDF of the exponential conditioned on x < high - low.
        mass = 1.0 - math.exp(-(self.high - self.low) / self.mean)
        return self.low - self.mean * jnp.log1p(-u * mass)

    def steps(self, ms: jax.Array, dt: float) -> jax.Array:
        """A duration in ms as int32 steps: rounded if fixed, floored if drawn."""
        ratio = ms / dt
        whole = jnp.round(ratio) if self.kind == "fixed" else jnp.floor(ratio + 1e-4)
        return whole.astype(jnp.int32)

    def max_steps(self, dt: float) -> int:
        """The longest this epoch can last, in steps."""
        ratio = self.high / dt
        return round(ratio) if self.kind == "fixed" else math.floor(ratio + 1e-4)


@struct.dataclass
class TrialState:
    """What a cognitive task's ``State.pipeline_state`` holds.

    Attributes:
        key: The PRNG key of the next observation's noise.
        condition: int32 ``[]``, the trial's row of the task's condition table.
        bounds: int32 ``[n_epochs + 1]``, the first step of every epoch; the last entry
            is the trial's length in steps.
        t: int32 ``[]``, the step whose observation is shown.
    """

    key: jax.Array
    condition: jax.Array
    bounds: jax.Array
    t: jax.Array


class TaskOptions(TypedDict, total=False):
    """The keywords every cognitive task takes, documented here once.

    `CognitiveTask` takes them as keywords, and a task with arguments of its own takes
    these after them as ``**options: Unpack[TaskOptions]`` (PEP 692), so a type checker
    knows every key; a task's docstring lists only its own arguments.

    Attributes:
        dt: Milliseconds per step (> 0; default 10, pyrl's). Epoch durations are in ms
            and the noise is scaled so that the evidence does not depend on ``dt``.
        sigma: Input noise in ``ms ** 0.5`` (>= 0); ``None`` (the default) takes the
            task's published value (`CognitiveTask.default_sigma`).
        correct_reward: Reward of a correct decision (default 1).
        abort_reward: Reward of breaking fixation (default -1, pyrl's).
        dict_obs: Observations as a dict of the task's input groups
            (`CognitiveTask.groups`) instead of one vector (default ``False``).
    """

    dt: float
    sigma: float | None
    correct_reward: float
    abort_reward: float
    dict_obs: bool


class CognitiveTask(Env):
    """Base class of the cognitive tasks: one trial per episode (see the module docstring).

    Observations are float32 ``[n_inputs]`` (``dict_obs=False``) or a dict of the
    task's input groups. Actions are discrete (``action_distribution =
    "categorical"``): an int32 index per environment, ``0`` = keep fixating, the others
    the task's choices. Rules, checked on the epoch of the observation the action
    answers:

    - outside the response epochs any action but ``0`` breaks fixation: the trial ends
      with ``abort_reward`` (``Outcome.ABORTED``);
    - inside them a choice ends the trial with the task's decision reward
      (``correct_reward`` for the right answer, ``0`` otherwise);
    - a trial that runs out without a choice ends with reward ``0``
      (``NO_DECISION``), or ``correct_reward`` where the answer is to withhold (``0``).

    ``state.info`` holds, every step: ``"condition"`` (the trial's condition values,
    float32 scalars by name), ``"condition_index"``, ``"epoch"`` (index into `epochs`
    of the shown observation), ``"time"`` (its step), ``"answer"`` (the correct action),
    ``"outcome"`` (an `Outcome`), ``"choice"`` (the action that ended the trial, else
    ``0``), ``"decision_time"`` and ``"reaction_time"`` (ms since the trial's start and
    since the first response epoch's start; ``-1`` without a decision).
    ``state.metrics`` holds ``trial_end``, ``correct``, ``decision`` and ``abort``
    (1 on the step that ends a trial so, else 0), whose means over a rollout give the
    rates.

    **Writing a task.** A subclass sets the class attributes `inputs`, `epochs` (and,
    where the defaults do not fit, `actions`, `response_epochs`, `groups`,
    `default_sigma`, `psychometric_variable`, `criterion`, `reaction_time`,
    `condition_units`) and implements four hooks, each a pure function of its
    arguments (jittable; ``condition`` is ``{name: float32 []}``, one row of the
    condition table):

    - `epoch_durations` ``() -> {epoch: Duration}``, in epoch order;
    - `condition_table` ``() -> {name: [C] values}``, the balanced conditions (a trial
      draws a row uniformly; `reset_condition` picks one);
    - `answer` ``(condition) -> int32 []``, the correct action (``0``: withhold);
    - `epoch_input` ``(condition, epoch) -> (mean [n_inputs], noisy bool [n_inputs])``,
      the noiseless input shown in ``epoch`` (an int32 index into `epochs`) and which
      channels carry noise;

    and may override `decision_reward` ``(condition, choice) -> float32 []``. A task
    with arguments of its own sets its attributes, then calls ``super().__init__(
    **options)``, which checks what the hooks return (errors name the hook). The
    how-to *Write your own cognitive task* builds one in under 30 lines.

    Args:
        dt: Milliseconds per step; see `TaskOptions`, where every keyword shared by the
            tasks is described.
        sigma: Input noise in ``ms ** 0.5``, ``None`` for `default_sigma`
            (`TaskOptions`).
        correct_reward: Reward of a correct decision (`TaskOptions`).
        abort_reward: Reward of breaking fixation (`TaskOptions`).
        dict_obs: Observations as a dict of `groups` (`TaskOptions`).

    Raises:
        ValueError: If a keyword is out of range, or a class attribute or a hook's
            result does not fit the others (naming the attribute or the hook).
    """

    inputs: tuple[str, ...]
    """The observation channels, in vector order."""
    actions: tuple[str, ...] = ("fixate", "left", "right")
    """The actions; index 0 is always keeping fixation."""
    epochs: tuple[str, ...]
    """The epochs of a trial, in order."""
    response_epochs: frozenset[str] = frozenset({"decision"})
    """The epochs in which a choice is a decision (elsewhere it breaks fixation)."""
    groups: Mapping[str, tuple[str, ...]] = {}
    """The dict observation's keys and the channels under each (``dict_obs=True``)."""
    default_sigma: float = 0.0
    """The task's published input noise (``ms ** 0.5``)."""
    psychometric_variable: str = ""
    """The condition value a psychometric curve is drawn over (``""``: none); the curve
    is P(action 2) among choices of 1 and 2, or P(action 1) against withholding for a
    task with one choice (`TrialResults.psychometric`)."""
    criterion: tuple[float, float] = (0.99, 0.8)
    """The training criterion ``(decision rate, accuracy)``: the published one where the
    task has one (Song, Yang & Wang 2017), `TrialResults.criteria`'s default."""
    reaction_time: bool = False
    """Whether a choice may come while the evidence is still shown (a reaction-time
    task): its reaction times then measure the decision, and the cognitive app draws
    chronometric curves."""
    condition_units: Mapping[str, str] = {}
    """The unit of each condition value that has one (``{"signed_coherence": "%"}``),
    for axis labels."""

    action_distribution = "categorical"
    discrete = True
    draws_episode_at_reset = True
    """The trial is drawn at reset: the trainer needs ``reset_mode="fresh"``."""

    def __init__(
        self,
        *,
        dt: float = 10.0,
        sigma: float | None = None,
        correct_reward: float = 1.0,
        abort_reward: float = -1.0,
        dict_obs: bool = False,
    ) -> None:
        name = type(self).__name__
        self.dt = check_float(name, "dt", dt, allow_zero=False, meaning="milliseconds per step")
        self.sigma = check_float(
            name,
            "sigma",
            self.default_sigma if sigma is None else sigma,
            allow_zero=True,
            meaning="input noise in ms ** 0.5",
        )
        for arg, value in (("correct_reward", correct_reward), ("abort_reward", abort_reward)):
            if isinstance(value, bool) or not isinstance(value, int | float | np.floating):
                raise ValueError(f"{name}: {arg}={value!r} must be a number.")
            if not math.isfinite(value):
                raise ValueError(f"{name}: {arg}={value!r} must be finite.")
        self.correct_reward = float(correct_reward)
        self.abort_reward = float(abort_reward)
        self.dict_obs = check_bool(name, "dict_obs", dict_obs)
        self._check_attributes()
        durations = self.epoch_durations()
        if not isinstance(durations, Mapping) or tuple(durations) != tuple(self.epochs):
            got = list(durations) if isinstance(durations, Mapping) else type(durations).__name__
            raise ValueError(
                f"{name}.epoch_durations() must give {{epoch: Duration}} for the epochs "
                f"{list(self.epochs)} in that order, got {got}."
            )
        for epoch, duration in durations.items():
            if not isinstance(duration, Duration):
                raise ValueError(
                    f"{name}.epoch_durations()[{epoch!r}] is {duration!r}, not a Duration; "
                    "use Duration.fixed(ms), Duration.uniform(low, high) or "
                    "Duration.truncated_exponential(mean, low, high)."
                )
        self.durations: dict[str, Duration] = dict(durations)
        if self.max_trial_steps < 1:
            raise ValueError(
                f"{name}: with dt={dt!r} ms a trial has no step; lower dt below the "
                "trial's duration."
            )
        table = {k: np.asarray(v, np.float32) for k, v in self.condition_table().items()}
        sizes = {v.shape for v in table.values()}
        if len(sizes) != 1 or len(next(iter(sizes))) != 1 or next(iter(sizes))[0] < 1:
            raise ValueError(
                f"{name}.condition_table() must give {{name: values}} with 1-D arrays of "
                f"one length >= 1, got shapes { ({k: v.shape for k, v in table.items()}) }."
            )
        self.conditions: dict[str, np.ndarray] = table
        """The balanced condition table: ``{name: [C]}``; a trial draws a row uniformly."""
        self._first_response = min(self.epochs.index(e) for e in self.response_epochs)
        self._check_hooks()

    def _check_attributes(self) -> None:
        """The class attributes fit each other (a subclass's mistakes, named)."""
        name = type(self).__name__
        for attribute in ("inputs", "epochs"):
            value = getattr(self, attribute, None)
            if (
                not isinstance(value, tuple)
                or not value
                or not all(isinstance(v, str) for v in value)
            ):
                raise ValueError(
                    f"{name}.{attribute}={value!r} must be a non-empty tuple of names, e.g. "
                    + ("inputs = ('fixation', 'left', 'right')." if attribute == "inputs"
                       else "epochs = ('fixation', 'stimulus', 'decision').")
                )  # fmt: skip
        if not isinstance(self.actions, tuple) or len(self.actions) < 2:
            raise ValueError(
                f"{name}.actions={self.actions!r} must be a tuple of at least two names: "
                "'fixate' (index 0) and the choices."
            )
        unknown = sorted(set(self.response_epochs) - set(self.epochs))
        if not self.response_epochs or unknown:
            raise ValueError(
                f"{name}.response_epochs={set(self.response_epochs)!r} must name one or more "
                f"of the epochs {list(self.epochs)} (unknown: {unknown})."
            )
        if self.dict_obs:
            grouped = sorted(c for channels in self.groups.values() for c in channels)
            if not self.groups or not set(grouped) <= set(self.inputs):
                raise ValueError(
                    f"{name}: dict_obs=True needs groups, {{key: channels}} over the inputs "
                    f"{list(self.inputs)}, got groups={dict(self.groups)!r}; set the class "
                    "attribute groups or pass dict_obs=False."
                )

    def _check_hooks(self) -> None:
        """`answer` and `epoch_input` give the documented shapes (traced abstractly, so
        nothing is compiled)."""
        name = type(self).__name__
        condition = self.condition_values(jnp.int32(0))
        answer = jax.eval_shape(self.answer, condition)
        if answer.shape != () or not jnp.issubdtype(answer.dtype, jnp.integer):
            raise ValueError(
                f"{name}.answer(condition) must give one integer action, shape (), got "
                f"{answer.dtype}{list(answer.shape)}; e.g. jnp.where(..., 1, 2)."
            )
        mean, noisy = jax.eval_shape(self.epoch_input, condition, jnp.int32(0))
        size = len(self.inputs)
        if mean.shape != (size,) or noisy.shape != (size,) or noisy.dtype != jnp.bool_:
            raise ValueError(
                f"{name}.epoch_input(condition, epoch) must give (mean, noisy): a float "
                f"[{size}] and a bool [{size}], one entry per input {list(self.inputs)}; "
                f"got {mean.dtype}{list(mean.shape)} and {noisy.dtype}{list(noisy.shape)}."
            )

    # ------------------------------------------------------------------ what a task says

    @abc.abstractmethod
    def epoch_durations(self) -> Mapping[str, Duration]:
        """How long each epoch lasts: ``{epoch: Duration}``, every epoch of `epochs` in
        order (an epoch may last 0 ms; it is then skipped)."""

    @abc.abstractmethod
    def condition_table(self) -> Mapping[str, ArrayLike]:
        """The balanced condition table: ``{name: values [C]}``, one entry per
        condition. A trial draws a row uniformly; its values reach the other hooks as
        ``condition`` (float32 scalars by name) and ``state.info["condition"]``."""

    @abc.abstractmethod
    def answer(self, condition: Mapping[str, jax.Array]) -> jax.Array:
        """The correct action (int32 ``[]``) of a trial with these condition values;
        ``0`` if the right answer is to withhold (a no-go trial)."""

    @abc.abstractmethod
    def epoch_input(
        self, condition: Mapping[str, jax.Array], epoch: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        """The input shown in ``epoch`` (an int32 index into `epochs`; compare it with
        `epoch_index`): ``(mean, noisy)``, the noiseless input ``[n_inputs]`` and which
        channels get the noise ``sigma / sqrt(dt) * N(0, 1)`` (bool ``[n_inputs]``)."""

    def decision_reward(self, condition: Mapping[str, jax.Array], choice: jax.Array) -> jax.Array:
        """The reward of choosing ``choice`` (an action >= 1) in a response epoch;
        default: ``correct_reward`` if it is the `answer`, else 0."""
        return jnp.where(choice == self.answer(condition), self.correct_reward, 0.0)

    # ------------------------------------------------------------------ derived facts

    @property
    def n_conditions(self) -> int:
        """The number of rows of the condition table."""
        return int(next(iter(self.conditions.values())).shape[0])

    @property
    def max_trial_steps(self) -> int:
        """The longest trial, in steps (an evaluation that runs this long sees every
        trial end)."""
        return sum(d.max_steps(self.dt) for d in self.epoch_durations().values())

    @property
    def max_episode_steps(self) -> int:
        """`max_trial_steps`: one episode is one trial."""
        return self.max_trial_steps

    @property
    def action_size(self) -> int:
        """The number of actions (fixate and the choices)."""
        return len(self.actions)

    @property
    def observation_size(self) -> Any:
        """``n_inputs``, or ``{group: (size,)}`` with ``dict_obs``."""
        if self.dict_obs:
            return {k: (len(v),) for k, v in self.groups.items()}
        return len(self.inputs)

    def epoch_index(self, name: str) -> int:
        """The index of epoch ``name`` in `epochs` (as ``info["epoch"]`` reports it)."""
        if name not in self.epochs:
            raise ValueError(f"{type(self).__name__}: no epoch {name!r}; epochs are {self.epochs}.")
        return self.epochs.index(name)

    def condition_values(self, index: jax.Array) -> dict[str, jax.Array]:
        """Row ``index`` of the condition table as ``{name: float32 []}``."""
        return {k: jnp.asarray(v)[index] for k, v in self.conditions.items()}

    # ------------------------------------------------------------------ the env API

    def reset(self, rng: jax.Array) -> State:
        """Starts a trial of a condition drawn uniformly from the table."""
        pick, rng = jax.random.split(rng)
        index = jax.random.randint(pick, (), 0, self.n_conditions, jnp.int32)
        return self.reset_condition(rng, index)

    def reset_condition(self, rng: jax.Array, condition: Any) -> State:
        """Starts a trial of condition row ``condition`` (int, may be traced): what an
        evaluation that scores every condition equally often calls."""
        condition = jnp.asarray(condition, jnp.int32)
        draws = jax.random.split(rng, len(self.epochs) + 1)
        steps = [
            d.steps(d.sample(k), self.dt)
            for d, k in zip(self.durations.values(), draws[1:], strict=True)
        ]
        bounds = jnp.concatenate([jnp.zeros((1,), jnp.int32), jnp.cumsum(jnp.stack(steps))])
        trial = TrialState(key=draws[0], condition=condition, bounds=bounds, t=jnp.int32(0))
        obs, trial = self._observe(trial)
        zero = jnp.zeros((), jnp.float32)
        return State(
            obs=obs,
            reward=zero,
            done=zero,
            metrics=dict.fromkeys(("trial_end", "correct", "decision", "abort"), zero),
            info=self._info(trial, Outcome.ONGOING, jnp.int32(0), jnp.int32(-1)),
            pipeline_state=trial,
        )

    def step(self, state: State, action: Any) -> State:
        """Judges ``action`` against the epoch of the observation it answers, then ends
        the trial or shows the next step's observation."""
        choice = self._check_action(action)
        trial: TrialState = state.pipeline_state
        condition = self.condition_values(trial.condition)
        answer = self.answer(condition)
        epoch = self._epoch(trial.bounds, trial.t)
        responding = jnp.isin(epoch, jnp.asarray(self._response_indices()))
        chose = choice != 0
        aborted = chose & ~responding
        decided = chose & responding
        timeout = ~chose & (trial.t + 1 >= trial.bounds[-1])
        withheld_right = timeout & (answer == 0)
        reward = jnp.where(decided, self.decision_reward(condition, choice), 0.0)
        reward = jnp.where(aborted, self.abort_reward, reward)
        reward = jnp.where(withheld_right, self.correct_reward, reward)
        correct = (decided & (choice == answer)) | withheld_right
        outcome = jnp.select(
            [aborted, correct, decided, timeout],
            [Outcome.ABORTED, Outcome.CORRECT, Outcome.WRONG, Outcome.NO_DECISION],
            Outcome.ONGOING,
        ).astype(jnp.int32)
        done = aborted | decided | timeout
        # The next observation: the step after t while the trial runs; at its end the
        # last one again (the trainer resets the env, so it is never acted on).
        following = trial.replace(t=jnp.where(done, trial.t, trial.t + 1))
        obs, following = self._observe(following)
        obs = jax.tree.map(lambda new, old: jnp.where(done, old, new), obs, state.obs)
        as_float = lambda x: x.astype(jnp.float32)
        return state.replace(
            obs=obs,
            reward=reward.astype(jnp.float32),
            done=as_float(done),
            metrics={  # keys added by wrappers are kept, as brax envs keep them
                **state.metrics,
                "trial_end": as_float(done),
                "correct": as_float(correct),
                "decision": as_float(decided),
                "abort": as_float(aborted),
            },
            info={
                **state.info,
                **self._info(
                    following,
                    outcome,
                    jnp.where(decided, choice, 0).astype(jnp.int32),
                    jnp.where(decided, trial.t, -1).astype(jnp.int32),
                ),
            },
            pipeline_state=following,
        )

    # ------------------------------------------------------------------ internals

    def _response_indices(self) -> list[int]:
        return [self.epochs.index(e) for e in self.epochs if e in self.response_epochs]

    @staticmethod
    def _epoch(bounds: jax.Array, t: jax.Array) -> jax.Array:
        """The epoch (int32) of step ``t``: the last epoch whose first step is <= t.
        Epochs of zero steps are skipped."""
        return (jnp.sum(bounds[1:-1] <= t)).astype(jnp.int32)

    def _observe(self, trial: TrialState) -> tuple[Any, TrialState]:
        key, noise_key = jax.random.split(trial.key)
        condition = self.condition_values(trial.condition)
        mean, noisy = self.epoch_input(condition, self._epoch(trial.bounds, trial.t))
        noise = jax.random.normal(noise_key, (len(self.inputs),), jnp.float32)
        obs = mean.astype(jnp.float32) + jnp.where(
            noisy, self.sigma / math.sqrt(self.dt) * noise, 0.0
        )
        if self.dict_obs:
            index = {c: i for i, c in enumerate(self.inputs)}
            groups = {g: obs[jnp.asarray([index[c] for c in cs])] for g, cs in self.groups.items()}
            return groups, trial.replace(key=key)
        return obs, trial.replace(key=key)

    def _info(
        self,
        trial: TrialState,
        outcome: Any,
        choice: jax.Array,
        decision_step: jax.Array,
    ) -> dict[str, Any]:
        # A decision answering the observation of step t is made after t + 1 steps.
        condition = self.condition_values(trial.condition)
        decided = decision_step >= 0
        decision_ms = jnp.where(decided, (decision_step + 1) * self.dt, -1.0)
        onset_ms = trial.bounds[self._first_response] * self.dt
        return {
            "condition": condition,
            "condition_index": trial.condition,
            "epoch": self._epoch(trial.bounds, trial.t),
            "time": trial.t,
            "answer": self.answer(condition).astype(jnp.int32),
            "outcome": jnp.asarray(outcome, jnp.int32),
            "choice": choice,
            "decision_time": decision_ms.astype(jnp.float32),
            "reaction_time": jnp.where(decided, decision_ms - onset_ms, -1.0).astype(jnp.float32),
        }

    def _check_action(self, action: Any) -> jax.Array:
        name = type(self).__name__
        if isinstance(action, Mapping) or jnp.shape(action) != ():
            shape = type(action).__name__ if isinstance(action, Mapping) else jnp.shape(action)
            raise ValueError(
                f"{name}.step: action must be one integer index per (unbatched) "
                f"environment, shape (), got {shape}. The task's actions are discrete "
                f"({dict(enumerate(self.actions))}); end the policy with a "
                "CategoricalSampler (action_distribution='categorical' in the factories)."
            )
        if not jnp.issubdtype(jnp.result_type(action), jnp.integer):
            raise ValueError(
                f"{name}.step: action has dtype {jnp.result_type(action)}, but the task's "
                "actions are discrete indices; use action_distribution='categorical'."
            )
        return jnp.clip(jnp.asarray(action, jnp.int32), 0, len(self.actions) - 1)
