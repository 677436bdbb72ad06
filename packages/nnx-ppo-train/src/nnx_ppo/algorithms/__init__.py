"""The PPO training loop for stateful NNX networks: the names a user needs, in one place.

    >>> from nnx_ppo.algorithms import PPOConfig, TrainConfig, train_ppo
    >>> PPOConfig(n_envs=8, n_minibatches=2).n_envs
    8

**Train**: `train_ppo`, `train_distillation`, `train_many` (several seeds or settings in
one program; `grid` builds their overrides) and what they return, `TrainResult`,
`DistillationResult`, `SweepResult`; `train_supervised` (backpropagation through time on
a cognitive task's trial datasets, the same networks) and its `SupervisedResult`;
`run_search` (an Optuna study's trials, a round at a time as one `train_many` program)
and its `SearchResult`; past one machine,
`train_shard` (a `Shard` of a sweep, e.g. a SLURM array task's) and `merge_shards` (the
shards back as one `MergedSweep`; `SweepMismatchError` refuses another sweep's);
`check_env_network` and `check_distillation_pair`, the checks they run first, without
compiling anything.
**Configure**: `TrainConfig`, `PPOConfig`, `EvalConfig`, `VideoConfig`,
`DistillationConfig`, `SupervisedConfig`, `LogLevel` (`LoggingLevel`, nnx-ppo's name of
it), `linear_decay` (a learning rate that decays over the run), `Symmetry` and `Mirror`
(a task's mirror symmetry, `PPOConfig.symmetry`).
**Save and load**: `Checkpointer`, `load_network`, `load_metadata`.
**Observe and analyse**: `evaluate`, `JSONLWriter`, `TensorBoardWriter`, `WandbWriter`,
`combine` (several sinks as one ``log_fn``), `PerRun`, `curves_of`, `summary_table`,
`plot_learning_curves`, `iqm`, `probability_of_improvement`, `interval_estimates`
(rliable's statistics), `record_activations_rollout`, `symmetry_error`, `NonFiniteError`,
`Periodic`
(your own task between device calls, ``tasks=[...]``); for cognitive tasks
`evaluate_trials`, `evaluate_trials_many`, `TrialResults`, `fit_psychometric`,
`PsychometricFit`, `plot_psychometric`, `plot_chronometric`.
**Environment hooks** (what the trainer writes into ``state.info``, for curricula):
`progress_info`, `TRAINING_STEP`, `TRAINING_PROGRESS`, `IS_TRAINING`.
**Stop cleanly**: `StopOnSignal`, `StopRequest`.
Everything else lives in the rooms of this package, one subpackage per concept, each
with a face (``__all__``) of its own; a room imports only the rooms below it:

- `nnx_ppo.algorithms.config`, `nnx_ppo.algorithms.types`,
  `nnx_ppo.algorithms.symmetry`: the records (configs, states, a task's symmetry);
- `nnx_ppo.algorithms.core`: rollout and replay, the phases of an iteration,
  schedules, placement on devices, randomization, progress, faults, checks, hooks,
  preemption, logging sinks;
- `nnx_ppo.algorithms.analysis`: curves, statistics, psychometrics, plots (no trainer);
- `nnx_ppo.algorithms.observe`: evaluation, video, activations, cognitive trials;
- `nnx_ppo.algorithms.trainer`: the run skeleton every trainer shares;
- `nnx_ppo.algorithms.ppo`, `nnx_ppo.algorithms.distillation`: the algorithms (neither
  imports the other); `nnx_ppo.algorithms.supervised`, their supervised sibling;
- `nnx_ppo.algorithms.checkpointing`: save, resume and load;
- `nnx_ppo.algorithms.sweeps`: many runs in one program, shards, search.

Importing this package is cheap: each name is imported from its submodule when first
used (``import nnx_ppo.algorithms`` alone loads neither the trainer nor orbax).
"""

from __future__ import annotations

import importlib
import sys
import types as _types
from collections.abc import Callable, Mapping
from importlib.metadata import version as _version
from typing import TYPE_CHECKING, Any

__version__: str = _version("nnx-ppo-train")


