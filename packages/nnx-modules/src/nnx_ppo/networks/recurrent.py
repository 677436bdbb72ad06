"""Recurrent cells as stateful modules: `LSTM`, `GRU`, `SimpleRNN` and `CTRNN`.

The cell's memory is the module's carry (a dict of ``[B, hidden_features]`` arrays), so
the trainer can thread it through the rollout, store it, replay from it and reset it
per environment. A cell starts each episode from zeros or, with
``trainable_initial_state=True``, from a learned vector (an `nnx.Param` of shape
``[hidden_features]``) broadcast to the batch.

Each cell uses one fused input projection and one fused recurrent projection (one
matmul each per step) rather than one small matmul per gate. All four are written on
`RecurrentCell` (`nnx_ppo.networks.recurrent_cell`), the base class to subclass for a
cell of your own. `LSTM` and `GRU` have a LayerNorm variant (``layer_norm=True``) and
`SimpleRNN` a residual one (``residual=True``). Cells whose recurrence is linear in the
carry, so that loss replay runs in parallel in time, are in
`nnx_ppo.networks.linear_recurrent` (`MinGRU`, `LRU`).

Examples:
    >>> import jax.numpy as jnp
    >>> from flax import nnx
    >>> from nnx_ppo.networks.recurrent import LSTM
    >>> cell = LSTM(3, 8, rngs=nnx.Rngs(0))
    >>> state = cell.initialize_state(batch_size=2)
    >>> sorted(state), state["h"].shape
    (['c', 'h'], (2, 8))
    >>> out = cell(state, jnp.ones((2, 3)))
    >>> out.output.shape, out.next_state["c"].shape
    ((2, 8), (2, 8))
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any, Unpack

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nnx_ppo.networks._helpers import cell_activation, check_features
from nnx_ppo.networks.recurrent_cell import CellOptions, RecurrentCell, _GateNorm
from nnx_ppo.networks.recurrent_noise import noise_std

__all__ = ["CTRNN", "GRU", "LSTM", "SimpleRNN", "TimeConstant"]

Activation = Any


class LSTM(RecurrentCell):
    """A long short-term memory cell.

    With gates stacked as ``[i, f, g, o]`` along the fused output axis::

        i = sigmoid(x W_i + h U_i + b_i)      f = sigmoid(x W_f + h U_f + b_f)
        g = tanh(x W_g + h U_g + b_g)         o = sigmoid(x W_o + h U_o + b_o)
        c' = f * c + i * g                    h' = o * tanh(c')

    ``W`` is ``input_proj.kernel`` ``[in_features, 4H]``, ``U`` is
    ``recurrent_proj.kernel`` ``[H, 4H]`` and ``b`` is ``recurrent_proj.bias`` ``[4H]``.

    With ``layer_norm=True`` (the LayerNorm LSTM of Ba et al. 2016, normalised per
    gate)::

        [i, f, g, o] = LN_x(x W) + LN_h(h U)       (each H-wide gate block normalised)
        c' = f * c + i * g                         h' = o * tanh(LN_c(c'))

    with the gate nonlinearities as above. ``LN_x`` (``input_norm``) scales, ``LN_h``
    (``recurrent_norm``) scales and shifts (its shift replaces ``b``), ``LN_c``
    (``cell_norm``) scales and shifts; the carried ``c'`` is not normalised.

    Args:
        in_features: Size of the input's last axis, a positive int.
        hidden_features: Size ``H`` of the hidden and cell state, a positive int.
        rngs: Random streams for the parameter initialisers (by keyword or, as in
            nnx-ppo 0.3.0, third positional argument: ``LSTM(8, 64, rngs)``).
        gate_fn: The gates' nonlinearity (``sigmoid`` above; default ``jax.nn.sigmoid``).
        activation_fn: The cell's nonlinearity (``tanh`` above; default ``jnp.tanh``).
        use_optimized: Accepted for nnx-ppo 0.3.0 compatibility and ignored: the cell
            always uses one fused input and one fused recurrent projection.
        layer_norm: Build the LayerNorm variant above (default ``False``: the plain
            LSTM, parameters and outputs unchanged).
        **options: The keywords every cell takes (`CellOptions`):
            ``trainable_initial_state`` (learn the episode-start ``h`` and ``c``),
            ``kernel_init``, ``recurrent_kernel_init``, ``bias_init`` (``W``, ``U``,
            ``b`` above) and ``param_dtype``.

    Raises:
        TypeError: If a size is not an int, ``gate_fn`` or ``activation_fn`` is not
            callable, or ``layer_norm`` is not a bool.
        ValueError: If a size is not positive.

    The carry is ``{"h": [B, H], "c": [B, H]}``; the output is ``h'``, ``[B, H]``.

    Examples:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> cell = LSTM(3, 4, rngs=nnx.Rngs(0), layer_norm=True)
        >>> sorted(nnx.state(cell, nnx.Param))
        ['cell_norm', 'input_norm', 'input_proj', 'recurrent_norm', 'recurrent_proj']
        >>> cell(cell.initialize_state(2), jnp.ones((2, 3))).output.shape
        (2, 4)
    """

    carry_names = ("c", "h")
    n_gates = 4

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        rngs: nnx.Rngs,
        *,
        gate_fn: Activation = jax.nn.sigmoid,
        activation_fn: Activation = jnp.tanh,
        use_optimized: bool = True,
        layer_norm: bool = False,
        **options: Unpack[CellOptions],
    ) -> None:
        del use_optimized  # one fused implementation (nnx-ppo's two variants agree)
        for name, fn in (("gate_fn", gate_fn), ("activation_fn", activation_fn)):
            if not callable(fn):
                raise TypeError(
                    f"LSTM: {name} must be an elementwise callable such as "
                    f"nnx.sigmoid or nnx.tanh, got {fn!r} of type {type(fn).__name__}."
                )
        self.gate_fn = gate_fn
        self.activation_fn = activation_fn
        super().__init__(
            in_features,
            hidden_features,
            rngs=rngs,
            input_bias=False,
            layer_norm=layer_norm,
            **options,
        )
        zeros = nnx.initializers.zeros_init()
        self.cell_norm = (
            _GateNorm(1, self.hidden_features, shift=zeros, param_dtype=self.param_dtype, rngs=rngs)
            if layer_norm
            else None
        )

    def _step(self, state: dict[str, jax.Array], projected: jax.Array) -> dict[str, jax.Array]:
        gates = projected + self._recurrent(state["h"])
        i, f, g, o = jnp.split(gates, 4, axis=-1)
        gate, act = self.gate_fn, self.activation_fn
        c = gate(f) * state["c"] + gate(i) * act(g)
        h = gate(o) * act(c if self.cell_norm is None else self.cell_norm(c))
        return {"c": c, "h": h}


class GRU(RecurrentCell):
    """A gated recurrent unit.

    With gates stacked as ``[r, z, n]`` along the fused output axis::

        r = sigmoid(x W_r + b_r + h U_r + a_r)
        z = sigmoid(x W_z + b_z + h U_z + a_z)
        n = tanh(x W_n + b_n + r * (h U_n + a_n))
        h' = (1 - z) * n + z * h

    ``W, b`` are ``input_proj`` ``[in_features, 3H]``, ``[3H]``; ``U, a`` are
    ``recurrent_proj`` ``[H, 3H]``, ``[3H]`` (the PyTorch formulation).

    With ``layer_norm=True`` each H-wide gate block of ``x W`` and of ``h U`` is
    layer-normalised (Ba et al. 2016, per gate), and the norms' shifts replace ``b``
    and ``a``: ``x W_k + b_k`` becomes ``LN_x(x W)_k`` and ``h U_k + a_k`` becomes
    ``LN_h(h U)_k`` in the equations above (``input_norm``, ``recurrent_norm``).

    Args:
        in_features: Size of the input's last axis, a positive int.
        hidden_features: Size ``H`` of the hidden state, a positive int.
        rngs: Random streams for the parameter initialisers (by keyword or third
            positional argument).
        layer_norm: Build the LayerNorm variant above (default ``False``: the plain
            GRU, parameters and outputs unchanged).
        **options: The keywords every cell takes (`CellOptions`):
            ``trainable_initial_state`` (learn the episode-start ``h``),
            ``kernel_init`` (``W``), ``recurrent_kernel_init`` (each gate's ``[H, H]``
            block of ``U``), ``bias_init`` (``b`` and ``a``, or the norms' shifts) and
            ``param_dtype``.

    Raises:
        TypeError: If a size is not an int or ``layer_norm`` not a bool.
        ValueError: If a size is not positive.

    The carry is ``{"h": [B, H]}``; the output is ``h'``, ``[B, H]``.
    """

    carry_names = ("h",)
    n_gates = 3

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        rngs: nnx.Rngs,
        *,
        layer_norm: bool = False,
        **options: Unpack[CellOptions],
    ) -> None:
        self.gate_fn = jax.nn.sigmoid
        self.activation_fn = jnp.tanh
        super().__init__(
            in_features,
            hidden_features,
            rngs=rngs,
            input_bias=True,
            layer_norm=layer_norm,
            **options,
        )

    def _step(self, state: dict[str, jax.Array], projected: jax.Array) -> dict[str, jax.Array]:
        h = state["h"]
        xr, xz, xn = jnp.split(projected, 3, axis=-1)
        hr, hz, hn = jnp.split(self._recurrent(h), 3, axis=-1)
        r = self.gate_fn(xr + hr)
        z = self.gate_fn(xz + hz)
        n = self.activation_fn(xn + r * hn)
        return {"h": (1.0 - z) * n + z * h}


# --------------------------------------------------------------------------------------
# SimpleRNN and CTRNN
# --------------------------------------------------------------------------------------


class SimpleRNN(RecurrentCell):
    """The simple (Elman) recurrent cell: ``h' = f(x W_in + h W_rec + b)``.

    ``W_in`` is ``input_proj.kernel`` ``[in_features, H]``, ``W_rec`` is
    ``recurrent_proj.kernel`` ``[H, H]`` and ``b`` is ``recurrent_proj.bias`` ``[H]``
    (the input projection has no bias of its own). The carry is ``{"h": [B, H]}``; the
    output is ``h'``, ``[B, H]``.

    With ``residual=True`` the input is added back (nnx-ppo's ``SimpleRNN(residual=...)``
    option): ``h' = x + f(x W_in + h W_rec + b)``, so the input and hidden sizes must be
    equal. The sum is both the output and the carried ``h``.

    Args:
        in_features: Size of the input's last axis, a positive int.
        hidden_features: Size ``H`` of the hidden state, a positive int.
        rngs: Random streams for the parameter initialisers (by keyword or third
            positional argument).
        activation: ``f``: ``"tanh"`` (default), ``"relu"``, or an elementwise
            callable such as ``jax.nn.softplus``.
        residual: Add the input to the new hidden state (needs ``in_features ==
            hidden_features``; default ``False``).
        **options: The keywords every cell takes (`CellOptions`):
            ``trainable_initial_state`` (learn the episode-start ``h``),
            ``kernel_init`` (``W_in``), ``recurrent_kernel_init`` (``W_rec``),
            ``bias_init`` (``b``) and ``param_dtype``.

    Raises:
        TypeError: If a size is not an int, ``activation`` is neither a name nor a
            callable, or ``residual`` is not a bool.
        ValueError: If a size is not positive, ``activation`` is an unknown name, or
            ``residual=True`` with ``in_features != hidden_features``.

    Examples:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from nnx_ppo.networks.recurrent import SimpleRNN
        >>> cell = SimpleRNN(3, 4, activation="relu", rngs=nnx.Rngs(0))
        >>> out = cell(cell.initialize_state(batch_size=2), jnp.ones((2, 3)))
        >>> out.output.shape, bool((out.output >= 0).all())
        ((2, 4), True)

        With ``residual=True`` the new state is the input plus the Elman update:

        >>> res = SimpleRNN(4, 4, residual=True, rngs=nnx.Rngs(0))
        >>> x = jnp.ones((2, 4))
        >>> h = res(res.initialize_state(2), x).output
        >>> pre = x @ res.input_proj.kernel[...] + res.recurrent_proj.bias[...]  # h = 0
        >>> bool(jnp.allclose(h, x + jnp.tanh(pre), atol=1e-6))
        True
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        rngs: nnx.Rngs,
        *,
        activation: str | Callable[[jax.Array], jax.Array] = "tanh",
        residual: bool = False,
        **options: Unpack[CellOptions],
    ) -> None:
        owner = type(self).__name__
        self.activation = cell_activation(owner, activation)
        if not isinstance(residual, bool):
            raise TypeError(
                f"{owner}: residual must be True or False, got {residual!r} of type "
                f"{type(residual).__name__}."
            )
        if residual:
            example = f"{owner}(64, 64, residual=True, rngs=rngs)"
            width = check_features(owner, "in_features", in_features, example)
            if check_features(owner, "hidden_features", hidden_features, example) != width:
                raise ValueError(
                    f"{owner}: residual=True adds the input to the new hidden state, so "
                    f"in_features must equal hidden_features; got in_features="
                    f"{in_features} and hidden_features={hidden_features}. Use "
                    f"{owner}({hidden_features}, {hidden_features}, residual=True, ...) "
                    f"behind a Dense({in_features}, {hidden_features}), or residual=False."
                )
        self.residual = residual
        super().__init__(in_features, hidden_features, rngs=rngs, input_bias=False, **options)

    def _project(self, x: jax.Array) -> jax.Array:
        # A residual step needs x itself: it rides beside x W_in, [..., 2H].
        projected = super()._project(x)
        return jnp.concatenate([projected, x], axis=-1) if self.residual else projected

    def _step(self, state: dict[str, jax.Array], projected: jax.Array) -> dict[str, jax.Array]:
        if not self.residual:
            return {"h": self.activation(projected + self.recurrent_proj(state["h"]))}
        projected, x = jnp.split(projected, 2, axis=-1)
        return {"h": x + self.activation(projected + self.recurrent_proj(state["h"]))}


class TimeConstant(nnx.Variable):
    """A fixed (not learned) per-unit time constant of a `CTRNN`, ``[H]``.

    Not an `nnx.Param`: gradient transforms and ``nnx.Param``-filtered optimizers
    leave it alone. A learned time constant is an `nnx.Param` instead (``raw_tau``).
    """


def _check_dt(owner: str, dt: Any) -> float:
    if isinstance(dt, (bool, np.bool_)) or not isinstance(dt, numbers.Real):
        raise TypeError(
            f"{owner}: dt must be a positive number (the integration step), got "
            f"{type(dt).__name__} {dt!r}; e.g. dt=0.1."
        )
    if not np.isfinite(dt) or dt <= 0:
        raise ValueError(
            f"{owner}: dt must be a positive finite number (the integration step), got "
            f"dt={dt!r}; e.g. dt=0.1."
        )
    return float(dt)


def _check_tau(owner: str, tau: Any, hidden: int, dt: float, learn_tau: bool) -> np.ndarray:
    """``tau`` as a float64 ``[hidden]`` array, checked for the Euler step with ``dt``."""
    example = f"tau=10 * dt, or an array of shape ({hidden},)"
    try:
        array = None if isinstance(tau, (bool, np.bool_, str)) else np.asarray(tau)
    except (TypeError, ValueError):
        array = None
    if array is None or array.dtype.kind not in "iuf":
        raise TypeError(
            f"{owner}: tau must be a positive number or an array of {hidden} positive "
            f"numbers (one per unit), got {type(tau).__name__} {tau!r}; e.g. {example}."
        )
    array = array.astype(np.float64)
    if array.shape not in {(), (hidden,)}:
        raise ValueError(
            f"{owner}: tau must be a number or an array of shape (hidden_features,) = "
            f"({hidden},), got an array of shape {array.shape}; e.g. {example}."
        )
    per_unit = np.broadcast_to(array, (hidden,)).copy()
    which = "" if array.ndim == 0 else " (unit {i})"
    bad = np.flatnonzero(~np.isfinite(per_unit) | (per_unit <= 0))
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"{owner}: tau must be positive and finite, got tau={float(per_unit[i])!r}"
            f"{which.format(i=i)}; e.g. {example}."
        )
    if learn_tau:
        bad = np.flatnonzero(per_unit <= dt)
        if bad.size:
            i = int(bad[0])
            raise ValueError(
                f"{owner}: with learn_tau=True, tau must be > dt for every unit, because "
                f"the learned time constant is tau = dt + softplus(raw_tau) > dt; got "
                f"tau={float(per_unit[i])!r}{which.format(i=i)} and dt={dt!r}. Start from a tau "
                f"above dt (e.g. tau={2 * dt!r}), or use learn_tau=False for tau == dt."
            )
    else:
        bad = np.flatnonzero(dt / per_unit > 1)
        if bad.size:
            i = int(bad[0])
            raise ValueError(
                f"{owner}: dt / tau must be <= 1 for every unit (a larger Euler step "
                f"overshoots the target and can diverge), got dt={dt!r} and "
                f"tau={float(per_unit[i])!r}{which.format(i=i)}, dt / tau = "
                f"{dt / per_unit[i]:.4g}. "
                f"Pass tau >= dt (e.g. tau={10 * dt!r}) or a smaller dt (e.g. "
                f"dt={float(per_unit.min())!r})."
            )
    return per_unit


def _inverse_softplus(y: np.ndarray) -> np.ndarray:
    """``log(exp(y) - 1)`` for ``y > 0``, written to stay finite for large ``y``."""
    return y + np.log(-np.expm1(-y))


class CTRNN(RecurrentCell):
    """A continuous-time recurrent network (leaky rate units), Euler-integrated.

    The network ``tau dh/dt = -h + f(x U + h W + b)`` stepped by ``dt``::

        h' = h + (dt / tau) * (-h + f(x U + h W + b))
           = (1 - a) * h + a * f(x U + h W + b),      a = dt / tau  (per unit, [H])

    computed in the second form, so with ``dt == tau`` (``a == 1``) the cell is exactly
    a `SimpleRNN` with the same weights. ``U`` is ``input_proj.kernel``
    ``[in_features, H]``, ``W`` is ``recurrent_proj.kernel`` ``[H, H]`` and ``b`` is
    ``recurrent_proj.bias`` ``[H]``, as in `SimpleRNN` (the same parameter names, and
    from the same ``rngs`` the same initial values). The carry is ``{"h": [B, H]}``;
    the output is ``h'``, ``[B, H]``.

    A fixed ``tau`` (``learn_tau=False``) is a `TimeConstant` ``fixed_tau`` and must
    satisfy ``dt / tau <= 1``, the stability condition of the Euler step. A learned one
    (``learn_tau=True``) is parametrised as ``tau = dt + softplus(raw_tau)`` with
    ``raw_tau`` an `nnx.Param` ``[H]`` initialised so that ``tau`` starts at the value
    given. This keeps ``tau`` above ``dt > 0`` after any gradient step, however large
    (at worst ``tau`` rounds to ``dt``), so ``a = dt / tau`` stays in ``(0, 1]`` and the
    learned cell is stable by construction. ``tau = exp(log_tau)`` would keep ``tau``
    positive but let a step take it below ``dt`` (``a > 1``, an overshooting update),
    and its gradient grows with ``tau`` where softplus's is at most 1. The price: a
    learned ``tau`` must start above ``dt``.

    **Recurrent noise** (``sigma_rec > 0``, pyrl's ``var_rec = sigma_rec ** 2``): the
    network ``tau dh/dt = -h + f(x U + h W + b) + sqrt(2 tau) sigma_rec xi(t)`` with
    ``xi`` Gaussian white noise (Song, Yang & Wang 2016, PLoS Comput Biol 12: e1004792,
    Eq. 1; the same in their 2017 eLife paper's pyrl), stepped by Euler-Maruyama::

        h' = (1 - a) * h + a * f(x U + h W + b) + sqrt(2 a) * sigma_rec * N(0, 1)

    one independent draw per unit, step and environment (``a = dt / tau``). The
    increment's variance ``2 a sigma_rec**2`` makes ``sigma_rec`` the standard
    deviation a unit's noise-driven fluctuation settles to without recurrence (an
    Ornstein-Uhlenbeck process; the discrete step's is ``sigma_rec**2 / (1 - a / 2)``),
    whatever ``dt``. The draws come from a per-environment key in the carry
    (``state["key"]``, see `RecurrentCell`), so loss replay reproduces them exactly; in
    ``eval()`` mode the cell is noise-free (export, analysis). The noise enters the
    carried ``h``, which is this cell's rate itself (pyrl integrates the currents and
    rectifies them; here ``f`` is applied before the leak), so with ``"relu"`` a noisy
    ``h`` can dip below zero. ``sigma_rec=0`` (the default) is the noise-free cell,
    bit for bit. `SimpleRNN` (the ``a = 1`` case) and the gated cells take no noise:
    use a `CTRNN` with ``tau == dt`` for a noisy Elman network.

    Args:
        in_features: Size of the input's last axis, a positive int.
        hidden_features: Size ``H`` of the hidden state, a positive int.
        tau: The time constant, a positive number or an array of ``H`` positive numbers
            (one per unit), in the units of ``dt``.
        rngs: Random streams for the parameter initialisers.
        dt: The integration step, a positive number (default 1.0).
        learn_tau: Learn ``tau`` (then ``tau`` is its initial value and must be
            ``> dt``) instead of keeping it fixed (then ``dt / tau <= 1``).
        activation: ``f``: ``"tanh"`` (default), ``"relu"``, or an elementwise
            callable such as ``jax.nn.softplus``.
        sigma_rec: The recurrent noise level (see above), a number ``>= 0`` (default
            0.0: no noise, no key in the carry).
        **options: The keywords every cell takes (`CellOptions`):
            ``trainable_initial_state`` (learn the episode-start ``h``),
            ``kernel_init`` (``U``), ``recurrent_kernel_init`` (``W``), ``bias_init``
            (``b``) and ``param_dtype``.

    Raises:
        TypeError: If a size is not an int, ``dt`` not a number, ``tau`` not a number
            or numeric array, ``learn_tau`` not a bool, ``activation`` neither a
            name nor a callable, or ``sigma_rec`` not a number.
        ValueError: If a size, ``dt`` or ``tau`` is not positive and finite, ``tau``
            has the wrong shape, ``dt / tau > 1`` for a fixed ``tau``, ``tau <= dt``
            for a learned one, ``activation`` is an unknown name, or ``sigma_rec`` is
            negative or not finite.

    Attributes:
        dt: The integration step (a Python float).
        learn_tau: Whether ``tau`` is learned.
        fixed_tau: The `TimeConstant` ``[H]`` (``None`` when learned).
        raw_tau: The `nnx.Param` ``[H]`` with ``tau = dt + softplus(raw_tau)``
            (``None`` when fixed).

    Examples:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from nnx_ppo.networks.recurrent import CTRNN
        >>> cell = CTRNN(3, 4, dt=1.0, tau=[1.0, 2.0, 4.0, 8.0], rngs=nnx.Rngs(0))
        >>> (cell.dt / cell.tau).tolist()  # how far each unit moves towards f(...)
        [1.0, 0.5, 0.25, 0.125]
        >>> out = cell(cell.initialize_state(batch_size=2), jnp.ones((2, 3)))
        >>> out.output.shape
        (2, 4)
        >>> learned = CTRNN(3, 4, dt=1.0, tau=4.0, learn_tau=True, rngs=nnx.Rngs(0))
        >>> [round(t, 5) for t in learned.tau.tolist()]
        [4.0, 4.0, 4.0, 4.0]
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        tau: float | np.ndarray | jax.Array | list[float],
        rngs: nnx.Rngs,
        dt: float = 1.0,
        learn_tau: bool = False,
        activation: str | Callable[[jax.Array], jax.Array] = "tanh",
        sigma_rec: float = 0.0,
        **options: Unpack[CellOptions],
    ) -> None:
        owner = type(self).__name__
        self.activation = cell_activation(owner, activation)
        self.dt = _check_dt(owner, dt)
        if not isinstance(learn_tau, bool):
            raise TypeError(f"{owner}: learn_tau must be True or False, got {learn_tau!r}.")
        self.learn_tau = learn_tau
        # tau's shape depends on hidden_features: check both before any parameter is drawn.
        example = f"{owner}(8, 64, tau=10.0, rngs=rngs)"
        check_features(owner, "in_features", in_features, example)
        hidden = check_features(owner, "hidden_features", hidden_features, example)
        per_unit = _check_tau(owner, tau, hidden, self.dt, learn_tau)
        super().__init__(in_features, hidden_features, rngs=rngs, input_bias=False, **options)
        raw = _inverse_softplus(per_unit - self.dt) if learn_tau else None
        self.fixed_tau: TimeConstant | None = (
            None if learn_tau else TimeConstant(jnp.asarray(per_unit, self.param_dtype))
        )
        self.raw_tau: nnx.Param | None = (
            None if raw is None else nnx.Param(jnp.asarray(raw, self.param_dtype))
        )
        self._enable_noise(sigma_rec, rngs)

    @property
    def tau(self) -> jax.Array:
        """The time constant of each unit, ``[H]``: the fixed one, or ``dt +
        softplus(raw_tau)`` when learned."""
        if self.raw_tau is not None:
            return self.dt + jax.nn.softplus(self.raw_tau[...])
        assert self.fixed_tau is not None  # one of the two is set at construction
        return self.fixed_tau[...]

    def _step(self, state: dict[str, jax.Array], projected: jax.Array) -> dict[str, jax.Array]:
        h = state["h"]
        a = self.dt / self.tau  # [H], in (0, 1]
        target = self.activation(projected + self.recurrent_proj(h))
        return {"h": (1.0 - a) * h + a * target}

    def _noise_std(self) -> jax.Array:
        return noise_std(self.sigma_rec, self.dt / self.tau)
