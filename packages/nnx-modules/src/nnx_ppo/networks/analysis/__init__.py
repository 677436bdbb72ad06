"""Analysis of trained recurrent networks: their dynamics as a pure map, its fixed and
slow points with their stability, Lyapunov exponents, the flow on a plane of principal
components, and the similarity of activity between networks or with recorded data.

- `CarryMap`: ``h -> h'``, the deterministic policy's carry step for a fixed
  observation on flat vectors of its canonical (time-invariant) carry, its Jacobian,
  and rollouts of states; every stateful family (recurrent cells, delay lines,
  population graphs with delays) is supported.
- `find_fixed_points`: fixed and slow points from many starts (Sussillo & Barak 2013),
  merged, with Jacobian eigenvalues.
- `lyapunov_exponents`: the Lyapunov spectrum (or its top ``K``) along a driven or
  recorded trajectory, by QR re-orthonormalisation of Jacobian products.
- `pca`: principal components of ``[..., N]`` activity.
- `flow_field`: the velocity ``F(h) - h`` on a grid of a principal-component plane.
- `cca` (SVCCA with a PCA reduction first) and `procrustes`: similarity of two
  ``[samples, features]`` activity matrices.
- `condition_average`: ``[T, B, N]`` activity averaged over the trials of each
  condition (coherence, context), step by step.
- `nnx_ppo.networks.analysis.plotting` (the ``plot`` extra, matplotlib): activation
  heatmaps, trajectories in principal-component space, flow fields, Lyapunov spectra
  and canonical correlations.

numpy and JAX only (plots apart); see the "Record and analyse activations" how-to.
"""

from nnx_ppo.networks.analysis.conditions import ConditionAverage, condition_average
from nnx_ppo.networks.analysis.dynamics import CarryMap
from nnx_ppo.networks.analysis.fixed_points import FixedPoints, find_fixed_points, speed
from nnx_ppo.networks.analysis.flow import FlowField, flow_field
from nnx_ppo.networks.analysis.lyapunov import LyapunovSpectrum, lyapunov_exponents
from nnx_ppo.networks.analysis.pca import PCA, pca
from nnx_ppo.networks.analysis.similarity import CCA, Procrustes, cca, procrustes

__all__ = [
    "CCA",
    "PCA",
    "CarryMap",
    "ConditionAverage",
    "FixedPoints",
    "FlowField",
    "LyapunovSpectrum",
    "Procrustes",
    "cca",
    "condition_average",
    "find_fixed_points",
    "flow_field",
    "lyapunov_exponents",
    "pca",
    "procrustes",
    "speed",
]
