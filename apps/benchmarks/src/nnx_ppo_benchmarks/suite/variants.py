"""Partially observed variants of the suite's tasks: velocities removed, optionally with
the last ``k`` observations stacked (the memoryless baseline against recurrence).

A variant is named ``<task>/<variant>`` (``CartpoleBalance/masked``,
``CartpoleBalance/masked-history4``) and is an environment like any other: the child
processes load it with :func:`load_variant` and give the same wrapped object to every
implementation (ours, brax PPO), so all of them see exactly the same observations. The
wrappers are pure JAX and import nothing of nnx-ppo, because brax PPO's isolated
environment does not have it; a test checks them against the library's
`nnx_ppo.wrappers.MaskObservation` and `nnx_ppo.wrappers.ObservationHistory`.

**Which entries are velocities.** In MuJoCo Playground 0.2.0's dm_control suite each
task's ``_get_obs`` builds the observation vector from the simulator state, and for the
tasks of :data:`VELOCITY_LAST` it ends with ``data.qvel``, the generalised velocities
(``mj_model.nv`` of them), after the position part:

- ``CartpoleBalance``: cart position, pole cos, pole sin, then ``qvel`` (cart and pole
  velocities): entries 3-4 of 5 are velocities, 0-2 are kept;
- ``PendulumSwingup``: pole orientation (2 entries), then the angular velocity
  (``qvel``, 1): entry 2 of 3;
- ``CheetahRun``: ``qpos[1:]`` (8, the root's x left out), then ``qvel`` (9): entries
  8-16 of 17;
- ``WalkerWalk``: body orientations (14), torso height (1), then ``qvel`` (9):
  entries 15-23 of 24.

So the kept entries are ``range(observation_size - mj_model.nv)``, read from the
loaded environment, not typed in. ``HopperHop``, ``FingerSpin`` and ``ReacherHard`` put
touch sensors or positions after ``qvel`` and are not offered. A test steps each task
and checks that the removed entries are ``state.data.qvel``.
"""

from __future__ import annotations

from typing import Any

from nnx_ppo_benchmarks.settings import BRAX_PREFIX

__all__ = [
    "HISTORY",
    "VARIANTS",
    "VELOCITY_LAST",
    "FrameStack",
    "base_task",
    "load_variant",
    "split_variant",
    "unstacked",
    "velocity_free_entries",
]

VELOCITY_LAST = ("CartpoleBalance", "PendulumSwingup", "CheetahRun", "WalkerWalk")
"""Playground tasks whose observation ends with ``data.qvel`` (see the module docstring)."""

HISTORY = 4
"""Observations stacked by the ``masked-history4`` variant (the newest and 3 before it)."""

VARIANTS: dict[str, tuple[str, int]] = {
    "masked": ("velocities removed", 1),
    f"masked-history{HISTORY}": (
        f"velocities removed, the last {HISTORY} observations stacked",
        HISTORY,
    ),
}
"""Variant name -> (description, observations stacked)."""


def split_variant(task: str) -> tuple[str, str | None]:
    """``"CartpoleBalance/masked"`` -> ``("CartpoleBalance", "masked")``; a task without
    a variant (``"CheetahRun"``, ``"brax/hopper"``) -> ``(task, None)``.

    Raises:
        ValueError: For an unknown variant, or a variant of a task whose velocities
            are not the end of its observation (not in :data:`VELOCITY_LAST`).

    Example:
        >>> split_variant("CartpoleBalance/masked-history4")
        ('CartpoleBalance', 'masked-history4')
        >>> split_variant("brax/hopper")
        ('brax/hopper', None)
    """
    base, sep, variant = task.rpartition("/")
    if not sep or (base + sep == BRAX_PREFIX and variant not in VARIANTS):
        return task, None  # a plain Playground task, or brax/<name>
    if variant not in VARIANTS:
        raise ValueError(
            f"task {task!r}: unknown variant {variant!r}; variants are "
            f"{', '.join(VARIANTS)} (e.g. 'CartpoleBalance/masked')"
        )
    if base not in VELOCITY_LAST:
        raise ValueError(
            f"task {task!r}: the {variant!r} variant exists for {', '.join(VELOCITY_LAST)} "
            f"only (their observation ends with the velocities); {base!r} is not one of them"
        )
    return base, variant