def lazy_exports(
    package: str, names: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for a package face that imports its names lazily.

    ``names`` maps each public name to the module (under ``nnx_ppo.algorithms``) that
    defines it; the first access imports that module and keeps the value in the face,
    so the next access is a plain lookup. Every face of ``nnx_ppo.algorithms`` and of
    its subpackages is built with it::

        __getattr__, __dir__ = lazy_exports(__name__, _NAMES)
    """
    face = sys.modules[package]

    def getattr_(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
        setattr(face, name, value)
        return value

    def dir_() -> list[str]:
        return sorted(set(vars(face)) | set(names))

    return getattr_, dir_


class _MovedModule(_types.ModuleType):
    """A module path of nnx-ppo 0.3.0 that moved into a subpackage: attribute reads and
    writes go to the module it moved to (imported on first use), and ``extra`` names
    it used to re-export come from where they live now."""

    def __init__(self, name: str, target: str, extra: Mapping[str, str]) -> None:
        super().__init__(name, f"Moved to {target}; this path is kept for nnx-ppo 0.3.0 code.")
        vars(self)["_target"] = target
        vars(self)["_extra"] = dict(extra)

    def _module(self, name: str) -> _types.ModuleType:
        return importlib.import_module(vars(self)["_extra"].get(name, vars(self)["_target"]))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module(name), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._module(name), name, value)

    def __dir__(self) -> list[str]:
        return sorted(set(dir(self._module(""))) | set(vars(self)["_extra"]))


# nnx-ppo 0.3.0's module paths that are no longer modules of this folder: `import
# nnx_ppo.algorithms.rollout` and `from nnx_ppo.algorithms.logging import JSONLWriter`
# keep working (`ppo`, `checkpointing`, `config` and `types` are still at their paths).
_MOVED_MODULES = {
    "rollout": ("core.rollout", {"record_activations_rollout": "observe.activations"}),
    "logging": ("core.logging", {}),
}
for _old, (_new, _extra) in _MOVED_MODULES.items():
    _alias = _MovedModule(
        f"{__name__}.{_old}",
        f"{__name__}.{_new}",
        {name: f"{__name__}.{module}" for name, module in _extra.items()},
    )
    sys.modules.setdefault(_alias.__name__, _alias)
    globals()[_old] = sys.modules[_alias.__name__]
del _old, _new, _extra, _alias

_NAMES = {
    # Train
    "train_ppo": "ppo.train",
    "TrainResult": "ppo.train",
    "train_distillation": "distillation.train",
    "DistillationResult": "distillation.train",
    "train_many": "sweeps.many",
    "SweepResult": "sweeps.many",
    "grid": "sweeps.many",
    "run_search": "sweeps.search",
    "SearchResult": "sweeps.search",
    "train_shard": "sweeps.shards",
    "Shard": "sweeps.shards",
    "SweepMismatchError": "sweeps.shards",
    "merge_shards": "sweeps.merge",
    "MergedSweep": "sweeps.merge",
    "train_supervised": "supervised.train",
    "SupervisedResult": "supervised.train",
    "check_env_network": "core.checks",
    "check_distillation_pair": "distillation.pairing",
    # Configure
    "TrainConfig": "config",
    "PPOConfig": "config",
    "EvalConfig": "config",
    "VideoConfig": "config",
    "LogLevel": "config",
    "LoggingLevel": "config",
    "DistillationConfig": "config",
    "SupervisedConfig": "supervised.config",
    "linear_decay": "core.schedules",
    "Symmetry": "symmetry",
    "Mirror": "symmetry",
    # Save and load
    "Checkpointer": "checkpointing.checkpointer",
    "load_network": "checkpointing.loading",
    "load_metadata": "checkpointing.loading",
    # Observe and analyse
    "evaluate": "observe.evaluation",
    "JSONLWriter": "core.logging",
    "TensorBoardWriter": "core.logging",
    "WandbWriter": "core.logging",
    "combine": "core.logging",
    "PerRun": "core.logging",
    "curves_of": "analysis.curves",
    "summary_table": "analysis.curves",
    "iqm": "analysis.statistics",
    "probability_of_improvement": "analysis.statistics",
    "interval_estimates": "analysis.statistics",
    "plot_learning_curves": "analysis.plotting",
    "record_activations_rollout": "observe.activations",
    "symmetry_error": "core.mirroring",
    "NonFiniteError": "core.faults",
    "Periodic": "core.hooks",
    "evaluate_trials": "observe.trials",
    "evaluate_trials_many": "observe.trials",
    "TrialResults": "analysis.trial_results",
    "fit_psychometric": "analysis.psychometrics",
    "PsychometricFit": "analysis.psychometrics",
    "plot_psychometric": "analysis.plotting",
    "plot_chronometric": "analysis.plotting",
    # Environment hooks
    "progress_info": "core.progress",
    "TRAINING_STEP": "core.progress",
    "TRAINING_PROGRESS": "core.progress",
    "IS_TRAINING": "core.progress",
    # Stop cleanly
    "StopOnSignal": "core.preemption",
    "StopRequest": "core.preemption",
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
    "Mirror",
    "NonFiniteError",
    "PPOConfig",
    "PerRun",
    "Periodic",
    "PsychometricFit",
    "SearchResult",
    "Shard",
    "StopOnSignal",
    "StopRequest",
    "SupervisedConfig",
    "SupervisedResult",
    "SweepMismatchError",
    "SweepResult",
    "Symmetry",
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
    "symmetry_error",
    "train_distillation",
    "train_many",
    "train_ppo",
    "train_shard",
    "train_supervised",
]

if TYPE_CHECKING:  # what a type checker and an IDE see
    from nnx_ppo.algorithms.analysis.curves import curves_of, summary_table
    from nnx_ppo.algorithms.analysis.plotting import (
        plot_chronometric,
        plot_learning_curves,
        plot_psychometric,
    )
    from nnx_ppo.algorithms.analysis.psychometrics import PsychometricFit, fit_psychometric
    from nnx_ppo.algorithms.analysis.statistics import (
        interval_estimates,
        iqm,
        probability_of_improvement,
    )
    from nnx_ppo.algorithms.analysis.trial_results import TrialResults
    from nnx_ppo.algorithms.checkpointing.checkpointer import Checkpointer
    from nnx_ppo.algorithms.checkpointing.loading import load_metadata, load_network
    from nnx_ppo.algorithms.config import (
        DistillationConfig,
        EvalConfig,
        LoggingLevel,
        LogLevel,
        PPOConfig,
        TrainConfig,
        VideoConfig,
    )
    from nnx_ppo.algorithms.core.checks import check_env_network
    from nnx_ppo.algorithms.core.faults import NonFiniteError
    from nnx_ppo.algorithms.core.hooks import Periodic
    from nnx_ppo.algorithms.core.logging import (
        JSONLWriter,
        PerRun,
        TensorBoardWriter,
        WandbWriter,
        combine,
    )
    from nnx_ppo.algorithms.core.mirroring import symmetry_error
    from nnx_ppo.algorithms.core.preemption import StopOnSignal, StopRequest
    from nnx_ppo.algorithms.core.progress import (
        IS_TRAINING,
        TRAINING_PROGRESS,
        TRAINING_STEP,
        progress_info,
    )
    from nnx_ppo.algorithms.core.schedules import linear_decay
    from nnx_ppo.algorithms.distillation.pairing import check_distillation_pair
    from nnx_ppo.algorithms.distillation.train import DistillationResult, train_distillation
    from nnx_ppo.algorithms.observe.activations import record_activations_rollout
    from nnx_ppo.algorithms.observe.evaluation import evaluate
    from nnx_ppo.algorithms.observe.trials import evaluate_trials, evaluate_trials_many
    from nnx_ppo.algorithms.ppo.train import TrainResult, train_ppo
    from nnx_ppo.algorithms.supervised.config import SupervisedConfig
    from nnx_ppo.algorithms.supervised.train import SupervisedResult, train_supervised
    from nnx_ppo.algorithms.sweeps.many import SweepResult, grid, train_many
    from nnx_ppo.algorithms.sweeps.merge import MergedSweep, merge_shards
    from nnx_ppo.algorithms.sweeps.search import SearchResult, run_search
    from nnx_ppo.algorithms.sweeps.shards import Shard, SweepMismatchError, train_shard
    from nnx_ppo.algorithms.symmetry import Mirror, Symmetry


__getattr__, __dir__ = lazy_exports(__name__, _NAMES)
