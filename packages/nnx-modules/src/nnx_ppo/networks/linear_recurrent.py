"""Linear-recurrence cells, replayed in parallel in time: `MinGRU`, `LRU`.

In these cells the carry follows a diagonal linear recurrence whose coefficients depend
on the input only::

    h_t = a(x_t) * h_{t-1} + b(x_t)          (elementwise, real or complex)

so the cell has two forms of the same dynamics. The step form (``__call__``) is what a
rollout, an exported policy and the fixed-point analysis run, one step at a time, like
any cell. The sequence form (`LinearRecurrentCell.replay_sequence`, the loss replay)
computes ``a`` and ``b`` for all ``T * B`` samples at once and composes the affine maps
``h -> a h + b`` with `jax.lax.associative_scan`: depth ``log T`` instead of a scan of
``T`` steps. Episode ends are handled inside the scan's associative operator: each step
carries a flag "the carry was reset before this step", composing with a later flagged
step discards everything before it, and a flagged prefix is applied to the initial
carry instead of the stored one. So a reset restarts from the initial carry exactly,
and the replay equals the step-by-step one to float32 rounding (a test, with random
done masks).

`LinearRecurrentCell` is the base: a subclass declares its carry and implements
``_coefficients`` (and, for a complex recurrence or an output other than ``h``,
``_multiply`` and ``_readout``). Everything else (carry, learned initial state, reset,
checks, both forms) is the base's. The carry is always real-valued: `LRU` keeps the
real and imaginary parts of its complex state as two entries, so export (StableHLO,
ONNX) and analysis see plain float arrays.

Examples:
    >>> import jax, jax.numpy as jnp
    >>> from flax import nnx
    >>> from nnx_ppo.networks.linear_recurrent import MinGRU
    >>> cell = MinGRU(3, 8, rngs=nnx.Rngs(0))
    >>> xs = jax.random.normal(jax.random.key(0), (5, 2, 3))  # [T, B, in]
    >>> done = jnp.zeros((5, 2), bool).at[2, 0].set(True)
    >>> final, seq = cell.replay_sequence(cell.initialize_state(2), xs, None, done)
    >>> seq.output.shape, final["h"].shape
    ((5, 2, 8), (2, 8))
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nnx_ppo.networks._helpers import cell_activation, check_features
from nnx_ppo.networks.recurrent_cell import (
    Initializer,
    _check_carry,
    _initial_carry,
    _learned_initial_state,
)
from nnx_ppo.networks.types import StatefulModule, StatefulModuleOutput, reset_where

__all__ = ["LRU", "LinearRecurrentCell", "MinGRU"]

Carry = dict[str, jax.Array]


def _output(next_state: Any, output: Any, regularization: jax.Array) -> StatefulModuleOutput:
    return StatefulModuleOutput(
        next_state=next_state,
        output=output,
        regularization_loss=regularization,
        metrics={},
        rollout_extras=(),
    )


class LinearRecurrentCell(StatefulModule):
    """Base class of the cells with a linear recurrence ``h' = a(x) * h + b(x)``.

    A subclass sets ``carry_names`` (the carry's entries, each ``[B, N]``) and
    implements one hook; two more have defaults:

    - ``_coefficients(x) -> (a, b)``: for an input ``[..., in_features]``, the
      coefficients as two dicts keyed like the carry, each leaf ``[..., N]``.
    - ``_multiply(a, h)``: the elementwise product of a coefficient and a carry
      (default: real, entry by entry; `LRU` multiplies complex numbers stored as real
      and imaginary entries). It must be associative and commutative, since the scan
      composes coefficients with it too.
    - ``_readout(h, x)``: the output from the new carry and the input (default
      ``h["h"]``).

    The base gives `__call__` (the step: ``h' = a * h + b``, then the read-out),
    `initialize_state` (zeros, or a learned vector per entry), ``reset_state``, the
    checks, and `replay_sequence` (coefficients of all steps at once, then
    `jax.lax.associative_scan` with the resets inside its operator; see the module
    docstring).

    Args:
        in_features: Size of the input's last axis, a positive int.
        state_features: Size ``N`` of each carry entry, a positive int.
        trainable_initial_state: If true, each carry entry starts an episode from a
            learned ``[N]`` parameter (initialised at zero, in ``initial_state``)
            broadcast to the batch, instead of fixed zeros.
        param_dtype: Dtype of the parameters and the carry.

    Raises:
        TypeError: If a size is not an int, ``trainable_initial_state`` not a bool, or
            the subclass's ``carry_names`` is malformed.
        ValueError: If a size is not positive.

    Attributes:
        initial_state: ``{name: nnx.Param [N]}`` with ``trainable_initial_state``, else
            ``None``.

    Examples:
        An exponential moving average of the input with a learned rate per unit,
        ``h' = sigmoid(w) * h + (1 - sigmoid(w)) * x``:

        >>> import jax, jax.numpy as jnp
        >>> from flax import nnx
        >>> class Average(LinearRecurrentCell):
        ...     def __init__(self, features):
        ...         super().__init__(features, features)
        ...         self.w = nnx.Param(jnp.zeros((features,)))
        ...
        ...     def _coefficients(self, x):
        ...         keep = jnp.broadcast_to(jax.nn.sigmoid(self.w[...]), x.shape)
        ...         return {"h": keep}, {"h": (1.0 - keep) * x}
        >>> cell = Average(2)
        >>> out = cell({"h": jnp.ones((1, 2))}, jnp.full((1, 2), 3.0))
        >>> out.output.tolist()  # 0.5 * 1 + 0.5 * 3
        [[2.0, 2.0]]
    """

    carry_names: ClassVar[tuple[str, ...]] = ("h",)
    """The carry's entries, each ``[B, N]``."""

    def __init__(
        self,
        in_features: int,
        state_features: int,
        *,
        trainable_initial_state: bool = False,
        param_dtype: Any = jnp.float32,
    ) -> None:
        owner = type(self).__name__
        names = type(self).carry_names
        if (
            not isinstance(names, tuple)
            or not names
            or not all(isinstance(n, str) for n in names)
            or len(set(names)) != len(names)
        ):
            raise TypeError(
                f"{owner}.carry_names must be a non-empty tuple of distinct str, got "
                f"{names!r}; declare e.g. carry_names = ('h',) in the class body."
            )
        example = f"{owner}(8, 64, rngs=rngs)"
        self.in_features = check_features(owner, "in_features", in_features, example)
        self.state_features = check_features(owner, "state_features", state_features, example)
        self.initial_state: nnx.Dict | None = _learned_initial_state(
            owner, names, self.state_features, trainable_initial_state, param_dtype
        )
        self.trainable_initial_state = trainable_initial_state
        self.param_dtype = param_dtype

    def initialize_state(self, batch_size: int) -> Carry:
        """The carry at the start of an episode.

        Args:
            batch_size: Number of environments ``B``.

        Returns:
            A dict with one ``[B, state_features]`` array per name in ``carry_names``:
            zeros, or the learned initial state broadcast to the batch.
        """
        shape = (batch_size, self.state_features)
        return _initial_carry(self.initial_state, self.carry_names, shape, self.param_dtype)

    def __call__(
        self, state: Carry, x: jax.Array, rollout_extras: Any = None
    ) -> StatefulModuleOutput:
        """The step form: ``h' = a(x) * h + b(x)``, then the read-out of ``h'`` and ``x``
        (what a rollout, an exported policy and the analysis run).

        Args:
            state: ``{name: [B, state_features]}`` for each name in ``carry_names``.
            x: ``[B, in_features]``.
            rollout_extras: Not used: given its carry, the cell is deterministic.

        Returns:
            ``next_state`` (``h'``, shaped and typed as ``state``) and ``output`` (the
            read-out, ``[B, ...]``), with no loss, metrics or extras.

        Raises:
            ValueError: If the carry's keys are not ``carry_names`` or ``x``'s last axis
                is not ``in_features``.
        """
        del rollout_extras
        self._check(state, x)
        a, b = self._coefficients(x)
        h = self._affine(a, b, state)
        return _output(h, self._readout(h, x), jnp.zeros(()))

    def replay_sequence(
        self, state: Carry, xs: jax.Array, rollout_extras: Any, done: jax.Array
    ) -> tuple[Carry, StatefulModuleOutput]:
        """Replay a stored sequence in parallel in time (see the module docstring).

        The coefficients of all ``T * B`` steps are computed at once, and
        `jax.lax.associative_scan` composes the affine maps with the episode resets
        inside its operator. The result is the step-by-step replay's (see
        `StatefulModule.replay_sequence`) to float32 rounding.

        Args:
            state: ``{name: [B, state_features]}``, the carry before step 0.
            xs: ``[T, B, in_features]``, the stored inputs.
            rollout_extras: Not used.
            done: ``[T, B]`` bool; where set, step ``t`` ended an episode and step
                ``t + 1`` starts from the initial carry.

        Returns:
            ``(final_state, out)``: the carry after step ``T - 1`` (reset where that
            step ended an episode) and the read-outs ``out.output``, ``[T, B, ...]``.
        """
        del rollout_extras
        self._check(state, xs)
        steps, batch = jnp.shape(done)[:2]
        done = jnp.asarray(done).astype(bool)
        a, b = self._coefficients(xs)
        # Step t starts from the initial carry where step t - 1 ended an episode.
        restarted = jnp.concatenate([jnp.zeros((1, batch), bool), done[:-1]])
        a, b, restarted = jax.lax.associative_scan(self._compose, (a, b, restarted))
        from_stored = self._affine(a, b, state)
        from_initial = self._affine(a, b, self.reset_state(state))
        mask = restarted[..., None]
        h = {k: jnp.where(mask, from_initial[k], from_stored[k]) for k in from_stored}
        final = reset_where(self, done[-1], {k: v[-1] for k, v in h.items()})
        return final, _output((), self._readout(h, xs), jnp.zeros((steps, batch)))

    def _compose(self, earlier: Any, later: Any) -> Any:
        """The associative operator: apply ``earlier``'s map, then ``later``'s; a
        ``later`` that restarts from the initial carry discards ``earlier``."""
        (a1, b1, restarted1), (a2, b2, restarted2) = earlier, later
        keep = restarted2[..., None]
        a = self._multiply(a2, a1)
        b = self._multiply(a2, b1)
        a = {k: jnp.where(keep, a2[k], a[k]) for k in a}
        b = {k: jnp.where(keep, b2[k], b[k] + b2[k]) for k in b}
        return a, b, restarted1 | restarted2

    def _affine(self, a: Carry, b: Carry, h: Carry) -> Carry:
        """``a * h + b`` in the carry's dtypes (``h`` broadcasts against ``a``)."""
        product = self._multiply(a, h)
        return {k: (product[k] + b[k]).astype(h[k].dtype) for k in product}

    def _coefficients(self, x: jax.Array) -> tuple[Carry, Carry]:
        """The recurrence's coefficients (the one hook a subclass implements).

        Args:
            x: Input, ``[..., in_features]`` (``[B, ...]`` in a step, ``[T, B, ...]``
                in replay).

        Returns:
            ``(a, b)``: two dicts keyed like the carry, each leaf ``[..., N]``.
        """
        raise NotImplementedError(
            f"{type(self).__name__} must implement _coefficients(x) -> (a, b)"
        )

    def _multiply(self, a: Carry, h: Carry) -> Carry:
        """Elementwise product of a coefficient and a carry (real, entry by entry)."""
        return {k: a[k] * h[k] for k in a}

    def _readout(self, h: Carry, x: jax.Array) -> Any:
        """The output from the new carry ``h`` and the input ``x`` (default ``h["h"]``)."""
        del x
        return h["h"]

    def _check(self, state: Any, x: jax.Array) -> None:
        _check_carry(type(self).__name__, state, self.carry_names, x, self.in_features)


# --------------------------------------------------------------------------------------
# minGRU
# --------------------------------------------------------------------------------------


class MinGRU(LinearRecurrentCell):
    """The minimal GRU of Feng et al. 2024 ("Were RNNs all we needed?").

    The gate and the candidate read the input only, so the recurrence is linear::

        z = sigmoid(x W_z + b_z)           h~ = x W_h + b_h   (or activation(x W_h + b_h))
        h' = (1 - z) * h + z * h~

    and `replay_sequence` runs in parallel in time (see `LinearRecurrentCell`).
    ``[W_z, W_h]`` is ``input_proj.kernel`` ``[in_features, 2H]`` and ``[b_z, b_h]``
    its bias. The carry is ``{"h": [B, H]}``; the output is ``h'``, ``[B, H]``.

    Args:
        in_features: Size of the input's last axis, a positive int.
        hidden_features: Size ``H`` of the hidden state, a positive int.
        rngs: Random streams for the parameter initialisers (by keyword or third
            positional argument).
        activation: Applied to the candidate: ``None`` (default, the paper's linear
            candidate), ``"tanh"``, ``"relu"`` or an elementwise callable.
        trainable_initial_state: Learn the episode-start ``h``.
        kernel_init: Initialiser of ``input_proj.kernel`` (``None``: LeCun normal).
        bias_init: Initialiser of ``input_proj.bias`` (``None``: zeros).
        param_dtype: Dtype of the parameters and the carry.

    Raises:
        TypeError: If a size is not an int, ``activation`` is neither ``None``, a name
            nor a callable, or ``trainable_initial_state`` is not a bool.
        ValueError: If a size is not positive or ``activation`` is an unknown name.

    Examples:
        All weights zero: ``z = sigmoid(0) = 0.5`` and ``h~ = 0``, so each step halves
        ``h``:

        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> zeros = nnx.initializers.zeros_init()
        >>> cell = MinGRU(3, 2, rngs=nnx.Rngs(0), kernel_init=zeros)
        >>> cell({"h": jnp.full((1, 2), 4.0)}, jnp.ones((1, 3))).output.tolist()
        [[2.0, 2.0]]
    """

    carry_names = ("h",)

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        rngs: nnx.Rngs,
        *,
        activation: str | Callable[[jax.Array], jax.Array] | None = None,
        trainable_initial_state: bool = False,
        kernel_init: Initializer | None = None,
        bias_init: Initializer | None = None,
        param_dtype: Any = jnp.float32,
    ) -> None:
        owner = type(self).__name__
        example = f"{owner}(8, 64, rngs=rngs)"
        hidden = check_features(owner, "hidden_features", hidden_features, example)
        self.activation = None if activation is None else cell_activation(owner, activation)
        super().__init__(
            in_features,
            hidden,
            trainable_initial_state=trainable_initial_state,
            param_dtype=param_dtype,
        )
        self.hidden_features = hidden
        self.input_proj = nnx.Linear(
            self.in_features,
            2 * hidden,
            kernel_init=nnx.initializers.lecun_normal() if kernel_init is None else kernel_init,
            bias_init=nnx.initializers.zeros_init() if bias_init is None else bias_init,
            param_dtype=param_dtype,
            rngs=rngs,
        )

    def _coefficients(self, x: jax.Array) -> tuple[Carry, Carry]:
        z, candidate = jnp.split(self.input_proj(x), 2, axis=-1)
        if self.activation is not None:
            candidate = self.activation(candidate)
        # 1 - sigmoid(z) = sigmoid(-z), without the cancellation near z >> 0.
        return {"h": jax.nn.sigmoid(-z)}, {"h": jax.nn.sigmoid(z) * candidate}


# --------------------------------------------------------------------------------------
# LRU
# --------------------------------------------------------------------------------------


def _check_real(owner: str, name: str, value: Any, example: str) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{owner}: {name} must be a number, got {type(value).__name__} {value!r}; "
            f"e.g. {example}."
        )
    if not math.isfinite(value):
        raise ValueError(f"{owner}: {name} must be finite, got {value!r}; e.g. {example}.")
    return float(value)