def unstacked(task: str) -> str | None:
    """The variant whose observations a history variant stacks
    (``"CartpoleBalance/masked-history4"`` -> ``"CartpoleBalance/masked"``), or ``None``.

    Example:
        >>> unstacked("CheetahRun/masked-history4"), unstacked("CheetahRun/masked")
        ('CheetahRun/masked', None)
    """
    base, variant = split_variant(task)
    if variant is None or VARIANTS[variant][1] == 1:
        return None
    return f"{base}/masked"


def base_task(task: str) -> str:
    """The environment a task loads: ``"CartpoleBalance/masked"`` -> ``"CartpoleBalance"``."""
    return split_variant(task)[0]


def velocity_free_entries(env: Any) -> tuple[int, ...]:
    """The observation entries left when the trailing ``data.qvel`` block is removed:
    ``range(observation_size - mj_model.nv)`` of a :data:`VELOCITY_LAST` task."""
    size, nv = int(env.observation_size), int(env.mj_model.nv)
    if not 0 < nv < size:
        raise ValueError(
            f"observation_size={size} and mj_model.nv={nv}: the observation cannot end "
            "with the velocities and keep anything else; not a VELOCITY_LAST task"
        )
    return tuple(range(size - nv))


class FrameStack:
    """The last ``length`` vector observations of the episode, oldest first, flattened.

    ``obs`` becomes ``[o_{t-length+1}, ..., o_t]`` concatenated (``length * n`` entries);
    slots older than the episode's first observation are zeros (what
    ``ObservationHistory(env, length, padding="zeros", flatten=True)`` gives). ``reset``
    starts a fresh history, so brax's cached auto-reset, which swaps in the reset
    state's observation, starts the next episode with one too. The wrapped step gets
    the state with its stacked observation: the Playground tasks of
    :data:`VELOCITY_LAST` compute the observation from ``state.data`` and never read
    ``state.obs``.

    Args:
        env: An unbatched environment with vector observations.
        length: Observations stacked, >= 1.
    """

    def __init__(self, env: Any, length: int) -> None:
        if isinstance(length, bool) or not isinstance(length, int) or length < 1:
            raise ValueError(f"FrameStack: length={length!r} must be an int >= 1, e.g. 4")
        self.env = env
        self.length = length
        self._size = int(env.observation_size)
        self.observation_size = length * self._size
        self.action_size = env.action_size

    def reset(self, rng: Any) -> Any:
        """Reset; the history is zeros and the first observation."""
        import jax.numpy as jnp

        state = self.env.reset(rng)
        pad = jnp.zeros(((self.length - 1) * self._size,), state.obs.dtype)
        return state.replace(obs=jnp.concatenate([pad, state.obs]))

    def step(self, state: Any, action: Any) -> Any:
        """Step; the oldest observation drops out and the new one goes last."""
        import jax.numpy as jnp

        stepped = self.env.step(state, action)
        history = jnp.concatenate([state.obs[self._size :], stepped.obs.astype(state.obs.dtype)])
        return stepped.replace(obs=history)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)


def load_variant(env: Any, task: str) -> Any:
    """``env`` (the loaded base environment of ``task``) behind ``task``'s variant:
    masked, then stacked; ``env`` itself for a task without a variant."""
    from nnx_ppo_benchmarks.learning.tasks import ObservationMask

    _, variant = split_variant(task)
    if variant is None:
        return env
    masked = ObservationMask(env, velocity_free_entries(env))
    length = VARIANTS[variant][1]
    return masked if length == 1 else FrameStack(masked, length)
