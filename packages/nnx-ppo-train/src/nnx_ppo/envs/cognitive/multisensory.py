"""Multisensory integration: `MultisensoryIntegration`.

The rate-discrimination task of Raposo, Kaufman & Churchland (2014, Nat. Neurosci.
17:1784): a flash and click rate seen, heard or both, as Song, Yang & Wang (2017)
define it in pyrl's ``multisensory``, written here from that definition.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike

from nnx_ppo.envs.cognitive._trial import CognitiveTask, Duration

__all__ = ["MultisensoryIntegration"]

_BOUNDARY = 12.5
_F_MIN = 2.0
_F_MAX = 2 * _BOUNDARY - _F_MIN  # the boundary maps to the middle of the scale


class MultisensoryIntegration(CognitiveTask):
    """Is the event rate above 12.5 Hz? Evidence seen, heard, or both at once.

    Channels ``fixation, visual_pos, visual_neg, auditory_pos, auditory_neg``; actions
    ``fixate, low, high``. A rate ``f`` (events / s) is shown on a positively and a
    negatively tuned channel of each presented modality, ``(1 + s) / 2`` and
    ``(1 - s) / 2`` with ``s = (f - 2) / (23 - 2)`` (``s = 1 / 2`` at the boundary), each
    with noise ``sigma / sqrt(dt)`` per step; an absent modality's channels are 0, without
    noise. The fixation channel is 1 until the decision epoch (the go cue).

    Epochs: fixation 750 ms, stimulus 1000 ms, decision 500 ms. Conditions: 3 modalities
    (visual, auditory, both) x rates 9, 10, ..., 16 = 24; ``info["condition"]`` has
    ``modality`` (``0`` visual, ``1`` auditory, ``2`` both), ``visual`` and ``auditory``
    (1 where presented) and ``frequency``; the answer is ``high`` above 12.5.
    ``sigma = sqrt(2 * 100 * 0.021)``.

    Published training criterion: decisions on >= 99 % of trials and >= 82 % of them
    correct. The ideal observer sums ``pos - neg - 1 / 2`` of every presented modality
    over the stimulus (``D = 1000`` ms); its accuracy at rate ``f`` is
    ``Phi(|s - 1 / 2| * sqrt(m * D) / (sqrt(2) * sigma))`` with ``m`` the number of
    modalities: 81.3 % on one, 86.8 % on both, 83.1 % on average (the multisensory
    benefit is the ``sqrt(2)``).

    Takes the shared task keywords, `TaskOptions` (``dt``, ``sigma``, ...).

    Examples:
        >>> import jax
        >>> env = MultisensoryIntegration(dt=20, sigma=0.0)
        >>> state = env.reset_condition(jax.random.key(0), 23)  # both, 16 Hz
        >>> for _ in range(38):
        ...     state = env.step(state, jax.numpy.int32(0))
        >>> [round(float(x), 3) for x in state.obs]
        [1.0, 0.833, 0.167, 0.833, 0.167]
    """

    inputs = ("fixation", "visual_pos", "visual_neg", "auditory_pos", "auditory_neg")
    actions = ("fixate", "low", "high")
    epochs = ("fixation", "stimulus", "decision")
    groups = {
        "fixation": ("fixation",),
        "visual": ("visual_pos", "visual_neg"),
        "auditory": ("auditory_pos", "auditory_neg"),
    }
    default_sigma = float(np.sqrt(2 * 100 * 0.021))
    psychometric_variable = "frequency"
    condition_units = {"frequency": "Hz"}
    criterion = (0.99, 0.82)
    boundary = _BOUNDARY
    """The rate (Hz) above which ``high`` is the answer."""

    def epoch_durations(self) -> Mapping[str, Duration]:
        return {
            "fixation": Duration.fixed(750),
            "stimulus": Duration.fixed(1000),
            "decision": Duration.fixed(500),
        }

    def condition_table(self) -> Mapping[str, ArrayLike]:
        frequencies = np.arange(9, 17, dtype=np.float32)
        modality = np.repeat([0.0, 1.0, 2.0], frequencies.size)
        return {
            "modality": modality,
            "visual": (modality != 1).astype(np.float32),
            "auditory": (modality != 0).astype(np.float32),
            "frequency": np.tile(frequencies, 3),
        }

    def answer(self, condition: Mapping[str, jax.Array]) -> jax.Array:
        return jnp.where(condition["frequency"] > _BOUNDARY, 2, 1).astype(jnp.int32)

    def epoch_input(
        self, condition: Mapping[str, jax.Array], epoch: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        stimulus = epoch == self.epoch_index("stimulus")
        s = (condition["frequency"] - _F_MIN) / (_F_MAX - _F_MIN)
        visual = stimulus & (condition["visual"] > 0)
        auditory = stimulus & (condition["auditory"] > 0)
        fixating = (epoch < self.epoch_index("decision")).astype(jnp.float32)
        pos, neg = (1 + s) / 2, (1 - s) / 2
        mean = jnp.stack([fixating, visual * pos, visual * neg, auditory * pos, auditory * neg])
        return mean, jnp.stack([False, visual, visual, auditory, auditory])
