"""Perceptual decision making: `PerceptualDecisionMaking`, fixed duration or reaction time.

The random-dots motion task of Kiani, Hanks & Shadlen (2008; fixed duration) and
Roitman & Shadlen (2002; reaction time), as Song, Yang & Wang (2017) define it in
pyrl's ``rdm_fixed`` and ``rdm_rt``, written here from those definitions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Unpack

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike

from nnx_ppo.envs._helpers import check_bool
from nnx_ppo.envs.cognitive._trial import CognitiveTask, Duration, TaskOptions

__all__ = ["PerceptualDecisionMaking", "coherence_scale"]


def coherence_scale(coherence: jax.Array) -> jax.Array:
    """pyrl's input scaling of a coherence in percent: ``(1 + coherence / 100) / 2``."""
    return (1.0 + coherence / 100.0) / 2.0


class PerceptualDecisionMaking(CognitiveTask):
    """Which way do the dots move? Two noisy evidence channels, left and right.

    Channels ``fixation, left, right``; actions ``fixate, left, right``. During the
    stimulus the channel of the true direction shows ``(1 + c / 100) / 2`` and the other
    ``(1 - c / 100) / 2``, each with noise ``sigma / sqrt(dt)`` per step, for coherence
    ``c`` (percent). Conditions: every coherence times both directions (10 fixed-duration,
    12 reaction-time conditions); ``info["condition"]`` has ``coherence`` (unsigned),
    ``direction`` (``-1`` left, ``+1`` right) and ``signed_coherence``.

    - **Fixed duration** (``reaction_time=False``, pyrl's ``rdm_fixed``): fixation
      750 ms, stimulus ``80 + Exp(330)`` ms truncated below 1500 ms (pyrl's exponential
      of mean 330 ms conditioned on ``[80, 1500)``, the same law), decision 500 ms. The fixation
      channel is 1 until the decision epoch (the go cue); choosing earlier aborts.
      Coherences 0, 6.4, 12.8, 25.6, 51.2 %; ``sigma = sqrt(2)``.
    - **Reaction time** (``reaction_time=True``, ``rdm_rt``): fixation 750 ms, then the
      stimulus for up to 2000 ms during which a choice ends the trial;
      ``info["reaction_time"]`` is from the stimulus onset. Coherences 0, 3.2, 6.4,
      12.8, 25.6, 51.2 %; ``sigma = sqrt(3)``.

    Published training criterion (Song et al. 2017): decisions on >= 99 % of trials and
    >= 80 % of them correct. The ideal observer sums ``right - left`` over the stimulus;
    for a stimulus of ``D`` ms its accuracy at coherence ``c`` is
    ``Phi(c / 100 * sqrt(D) / (sqrt(2) * sigma))`` (the tests check it by Monte Carlo).

    Args:
        reaction_time: The reaction-time version.
        coherences: Unsigned coherences in percent (default: the published ones).
        **options: The shared task keywords, `TaskOptions` (``dt``, ``sigma``, ...).

    Examples:
        >>> import jax
        >>> env = PerceptualDecisionMaking(dt=20)
        >>> state = env.reset(jax.random.key(0))
        >>> state.obs.shape, env.action_size, env.n_conditions, env.max_trial_steps
        ((3,), 3, 10, 138)
        >>> state = env.step(state, jax.numpy.int32(1))      # a choice during fixation
        >>> float(state.reward), int(state.info["outcome"]), float(state.done)
        (-1.0, 3, 1.0)
    """

    inputs = ("fixation", "left", "right")
    groups = {"fixation": ("fixation",), "stimulus": ("left", "right")}
    psychometric_variable = "signed_coherence"
    condition_units = {"coherence": "%", "signed_coherence": "%"}

    def __init__(
        self,
        *,
        reaction_time: bool = False,
        coherences: Sequence[float] | None = None,
        **options: Unpack[TaskOptions],
    ) -> None:
        self.reaction_time = check_bool("PerceptualDecisionMaking", "reaction_time", reaction_time)
        default = (0, 3.2, 6.4, 12.8, 25.6, 51.2) if reaction_time else (0, 6.4, 12.8, 25.6, 51.2)
        cohs = np.asarray(default if coherences is None else coherences, np.float32)
        if cohs.ndim != 1 or cohs.size == 0 or np.any(cohs < 0) or np.any(cohs > 100):
            raise ValueError(
                f"PerceptualDecisionMaking: coherences={coherences!r} must be a non-empty "
                "sequence of percentages in [0, 100] (unsigned; both directions are used)."
            )
        self.coherences = cohs
        self.epochs = (
            ("fixation", "stimulus") if reaction_time else ("fixation", "stimulus", "decision")
        )
        self.response_epochs = frozenset({"stimulus"} if reaction_time else {"decision"})
        self.default_sigma = float(np.sqrt(3.0 if reaction_time else 2.0))
        super().__init__(**options)

    def epoch_durations(self) -> Mapping[str, Duration]:
        if self.reaction_time:
            return {"fixation": Duration.fixed(750), "stimulus": Duration.fixed(2000)}
        return {
            "fixation": Duration.fixed(750),
            "stimulus": Duration.truncated_exponential(330, 80, 1500),
            "decision": Duration.fixed(500),
        }

    def condition_table(self) -> Mapping[str, ArrayLike]:
        direction = np.repeat([-1.0, 1.0], self.coherences.size)
        coherence = np.tile(self.coherences, 2)
        return {
            "coherence": coherence,
            "direction": direction,
            "signed_coherence": direction * coherence,
        }

    def answer(self, condition: Mapping[str, jax.Array]) -> jax.Array:
        return jnp.where(condition["direction"] < 0, 1, 2).astype(jnp.int32)

    def epoch_input(
        self, condition: Mapping[str, jax.Array], epoch: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        stimulus = epoch == self.epoch_index("stimulus")
        fixating = (
            epoch < self.epoch_index("stimulus")
            if self.reaction_time
            else ~(epoch == self.epoch_index("decision"))
        )
        signed = condition["signed_coherence"]
        left, right = coherence_scale(-signed), coherence_scale(signed)
        mean = jnp.stack([fixating.astype(jnp.float32), left * stimulus, right * stimulus])
        return mean, jnp.stack([False, stimulus, stimulus])
