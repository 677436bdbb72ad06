"""`condition_average`: trial-averaged activity per task condition.

Cognitive-task analyses average the recorded activity of trials that share a condition
(a coherence, a context, a cue) step by step, then look at those condition-averaged
trajectories, e.g. projected on the principal components of `pca`. Recorded rollouts
are time-major, ``[T, B, N]``, one trial per environment column ``b``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

__all__ = ["ConditionAverage", "condition_average"]


@dataclasses.dataclass(frozen=True)
class ConditionAverage:
    """Activity averaged over the trials of each condition (numpy arrays).

    Attributes:
        labels: ``[C]`` the distinct conditions, sorted.
        mean: ``[C, T, N]`` the mean activity of condition ``c``'s trials at step ``t``,
            NaN where none of them is valid at ``t``.
        count: ``[C, T]`` how many trials of condition ``c`` are valid at step ``t``.
    """

    labels: np.ndarray
    mean: np.ndarray
    count: np.ndarray

    def __len__(self) -> int:
        return int(self.labels.shape[0])


def condition_average(activity: Any, labels: Any, valid: Any = None) -> ConditionAverage:
    """Average ``activity`` over the trials of each condition, step by step.

    Args:
        activity: ``[T, B, N]`` time-major activity of ``B`` trials (e.g. the states of
            `CarryMap.rollout`, or a recorded layer's activations flattened to units).
        labels: ``[B]`` each trial's condition: ints, floats or any sortable value
            (e.g. the coherence or context read from the task's ``state.info``).
        valid: ``[T, B]`` bool: the steps that belong to the trial (e.g. ``~dones`` of
            a recorded rollout); default all.

    Returns:
        A `ConditionAverage` with the sorted distinct labels, the ``[C, T, N]`` means
        (in float64; NaN where no trial of a condition is valid at a step) and the
        ``[C, T]`` counts.

    Raises:
        ValueError: If the shapes do not fit together.

    Examples:
        Two trials of condition 1.0 and one of -1.0, over 2 steps; the last trial ends
        after its first step:

        >>> import numpy as np
        >>> activity = np.array([[[1.0], [3.0], [5.0]], [[2.0], [4.0], [6.0]]])  # [2, 3, 1]
        >>> valid = np.array([[True, True, True], [True, False, True]])
        >>> avg = condition_average(activity, [1.0, 1.0, -1.0], valid)
        >>> avg.labels.tolist(), avg.count.tolist()
        ([-1.0, 1.0], [[1, 1], [2, 1]])
        >>> avg.mean[:, :, 0].tolist()  # condition 1.0 at step 1: trial 0 only
        [[5.0, 6.0], [2.0, 2.0]]
    """
    x = np.asarray(activity, np.float64)
    if x.ndim != 3:
        raise ValueError(
            f"condition_average: activity must be [T, B, N] (time-major), got shape "
            f"{x.shape}; add a unit axis (x[..., None]) for a single unit."
        )
    steps, trials, _ = x.shape
    labels = np.asarray(labels)
    if labels.shape != (trials,):
        raise ValueError(
            f"condition_average: labels must be [B] = [{trials}] (one condition per trial, "
            f"activity's axis 1), got shape {labels.shape}."
        )
    if valid is None:
        mask = np.ones((steps, trials), bool)
    else:
        mask = np.asarray(valid, bool)
        if mask.shape != (steps, trials):
            raise ValueError(
                f"condition_average: valid must be [T, B] = [{steps}, {trials}] like "
                f"activity's leading axes, got shape {mask.shape}."
            )
    unique, index = np.unique(labels, return_inverse=True)
    member = index.reshape(-1)[None, :] == np.arange(len(unique))[:, None]  # [C, B]
    weights = member[:, None, :] & mask[None]  # [C, T, B]
    count = weights.sum(axis=-1)
    total = np.einsum("ctb,tbn->ctn", weights.astype(np.float64), np.where(mask[..., None], x, 0))
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count[..., None] > 0, total / count[..., None], np.nan)
    return ConditionAverage(unique, mean, count)
