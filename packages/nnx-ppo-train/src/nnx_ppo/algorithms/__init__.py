"""The PPO training loop for stateful NNX networks: the names a user needs, in one place.

    >>> from nnx_ppo.algorithms import PPOConfig, TrainConfig, train_ppo
    >>> PPOConfig(n_envs=8, n_minibatches=2).n_envs
    8

**Train**: `train_ppo`, `train_distillation`, `train_many` (several seeds or settings in
one program; `grid` builds their overrides) and what they return, `TrainResult`,
`DistillationResult`, `SweepResult`; `run_search` (an Optuna study's trials, a round at a
time as one `train_many` program) and its `SearchResult`; past one machine,
`train_shard` (a `Shard` of a sweep, e.g. a SLURM array task's) and `merge_shards` (the
shards back as one `MergedSweep`; `SweepMismatchError` refuses another sweep's);
`check_env_network` and `check_distillation_pair`, the checks they run first, without
compiling anything.
**Configure**: `TrainConfig`, `PPOConfig`, `EvalConfig`, `VideoConfig`,
`DistillationConfig`, `LogLevel` (`LoggingLevel`, nnx-ppo's name of it), `linear_decay`
(a learning rate that decays over the run).
**Save and load**: `Checkpointer`, `load_network`, `load_metadata`.
**Observe and analyse**: `evaluate`, `JSONLWriter`, `TensorBoardWriter`, `WandbWriter`,
`combine` (several sinks as one ``log_fn``), `PerRun`, `curves_of`, `summary_table`,
`plot_learning_curves`, `iqm`, `probability_of_improvement`, `interval_estimates`
(rliable's statistics), `record_activations_rollout`, `NonFiniteError`, `Periodic`
(your own task between device calls, ``tasks=[...]``); for cognitive tasks
`evaluate_trials`, `evaluate_trials_many`, `TrialResults`, `fit_psychometric`,
`PsychometricFit`, `plot_psychometric`, `plot_chronometric`.
**Environment hooks** (what the trainer writes into ``state.info``, for curricula):
`progress_info`, `TRAINING_STEP`, `TRAINING_PROGRESS`, `IS_TRAINING`.
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
    "run_search": "search",
    "SearchResult": "search",
    "train_shard": "shards",
    "Shard": "shards",
    "SweepMismatchError": "shards",
    "merge_shards": "merge",
    "MergedSweep": "merge",
    "check_env_network": "checks",
    "check_distillation_pair": "pairing",
    # Configure
    "TrainConfig": "config",
    "PPOConfig": "config",
    "EvalConfig": "config",
    "VideoConfig": "config",
    "LogLevel": "config",
    "LoggingLevel": "config",
    "DistillationConfig": "config",
    "linear_decay": "schedules",
    # Save and load
    "Checkpointer": "checkpointing",
    "load_network": "loading",
    "load_metadata": "loading",
    # Observe and analyse
    "evaluate": "evaluation",
    "JSONLWriter": "logging",
    "TensorBoardWriter": "logging",
    "WandbWriter": "logging",
    "combine": "logging",
    "PerRun": "logging",
    "curves_of": "curves",
    "summary_table": "curves",
    "iqm": "statistics",
    "probability_of_improvement": "statistics",
    "interval_estimates": "statistics",
    "plot_learning_curves": "plotting",
    "record_activations_rollout": "activations",
    "NonFiniteError": "faults",
    "Periodic": "hooks",
    "evaluate_trials": "trials",
    "evaluate_trials_many": "trials",
    "TrialResults": "trials",
    "fit_psychometric": "psychometrics",
    "PsychometricFit": "psychometrics",
    "plot_psychometric": "plotting",
    "plot_chronometric": "plotting",
    # Environment hooks
    "progress_info": "progress",
    "TRAINING_STEP": "progress",
    "TRAINING_PROGRESS": "progress",
    "IS_TRAINING": "progress",
    # Stop cleanly
    "StopOnSignal": "preemption",
    "StopRequest": "preemption",
}

__all__ = [
    "IS_TRAINING",
    "TRAINING_PROGRESS",
    "TRAINING_STEP",
    "Checkpointer",
    "DistillationConfig",
    "DistillationResult",
    "EvalConfig",
    "JSONLWriter",
    "LogLevel",
    "LoggingLevel",
    "MergedSweep",
    "NonFiniteError",
    "PPOConfig",
    "PerRun",
    "Periodic",
    "PsychometricFit",
    "SearchResult",
    "Shard",
    "StopOnSignal",
    "StopRequest",
    "SweepMismatchError",
    "SweepResult",
    "TensorBoardWriter",
    "TrainConfig",
    "TrainResult",
    "TrialResults",
    "VideoConfig",
    "WandbWriter",
    "__version__",
    "check_distillation_pair",
    "check_env_network",
    "combine",
    "curves_of",
    "evaluate",
    "evaluate_trials",
    "evaluate_trials_many",
    "fit_psychometric",
    "grid",
    "interval_estimates",
    "iqm",
    "linear_decay",
    "load_metadata",
    "load_network",
    "merge_shards",
    "plot_chronometric",
    "plot_learning_curves",
    "plot_psychometric",
    "probability_of_improvement",
    "progress_info",
    "record_activations_rollout",
    "run_search",
    "summary_table",
    "train_distillation",
    "train_many",
    "train_ppo",
    "train_shard",
]

if TYPE_CHECKING:  # what a type checker and an IDE see
    from nnx_ppo.algorithms.activations import record_activations_rollout
    from nnx_ppo.algorithms.checkpointing import Checkpointer
    from nnx_ppo.algorithms.checks import check_env_network
    from nnx_ppo.algorithms.config import (
        DistillationConfig,
        EvalConfig,
        LoggingLevel,
        LogLevel,
        PPOConfig,
        TrainConfig,
        VideoConfig,
    )
    from nnx_ppo.algorithms.curves import curves_of, summary_table
    from nnx_ppo.algorithms.distillation import DistillationResult, train_distillation
    from nnx_ppo.algorithms.evaluation import evaluate
    from nnx_ppo.algorithms.faults import NonFiniteError
    from nnx_ppo.algorithms.hooks import Periodic
    from nnx_ppo.algorithms.loading import load_metadata, load_network
    from nnx_ppo.algorithms.logging import (
        JSONLWriter,
        PerRun,
        TensorBoardWriter,
        WandbWriter,
        combine,
    )
    from nnx_ppo.algorithms.merge import MergedSweep, merge_shards
    from nnx_ppo.algorithms.pairing import check_distillation_pair
    from nnx_ppo.algorithms.plotting import (
        plot_chronometric,
        plot_learning_curves,
        plot_psychometric,
    )
    from nnx_ppo.algorithms.ppo import TrainResult, train_ppo
    from nnx_ppo.algorithms.preemption import StopOnSignal, StopRequest
    from nnx_ppo.algorithms.progress import (
        IS_TRAINING,
        TRAINING_PROGRESS,
        TRAINING_STEP,
        progress_info,
    )
    from nnx_ppo.algorithms.psychometrics import PsychometricFit, fit_psychometric
    from nnx_ppo.algorithms.schedules import linear_decay
    from nnx_ppo.algorithms.search import SearchResult, run_search
    from nnx_ppo.algorithms.shards import Shard, SweepMismatchError, train_shard
    from nnx_ppo.algorithms.statistics import interval_estimates, iqm, probability_of_improvement
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
