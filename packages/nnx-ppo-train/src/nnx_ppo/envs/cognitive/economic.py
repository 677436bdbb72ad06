"""Economic choice: `EconomicChoice`.

The juice-choice task of Padoa-Schioppa & Assad (2006, Nature 441:223): two offers of
two juices in varying quantities, rewarded with the chosen juice, as Song, Yang & Wang
(2017) define it in pyrl's ``padoaschioppa2006``, written here from that definition.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike

from nnx_ppo.envs._helpers import check_float
from nnx_ppo.envs.cognitive._trial import CognitiveTask, Duration

__all__ = ["EconomicChoice"]

# (drops of B, drops of A) per offer, as published; (0, 1) and (2, 0) offer nothing of
# one juice, and choosing that side earns 0.
_OFFERS = ((0, 1), (1, 3), (1, 2), (1, 1), (2, 1), (3, 1), (4, 1), (6, 1), (2, 0))


class EconomicChoice(CognitiveTask):
    """Which offer is worth more? Juice A is worth 2.2 drops of juice B.

    Channels ``fixation, left_a, left_b, right_a, right_b, n_left, n_right``; actions
    ``fixate, left, right``. During the offer epoch the identity channels of the juice on
    each side are 1 (noiseless) and ``n_left``, ``n_right`` show the quantities over 5
    (``n / 5``) with noise ``sigma / sqrt(dt)`` per step; the fixation channel is 1
    until the decision epoch (the go cue). A choice earns the chosen juice:
    ``n * reward_b`` drops of B, ``n * a_to_b * reward_b`` of A (0.1 and 0.22 per
    drop as published), 0 for an empty offer; it is *correct* when the chosen offer is
    worth at least the other (no offer ties with the published values).

    Epochs: fixation 750 ms, offer uniform in 1000-2000 ms, decision 750 ms (pyrl runs
    the decision epoch to its fixed ``tmax``: 750 ms plus what the offer left of
    2000 ms). Conditions: the offers ``(nB, nA)`` = (0, 1), (1, 3), (1, 2), (1, 1),
    (2, 1), (3, 1), (4, 1), (6, 1), (2, 0) times A on the left or on the right = 18.
    ``info["condition"]`` has ``n_a``, ``n_b``, ``a_left`` (1 if A is on the left),
    ``n_left``, ``n_right``, ``value_left``, ``value_right`` (the reward of choosing
    each side) and ``value_difference = value_right - value_left``, the psychometric
    variable (choosing ``right`` rises with it). Padoa-Schioppa's choice curve, the
    fraction of B choices per offer type ``nB:nA``, is read from ``n_b``, ``n_a``,
    ``a_left`` and the choice. ``sigma = sqrt(2 * 100 * 0.001)``.

    Published training criterion: decisions on >= 99 % of trials and >= 95 % of them
    correct. The ideal observer reads the juices, estimates each quantity from the
    summed evidence (``5 * sum n * dt / D``, standard deviation ``5 * sigma /
    sqrt(D)`` <= 0.071 drops for ``D >= 1000`` ms), rounds it to whole drops (wrong
    with probability ``2 * Phi(-7)``) and takes the larger value: 100 % correct, mean
    reward the mean over the offers of the larger value. Without memory of the offer no
    policy beats chance: the decision epoch shows nothing.

    Args:
        a_to_b: The value of a drop of A in drops of B (> 0).
        reward_b: The reward of a drop of B (> 0).
        dt: See `TaskOptions`.
        sigma: See `TaskOptions`.
        abort_reward: See `TaskOptions`. (No ``correct_reward``: a choice earns the
            chosen juice.)
        dict_obs: See `TaskOptions`.

    Examples:
        >>> import jax
        >>> env = EconomicChoice(dt=20)
        >>> state = env.reset_condition(jax.random.key(0), 4)
        >>> state.obs.shape, env.n_conditions, env.max_trial_steps
        ((7,), 18, 176)
        >>> c = state.info["condition"]  # 1 drop of A on the left, 2 drops of B right
        >>> round(float(c["value_left"]), 3), round(float(c["value_right"]), 3)
        (0.22, 0.2)
        >>> int(state.info["answer"])
        1
    """

    inputs = ("fixation", "left_a", "left_b", "right_a", "right_b", "n_left", "n_right")
    epochs = ("fixation", "offer", "decision")
    groups = {
        "fixation": ("fixation",),
        "juice": ("left_a", "left_b", "right_a", "right_b"),
        "quantity": ("n_left", "n_right"),
    }
    default_sigma = float(np.sqrt(2 * 100 * 0.001))
    psychometric_variable = "value_difference"
    criterion = (0.99, 0.95)

    def __init__(
        self,
        *,
        a_to_b: float = 2.2,
        reward_b: float = 0.1,
        dt: float = 10.0,
        sigma: float | None = None,
        abort_reward: float = -1.0,
        dict_obs: bool = False,
    ) -> None:
        self.a_to_b = check_float(
            "EconomicChoice", "a_to_b", a_to_b, allow_zero=False, meaning="drops of B per drop of A"
        )
        self.reward_b = check_float(
            "EconomicChoice", "reward_b", reward_b, allow_zero=False, meaning="reward per drop of B"
        )
        super().__init__(dt=dt, sigma=sigma, abort_reward=abort_reward, dict_obs=dict_obs)

    def epoch_durations(self) -> Mapping[str, Duration]:
        return {
            "fixation": Duration.fixed(750),
            "offer": Duration.uniform(1000, 2000),
            "decision": Duration.fixed(750),
        }

    def condition_table(self) -> Mapping[str, ArrayLike]:
        n_b, n_a = np.asarray(_OFFERS, np.float32).T
        a_left = np.repeat([1.0, 0.0], len(_OFFERS))
        n_a, n_b = np.tile(n_a, 2), np.tile(n_b, 2)
        n_left = np.where(a_left == 1, n_a, n_b)
        n_right = np.where(a_left == 1, n_b, n_a)
        reward_a = self.a_to_b * self.reward_b
        value_left = n_left * np.where(a_left == 1, reward_a, self.reward_b)
        value_right = n_right * np.where(a_left == 1, self.reward_b, reward_a)
        return {
            "n_a": n_a,
            "n_b": n_b,
            "a_left": a_left,
            "n_left": n_left,
            "n_right": n_right,
            "value_left": value_left,
            "value_right": value_right,
            "value_difference": value_right - value_left,
        }

    def answer(self, condition: Mapping[str, jax.Array]) -> jax.Array:
        left_better = condition["value_left"] >= condition["value_right"]
        return jnp.where(left_better, 1, 2).astype(jnp.int32)

    def decision_reward(self, condition: Mapping[str, jax.Array], choice: jax.Array) -> jax.Array:
        return jnp.where(choice == 1, condition["value_left"], condition["value_right"])

    def epoch_input(
        self, condition: Mapping[str, jax.Array], epoch: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        offer = epoch == self.epoch_index("offer")
        on = offer.astype(jnp.float32)
        a_left = condition["a_left"]
        fixating = (epoch < self.epoch_index("decision")).astype(jnp.float32)
        identity = jnp.stack([a_left, 1 - a_left, 1 - a_left, a_left])
        quantity = jnp.stack([condition["n_left"], condition["n_right"]]) / 5
        mean = jnp.concatenate([fixating[None], on * identity, on * quantity])
        return mean, jnp.stack([False, False, False, False, False, offer, offer])
