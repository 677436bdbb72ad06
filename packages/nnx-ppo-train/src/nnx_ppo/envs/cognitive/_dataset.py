"""Trial datasets of a cognitive task, for supervised training: `trial_dataset`.

A dataset is ``N`` trials of one task laid side by side, ``[T, N, ...]`` (time first,
as the trainers' rollouts are): the inputs the task shows, the correct action at every
step and a loss mask. It is built from the task's own trial machinery (`CognitiveTask`'s
reset and observation), so every task, a user's own subclass included, has one, and
trial ``j``'s inputs are exactly what ``task.reset(keys[j])`` followed by steps of
action 0 (keep fixating) shows, ``keys = jax.random.split(key, n_trials)``.

**Targets** are the convention of PsychRNN and NeuroGym, in the task's action space:
``0`` (fixate) outside the response epochs, the trial's `CognitiveTask.answer` inside
them (``0`` again where the answer is to withhold, e.g. a no-go trial).

**Mask**: 1 on every step of the trial except the first ``grace_ms`` milliseconds of
its first response epoch (the reaction after the go cue, which the loss should not
dictate; PsychRNN masks such a window); 0 on padding.

**Padding**: trials whose epochs are drawn (e.g. a stimulus of random duration) differ
in length; every trial is padded to ``n_steps`` (default `CognitiveTask.max_trial_steps`,
the longest trial) after its last step, with inputs 0, target 0, mask 0 and epoch -1.
A network replayed from its initial carry over a padded trial computes the trial's
steps before it sees any padding, so padding changes neither the loss nor its
gradient.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from nnx_ppo.envs.cognitive._trial import CognitiveTask

__all__ = ["TrialDataset", "trial_dataset"]


@struct.dataclass
class TrialDataset:
    """``N`` trials of a cognitive task as supervised-learning arrays (`trial_dataset`).

    Attributes:
        inputs: The observations ``[T, N, n_inputs]`` (a dict of ``[T, N, size]`` for
            a task with ``dict_obs=True``), zero on padding.
        targets: int32 ``[T, N]``, the correct action at every step (0 = fixate).
        mask: float32 ``[T, N]``, the loss weight of every step (0 or 1).
        epoch: int32 ``[T, N]``, the epoch of every step (index into the task's
            ``epochs``), ``-1`` on padding.
        responding: bool ``[T, N]``, whether a choice at that step is a decision (a
            response epoch); elsewhere a choice breaks fixation.
        answer: int32 ``[N]``, each trial's correct action.
        condition_index: int32 ``[N]``, each trial's row of the condition table.
    """

    inputs: Any
    targets: jax.Array
    mask: jax.Array
    epoch: jax.Array
    responding: jax.Array
    answer: jax.Array
    condition_index: jax.Array

    @property
    def valid(self) -> jax.Array:
        """bool ``[T, N]``: the steps of the trials (``False`` on padding)."""
        return self.epoch >= 0

    def correct(self, actions: jax.Array) -> jax.Array:
        """Whether each trial would end correctly if these actions were taken, by the
        task's rules: the first choice (action != 0) ends the trial, correct if it
        falls in a response epoch and is the answer; a trial without a choice is
        correct if its answer is to withhold (0).

        Args:
            actions: int ``[T, N]``, e.g. the argmax of a network's logits on
                `inputs` (which are what the task shows while the agent fixates, so
                up to the first choice they are exactly the trial the agent plays).

        Returns:
            bool ``[N]``.
        """
        return _correct(self.epoch, self.responding, self.answer, jnp.asarray(actions))


@jax.jit
def _correct(epoch: jax.Array, responding: jax.Array, answer: jax.Array, actions: jax.Array):
    """`TrialDataset.correct` (one compiled program per shape)."""
    chose = (actions != 0) & (epoch >= 0)
    first = jnp.argmax(chose, axis=0)  # 0 where no choice: read through `decided` below
    take = lambda x: jnp.take_along_axis(x, first[None], axis=0)[0]
    decided = jnp.any(chose, axis=0)
    right = take(responding) & (take(actions) == answer)
    return jnp.where(decided, right, answer == 0)


def trial_dataset(
    task: CognitiveTask,
    key: jax.Array,
    n_trials: int,
    *,
    grace_ms: float = 0.0,
    n_steps: int | None = None,
) -> TrialDataset:
    """``n_trials`` trials of ``task`` with targets and a loss mask (module docstring).

    Pure JAX and jitted (one program per task, ``n_trials``, ``grace_ms`` and
    ``n_steps``; ``key`` may be traced, so it also runs inside a jitted training step).
    Conditions are drawn uniformly per trial, as ``task.reset`` draws them.

    Args:
        task: A cognitive task (any `CognitiveTask` subclass).
        key: A PRNG key; trial ``j`` is the trial ``task.reset(jax.random.split(key,
            n_trials)[j])`` starts.
        n_trials: ``N >= 1``.
        grace_ms: Milliseconds at the start of the first response epoch left out of the
            loss (mask 0), ``>= 0``; rounded to whole steps of ``task.dt``.
        n_steps: ``T``, the padded length; ``None`` for ``task.max_trial_steps``.

    Returns:
        A `TrialDataset`.

    Raises:
        TypeError: If ``task`` is not a `CognitiveTask` (e.g. a wrapper around one).
        ValueError: If ``n_trials`` is not a positive int, ``grace_ms`` negative or
            ``n_steps`` shorter than the longest trial.

    Examples:
        >>> import jax
        >>> from nnx_ppo.envs.cognitive import PerceptualDecisionMaking
        >>> task = PerceptualDecisionMaking(dt=100)
        >>> data = trial_dataset(task, jax.random.key(0), 4)
        >>> data.inputs.shape, data.targets.shape, task.max_trial_steps
        ((28, 4, 3), (28, 4), 28)
        >>> bool(data.correct(data.targets).all())  # the targets play every trial right
        True
    """
    if not isinstance(task, CognitiveTask):
        raise TypeError(
            f"trial_dataset: task={type(task).__name__} is not a CognitiveTask; pass the "
            "unwrapped task (nnx_ppo.envs.cognitive), whose trial machinery gives the "
            "inputs, targets and mask."
        )
    if isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 1:
        raise ValueError(f"trial_dataset: n_trials={n_trials!r} must be an int >= 1.")
    if (
        isinstance(grace_ms, bool)
        or not isinstance(grace_ms, int | float)
        or not (math.isfinite(grace_ms) and grace_ms >= 0)
    ):
        raise ValueError(f"trial_dataset: grace_ms={grace_ms!r} must be a finite number >= 0.")
    longest = task.max_trial_steps
    steps = longest if n_steps is None else n_steps
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < longest:
        raise ValueError(
            f"trial_dataset: n_steps={n_steps!r} must be an int >= the task's longest "
            f"trial, max_trial_steps={longest} (or None for exactly that), so that no "
            "trial is cut short."
        )
    return _build(task, key, n_trials, round(grace_ms / task.dt), steps)


@functools.partial(jax.jit, static_argnums=(0, 2, 3, 4))
def _build(task: CognitiveTask, key: jax.Array, n_trials: int, grace: int, steps: int) -> Any:
    """`trial_dataset` after its checks, one compiled program per task and sizes
    (``grace`` in steps)."""
    response = jnp.asarray([task.epochs.index(e) for e in task.response_epochs])
    first_response = min(task.epochs.index(e) for e in task.response_epochs)

    def one_trial(trial_key: jax.Array) -> tuple[Any, ...]:
        state = task.reset(trial_key)
        trial = state.pipeline_state

        def observe(trial: Any, t: jax.Array) -> tuple[Any, Any]:
            obs, trial = task._observe(trial.replace(t=t))
            return trial, obs

        _, rest = jax.lax.scan(observe, trial, jnp.arange(1, steps, dtype=jnp.int32))
        obs = jax.tree.map(lambda first, later: jnp.concatenate([first[None], later]),
                           state.obs, rest)  # fmt: skip
        t = jnp.arange(steps, dtype=jnp.int32)
        valid = t < trial.bounds[-1]
        epoch = jnp.where(valid, jax.vmap(task._epoch, (None, 0))(trial.bounds, t), -1)
        responding = jnp.isin(epoch, response)
        answer = state.info["answer"]
        onset = trial.bounds[first_response]
        in_grace = (t >= onset) & (t < onset + grace)
        obs = jax.tree.map(lambda x: jnp.where(valid[:, None], x, 0.0), obs)
        targets = jnp.where(responding, answer, 0).astype(jnp.int32)
        mask = (valid & ~in_grace).astype(jnp.float32)
        return obs, targets, mask, epoch, responding, answer, trial.condition

    per_trial = jax.vmap(one_trial)(jax.random.split(key, n_trials))
    obs, targets, mask, epoch, responding, answer, condition = per_trial
    time_first = lambda x: jnp.swapaxes(x, 0, 1)
    return TrialDataset(
        inputs=jax.tree.map(time_first, obs),
        targets=time_first(targets),
        mask=time_first(mask),
        epoch=time_first(epoch),
        responding=time_first(responding),
        answer=answer,
        condition_index=condition,
    )
