"""Context-dependent integration: `ContextDependentIntegration`.

The task of Mante, Sussillo, Shenoy & Newsome (2013, Nature 503:78): a context cue says
whether the motion or the colour of a random-dots stimulus decides the answer, as Song,
Yang & Wang (2017) define it in pyrl's ``mante``, written here from that definition.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike

from nnx_ppo.envs.cognitive._trial import CognitiveTask, Duration
from nnx_ppo.envs.cognitive.decision import coherence_scale

__all__ = ["ContextDependentIntegration"]

_COHERENCES = (5.0, 15.0, 50.0)


class ContextDependentIntegration(CognitiveTask):
    """Motion or colour? Two evidence streams at once; the context cue says which counts.

    Channels ``context_motion, context_colour, motion_left, motion_right, colour_left,
    colour_right``; actions ``fixate, left, right``. The cue of the trial's context is 1
    through fixation, stimulus and delay and 0 in the decision epoch: it is also the
    fixation cue, its offset the go cue. During the stimulus each stream shows
    ``(1 + c / 100) / 2`` on the channel of its direction and ``(1 - c / 100) / 2`` on the
    other, for its coherence ``c``, every stimulus channel with noise ``sigma / sqrt(dt)``
    per step. The answer is the direction of the stream the context names; the other
    stream is a distractor.

    Conditions: 2 contexts x 6 signed motion coherences (+-5, 15, 50 %) x 6 signed
    colour coherences = 72. ``info["condition"]`` has ``context`` (``0`` motion, ``1``
    colour), ``motion_coherence`` and ``colour_coherence`` (signed, ``+`` = right) and
    ``relevant_coherence`` (the signed coherence of the stream that counts).

    Epochs: fixation 750 ms, stimulus 750 ms, delay ``300 + Exp(300)`` ms truncated
    below 1500 ms (pyrl's ``300 +`` an exponential of mean 300 ms conditioned below
    1200 ms), decision 500 ms. pyrl lets the decision epoch run to its fixed ``tmax``
    (500 ms plus what the delay left of its maximum); it is 500 ms here, which changes
    nothing for an agent that answers at the go cue. ``sigma = sqrt(2 * 100 * 0.02) =
    2``.

    Published training criterion: decisions on >= 99 % of trials and >= 85 % of them
    correct. The ideal observer reads the context and sums ``right - left`` of the
    relevant stream over the stimulus (``D = 750`` ms); its accuracy at relevant
    coherence ``c`` is ``Phi(c / 100 * sqrt(D) / (sqrt(2) * sigma))``: 68.6, 92.7 and
    100 % at 5, 15, 50 %, 87.1 % on average.

    Takes the shared task keywords, `TaskOptions` (``dt``, ``sigma``, ...).

    Examples:
        >>> import jax
        >>> env = ContextDependentIntegration(dt=20)
        >>> state = env.reset_condition(jax.random.key(0), 41)
        >>> state.obs.shape, env.n_conditions, env.max_trial_steps
        ((6,), 72, 176)
        >>> c = state.info["condition"]  # colour context: the colour decides
        >>> float(c["context"]), float(c["motion_coherence"]), float(c["colour_coherence"])
        (1.0, -50.0, 50.0)
        >>> env.actions[int(state.info["answer"])]
        'right'
    """

    inputs = (
        "context_motion",
        "context_colour",
        "motion_left",
        "motion_right",
        "colour_left",
        "colour_right",
    )
    epochs = ("fixation", "stimulus", "delay", "decision")
    groups = {
        "context": ("context_motion", "context_colour"),
        "motion": ("motion_left", "motion_right"),
        "colour": ("colour_left", "colour_right"),
    }
    default_sigma = 2.0  # sqrt(2 * 100 * 0.02)
    psychometric_variable = "relevant_coherence"
    condition_units = {
        k: "%" for k in ("motion_coherence", "colour_coherence", "relevant_coherence")
    }
    criterion = (0.99, 0.85)

    def epoch_durations(self) -> Mapping[str, Duration]:
        return {
            "fixation": Duration.fixed(750),
            "stimulus": Duration.fixed(750),
            "delay": Duration.truncated_exponential(300, 300, 1500),
            "decision": Duration.fixed(500),
        }

    def condition_table(self) -> Mapping[str, ArrayLike]:
        signed = sorted(s * c for s in (-1.0, 1.0) for c in _COHERENCES)
        rows = np.asarray(list(itertools.product((0.0, 1.0), signed, signed)), np.float32)
        context, motion, colour = rows.T
        return {
            "context": context,
            "motion_coherence": motion,
            "colour_coherence": colour,
            "relevant_coherence": np.where(context == 0, motion, colour),
        }

    def answer(self, condition: Mapping[str, jax.Array]) -> jax.Array:
        return jnp.where(condition["relevant_coherence"] < 0, 1, 2).astype(jnp.int32)

    def epoch_input(
        self, condition: Mapping[str, jax.Array], epoch: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        cued = (epoch < self.epoch_index("decision")).astype(jnp.float32)
        stimulus = epoch == self.epoch_index("stimulus")
        on = stimulus.astype(jnp.float32)
        motion, colour = condition["motion_coherence"], condition["colour_coherence"]
        mean = jnp.stack(
            [
                cued * (condition["context"] == 0),
                cued * (condition["context"] == 1),
                on * coherence_scale(-motion),
                on * coherence_scale(motion),
                on * coherence_scale(-colour),
                on * coherence_scale(colour),
            ]
        )
        return mean, jnp.stack([False, False, stimulus, stimulus, stimulus, stimulus])
