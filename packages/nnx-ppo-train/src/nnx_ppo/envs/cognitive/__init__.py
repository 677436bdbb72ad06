"""Cognitive tasks for computational neuroscience: trials of epochs in milliseconds.

Pure-JAX, jit- and vmap-able environments with the protocol of `nnx_ppo.envs`, one
trial per episode, discrete actions (``0`` = keep fixating) and the trial's condition,
epoch, answer and outcome in ``state.info`` so that `nnx_ppo.algorithms.observe.trials` can
score them. The definitions are those of Song, Yang & Wang (2017, eLife 6:e21492;
pyrl), written from their published specifications (post-decision wager included),
plus NeuroGym-style go/no-go, delayed match-to-sample and ready-set-go interval timing.
See `CognitiveTask` for the trial rules and the noise model (evidence's signal-to-noise
ratio independent of ``dt``), and `trial_dataset` for any task's trials as
supervised-learning arrays (inputs, targets, loss mask).
"""

from nnx_ppo.envs.cognitive._dataset import TrialDataset, trial_dataset
from nnx_ppo.envs.cognitive._trial import (
    CognitiveTask,
    Duration,
    Outcome,
    TaskOptions,
    TrialState,
)
from nnx_ppo.envs.cognitive.context import ContextDependentIntegration
from nnx_ppo.envs.cognitive.decision import PerceptualDecisionMaking
from nnx_ppo.envs.cognitive.economic import EconomicChoice
from nnx_ppo.envs.cognitive.go_nogo import GoNoGo
from nnx_ppo.envs.cognitive.multisensory import MultisensoryIntegration
from nnx_ppo.envs.cognitive.timing import ReadySetGo
from nnx_ppo.envs.cognitive.wager import PostDecisionWager
from nnx_ppo.envs.cognitive.working_memory import DelayedMatchToSample, ParametricWorkingMemory

__all__ = [
    "CognitiveTask",
    "ContextDependentIntegration",
    "DelayedMatchToSample",
    "Duration",
    "EconomicChoice",
    "GoNoGo",
    "MultisensoryIntegration",
    "Outcome",
    "ParametricWorkingMemory",
    "PerceptualDecisionMaking",
    "PostDecisionWager",
    "ReadySetGo",
    "TaskOptions",
    "TrialDataset",
    "TrialState",
    "trial_dataset",
]
