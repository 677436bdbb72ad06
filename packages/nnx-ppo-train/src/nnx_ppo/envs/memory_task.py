"""MemoryTask: reproduce the cue seen ``delay`` steps ago (needs memory)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from nnx_ppo.envs._helpers import check_action, check_bool, check_float
from nnx_ppo.envs.base import Env, State

__all__ = ["MemoryTask"]


class MemoryTask(Env):
    """Reproduce the cue observed ``delay`` steps ago; an MLP cannot solve it.

    At every step ``t`` the observation ``o_t`` (float32 ``[cue_size]``) is a random
    cue ``c_t`` with entries uniform in ``{-1, +1}``, shown with probability
    ``cue_probability`` (else ``o_t = 0``). The action ``a_t`` (float32 ``[cue_size]``,
    clipped to ``[-1, 1]``) is scored against the observation ``delay`` steps earlier::

        target_t = o_{t - delay}        (zeros for t < delay)
        r_t      = mean_i(a_t[i] * target_t[i])          # in [-1, 1]

    Returns (undiscounted, episode of ``T`` steps, ``p = cue_probability``):

    - optimal: ``a_t = target_t`` earns ``|target_t| = 1`` per shown cue, i.e.
      ``p * (T - delay)`` in expectation (exactly ``T - delay`` when ``p = 1``).
      A ``Delay(k_steps=delay)`` on the observation, or an LSTM, can represent it.
      Tanh-squashed actions only approach ``+-1``, so they approach this bound.
    - best memoryless: ``0``. ``target_t`` is independent of ``o_t`` (and of the last
      ``delay - 1`` observations) and has mean zero, so
      ``E[a_t * target_t] = E[a_t] * E[target_t] = 0`` for any policy that remembers
      fewer than ``delay`` steps. An MLP therefore earns 0 in expectation whatever it
      learns.

    ``metrics["max_reward"]`` is ``mean_i |target_t[i]|``, the reward the optimal
    policy gets at that step (divide the summed rewards by its sum for a score in
    ``[-1, 1]``). The task never terminates; wrap it in
    `EpisodeWrapper`.

    With ``hold=True`` the target is the last cue *shown* at or before ``t - delay``
    (zeros before the first): a flip-flop memory (Sussillo & Barak's "3-bit
    flip-flop" for ``cue_size=3``). Between sparse cues a network must hold one of
    ``2 ** cue_size`` values indefinitely, which a trained network does with that many
    attractors (the "Record and analyse activations" how-to finds them). A memoryless
    policy still earns ``0`` in expectation.

    Args:
        delay: ``k``, steps between a cue and the action that must reproduce it; an
            int >= 1.
        cue_size: Number of cue entries; an int >= 1.
        cue_probability: Probability that a cue is shown at a step, in ``(0, 1]``.
        hold: Score against the last shown cue (a flip-flop) instead of the
            observation ``delay`` steps earlier.

    Examples:
        >>> import jax, jax.numpy as jnp
        >>> env = MemoryTask(delay=1)
        >>> s0 = env.reset(jax.random.key(0))
        >>> s1 = env.step(s0, jnp.zeros(1))      # target_0 = 0: nothing to reproduce
        >>> s2 = env.step(s1, s0.obs)            # target_1 = o_0: reproduce it
        >>> float(s1.reward), float(s2.reward)
        (0.0, 1.0)
    """

    def __init__(
        self, delay: int = 2, cue_size: int = 1, cue_probability: float = 1.0, hold: bool = False
    ) -> None:
        for name, value in (("delay", delay), ("cue_size", cue_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"MemoryTask: {name}={value!r} must be an int >= 1 (delay=0 would make "
                    "the task memoryless)."
                )
        self.delay = delay
        self.cue_size = cue_size
        self.cue_probability = check_float(
            "MemoryTask",
            "cue_probability",
            cue_probability,
            allow_zero=False,
            meaning="probability that a cue is shown at a step",
        )
        if self.cue_probability > 1:
            raise ValueError(
                f"MemoryTask: cue_probability={cue_probability!r} must be in (0, 1]; it is "
                "the probability that a cue is shown at a step."
            )
        self.hold = check_bool("MemoryTask", "hold", hold)

    @property
    def observation_size(self) -> int:
        """``cue_size``."""
        return self.cue_size

    @property
    def action_size(self) -> int:
        """``cue_size``."""
        return self.cue_size

    def _draw_cue(self, rng: jax.Array) -> jax.Array:
        sign_key, show_key = jax.random.split(rng)
        cue = jnp.where(jax.random.bernoulli(sign_key, 0.5, (self.cue_size,)), 1.0, -1.0)
        shown = jax.random.bernoulli(show_key, self.cue_probability)
        return (cue * shown).astype(jnp.float32)

    def reset(self, rng: jax.Array) -> State:
        """Draws the first cue; the memory of earlier cues is all zeros."""
        rng, cue_key = jax.random.split(rng)
        cue = self._draw_cue(cue_key)
        zero = jnp.zeros((), jnp.float32)
        return State(
            obs=cue,
            reward=zero,
            done=zero,
            metrics={"max_reward": zero},
            info={},
            # history[0] is o_{t-delay}, history[-1] is o_{t-1}; with hold, "held" is
            # the last cue shown at or before t - delay.
            pipeline_state={
                "rng": rng,
                "cue": cue,
                "history": jnp.zeros((self.delay, self.cue_size), jnp.float32),
                **({"held": jnp.zeros((self.cue_size,), jnp.float32)} if self.hold else {}),
            },
        )

    def step(self, state: State, action: jax.Array) -> State:
        """Scores ``action`` against ``o_{t-delay}`` and shows the next cue."""
        action = check_action(action, self.action_size, "MemoryTask")
        ps = state.pipeline_state
        target = ps["history"][0]
        held = {}
        if self.hold:  # a shown cue has every entry +-1, an unshown one is all zeros
            target = jnp.where(jnp.any(target != 0), target, ps["held"])
            held = {"held": target}
        reward = jnp.mean(action * target)
        history = jnp.concatenate([ps["history"][1:], ps["cue"][None]], axis=0)
        rng, cue_key = jax.random.split(ps["rng"])
        cue = self._draw_cue(cue_key)
        return state.replace(
            obs=cue,
            reward=reward,
            done=jnp.zeros((), jnp.float32),
            metrics={"max_reward": jnp.mean(jnp.abs(target))},
            pipeline_state={"rng": rng, "cue": cue, "history": history, **held},
        )
