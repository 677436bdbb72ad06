"""Post-decision wager: `PostDecisionWager`, a perceptual decision with a sure option.

The random-dots task with post-decision wagering of Kiani & Shadlen (2009, Science
324:759), as Song, Yang & Wang (2017) define it in pyrl's ``postdecisionwager``, written
here from that definition.
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
from nnx_ppo.envs.cognitive.decision import coherence_scale

__all__ = ["PostDecisionWager"]


class PostDecisionWager(CognitiveTask):
    """Which way do the dots move, and is it worth betting on? Left, right or sure.

    Channels ``fixation, left, right, sure``; actions ``fixate, left, right, sure``. The
    stimulus is `PerceptualDecisionMaking`'s: during it the channel of the true
    direction shows ``(1 + c / 100) / 2`` and the other ``(1 - c / 100) / 2``, each with
    noise ``sigma / sqrt(dt)`` per step. A delay follows; on half of the trials (the
    *wager* trials) a sure target appears during the delay, 500-750 ms after the
    stimulus's offset, and stays on (channel ``sure`` = 1, noiseless) to the trial's
    end. The fixation channel is 1 until the decision epoch (the go cue).

    In the decision epoch ``left`` or ``right`` earns ``correct_reward`` if it is the
    dots' direction, else 0; ``sure`` earns ``sure_reward * correct_reward`` (0.7 as
    published) whatever the direction on a wager trial, and is treated as breaking
    fixation on a trial without the sure target (``abort_reward``, ``Outcome.ABORTED``,
    as pyrl rewards it). A sure choice ends the trial as a decision that is not the
    answer (``Outcome.WRONG``, ``info["choice"] == 3``); the task's `opt_out_action`
    tells `TrialResults` to count it as answered but leave it out of the accuracy.

    Epochs (pyrl's laws): fixation 750 ms; stimulus ``100 + Exp(180)`` ms truncated
    below 900 ms; ``delay`` until the sure target's onset, ``Exp(575)`` truncated to
    ``[500, 750)`` ms; ``sure``, the rest of the delay, whose whole length is ``Exp(1350)``
    truncated to ``[1200, 1800)`` ms (both drawn on every trial; the sure channel is on
    in ``sure`` and ``decision`` of wager trials only); decision 500 ms (pyrl runs it to
    its fixed ``tmax``). Conditions: wager or not times the coherences 0, 3.2, 6.4, 12.8,
    25.6, 51.2 % times both directions = 24; ``info["condition"]`` has ``wager`` (1 or
    0), ``coherence``, ``direction`` (``-1`` left, ``+1`` right) and
    ``signed_coherence``. ``sigma = sqrt(2)``.

    Published criteria. Training (pyrl): answers (``left``, ``right`` or ``sure``) on
    >= 99 % of trials, >= 80 % of the left/right decisions correct and the sure option
    chosen on 40-60 % of the wager trials. Behaviour (Kiani & Shadlen 2009; Song et al.
    2017, Fig. 5): the sure option is chosen more often at low coherence, and on wager
    trials where it was waived the choices are more accurate than on trials without it.
    `nnx_ppo.algorithms.analysis.wager_criterion` checks all three on evaluated trials.

    The ideal observer sums ``right - left`` over the stimulus, ``E``; for a stimulus of
    ``D`` ms at coherence ``c`` it is right with probability ``Phi(c / 100 * sqrt(D) /
    (sqrt(2) * sigma))`` on trials without the sure target, and on wager trials it
    takes the sure option when ``|E|`` is small (when its posterior of being right is
    below ``sure_reward``), which leaves it the easy trials: its accuracy on waived
    trials is higher. Without memory of the stimulus a policy sees the same decision
    epoch on every direction: it is at chance on left/right and earns at most
    ``(0.5 + sure_reward) / 2`` per trial.

    Args:
        coherences: Unsigned coherences in percent (default: the published ones).
        sure_reward: The sure option's reward as a fraction of ``correct_reward``, in
            ``(0, 1)`` (default 0.7, pyrl's ``R_SURE``).
        **options: The shared task keywords, `TaskOptions` (``dt``, ``sigma``, ...).

    Examples:
        >>> import jax
        >>> env = PostDecisionWager(dt=20)
        >>> env.actions, env.n_conditions, env.opt_out_action
        (('fixate', 'left', 'right', 'sure'), 24, 3)
        >>> state = env.reset_condition(jax.random.key(0), 0)  # a wager trial
        >>> float(state.info["condition"]["wager"]), state.obs.tolist()  # fixation
        (1.0, [1.0, 0.0, 0.0, 0.0])
    """

    inputs = ("fixation", "left", "right", "sure")
    actions = ("fixate", "left", "right", "sure")
    epochs = ("fixation", "stimulus", "delay", "sure", "decision")
    groups = {"fixation": ("fixation",), "stimulus": ("left", "right"), "sure": ("sure",)}
    default_sigma = float(np.sqrt(2 * 100 * 0.01))
    psychometric_variable = "signed_coherence"
    condition_units = {"coherence": "%", "signed_coherence": "%"}
    opt_out_action = 3
    """The sure option's action index: an answer, but neither right nor wrong
    (`TrialResults` leaves it out of the accuracy)."""
    sure_window: tuple[float, float] = (0.4, 0.6)
    """pyrl's training criterion on the fraction of sure choices among answered wager
    trials: strictly inside this window."""

    _DELAY = Duration.truncated_exponential(1350, 1200, 1800)
    """The whole delay (stimulus offset to the go cue)."""

    def __init__(
        self,
        *,
        coherences: Sequence[float] | None = None,
        sure_reward: float = 0.7,
        **options: Unpack[TaskOptions],
    ) -> None:
        default = (0, 3.2, 6.4, 12.8, 25.6, 51.2)
        cohs = np.asarray(default if coherences is None else coherences, np.float32)
        if cohs.ndim != 1 or cohs.size == 0 or np.any(cohs < 0) or np.any(cohs > 100):
            raise ValueError(
                f"PostDecisionWager: coherences={coherences!r} must be a non-empty sequence "
                "of percentages in [0, 100] (unsigned; both directions are used)."
            )
        self.coherences = cohs
        self.sure_reward = check_float(
            "PostDecisionWager", "sure_reward", sure_reward, allow_zero=False,
            meaning="fraction of correct_reward",
        )  # fmt: skip
        if not self.sure_reward < 1:
            raise ValueError(
                f"PostDecisionWager: sure_reward={sure_reward!r} must be in (0, 1): a sure "
                "option worth a correct answer is always taken (pyrl: 0.7)."
            )
        super().__init__(**options)

    def epoch_durations(self) -> Mapping[str, Duration]:
        return {
            "fixation": Duration.fixed(750),
            "stimulus": Duration.truncated_exponential(180, 100, 900),
            "delay": Duration.truncated_exponential(575, 500, 750),  # to the sure onset
            "sure": self._DELAY,  # the whole delay; `reset_condition` subtracts the onset
            "decision": Duration.fixed(500),
        }

    @property
    def max_trial_steps(self) -> int:
        """The longest trial, in steps: fixation, stimulus, the whole delay, decision."""
        d = self.epoch_durations()
        parts = (d["fixation"], d["stimulus"], self._DELAY, d["decision"])
        return sum(p.max_steps(self.dt) for p in parts)

    def reset_condition(self, rng: jax.Array, condition: Any) -> State:
        """Starts a trial of condition row ``condition``; the ``sure`` epoch is the part
        of the delay after the sure target's onset (pyrl draws the delay and the onset
        independently)."""
        state = super().reset_condition(rng, condition)
        trial = state.pipeline_state
        steps = jnp.diff(trial.bounds)
        sure = self.epoch_index("sure")
        steps = steps.at[sure].set(steps[sure] - steps[sure - 1])  # delay minus onset
        bounds = jnp.concatenate([jnp.zeros((1,), jnp.int32), jnp.cumsum(steps)])
        # The first observation (fixation) does not depend on the later epochs' bounds.
        return state.replace(pipeline_state=trial.replace(bounds=bounds.astype(jnp.int32)))

    def step(self, state: State, action: Any) -> State:
        """`CognitiveTask.step`, with the sure option on a trial without it treated as
        breaking fixation."""
        following = super().step(state, action)
        wager = self.condition_values(state.pipeline_state.condition)["wager"] > 0
        absent = (following.info["choice"] == self.opt_out_action) & ~wager
        zero, one = jnp.zeros((), jnp.float32), jnp.ones((), jnp.float32)
        info = dict(following.info)
        info.update(
            outcome=jnp.where(absent, Outcome.ABORTED, info["outcome"]).astype(jnp.int32),
            choice=jnp.where(absent, 0, info["choice"]).astype(jnp.int32),
            decision_time=jnp.where(absent, -1.0, info["decision_time"]).astype(jnp.float32),
            reaction_time=jnp.where(absent, -1.0, info["reaction_time"]).astype(jnp.float32),
        )
        metrics = dict(following.metrics)
        metrics.update(
            decision=jnp.where(absent, zero, metrics["decision"]),
            abort=jnp.where(absent, one, metrics["abort"]),
        )
        return following.replace(info=info, metrics=metrics)

    def condition_table(self) -> Mapping[str, ArrayLike]:
        n = self.coherences.size
        wager = np.repeat([1.0, 0.0], 2 * n)
        direction = np.tile(np.repeat([-1.0, 1.0], n), 2)
        coherence = np.tile(self.coherences, 4)
        return {
            "wager": wager,
            "coherence": coherence,
            "direction": direction,
            "signed_coherence": direction * coherence,
        }

    def answer(self, condition: Mapping[str, jax.Array]) -> jax.Array:
        return jnp.where(condition["direction"] < 0, 1, 2).astype(jnp.int32)

    def decision_reward(self, condition: Mapping[str, jax.Array], choice: jax.Array) -> jax.Array:
        right = jnp.where(choice == self.answer(condition), self.correct_reward, 0.0)
        sure = jnp.where(
            condition["wager"] > 0, self.sure_reward * self.correct_reward, self.abort_reward
        )
        return jnp.where(choice == self.opt_out_action, sure, right)

    def epoch_input(
        self, condition: Mapping[str, jax.Array], epoch: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        stimulus = epoch == self.epoch_index("stimulus")
        fixating = (epoch < self.epoch_index("decision")).astype(jnp.float32)
        signed = condition["signed_coherence"]
        left, right = coherence_scale(-signed), coherence_scale(signed)
        sure = (epoch >= self.epoch_index("sure")) & (condition["wager"] > 0)
        mean = jnp.stack([fixating, left * stimulus, right * stimulus, sure.astype(jnp.float32)])
        return mean, jnp.stack([False, stimulus, stimulus, False])
