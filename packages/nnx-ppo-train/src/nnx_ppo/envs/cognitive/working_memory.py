"""Working memory across a delay: `ParametricWorkingMemory` and `DelayedMatchToSample`.

Parametric working memory is the vibrotactile frequency comparison of Romo, Brody,
Hernandez & Lemus (1999), as Song, Yang & Wang (2017) define it in pyrl's ``romo``
(after Barak, Tsodyks & Romo 2010); delayed match-to-sample is a NeuroGym-style task
whose specification is given here. Both are written from those definitions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Unpack

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike

from nnx_ppo.envs.cognitive._trial import CognitiveTask, Duration, TaskOptions

__all__ = ["DelayedMatchToSample", "ParametricWorkingMemory"]

_FREQUENCY_PAIRS = ((18, 10), (22, 14), (26, 18), (30, 22), (34, 26))
_F_MIN, _F_MAX = 10.0, 34.0


def _frequency_scale(f: jax.Array) -> jax.Array:
    """pyrl's scaling of a frequency (Hz) to [0, 1] over the task's range, 10-34 Hz."""
    return (f - _F_MIN) / (_F_MAX - _F_MIN)


class ParametricWorkingMemory(CognitiveTask):
    """Was the first vibration faster than the second? f1, a 3 s delay, then f2.

    Channels ``fixation, f_pos, f_neg``; actions ``fixate, f1>f2, f1<f2``. A frequency
    ``f`` (Hz) is shown on a positively and a negatively tuned channel, ``(1 + s) / 2``
    and ``(1 - s) / 2`` with ``s = (f - 10) / (34 - 10)``, each with noise
    ``sigma / sqrt(dt)`` per step, during its epoch (0 elsewhere). The fixation channel is
    1 until the decision epoch (the go cue).

    Epochs: fixation 750 ms, f1 500 ms, delay uniform in 2700-3300 ms, f2 500 ms,
    decision 500 ms (pyrl runs the decision epoch to its fixed ``tmax``: 500 ms plus what
    the delay left of 3300 ms). Conditions: the pairs (18, 10), (22, 14), (26, 18),
    (30, 22), (34, 26) Hz in either order = 10; ``info["condition"]`` has ``f1``, ``f2``
    and ``difference = f1 - f2``. ``sigma = sqrt(2 * 100 * 0.001)``.

    Published training criterion: decisions on >= 99 % of trials and >= 97 % of them
    correct. The ideal observer remembers f1's summed evidence ``E1 = sum (f_pos - f_neg)
    * dt`` and compares it with f2's; for epochs of ``D = 500`` ms its accuracy is
    ``Phi(|s1 - s2| * sqrt(D) / (2 * sigma))``, ``Phi(8.3)``: 100 %. Without memory of f1
    no policy beats chance at the go cue, and one that judges f2 alone scores 70 %: f2
    settles 4 of the 10 conditions (10, 14 Hz: f1 > f2; 30, 34 Hz: f1 < f2), and 18,
    22 and 26 Hz are the f2 of one condition of either answer.

    Takes the shared task keywords, `TaskOptions` (``dt``, ``sigma``, ...).

    Examples:
        >>> import jax
        >>> env = ParametricWorkingMemory(dt=20)
        >>> env.actions, env.n_conditions, env.max_trial_steps
        (('fixate', 'f1>f2', 'f1<f2'), 10, 278)
        >>> state = env.reset_condition(jax.random.key(0), 0)
        >>> {k: float(v) for k, v in state.info["condition"].items()}
        {'f1': 18.0, 'f2': 10.0, 'difference': 8.0}
    """

    inputs = ("fixation", "f_pos", "f_neg")
    actions = ("fixate", "f1>f2", "f1<f2")
    epochs = ("fixation", "f1", "delay", "f2", "decision")
    groups = {"fixation": ("fixation",), "frequency": ("f_pos", "f_neg")}
    default_sigma = float(np.sqrt(2 * 100 * 0.001))
    psychometric_variable = "difference"
    condition_units = {"f1": "Hz", "f2": "Hz", "difference": "Hz"}
    criterion = (0.99, 0.97)

    def epoch_durations(self) -> Mapping[str, Duration]:
        return {
            "fixation": Duration.fixed(750),
            "f1": Duration.fixed(500),
            "delay": Duration.uniform(2700, 3300),
            "f2": Duration.fixed(500),
            "decision": Duration.fixed(500),
        }

    def condition_table(self) -> Mapping[str, ArrayLike]:
        pairs = np.asarray(_FREQUENCY_PAIRS, np.float32)
        f1 = np.concatenate([pairs[:, 0], pairs[:, 1]])  # f1 > f2, then f1 < f2
        f2 = np.concatenate([pairs[:, 1], pairs[:, 0]])
        return {"f1": f1, "f2": f2, "difference": f1 - f2}

    def answer(self, condition: Mapping[str, jax.Array]) -> jax.Array:
        return jnp.where(condition["f1"] > condition["f2"], 1, 2).astype(jnp.int32)

    def epoch_input(
        self, condition: Mapping[str, jax.Array], epoch: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        in_f1, in_f2 = epoch == self.epoch_index("f1"), epoch == self.epoch_index("f2")
        shown = in_f1 | in_f2
        s = _frequency_scale(jnp.where(in_f1, condition["f1"], condition["f2"]))
        fixating = (epoch < self.epoch_index("decision")).astype(jnp.float32)
        mean = jnp.stack([fixating, shown * (1 + s) / 2, shown * (1 - s) / 2])
        return mean, jnp.stack([False, shown, shown])


class DelayedMatchToSample(CognitiveTask):
    """Is the test stimulus the sample seen before the delay? Match or non-match.

    Channels ``fixation, stimulus_0, ..., stimulus_{n-1}``; actions ``fixate, match,
    non_match``. A stimulus ``k`` is shown one-hot: 1 on ``stimulus_k`` and 0 on the
    others, every stimulus channel with noise ``sigma / sqrt(dt)`` per step while a
    stimulus is on (sample and test epochs; 0 and noiseless elsewhere). The fixation
    channel is 1 until the decision epoch (the go cue); choosing earlier aborts.

    Epochs: fixation 300 ms, sample 500 ms, delay 1000 ms, test 500 ms, decision 500 ms.
    Conditions: every sample times match / non-match = ``2 * n_stimuli``; a non-match
    trial's test stimulus is ``(sample + n_stimuli // 2) % n_stimuli``, so every
    stimulus is the test equally often on match and non-match trials: the test alone says
    nothing. ``info["condition"]`` has ``sample``, ``test`` and ``match`` (1 or 0).
    ``sigma = 1``.

    Criterion (ours, NeuroGym has none): >= 99 % decisions, >= 90 % correct. The ideal
    observer picks the channel with the largest summed evidence in the sample and in the
    test and answers match iff they agree; with 2 stimuli each identification is right
    with ``p = Phi(sqrt(D) / (sqrt(2) * sigma))`` (``D = 500`` ms) and the answer with
    ``p ** 2 + (1 - p) ** 2``: 100 % at ``sigma = 1``. Without memory of the sample no
    policy beats chance.

    Args:
        n_stimuli: The number of stimuli (>= 2).
        **options: The shared task keywords, `TaskOptions` (``dt``, ``sigma``, ...).

    Examples:
        >>> import jax
        >>> env = DelayedMatchToSample(n_stimuli=3, dt=20)
        >>> env.inputs, env.n_conditions, env.max_trial_steps
        (('fixation', 'stimulus_0', 'stimulus_1', 'stimulus_2'), 6, 140)
        >>> [int(t) for t in env.conditions["test"]]  # match, then non-match trials
        [0, 1, 2, 1, 2, 0]
    """

    actions = ("fixate", "match", "non_match")
    epochs = ("fixation", "sample", "delay", "test", "decision")
    default_sigma = 1.0

    def __init__(
        self,
        *,
        n_stimuli: int = 2,
        **options: Unpack[TaskOptions],
    ) -> None:
        if isinstance(n_stimuli, bool) or not isinstance(n_stimuli, int) or n_stimuli < 2:
            raise ValueError(
                f"DelayedMatchToSample: n_stimuli={n_stimuli!r} must be an int >= 2 "
                "(a non-match needs a second stimulus)."
            )
        self.n_stimuli = n_stimuli
        stimuli = tuple(f"stimulus_{k}" for k in range(n_stimuli))
        self.inputs = ("fixation", *stimuli)
        self.groups = {"fixation": ("fixation",), "stimulus": stimuli}
        super().__init__(**options)

    def epoch_durations(self) -> Mapping[str, Duration]:
        return {
            "fixation": Duration.fixed(300),
            "sample": Duration.fixed(500),
            "delay": Duration.fixed(1000),
            "test": Duration.fixed(500),
            "decision": Duration.fixed(500),
        }

    def condition_table(self) -> Mapping[str, ArrayLike]:
        n = self.n_stimuli
        sample = np.tile(np.arange(n), 2)
        match = np.repeat([1, 0], n)
        test = np.where(match == 1, sample, (sample + n // 2) % n)
        return {"sample": sample, "test": test, "match": match}

    def answer(self, condition: Mapping[str, jax.Array]) -> jax.Array:
        return jnp.where(condition["match"] > 0, 1, 2).astype(jnp.int32)

    def epoch_input(
        self, condition: Mapping[str, jax.Array], epoch: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        in_sample = epoch == self.epoch_index("sample")
        shown = in_sample | (epoch == self.epoch_index("test"))
        stimulus = jnp.where(in_sample, condition["sample"], condition["test"])
        one_hot = shown * (jnp.arange(self.n_stimuli) == stimulus)
        fixating = (epoch < self.epoch_index("decision")).astype(jnp.float32)
        mean = jnp.concatenate([fixating[None], one_hot.astype(jnp.float32)])
        noisy = jnp.concatenate([jnp.zeros((1,), bool), jnp.full((self.n_stimuli,), shown)])
        return mean, noisy
