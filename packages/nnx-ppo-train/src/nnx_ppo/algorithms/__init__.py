"""The PPO training loop for stateful NNX networks: the names a user needs, in one place.

    >>> from nnx_ppo.algorithms import PPOConfig, TrainConfig, train_ppo
    >>> PPOConfig(n_envs=8, n_minibatches=2).n_envs
    8

**Train**: `train_ppo`, `train_distillation`, `train_many` (several seeds or settings in
one program; `grid` builds their overrides) and what they return. **Configure**:
`TrainConfig`, `PPOConfig`, `EvalConfig`, `VideoConfig`, `DistillationConfig`,
`LogLevel`. **Save and load**: `Checkpointer`, `load_network`, `load_metadata`.
**Observe and analyse**: `evaluate`, `JSONLWriter`, `PerRun`,
`record_activations_rollout`, `NonFiniteError`, `Periodic` (your own task between
device calls, ``tasks=[...]``); for cognitive tasks `evaluate_trials`,
`evaluate_trials_many`, `TrialResults`, `fit_psychometric`, `PsychometricFit`.
**Stop cleanly**: `StopOnSignal`, `StopRequest`.
Everything else (the phases of an iteration, the host loop, placement on devices) lives
in the submodules, documented in the API reference.

Importing this package is cheap: each name is imported from its submodule when first
used (``import nnx_ppo.algorithms`` alone loads neither the trainer nor orbax).
"""

from __future__ import annotations

import importlib
from importlib.metadata import version as _version
from typing import TYPE_CHECKING, Any

__version__: str = _version("nnx-ppo-train")

_NAMES = {
    # Train
    "train_ppo": "ppo",
    "TrainResult": "ppo",
    "train_distillation": "distillation",
    "DistillationResult": "distillation",
    "train_many": "sweeps",
    "SweepResult": "sweeps",
    "grid": "sweeps",
    # Configure
    "TrainConfig": "config",
    "PPOConfig": "config",
    "EvalConfig": "config",
    "VideoConfig": "config",
    "LogLevel": "config",
    "DistillationConfig": "distillation",
    # Save and load
    "Checkpointer": "checkpointing",
    "load_network": "loading",
    "load_metadata": "loading",
    # Observe and analyse
    "evaluate": "evaluation",
    "JSONLWriter": "logging",
    "PerRun": "logging",
    "record_activations_rollout": "activations",
    "NonFiniteError": "faults",
    "Periodic": "hooks",
    "evaluate_trials": "trials",
    "evaluate_trials_many": "trials",
    "TrialResults": "trials",
    "fit_psychometric": "psychometrics",
    "PsychometricFit": "psychometrics",
    # Stop cleanly
    "StopOnSignal": "preemption",
    "StopRequest": "preemption",
}

__all__ = [
    "Checkpointer",
    "DistillationConfig",
    "DistillationResult",
    "EvalConfig",
    "JSONLWriter",
    "LogLevel",
    "NonFiniteError",
    "PPOConfig",
    "PerRun",
    "Periodic",
    "PsychometricFit",
    "StopOnSignal",
    "StopRequest",
    "SweepResult",
    "TrainConfig",
    "TrainResult",
    "TrialResults",
    "VideoConfig",
    "__version__",
    "evaluate",
    "evaluate_trials",
    "evaluate_trials_many",
    "fit_psychometric",
    "grid",
    "load_metadata",
    "load_network",
    "record_activations_rollout",
    "train_distillation",
    "train_many",
    "train_ppo",
]

if TYPE_CHECKING:  # what a type checker and an IDE see
    from nnx_ppo.algorithms.activations import record_activations_rollout
    from nnx_ppo.algorithms.checkpointing import Checkpointer
    from nnx_ppo.algorithms.config import (
        EvalConfig,
        LogLevel,
        PPOConfig,
        TrainConfig,
        VideoConfig,
    )
    from nnx_ppo.algorithms.distillation import (
        DistillationConfig,
        DistillationResult,
        train_distillation,
    )
    from nnx_ppo.algorithms.evaluation import evaluate
    from nnx_ppo.algorithms.faults import NonFiniteError
    from nnx_ppo.algorithms.hooks import Periodic
    from nnx_ppo.algorithms.loading import load_metadata, load_network
    from nnx_ppo.algorithms.logging import JSONLWriter, PerRun
    from nnx_ppo.algorithms.ppo import TrainResult, train_ppo
    from nnx_ppo.algorithms.preemption import StopOnSignal, StopRequest
    from nnx_ppo.algorithms.psychometrics import PsychometricFit, fit_psychometric
    from nnx_ppo.algorithms.sweeps import SweepResult, grid, train_many
    from nnx_ppo.algorithms.trials import TrialResults, evaluate_trials, evaluate_trials_many


def __getattr__(name: str) -> Any:
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'nnx_ppo.algorithms' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"nnx_ppo.algorithms.{module}"), name)
    globals()[name] = value  # the next access is a plain lookup
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_NAMES))
