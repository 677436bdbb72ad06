"""Environment wrappers: episode truncation, reward scaling, auto-reset, observation
masking and history, randomized action and observation latency, and
`wrap_for_training`, which sets an environment up for PPO.

Wrappers act on one unbatched environment (ours, brax's or MuJoCo Playground's); the
trainer vmaps the wrapped environment. Unknown attributes (``render``, ``dt``, ...) are
forwarded to the wrapped environment.
"""

from nnx_ppo.wrappers.auto_reset import AutoResetWrapper, reset_done
from nnx_ppo.wrappers.base import Wrapper
from nnx_ppo.wrappers.episode import EpisodeWrapper
from nnx_ppo.wrappers.history import ObservationHistory
from nnx_ppo.wrappers.latency import Latency
from nnx_ppo.wrappers.mask_observation import MaskObservation
from nnx_ppo.wrappers.reward_scaling import RewardScalingWrapper
from nnx_ppo.wrappers.training import wrap_for_training

__all__ = [
    "AutoResetWrapper",
    "EpisodeWrapper",
    "Latency",
    "MaskObservation",
    "ObservationHistory",
    "RewardScalingWrapper",
    "Wrapper",
    "reset_done",
    "wrap_for_training",
]
