"""Distillation: `train_distillation` (a student trained on a teacher's actions along
the student's own rollouts) and the teacher/student pairing checks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nnx_ppo.algorithms import lazy_exports

_NAMES = {
    "DistillationConfig": "config",
    "distillation_loss": "core.losses",
    "SamplerSlots": "distillation.pairing",
    "TargetFn": "distillation.pairing",
    "check_distillation_pair": "distillation.pairing",
    "match_samplers": "distillation.pairing",
    "DistillationResult": "distillation.train",
    "distillation_algorithm": "distillation.train",
    "train_distillation": "distillation.train",
    "DistillationState": "types",
}
__all__ = [
    "DistillationConfig",
    "DistillationResult",
    "DistillationState",
    "SamplerSlots",
    "TargetFn",
    "check_distillation_pair",
    "distillation_algorithm",
    "distillation_loss",
    "match_samplers",
    "train_distillation",
]

if TYPE_CHECKING:  # what a type checker and an IDE see
    from nnx_ppo.algorithms.config import DistillationConfig
    from nnx_ppo.algorithms.core.losses import distillation_loss
    from nnx_ppo.algorithms.distillation.pairing import (
        SamplerSlots,
        TargetFn,
        check_distillation_pair,
        match_samplers,
    )
    from nnx_ppo.algorithms.distillation.train import (
        DistillationResult,
        distillation_algorithm,
        train_distillation,
    )
    from nnx_ppo.algorithms.types import DistillationState

__getattr__, __dir__ = lazy_exports(__name__, _NAMES)
