"""`wrap_for_training`: an environment set up for PPO the way the library learns best.

brax's and Playground's ``wrap_for_brax_training`` bound the episode, repeat actions and
auto-reset. Here the trainer resets finished environments itself (``PPOConfig.reset_mode``),
so the wrapper only bounds the episode (`EpisodeWrapper`) and, by default, **staggers**
the starts of fixed-length episodes. Staggering was measured as the cause of the
recurrent-learning gap on CartpoleBalance (docs: learning quality): without it every
parallel environment of a task that never ends early sits at the same phase of its
episode, and each PPO batch comes from one phase only.

The episode-boundary contract, for every environment the trainer steps:

- A step **terminates** when the environment's own ``done`` is set; it is **truncated**
  when the time limit is reached on a step that did not terminate
  (``info["truncation"] = 1``). On a step that does both, termination wins: truncation
  stays 0, and the value target is the reward alone.
- At a truncation the trainer bootstraps from the value of the true final observation,
  computed before the reset (``PPOConfig(bootstrap_on_truncation=True)``, the default;
  ``False`` follows brax and zeroes the step's TD error); a termination never
  bootstraps.
- With ``stagger = S``, each reset starts ``info["steps"]`` at a uniform draw in
  ``[0, S)``, so a training episode that runs to its limit lasts ``episode_length - d``
  steps (``episode_length - (S - 1) / 2`` on average). The training episode statistics
  (``rollout/episode_reward``, ``rollout/episode_length``) are of these shortened
  episodes; evaluations play whole episodes (wrap the evaluation environment with
  ``stagger=False``), so evaluation returns stay comparable across settings.
"""

from __future__ import annotations

from typing import Any

from nnx_ppo.wrappers.episode import EpisodeWrapper

__all__ = ["wrap_for_training"]


def wrap_for_training(
    env: Any,
    *,
    episode_length: int = 1000,
    action_repeat: int = 1,
    stagger: bool | int = True,
) -> EpisodeWrapper:
    """Wrap an unbatched brax, Playground or nnx-ppo environment for `train_ppo`.

    Every training episode gets a newly drawn start with any ``PPOConfig.reset_mode``:
    ``"fresh"`` also redraws the environment's own initial state, at the cost of a
    batched reset at almost every step once the starts are staggered; ``"cached"``
    (brax's) restarts from each environment's cached state and redraws only the start
    step, which is the choice for an environment whose ``reset`` is expensive (e.g.
    Playground's ``CheetahRun``). Auto-reset is the trainer's (``reset_mode``); do not
    add brax's ``AutoResetWrapper``.

    Args:
        env: The unbatched environment.
        episode_length: Environment steps per episode (the time limit), an int >= 1.
        action_repeat: Times each action is applied, an int >= 1.
        stagger: Staggered starts: ``True`` (the default) draws each episode's first
            step in ``[0, episode_length // 2)``, as nnx-ppo does; an int ``S`` draws
            it in ``[0, S)``; ``False`` (or 0) starts every episode at step 0, which a
            curriculum that acts on an episode's first step, or an evaluation
            environment, needs.

    Returns:
        The wrapped environment (an `EpisodeWrapper`).

    Raises:
        ValueError: If ``episode_length``, ``action_repeat`` or ``stagger`` is out of
            range (``stagger`` must be a bool or an int in ``[0, episode_length]``).

    Examples:
        >>> import jax
        >>> from nnx_ppo.envs import PointMass
        >>> env = wrap_for_training(PointMass(), episode_length=100)
        >>> env.stagger
        50
        >>> starts = jax.vmap(env.reset)(jax.random.split(jax.random.key(0), 64))
        >>> int(starts.info["steps"].min()) >= 0, int(starts.info["steps"].max()) < 50
        (True, True)
        >>> wrap_for_training(PointMass(), episode_length=100, stagger=False).stagger
        0
    """
    if isinstance(stagger, bool):
        steps = episode_length // 2 if stagger and isinstance(episode_length, int) else 0
    elif isinstance(stagger, int):
        steps = stagger
    else:
        raise ValueError(
            f"wrap_for_training: stagger={stagger!r} must be a bool (True: half the "
            "episode) or an int in [0, episode_length]."
        )
    return EpisodeWrapper(env, episode_length, action_repeat=action_repeat, stagger=steps)