class LRU(LinearRecurrentCell):
    """The linear recurrent unit of Orvieto et al. 2023, with a real-valued carry.

    A diagonal complex recurrence of ``N = state_features`` units and a real read-out::

        lambda = exp(-exp(nu_log) + i exp(theta_log))            (|lambda| < 1 always)
        h' = lambda * h + exp(gamma_log) * (x B)                 (complex, [B, N])
        y  = Re(h' C) + x D                                      (real, [B, H])

    ``B = B_re + i B_im`` is ``[in_features, N]``, ``C = C_re + i C_im`` is
    ``[N, H]`` and ``D`` (the skip) ``[in_features, H]``; ``nu_log``, ``theta_log``,
    ``gamma_log`` are ``[N]``. The stable exponential parametrisation keeps
    ``|lambda| = exp(-exp(nu_log))`` in ``(0, 1]`` after any gradient step; ``gamma``
    starts at ``sqrt(1 - |lambda|^2)`` (the normalisation that keeps the state's
    scale independent of how slowly it decays) and is learned. The eigenvalues start
    uniform on the ring ``r_min <= |lambda| <= r_max`` with phases in ``[0,
    max_phase]`` (the paper's initialisation). As in the paper the layer is linear;
    the network's next layers bring the nonlinearity.

    The carry is ``{"h_re": [B, N], "h_im": [B, N]}``, the real and imaginary parts of
    ``h'``, so an exported policy and the fixed-point analysis see real arrays; the
    output is ``y``, ``[B, H]``. Loss replay runs in parallel in time (see
    `LinearRecurrentCell`).

    Args:
        in_features: Size of the input's last axis, a positive int.
        hidden_features: Size ``H`` of the output, a positive int.
        rngs: Random streams for the parameter initialisers (by keyword or third
            positional argument).
        state_features: Number ``N`` of complex units (default: ``hidden_features``).
        r_min: Smallest initial ``|lambda|``, in ``[0, r_max)``.
        r_max: Largest initial ``|lambda|``, in ``(r_min, 1]`` (e.g. ``r_min=0.9,
            r_max=0.999`` for memories of hundreds of steps).
        max_phase: Largest initial phase of ``lambda``, positive (default ``2 pi``).
        trainable_initial_state: Learn the episode-start ``h_re`` and ``h_im``.
        param_dtype: Dtype of the parameters and the carry.

    Raises:
        TypeError: If a size is not an int or ``r_min``, ``r_max`` or ``max_phase`` is
            not a number.
        ValueError: If a size is not positive, not ``0 <= r_min < r_max <= 1``, or
            ``max_phase`` is not positive and finite.

    Examples:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> cell = LRU(3, 4, rngs=nnx.Rngs(0), state_features=6, r_min=0.5, r_max=0.9)
        >>> state = cell.initialize_state(2)
        >>> sorted(state), state["h_re"].shape
        (['h_im', 'h_re'], (2, 6))
        >>> cell(state, jnp.ones((2, 3))).output.shape
        (2, 4)
        >>> modulus = jnp.abs(cell.eigenvalues)
        >>> bool(((modulus >= 0.5) & (modulus <= 0.9)).all())
        True
    """

    carry_names = ("h_im", "h_re")

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        rngs: nnx.Rngs,
        *,
        state_features: int | None = None,
        r_min: float = 0.0,
        r_max: float = 1.0,
        max_phase: float = 2 * math.pi,
        trainable_initial_state: bool = False,
        param_dtype: Any = jnp.float32,
    ) -> None:
        owner = type(self).__name__
        example = f"{owner}(8, 64, rngs=rngs)"
        hidden = check_features(owner, "hidden_features", hidden_features, example)
        n = hidden if state_features is None else state_features
        r_min = _check_real(owner, "r_min", r_min, "r_min=0.9")
        r_max = _check_real(owner, "r_max", r_max, "r_max=0.999")
        max_phase = _check_real(owner, "max_phase", max_phase, "max_phase=6.28")
        if not 0.0 <= r_min < r_max <= 1.0:
            raise ValueError(
                f"{owner}: the initial eigenvalue moduli are drawn from r_min <= |lambda| "
                f"<= r_max, which needs 0 <= r_min < r_max <= 1 (a stable recurrence); got "
                f"r_min={r_min!r}, r_max={r_max!r}. E.g. r_min=0.9, r_max=0.999."
            )
        if max_phase <= 0.0:
            raise ValueError(
                f"{owner}: max_phase must be positive (the largest initial phase of "
                f"lambda), got max_phase={max_phase!r}; e.g. max_phase=6.28."
            )
        super().__init__(
            in_features,
            n,
            trainable_initial_state=trainable_initial_state,
            param_dtype=param_dtype,
        )
        self.hidden_features = hidden
        self.r_min, self.r_max, self.max_phase = r_min, r_max, max_phase
        n, d_in = self.state_features, self.in_features

        def uniform() -> np.ndarray:  # in (0, 1), in float64 for the logs below
            u = np.asarray(jax.random.uniform(rngs.params(), (n,)), np.float64)
            return np.clip(u, 1e-6, 1.0 - 1e-6)

        def normal(shape: tuple[int, int], scale: float) -> nnx.Param:
            return nnx.Param(scale * jax.random.normal(rngs.params(), shape, param_dtype))

        # |lambda|^2 uniform on [r_min^2, r_max^2], phase uniform on [0, max_phase].
        modulus_sq = np.clip(uniform() * (r_max**2 - r_min**2) + r_min**2, 1e-12, None)
        nu = -0.5 * np.log(modulus_sq)  # |lambda| = exp(-nu)
        gamma = np.sqrt(np.clip(1.0 - modulus_sq, 1e-12, None))
        self.nu_log = nnx.Param(jnp.asarray(np.log(np.maximum(nu, 1e-12)), param_dtype))
        self.theta_log = nnx.Param(jnp.asarray(np.log(max_phase * uniform()), param_dtype))
        self.gamma_log = nnx.Param(jnp.asarray(np.log(gamma), param_dtype))
        self.B_re = normal((d_in, n), 1.0 / math.sqrt(2 * d_in))
        self.B_im = normal((d_in, n), 1.0 / math.sqrt(2 * d_in))
        self.C_re = normal((n, hidden), 1.0 / math.sqrt(n))
        self.C_im = normal((n, hidden), 1.0 / math.sqrt(n))
        self.D = normal((d_in, hidden), 1.0 / math.sqrt(d_in))

    @property
    def eigenvalues(self) -> jax.Array:
        """The recurrence's diagonal ``lambda``, complex ``[N]`` (for inspection)."""
        modulus, phase = jnp.exp(-jnp.exp(self.nu_log[...])), jnp.exp(self.theta_log[...])
        return modulus * jnp.exp(1j * phase)

    def _coefficients(self, x: jax.Array) -> tuple[Carry, Carry]:
        modulus = jnp.exp(-jnp.exp(self.nu_log[...]))
        phase = jnp.exp(self.theta_log[...])
        gamma = jnp.exp(self.gamma_log[...])
        shape = (*x.shape[:-1], self.state_features)
        a = {
            "h_re": jnp.broadcast_to(modulus * jnp.cos(phase), shape),
            "h_im": jnp.broadcast_to(modulus * jnp.sin(phase), shape),
        }
        b = {"h_re": (x @ self.B_re[...]) * gamma, "h_im": (x @ self.B_im[...]) * gamma}
        return a, b

    def _multiply(self, a: Carry, h: Carry) -> Carry:
        # Complex multiplication on (real, imaginary) pairs.
        return {
            "h_re": a["h_re"] * h["h_re"] - a["h_im"] * h["h_im"],
            "h_im": a["h_re"] * h["h_im"] + a["h_im"] * h["h_re"],
        }

    def _readout(self, h: Carry, x: jax.Array) -> jax.Array:
        real = h["h_re"] @ self.C_re[...] - h["h_im"] @ self.C_im[...]
        return real + x @ self.D[...]
