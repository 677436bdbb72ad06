"""`LowRankRNN`: a leaky rate network whose connectivity is low-rank plus random.

The recurrent connectivity of ``N`` units is

    J = m n^T / N + g * chi,       m, n: [N, R] learned,   chi: [N, N] fixed,

(Mastrogiuseppe & Ostojic 2018, Neuron 99: 609-623): a rank-``R`` structured part, whose
``R`` output directions ``m`` and input-selection vectors ``n`` are trained, plus an
optional random part of gain ``g`` with ``chi`` drawn once (entries ``N(0, 1 / N)``,
so its spectral radius is close to ``g``) and never trained. The recurrent input of
unit ``i`` is ``sum_j J_ij h_j = sum_r m_ir kappa_r + g (chi h)_i`` with the ``R``
latent variables ``kappa = h n / N``, so the structured part of the dynamics lives in
the span of ``m``, the object of the low-rank analyses.

The dynamics are `CTRNN`'s (same ``tau``, ``dt``, learned ``tau``, activations and
recurrent noise ``sigma_rec``): `LowRankRNN` is a `CTRNN` whose full recurrent kernel
is replaced by this connectivity, computed as ``(h n) m^T / N`` (``O(N R)`` per step
rather than ``O(N^2)`` when ``g == 0``). Replay, reset, export, recording and the
fixed-point analysis come from `RecurrentCell` as for every cell.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any, Unpack

import jax
import numpy as np
from flax import nnx

from nnx_ppo.networks._helpers import check_features
from nnx_ppo.networks.recurrent import CTRNN
from nnx_ppo.networks.recurrent_cell import CellOptions

__all__ = ["LowRankConnectivity", "LowRankRNN", "RandomConnectivity"]

Initializer = Any

_STANDARD_NORMAL = nnx.initializers.normal(stddev=1.0)


class RandomConnectivity(nnx.Variable):
    """The fixed random part ``chi`` ``[N, N]`` of a `LowRankRNN`'s connectivity.

    Drawn once at construction and never trained (not an `nnx.Param`).
    """


class LowRankConnectivity(nnx.Module):
    """The recurrent projection ``h -> h J^T + b`` with ``J = m n^T / N + g chi``.

    Args:
        features: ``N``, the number of units.
        rank: ``R``, the rank of the structured part.
        g: The gain of the random part (0: none, and no ``chi`` is drawn).
        init: Initialiser of ``m`` and ``n`` (each ``[N, R]``).
        bias_init: Initialiser of ``bias`` ``[N]``.
        param_dtype: Dtype of the parameters.
        rngs: Random streams (``params``) for ``m``, ``n``, ``bias`` and ``chi``.

    Attributes:
        m: The output directions, an `nnx.Param` ``[N, R]``.
        n: The input-selection vectors, an `nnx.Param` ``[N, R]``.
        bias: An `nnx.Param` ``[N]``.
        chi: The `RandomConnectivity` ``[N, N]`` (``None`` when ``g == 0``).
        g: The gain of the random part (a Python float).
    """

    def __init__(
        self,
        features: int,
        rank: int,
        *,
        g: float,
        init: Initializer,
        bias_init: Initializer,
        param_dtype: Any,
        rngs: nnx.Rngs,
    ) -> None:
        self.features, self.rank, self.g = features, rank, g
        self.m = nnx.Param(init(rngs.params(), (features, rank), param_dtype))
        self.n = nnx.Param(init(rngs.params(), (features, rank), param_dtype))
        self.bias = nnx.Param(bias_init(rngs.params(), (features,), param_dtype))
        chi = None
        if g > 0:
            scale = 1.0 / math.sqrt(features)
            chi = RandomConnectivity(
                scale * jax.random.normal(rngs.params(), (features, features), param_dtype)
            )
        self.chi: RandomConnectivity | None = chi

    @property
    def connectivity(self) -> jax.Array:
        """``J = m n^T / N + g chi``, ``[N, N]`` (``J[i, j]``: from unit ``j`` to ``i``)."""
        low_rank = self.m[...] @ self.n[...].T / self.features
        return low_rank if self.chi is None else low_rank + self.g * self.chi[...]

    def __call__(self, h: jax.Array) -> jax.Array:
        """``h J^T + b``: ``[..., N] -> [..., N]``."""
        kappa = h @ self.n[...] / self.features  # [..., R], the latent variables
        out = kappa @ self.m[...].T + self.bias[...]
        return out if self.chi is None else out + self.g * (h @ self.chi[...].T)


def _check_rank(owner: str, rank: Any, hidden: int) -> int:
    rank = check_features(owner, "rank", rank, f"{owner}(8, 64, rank=2, tau=10.0, rngs=rngs)")
    if rank > hidden:
        raise ValueError(
            f"{owner}: rank={rank} is above hidden_features={hidden}: the connectivity "
            f"m n^T / N has rank at most N; use rank <= {hidden} (1 to 3 is typical)."
        )
    return rank


def _check_gain(owner: str, g: Any) -> float:
    if isinstance(g, (bool, np.bool_)) or not isinstance(g, numbers.Real):
        raise TypeError(
            f"{owner}: g must be a number >= 0 (the gain of the random connectivity), got "
            f"{type(g).__name__} {g!r}; e.g. g=0.8, or g=0.0 for a purely low-rank network."
        )
    if not np.isfinite(g) or g < 0:
        raise ValueError(
            f"{owner}: g must be finite and >= 0, got g={g!r}; e.g. g=0.8 (below 1 the "
            "random part alone decays), or g=0.0 for none."
        )
    return float(g)


class LowRankRNN(CTRNN):
    """A leaky rate network with low-rank plus random connectivity (see the module).

    The `CTRNN` step with ``W = J^T``, ``J = m n^T / N + g chi``::

        h' = (1 - a) * h + a * f(x U + h J^T + b) [+ sqrt(2 a) sigma_rec N(0, 1)]

    with ``a = dt / tau``. ``U`` is ``input_proj.kernel`` ``[in_features, N]``; ``m``,
    ``n``, ``b`` and ``chi`` are in ``recurrent_proj`` (a `LowRankConnectivity`).

    Args:
        in_features: Size of the input's last axis, a positive int.
        hidden_features: ``N``, the number of units, a positive int.
        rank: ``R``, the rank of the structured connectivity, ``1 <= R <= N``.
        tau: The time constant (a number or ``[N]``), as in `CTRNN`.
        rngs: Random streams for the parameters, ``chi`` and the noise key.
        dt: The integration step (default 1.0).
        g: The gain of the fixed random part (default 0.0: none).
        learn_tau: Learn ``tau`` (as in `CTRNN`).
        activation: ``f``: ``"tanh"`` (default), ``"relu"`` or a callable.
        sigma_rec: The recurrent noise level (as in `CTRNN`; default 0.0).
        **options: The keywords every cell takes (`CellOptions`):
            ``trainable_initial_state``, ``kernel_init`` (``U``),
            ``recurrent_kernel_init`` (``m`` and ``n``; default or ``None``: standard
            normal entries, so that ``m n^T / N`` has ``O(1)`` eigenvalues),
            ``bias_init`` (``b``) and ``param_dtype``.

    Raises:
        TypeError: As `CTRNN`, or if ``rank`` is not an int or ``g`` not a number.
        ValueError: As `CTRNN`, or if ``rank`` is not in ``[1, N]`` or ``g`` is negative.

    Attributes:
        rank: ``R``.
        g: The gain of the random part.

    Examples:
        >>> import jax.numpy as jnp, numpy as np
        >>> from flax import nnx
        >>> from nnx_ppo.networks.low_rank import LowRankRNN
        >>> cell = LowRankRNN(3, 16, rank=2, tau=4.0, rngs=nnx.Rngs(0))
        >>> J = cell.recurrent_proj.connectivity
        >>> J.shape, int(np.linalg.matrix_rank(np.asarray(J), tol=1e-5))
        ((16, 16), 2)
        >>> out = cell(cell.initialize_state(batch_size=2), jnp.ones((2, 3)))
        >>> out.output.shape
        (2, 16)
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        rank: int,
        tau: float | np.ndarray | jax.Array | list[float],
        rngs: nnx.Rngs,
        dt: float = 1.0,
        g: float = 0.0,
        learn_tau: bool = False,
        activation: str | Callable[[jax.Array], jax.Array] = "tanh",
        sigma_rec: float = 0.0,
        **options: Unpack[CellOptions],
    ) -> None:
        owner = type(self).__name__
        example = f"{owner}(8, 64, rank=2, tau=10.0, rngs=rngs)"
        hidden = check_features(owner, "hidden_features", hidden_features, example)
        # Read by _make_recurrent_proj, which the base calls during super().__init__.
        self.rank = _check_rank(owner, rank, hidden)
        self.g = _check_gain(owner, g)
        # The base's default recurrent initialiser (orthogonal) is meant for [H, H]
        # blocks; m and n get standard-normal entries unless one is given.
        if options.get("recurrent_kernel_init") is None:
            options["recurrent_kernel_init"] = _STANDARD_NORMAL
        super().__init__(
            in_features,
            hidden_features,
            tau=tau,
            rngs=rngs,
            dt=dt,
            learn_tau=learn_tau,
            activation=activation,
            sigma_rec=sigma_rec,
            **options,
        )

    def _make_recurrent_proj(
        self,
        *,
        use_bias: bool,
        kernel_init: Initializer,
        bias_init: Initializer,
        param_dtype: Any,
        rngs: nnx.Rngs,
    ) -> nnx.Module:
        del use_bias  # a CTRNN's recurrent projection always has its bias
        return LowRankConnectivity(
            self.hidden_features,
            self.rank,
            g=self.g,
            init=kernel_init,
            bias_init=bias_init,
            param_dtype=param_dtype,
            rngs=rngs,
        )
