"""Recurrent cells as stateful modules: `LSTM` and `GRU`.

The cell's memory is the module's carry (a dict of ``[B, hidden_features]`` arrays), so
the trainer can thread it through the rollout, store it, replay from it and reset it
per environment. A cell starts each episode from zeros or, with
``trainable_initial_state=True``, from a learned vector (an `nnx.Param` of shape
``[hidden_features]``) broadcast to the batch.

Each cell uses one fused input projection and one fused recurrent projection (one
matmul each per step) rather than one small matmul per gate.

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

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from nnx_ppo.networks._helpers import check_features
from nnx_ppo.networks.types import StatefulModule, StatefulModuleOutput, replay_scanned

__all__ = ["GRU", "LSTM"]

Initializer = Any
Activation = Any

_LECUN_NORMAL = nnx.initializers.lecun_normal()
_ORTHOGONAL = nnx.initializers.orthogonal()
_ZEROS = nnx.initializers.zeros_init()


def _per_gate(init: Initializer, n_gates: int) -> Initializer:
    """An initialiser for a fused ``[in, n_gates * H]`` kernel: ``init`` on each gate block."""

    def fused(key: jax.Array, shape: tuple[int, ...], dtype: Any = jnp.float32) -> jax.Array:
        fan_in, fused_out = shape
        keys = jax.random.split(key, n_gates)
        blocks = [init(k, (fan_in, fused_out // n_gates), dtype) for k in keys]
        return jnp.concatenate(blocks, axis=-1)

    return fused


class _RecurrentCell(StatefulModule):
    """Shared carry handling; subclasses implement `_step` (on the input already
    projected by ``input_proj``) and name their carry."""

    _carry_names: tuple[str, ...] = ()
    _n_gates: int = 0

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        rngs: nnx.Rngs,
        trainable_initial_state: bool,
        kernel_init: Initializer | None,
        recurrent_kernel_init: Initializer | None,
        bias_init: Initializer | None,
        param_dtype: Any,
        input_bias: bool,
        gate_fn: Activation = jax.nn.sigmoid,
        activation_fn: Activation = jnp.tanh,
    ) -> None:
        owner = type(self).__name__
        # None selects the default, as in nnx-ppo 0.3.0's LSTM.
        kernel_init = _LECUN_NORMAL if kernel_init is None else kernel_init
        recurrent_kernel_init = (
            _ORTHOGONAL if recurrent_kernel_init is None else recurrent_kernel_init
        )
        bias_init = _ZEROS if bias_init is None else bias_init
        for name, fn in (("gate_fn", gate_fn), ("activation_fn", activation_fn)):
            if not callable(fn):
                raise TypeError(
                    f"{owner}: {name} must be an elementwise callable such as "
                    f"nnx.sigmoid or nnx.tanh, got {fn!r} of type {type(fn).__name__}."
                )
        self.gate_fn = gate_fn
        self.activation_fn = activation_fn
        example = f"{owner}(8, 64, rngs=rngs)"
        self.in_features = check_features(owner, "in_features", in_features, example)
        self.hidden_features = check_features(owner, "hidden_features", hidden_features, example)
        if not isinstance(trainable_initial_state, bool):
            raise TypeError(
                f"{owner}: trainable_initial_state must be True or False, got "
                f"{trainable_initial_state!r}."
            )
        self.trainable_initial_state = trainable_initial_state
        self.param_dtype = param_dtype
        fused = self._n_gates * self.hidden_features
        self.input_proj = nnx.Linear(
            self.in_features,
            fused,
            use_bias=input_bias,
            kernel_init=kernel_init,
            bias_init=bias_init,
            param_dtype=param_dtype,
            rngs=rngs,
        )
        self.recurrent_proj = nnx.Linear(
            self.hidden_features,
            fused,
            use_bias=True,
            kernel_init=_per_gate(recurrent_kernel_init, self._n_gates),
            bias_init=bias_init,
            param_dtype=param_dtype,
            rngs=rngs,
        )
        self.initial_state: nnx.Dict | None
        if trainable_initial_state:
            self.initial_state = nnx.Dict(
                {
                    name: nnx.Param(jnp.zeros((self.hidden_features,), param_dtype))
                    for name in self._carry_names
                }
            )
        else:
            self.initial_state = None

    def initialize_state(self, batch_size: int) -> dict[str, jax.Array]:
        """The carry at the start of an episode.

        Args:
            batch_size: Number of environments ``B``.

        Returns:
            A dict of ``[B, hidden_features]`` arrays: zeros, or the learned initial
            state broadcast to the batch.
        """
        shape = (batch_size, self.hidden_features)
        if self.initial_state is None:
            return {name: jnp.zeros(shape, self.param_dtype) for name in self._carry_names}
        return {
            name: jnp.broadcast_to(self.initial_state[name][...], shape)
            for name in self._carry_names
        }

    def __call__(
        self, state: dict[str, jax.Array], x: jax.Array, rollout_extras: Any = None
    ) -> StatefulModuleOutput:
        """Advance the cell one step.

        Args:
            state: The carry, a dict of ``[B, hidden_features]`` arrays.
            x: Input, shape ``[B, in_features]``.
            rollout_extras: Ignored (the cell is deterministic given its carry).

        Returns:
            A `StatefulModuleOutput` whose ``output`` is the new hidden state
            ``h``, shape ``[B, hidden_features]``, and whose ``next_state`` has the
            structure, shapes and dtypes of ``state``.
        """
        del rollout_extras
        self._check(state, x)
        return self._projected_call(state, self.input_proj(x))

    def replay_sequence(
        self, state: dict[str, jax.Array], xs: jax.Array, rollout_extras: Any, done: jax.Array
    ) -> tuple[dict[str, jax.Array], StatefulModuleOutput]:
        """Replay a stored sequence: the input projection ``x W`` of all ``T * B``
        samples in one product, then a scan over time of the recurrent part only
        (see `StatefulModule.replay_sequence`)."""
        self._check(state, xs)
        return replay_scanned(
            self, state, self.input_proj(xs), rollout_extras, done, step=_projected_step
        )

    def _check(self, state: Any, x: jax.Array) -> None:
        owner = type(self).__name__
        if not isinstance(state, dict) or set(state) != set(self._carry_names):
            keys = sorted(state) if isinstance(state, dict) else type(state).__name__
            raise ValueError(
                f"{owner}: state must be a dict with keys {sorted(self._carry_names)}, got "
                f"{keys}; pass the carry from initialize_state() or a previous next_state."
            )
        if x.shape[-1:] != (self.in_features,):
            raise ValueError(
                f"{owner}: the input's last axis must have size in_features="
                f"{self.in_features}, got an input of shape {tuple(x.shape)}."
            )

    def _projected_call(
        self, state: dict[str, jax.Array], projected: jax.Array
    ) -> StatefulModuleOutput:
        next_state = self._step(state, projected)
        next_state = {k: v.astype(state[k].dtype) for k, v in next_state.items()}
        return StatefulModuleOutput(
            next_state=next_state,
            output=next_state["h"],
            regularization_loss=jnp.zeros(()),
            metrics={},
            rollout_extras=(),
        )

    def _step(self, state: dict[str, jax.Array], projected: jax.Array) -> dict[str, jax.Array]:
        raise NotImplementedError


def _projected_step(
    cell: _RecurrentCell, state: dict[str, jax.Array], projected: jax.Array, extras: Any
) -> StatefulModuleOutput:
    del extras
    return cell._projected_call(state, projected)


class LSTM(_RecurrentCell):
    """A long short-term memory cell.

    With gates stacked as ``[i, f, g, o]`` along the fused output axis::

        i = sigmoid(x W_i + h U_i + b_i)      f = sigmoid(x W_f + h U_f + b_f)
        g = tanh(x W_g + h U_g + b_g)         o = sigmoid(x W_o + h U_o + b_o)
        c' = f * c + i * g                    h' = o * tanh(c')

    ``W`` is ``input_proj.kernel`` ``[in_features, 4H]``, ``U`` is
    ``recurrent_proj.kernel`` ``[H, 4H]`` and ``b`` is ``recurrent_proj.bias`` ``[4H]``.

    Args:
        in_features: Size of the input's last axis, a positive int.
        hidden_features: Size ``H`` of the hidden and cell state, a positive int.
        rngs: Random streams for the parameter initialisers (by keyword or, as in
            nnx-ppo 0.3.0, third positional argument: ``LSTM(8, 64, rngs)``).
        trainable_initial_state: If true, the episode-start ``h`` and ``c`` are learned
            parameters (initialised at zero) instead of fixed zeros.
        kernel_init: Initialiser of the input kernel (default, or ``None``: LeCun
            normal).
        recurrent_kernel_init: Initialiser of each gate's ``[H, H]`` recurrent block
            (default, or ``None``: orthogonal).
        bias_init: Initialiser of the bias (default, or ``None``: zeros).
        param_dtype: Dtype of the parameters and the carry.
        gate_fn: The gates' nonlinearity (``sigmoid`` above; default ``jax.nn.sigmoid``).
        activation_fn: The cell's nonlinearity (``tanh`` above; default ``jnp.tanh``).
        use_optimized: Accepted for nnx-ppo 0.3.0 compatibility and ignored: the cell
            always uses one fused input and one fused recurrent projection.

    Raises:
        TypeError: If a size is not an int.
        ValueError: If a size is not positive.

    The carry is ``{"h": [B, H], "c": [B, H]}``; the output is ``h'``, ``[B, H]``.
    """

    _carry_names = ("c", "h")
    _n_gates = 4

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        rngs: nnx.Rngs,
        *,
        trainable_initial_state: bool = False,
        kernel_init: Initializer | None = _LECUN_NORMAL,
        recurrent_kernel_init: Initializer | None = _ORTHOGONAL,
        bias_init: Initializer | None = _ZEROS,
        param_dtype: Any = jnp.float32,
        gate_fn: Activation = jax.nn.sigmoid,
        activation_fn: Activation = jnp.tanh,
        use_optimized: bool = True,
    ) -> None:
        del use_optimized  # one fused implementation (nnx-ppo's two variants agree)
        super().__init__(
            in_features,
            hidden_features,
            rngs=rngs,
            trainable_initial_state=trainable_initial_state,
            kernel_init=kernel_init,
            recurrent_kernel_init=recurrent_kernel_init,
            bias_init=bias_init,
            param_dtype=param_dtype,
            input_bias=False,
            gate_fn=gate_fn,
            activation_fn=activation_fn,
        )

    def _step(self, state: dict[str, jax.Array], projected: jax.Array) -> dict[str, jax.Array]:
        gates = projected + self.recurrent_proj(state["h"])
        i, f, g, o = jnp.split(gates, 4, axis=-1)
        gate, act = self.gate_fn, self.activation_fn
        c = gate(f) * state["c"] + gate(i) * act(g)
        h = gate(o) * act(c)
        return {"c": c, "h": h}


class GRU(_RecurrentCell):
    """A gated recurrent unit.

    With gates stacked as ``[r, z, n]`` along the fused output axis::

        r = sigmoid(x W_r + b_r + h U_r + a_r)
        z = sigmoid(x W_z + b_z + h U_z + a_z)
        n = tanh(x W_n + b_n + r * (h U_n + a_n))
        h' = (1 - z) * n + z * h

    ``W, b`` are ``input_proj`` ``[in_features, 3H]``, ``[3H]``; ``U, a`` are
    ``recurrent_proj`` ``[H, 3H]``, ``[3H]`` (the PyTorch formulation).

    Args:
        in_features: Size of the input's last axis, a positive int.
        hidden_features: Size ``H`` of the hidden state, a positive int.
        rngs: Random streams for the parameter initialisers (by keyword or third
            positional argument).
        trainable_initial_state: If true, the episode-start ``h`` is a learned parameter
            (initialised at zero) instead of fixed zeros.
        kernel_init: Initialiser of the input kernel (default, or ``None``: LeCun
            normal).
        recurrent_kernel_init: Initialiser of each gate's ``[H, H]`` recurrent block
            (default, or ``None``: orthogonal).
        bias_init: Initialiser of both biases (default, or ``None``: zeros).
        param_dtype: Dtype of the parameters and the carry.

    Raises:
        TypeError: If a size is not an int.
        ValueError: If a size is not positive.

    The carry is ``{"h": [B, H]}``; the output is ``h'``, ``[B, H]``.
    """

    _carry_names = ("h",)
    _n_gates = 3

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        rngs: nnx.Rngs,
        *,
        trainable_initial_state: bool = False,
        kernel_init: Initializer | None = _LECUN_NORMAL,
        recurrent_kernel_init: Initializer | None = _ORTHOGONAL,
        bias_init: Initializer | None = _ZEROS,
        param_dtype: Any = jnp.float32,
    ) -> None:
        super().__init__(
            in_features,
            hidden_features,
            rngs=rngs,
            trainable_initial_state=trainable_initial_state,
            kernel_init=kernel_init,
            recurrent_kernel_init=recurrent_kernel_init,
            bias_init=bias_init,
            param_dtype=param_dtype,
            input_bias=True,
        )

    def _step(self, state: dict[str, jax.Array], projected: jax.Array) -> dict[str, jax.Array]:
        h = state["h"]
        xr, xz, xn = jnp.split(projected, 3, axis=-1)
        hr, hz, hn = jnp.split(self.recurrent_proj(h), 3, axis=-1)
        r = self.gate_fn(xr + hr)
        z = self.gate_fn(xz + hz)
        n = self.activation_fn(xn + r * hn)
        return {"h": (1.0 - z) * n + z * h}
