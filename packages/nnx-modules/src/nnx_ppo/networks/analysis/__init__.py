"""Analysis of trained recurrent networks: their dynamics as a pure map, its fixed and
slow points with their stability, and principal components of recorded activity.

- `CarryMap`: ``h -> h'``, the deterministic policy's carry step for a fixed
  observation on flat vectors of its canonical (time-invariant) carry, its Jacobian,
  and rollouts of states; every stateful family (recurrent cells, delay lines,
  population graphs with delays) is supported.
- `find_fixed_points`: fixed and slow points from many starts (Sussillo & Barak 2013),
  merged, with Jacobian eigenvalues.
- `pca`: principal components of ``[..., N]`` activity.
- `condition_average`: ``[T, B, N]`` activity averaged over the trials of each
  condition (coherence, context), step by step.
- `nnx_ppo.networks.analysis.plotting` (the ``plot`` extra, matplotlib): activation
  heatmaps and trajectories in principal-component space.

numpy and JAX only (plots apart); see the "Record and analyse activations" how-to.
"""

from nnx_ppo.networks.analysis.conditions import ConditionAverage, condition_average
from nnx_ppo.networks.analysis.dynamics import CarryMap
from nnx_ppo.networks.analysis.fixed_points import FixedPoints, find_fixed_points, speed
from nnx_ppo.networks.analysis.pca import PCA, pca

__all__ = [
    "PCA",
    "CarryMap",
    "ConditionAverage",
    "FixedPoints",
    "condition_average",
    "find_fixed_points",
    "pca",
    "speed",
]
