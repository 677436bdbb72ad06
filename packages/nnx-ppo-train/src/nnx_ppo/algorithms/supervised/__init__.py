"""Supervised training on a task's trial datasets: `train_supervised`, a sibling of the
RL trainers that trains the same network objects by backpropagation through time.

    >>> from nnx_ppo.algorithms.supervised import SupervisedConfig
    >>> SupervisedConfig(batch_size=16).batch_size
    16

The datasets come from the tasks themselves (`nnx_ppo.envs.cognitive.trial_dataset`:
inputs, target actions, loss mask); the trained networks go unchanged to the analyses,
export and PPO fine-tuning.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nnx_ppo.algorithms import lazy_exports

_NAMES = {
    "SupervisedConfig": "supervised.config",
    "SupervisedLogFn": "supervised.train",
    "SupervisedResult": "supervised.train",
    "train_supervised": "supervised.train",
}
__all__ = ["SupervisedConfig", "SupervisedLogFn", "SupervisedResult", "train_supervised"]

if TYPE_CHECKING:  # what a type checker and an IDE see
    from nnx_ppo.algorithms.supervised.config import SupervisedConfig
    from nnx_ppo.algorithms.supervised.train import (
        SupervisedLogFn,
        SupervisedResult,
        train_supervised,
    )

__getattr__, __dir__ = lazy_exports(__name__, _NAMES)
