"""Interval timing: `ReadySetGo`, measure an interval and produce it again.

The ready-set-go task of Jazayeri & Shadlen (2010, Nat. Neurosci. 13:1020), with the
trial structure and the gain of NeuroGym's ``ReadySetGo``; the specification is given
here and the task written from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Unpack

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike

from nnx_ppo.envs._helpers import check_float
from nnx_ppo.envs.base import State
from nnx_ppo.envs.cognitive._trial import CognitiveTask, Duration, Outcome, TaskOptions

__all__ = ["ReadySetGo"]


class ReadySetGo(CognitiveTask):
    """Two flashes, *ready* and *set*, mark an interval; answer *go* that long after set.

    Channels ``fixation, ready, set``; actions ``fixate, go``. After fixation a
    ``flash``-ms pulse on ``ready`` starts the sample interval ``t_s`` (a condition); a
    pulse on ``set`` ends it, ``t_s`` after ready's onset; the target is to answer
    ``go`` ``gain * t_s`` after set's onset. The observations are noiseless (``sigma``
    0 by default); the fixation channel is 1 until set's onset.

    ``go`` before set breaks fixation (``abort_reward``). From set's onset ``go`` ends
    the trial; its produced interval ``t_p``, ms from set's onset to the decision, is
    ``info["reaction_time"]``. With the target ``t_t = gain * t_s`` and the window
    ``w = margin * t_t`` (relative: the allowed error grows with the interval, as the
    animals' scalar timing noise does) the reward is ``correct_reward * (1 - |t_p -
    t_t| / w)``, falling linearly from ``correct_reward`` at the target to 0 at the
    window's edges; the trial is *correct* when ``|t_p - t_t| < w`` (reward > 0). No
    ``go`` within ``2 * t_t`` after set ends the trial with reward 0 (``NO_DECISION``).

    Epochs: fixation 500 ms, ready ``flash``, measure ``t_s - flash``, set ``flash``,
    production ``2 * gain * t_s - flash`` (the measure and production epochs follow the
    trial's interval). Conditions: one per sample interval, by default NeuroGym's
    800-1500 ms in steps of 100 ms = 8 (a discrete uniform prior, as in Jazayeri &
    Shadlen's experiments); ``info["condition"]`` has ``interval`` (``t_s``) and
    ``target`` (``t_t``), in ms. Every trial's answer is ``go`` (1); its scores are
    timing ones: `nnx_ppo.algorithms.analysis.timing_scores` gives the produced
    interval per sample interval and the regression slope of ``t_p`` on ``t_s`` (the
    gain for perfect timing; below it where produced intervals regress to the prior's
    mean, as in Jazayeri & Shadlen 2010).

    Criterion (ours, NeuroGym has none): >= 99 % decisions, >= 80 % of them within the
    window. The ideal observer counts the steps from ready's onset to set's onset and
    answers after ``gain`` times as many: its error is below one step (0 when
    ``gain * t_s`` is a whole number of steps), correct on every trial at reward
    ``correct_reward``. Without memory a policy sees the same observation on every step
    of the production epoch whatever ``t_s``: it cannot time its answer from set, and
    its produced interval does not depend on ``t_s`` (slope 0).

    Args:
        intervals: The sample intervals ``t_s`` in ms (> ``flash``; default 800, 900,
            ..., 1500).
        gain: The produced interval's target as a multiple of the sample (> 0; default
            1, NeuroGym's ``gain``).
        margin: The reward window's half-width as a fraction of the target (> 0;
            default 0.2, NeuroGym's ``prod_margin``).
        flash: The duration of the ready and set pulses in ms (> 0; default 100).
        **options: The shared task keywords, `TaskOptions` (``dt``, ``sigma``, ...).

    Examples:
        >>> import jax
        >>> env = ReadySetGo(dt=20)
        >>> env.actions, env.n_conditions, env.max_trial_steps
        (('fixate', 'go'), 8, 250)
        >>> state = env.reset_condition(jax.random.key(0), 0)  # t_s = 800 ms
        >>> step = jax.jit(env.step)
        >>> for _ in range(102):  # fixate for 2040 ms: set's onset is at 1300 ms
        ...     state = step(state, jax.numpy.int32(0))
        >>> state = step(state, jax.numpy.int32(1))  # go after 2060 ms: t_p = 760
        >>> float(state.info["reaction_time"]), round(float(state.reward), 3)
        (760.0, 0.75)
    """

    inputs = ("fixation", "ready", "set")
    actions = ("fixate", "go")
    epochs = ("fixation", "ready", "measure", "set", "production")
    response_epochs = frozenset({"set", "production"})
    groups = {"fixation": ("fixation",), "cue": ("ready", "set")}
    default_sigma = 0.0
    condition_units = {"interval": "ms", "target": "ms"}

    def __init__(
        self,
        *,
        intervals: Sequence[float] | None = None,
        gain: float = 1.0,
        margin: float = 0.2,
        flash: float = 100.0,
        **options: Unpack[TaskOptions],
    ) -> None:
        name = "ReadySetGo"
        self.gain = check_float(name, "gain", gain, allow_zero=False, meaning="target / sample")
        self.margin = check_float(
            name, "margin", margin, allow_zero=False, meaning="window / target"
        )
        self.flash = check_float(name, "flash", flash, allow_zero=False, meaning="ms")
        values = np.asarray(
            np.arange(800, 1501, 100) if intervals is None else intervals, np.float32
        )
        if values.ndim != 1 or values.size == 0 or np.any(values <= self.flash):
            raise ValueError(
                f"{name}: intervals={intervals!r} must be a non-empty sequence of sample "
                f"intervals in ms, each longer than flash={self.flash!r} ms."
            )
        if not 2 * self.gain * float(values.min()) > self.flash:
            raise ValueError(
                f"{name}: gain={gain!r} leaves the shortest interval ({float(values.min()):g} "
                f"ms) a production epoch of 2 * gain * interval <= flash={self.flash!r} ms; "
                "raise gain or the intervals."
            )
        self.intervals = values
        super().__init__(**options)
        # Both pulses must last at least a step, or a cue would never be shown.
        if self.durations["ready"].max_steps(self.dt) < 1:
            raise ValueError(
                f"{name}: flash={self.flash!r} ms is shorter than dt={self.dt!r} ms: the "
                "ready and set pulses would not be shown; lower dt or lengthen flash."
            )

    def epoch_durations(self) -> Mapping[str, Duration]:
        longest = float(self.intervals.max())
        return {
            "fixation": Duration.fixed(500),
            "ready": Duration.fixed(self.flash),
            "measure": Duration.fixed(longest - self.flash),  # the longest; set per trial
            "set": Duration.fixed(self.flash),
            "production": Duration.fixed(2 * self.gain * longest - self.flash),
        }

    def reset_condition(self, rng: jax.Array, condition: Any) -> State:
        """Starts a trial of condition row ``condition`` (sample interval ``t_s``): the
        measure and production epochs follow ``t_s``."""
        state = super().reset_condition(rng, condition)
        trial = state.pipeline_state
        interval = self.condition_values(trial.condition)["interval"]
        steps = jnp.diff(trial.bounds)
        to_steps = lambda ms: jnp.round(ms / self.dt).astype(jnp.int32)
        flash = steps[self.epoch_index("ready")]
        steps = steps.at[self.epoch_index("measure")].set(to_steps(interval) - flash)
        production = to_steps(2 * self.gain * interval) - flash
        steps = steps.at[self.epoch_index("production")].set(jnp.maximum(production, 0))
        bounds = jnp.concatenate([jnp.zeros((1,), jnp.int32), jnp.cumsum(steps)])
        # The first observation (fixation) does not depend on the later epochs' bounds.
        return state.replace(pipeline_state=trial.replace(bounds=bounds.astype(jnp.int32)))

    def step(self, state: State, action: Any) -> State:
        """`CognitiveTask.step`, a ``go`` rewarded by its timing error."""
        following = super().step(state, action)
        condition = self.condition_values(state.pipeline_state.condition)
        decided = following.metrics["decision"] > 0
        error = jnp.abs(following.info["reaction_time"] - condition["target"])
        window = self.margin * condition["target"]
        within = decided & (error < window)
        reward = self.correct_reward * jnp.maximum(1.0 - error / window, 0.0)
        info = dict(following.info)
        outcome = jnp.where(within, Outcome.CORRECT, Outcome.WRONG)
        info["outcome"] = jnp.where(decided, outcome, info["outcome"]).astype(jnp.int32)
        metrics = {**following.metrics, "correct": within.astype(jnp.float32)}
        return following.replace(
            reward=jnp.where(decided, reward, following.reward).astype(jnp.float32),
            info=info,
            metrics=metrics,
        )

    def condition_table(self) -> Mapping[str, ArrayLike]:
        return {"interval": self.intervals, "target": self.gain * self.intervals}

    def answer(self, condition: Mapping[str, jax.Array]) -> jax.Array:
        return jnp.ones((), jnp.int32)

    def epoch_input(
        self, condition: Mapping[str, jax.Array], epoch: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        fixating = epoch < self.epoch_index("set")
        ready, set_ = epoch == self.epoch_index("ready"), epoch == self.epoch_index("set")
        mean = jnp.stack([fixating, ready, set_]).astype(jnp.float32)
        return mean, jnp.zeros((3,), bool)
