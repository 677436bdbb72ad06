"""PPO: `train_ppo`, its iteration (advantages, the clipped loss replayed over epochs
of minibatches), GAE and value-target normalization.

The import path ``nnx_ppo.algorithms.ppo`` is nnx-ppo 0.3.0's: every name its module
had is still here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nnx_ppo.algorithms import lazy_exports

_NAMES = {
    "check_env_network": "core.checks",
    "CheckpointHook": "core.hooks",
    "split_minibatches": "core.phases",
    "split_network": "core.rollout",
    "make_optimizer": "core.schedules",
    "combine_advantages": "ppo.advantages",
    "gae": "ppo.advantages",
    "AdvantageFn": "ppo.iteration",
    "TRACEABLE_FIELDS": "ppo.iteration",
    "init_train_state": "ppo.iteration",
    "make_training_iteration": "ppo.iteration",
    "ppo_state_fields": "ppo.iteration",
    "TrainResult": "ppo.train",
    "as_train_config": "ppo.train",
    "ppo_algorithm": "ppo.train",
    "train_ppo": "ppo.train",
    "ValueStatistics": "ppo.value_normalization",
    "denormalize": "ppo.value_normalization",
    "initial_value_statistics": "ppo.value_normalization",
    "normalize": "ppo.value_normalization",
    "update": "ppo.value_normalization",
    "reset_on_mesh": "trainer.initial_state",
}
__all__ = [
    "TRACEABLE_FIELDS",
    "AdvantageFn",
    "CheckpointHook",
    "TrainResult",
    "ValueStatistics",
    "as_train_config",
    "check_env_network",
    "combine_advantages",
    "denormalize",
    "gae",
    "init_train_state",
    "initial_value_statistics",
    "make_optimizer",
    "make_training_iteration",
    "normalize",
    "ppo_algorithm",
    "ppo_state_fields",
    "reset_on_mesh",
    "split_minibatches",
    "split_network",
    "train_ppo",
    "update",
]

if TYPE_CHECKING:  # what a type checker and an IDE see
    from nnx_ppo.algorithms.core.checks import check_env_network
    from nnx_ppo.algorithms.core.hooks import CheckpointHook
    from nnx_ppo.algorithms.core.phases import split_minibatches
    from nnx_ppo.algorithms.core.rollout import split_network
    from nnx_ppo.algorithms.core.schedules import make_optimizer
    from nnx_ppo.algorithms.ppo.advantages import combine_advantages, gae
    from nnx_ppo.algorithms.ppo.iteration import (
        TRACEABLE_FIELDS,
        AdvantageFn,
        init_train_state,
        make_training_iteration,
        ppo_state_fields,
    )
    from nnx_ppo.algorithms.ppo.train import (
        TrainResult,
        as_train_config,
        ppo_algorithm,
        train_ppo,
    )
    from nnx_ppo.algorithms.ppo.value_normalization import (
        ValueStatistics,
        denormalize,
        initial_value_statistics,
        normalize,
        update,
    )
    from nnx_ppo.algorithms.trainer.initial_state import reset_on_mesh

__getattr__, __dir__ = lazy_exports(__name__, _NAMES)
