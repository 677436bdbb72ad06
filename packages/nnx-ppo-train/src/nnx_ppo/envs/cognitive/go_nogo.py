"""Go / no-go: `GoNoGo`, a NeuroGym-style task whose specification is given here."""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike

from nnx_ppo.envs.cognitive._trial import CognitiveTask, Duration

__all__ = ["GoNoGo"]


class GoNoGo(CognitiveTask):
    """Respond to the go cue, withhold on the no-go cue, after a delay.

    Channels ``fixation, go, nogo``; actions ``fixate, go``. During the stimulus epoch
    the trial's cue shows 1 on its channel (the other 0), both channels with noise
    ``sigma / sqrt(dt)`` per step; the fixation channel is 1 until the decision epoch
    (the go cue of the response, shown on every trial). A go trial is correct when
    ``go`` is chosen in the decision epoch (``correct_reward``; running out is
    ``NO_DECISION``, reward 0); a no-go trial is correct when the agent withholds to the
    end (its answer is ``0``: the trial's timeout earns ``correct_reward``), and ``go``
    in the decision epoch is wrong (reward 0). ``go`` before the decision epoch breaks
    fixation on either trial.

    Epochs: fixation 750 ms, stimulus 500 ms, delay 500 ms, decision 500 ms. Conditions:
    go, no-go = 2; ``info["condition"]`` has ``go`` (1 or 0). ``sigma = 1``.

    Criterion (ours): >= 90 % correct. The ideal observer sums ``go - nogo`` over the
    stimulus (``D = 500`` ms) and goes iff the sum is positive; its accuracy is
    ``Phi(sqrt(D) / (sqrt(2) * sigma))``: 100 % at ``sigma = 1``. Without memory of the
    cue no policy beats chance: always going and never going both score 50 %.

    Takes the shared task keywords, `TaskOptions` (``dt``, ``sigma``, ...).

    Examples:
        >>> import jax
        >>> env = GoNoGo(dt=20)
        >>> state = env.reset_condition(jax.random.key(0), 0)  # a no-go trial
        >>> for _ in range(env.max_trial_steps):
        ...     state = env.step(state, jax.numpy.int32(0))
        >>> float(state.reward), int(state.info["outcome"]), int(state.info["answer"])
        (1.0, 1, 0)
    """

    inputs = ("fixation", "go", "nogo")
    actions = ("fixate", "go")
    epochs = ("fixation", "stimulus", "delay", "decision")
    groups = {"fixation": ("fixation",), "cue": ("go", "nogo")}
    default_sigma = 1.0

    def epoch_durations(self) -> Mapping[str, Duration]:
        return {
            "fixation": Duration.fixed(750),
            "stimulus": Duration.fixed(500),
            "delay": Duration.fixed(500),
            "decision": Duration.fixed(500),
        }

    def condition_table(self) -> Mapping[str, ArrayLike]:
        return {"go": np.asarray([0.0, 1.0])}

    def answer(self, condition: Mapping[str, jax.Array]) -> jax.Array:
        return (condition["go"] > 0).astype(jnp.int32)

    def epoch_input(
        self, condition: Mapping[str, jax.Array], epoch: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        stimulus = epoch == self.epoch_index("stimulus")
        go = condition["go"]
        fixating = (epoch < self.epoch_index("decision")).astype(jnp.float32)
        mean = jnp.stack([fixating, stimulus * go, stimulus * (1 - go)])
        return mean, jnp.stack([False, stimulus, stimulus])
