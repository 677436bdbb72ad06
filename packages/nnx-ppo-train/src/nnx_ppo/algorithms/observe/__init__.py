"""Looking at a policy while and after it trains: deterministic evaluation, videos,
activation recordings of a rollout, and cognitive-task trials scored trial by trial.

Stands on `nnx_ppo.algorithms.core` and `nnx_ppo.algorithms.analysis`; the trainer
(`nnx_ppo.algorithms.trainer`) calls the evaluation and the video as periodic tasks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nnx_ppo.algorithms import lazy_exports

_NAMES = {
    "TrialResults": "analysis.trial_results",
    "record_activations_rollout": "observe.activations",
    "episode_returns": "observe.evaluation",
    "evaluate": "observe.evaluation",
    "make_evaluator": "observe.evaluation",
    "evaluate_trials": "observe.trials",
    "evaluate_trials_many": "observe.trials",
    "check_video_env": "observe.video",
    "choose_mujoco_gl": "observe.video",
    "make_video_recorder": "observe.video",
}
__all__ = [
    "TrialResults",
    "check_video_env",
    "choose_mujoco_gl",
    "episode_returns",
    "evaluate",
    "evaluate_trials",
    "evaluate_trials_many",
    "make_evaluator",
    "make_video_recorder",
    "record_activations_rollout",
]

if TYPE_CHECKING:  # what a type checker and an IDE see
    from nnx_ppo.algorithms.analysis.trial_results import TrialResults
    from nnx_ppo.algorithms.observe.activations import record_activations_rollout
    from nnx_ppo.algorithms.observe.evaluation import episode_returns, evaluate, make_evaluator
    from nnx_ppo.algorithms.observe.trials import evaluate_trials, evaluate_trials_many
    from nnx_ppo.algorithms.observe.video import (
        check_video_env,
        choose_mujoco_gl,
        make_video_recorder,
    )

__getattr__, __dir__ = lazy_exports(__name__, _NAMES)
