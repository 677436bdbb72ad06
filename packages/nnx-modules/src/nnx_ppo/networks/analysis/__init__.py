"""Analysis of trained recurrent networks: their dynamics as a pure map, its fixed and
slow points with their stability, and principal components of recorded activity.

- `CarryMap`: ``h -> h'``, the deterministic policy's carry step for a fixed
  observation on flat state vectors, its Jacobian, and rollouts of states.
- `find_fixed_points`: fixed and slow points from many starts (Sussillo & Barak 2013),
  merged, with Jacobian eigenvalues.
- `pca`: principal components of ``[..., N]`` activity.
- `nnx_ppo.networks.analysis.plotting` (the ``plot`` extra, matplotlib): activation
  heatmaps and trajectories in principal-component space.

numpy and JAX only (plots apart); see the "Record and analyse activations" how-to.
"""

from nnx_ppo.networks.analysis.dynamics import CarryMap
from nnx_ppo.networks.analysis.fixed_points import FixedPoints, find_fixed_points, speed
from nnx_ppo.networks.analysis.pca import PCA, pca

__all__ = ["PCA", "CarryMap", "FixedPoints", "find_fixed_points", "pca", "speed"]
