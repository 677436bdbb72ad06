"""`RecurrentCell`: the base class of the recurrent cells, for writing your own.

A recurrent cell keeps its memory in the module's carry, a dict of ``[B, H]`` arrays
(``H = hidden_features``), so the trainer can thread it through the rollout, store it,
replay from it and reset it per environment. Everything a cell needs besides its update
rule lives here, once: the carry (zeros, or a learned initial vector per entry with
``trainable_initial_state=True``), the reset, the input checks, one fused input
projection and one fused recurrent projection (each optionally layer-normalised per
gate, ``layer_norm=True``), and `RecurrentCell.replay_sequence`,
which projects the inputs of all ``T * B`` samples in one product and scans only the
recurrent part over time. A cell written on this base is exported by
``nnx_ppo.networks.export`` and recorded by ``nnx_ppo.networks.recording`` like the
library's own (`LSTM`, `GRU`, `SimpleRNN` and `CTRNN` in `nnx_ppo.networks.recurrent`).

A subclass declares its carry and the width of its projections, and implements one
hook, `RecurrentCell._step`, on the input already projected (see the class docstring
for a complete cell in a few lines).

**Recurrent noise.** A cell may add Gaussian noise to its new ``h`` at every step (the
leaky rate cells do, with ``sigma_rec``: `CTRNN`, and the low-rank cell in
`nnx_ppo.networks.low_rank`). The base class owns the mechanics once: the subclass calls
`RecurrentCell._enable_noise` at the end of its constructor and implements the hook
`RecurrentCell._noise_std` (the per-unit standard deviation of one step's increment).
The noise is drawn from a per-environment PRNG key that lives in the carry
(``state["key"]``, raw key data ``[B, *key_shape]``, uint32 for the default threefry
keys), split every step, so loss replay from the stored carry draws exactly the noise
of the rollout; `RecurrentCell.reset_state` folds a constant into each environment's
current key (a fresh, deterministic stream per episode) and restores the other entries
(see `nnx_ppo.networks.recurrent_noise`).
In ``eval()`` mode (``deterministic``) no noise is added and the key is not advanced:
export and the dynamics analysis (`nnx_ppo.networks.analysis`) see the noise-free map,
and the exported policy leaves the key out (its action does not depend on it).
Without noise (the default) the carry has no key and nothing changes.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypedDict

import jax
import jax.numpy as jnp
from flax import nnx

from nnx_ppo.networks import recurrent_noise
from nnx_ppo.networks._helpers import check_features
from nnx_ppo.networks.types import StatefulModule, StatefulModuleOutput, replay_scanned

__all__ = ["CellOptions", "RecurrentCell"]

Initializer = Any

_LECUN_NORMAL = nnx.initializers.lecun_normal()
_ORTHOGONAL = nnx.initializers.orthogonal()
_ZEROS = nnx.initializers.zeros_init()
_NOISE_KEY = "key"  # the carry entry of a noisy cell's per-environment PRNG keys


def _per_gate(init: Initializer, n_gates: int) -> Initializer:
    """An initialiser for a fused ``[in, n_gates * H]`` kernel: ``init`` on each gate block."""

    def fused(key: jax.Array, shape: tuple[int, ...], dtype: Any = jnp.float32) -> jax.Array:
        fan_in, fused_out = shape
        keys = jax.random.split(key, n_gates)
        blocks = [init(k, (fan_in, fused_out // n_gates), dtype) for k in keys]
        return jnp.concatenate(blocks, axis=-1)

    return fused


class _GateNorm(nnx.Module):
    """LayerNorm of each ``H``-wide block of a ``[..., n_blocks * H]`` pre-activation
    (statistics per block, per sample), with a learned scale and optional shift per unit
    (Ba et al. 2016, per gate)."""

    def __init__(
        self,
        n_blocks: int,
        features: int,
        *,
        shift: Initializer | None,
        param_dtype: Any,
        rngs: nnx.Rngs,
        epsilon: float = 1e-5,
    ) -> None:
        self.n_blocks, self.features, self.epsilon = n_blocks, features, epsilon
        width = n_blocks * features
        self.scale = nnx.Param(jnp.ones((width,), param_dtype))
        self.bias = (
            None if shift is None else nnx.Param(shift(rngs.params(), (width,), param_dtype))
        )

    def __call__(self, v: jax.Array) -> jax.Array:
        blocks = v.reshape(*v.shape[:-1], self.n_blocks, self.features)
        centred = blocks - blocks.mean(-1, keepdims=True)
        variance = (centred * centred).mean(-1, keepdims=True)
        normed = (centred * jax.lax.rsqrt(variance + self.epsilon)).reshape(v.shape)
        normed = normed * self.scale[...]
        return normed if self.bias is None else normed + self.bias[...]


def _learned_initial_state(
    owner: str, names: tuple[str, ...], features: int, trainable: Any, param_dtype: Any
) -> nnx.Dict | None:
    """``{name: nnx.Param [features]}`` (zeros) if ``trainable``, else ``None``."""
    if not isinstance(trainable, bool):
        raise TypeError(
            f"{owner}: trainable_initial_state must be True or False, got {trainable!r}."
        )
    if not trainable:
        return None
    return nnx.Dict({name: nnx.Param(jnp.zeros((features,), param_dtype)) for name in names})


def _initial_carry(
    initial_state: nnx.Dict | None, names: tuple[str, ...], shape: tuple[int, int], dtype: Any
) -> dict[str, jax.Array]:
    """The episode-start carry: zeros, or the learned vectors broadcast to ``shape``."""
    if initial_state is None:
        return {name: jnp.zeros(shape, dtype) for name in names}
    return {name: jnp.broadcast_to(initial_state[name][...], shape) for name in names}


def _check_carry(
    owner: str, state: Any, names: tuple[str, ...], x: jax.Array, in_features: int
) -> None:
    """A cell's call checks: the carry's keys and the input's last axis."""
    if not isinstance(state, dict) or set(state) != set(names):
        keys = sorted(state) if isinstance(state, dict) else type(state).__name__
        raise ValueError(
            f"{owner}: state must be a dict with keys {sorted(names)}, got "
            f"{keys}; pass the carry from initialize_state() or a previous next_state."
        )
    if x.shape[-1:] != (in_features,):
        raise ValueError(
            f"{owner}: the input's last axis must have size in_features="
            f"{in_features}, got an input of shape {tuple(x.shape)}."
        )


class CellOptions(TypedDict, total=False):
    """The keywords every recurrent cell takes, owned by `RecurrentCell`.

    A subclass states only its own arguments and forwards these as
    ``**options: Unpack[CellOptions]`` to ``super().__init__``, so they are written
    (and checked) once. See `RecurrentCell` for what each does.

    Attributes:
        trainable_initial_state: Learn each carry entry's episode-start value.
        kernel_init: Initialiser of the input kernel (``None``: LeCun normal).
        recurrent_kernel_init: Initialiser of each gate's ``[H, H]`` recurrent block
            (``None``: orthogonal).
        bias_init: Initialiser of the biases (``None``: zeros).
        param_dtype: Dtype of the parameters and the carry.
    """

    trainable_initial_state: bool
    kernel_init: Initializer | None
    recurrent_kernel_init: Initializer | None
    bias_init: Initializer | None
    param_dtype: Any


class RecurrentCell(StatefulModule):
    """Base class of the recurrent cells: everything but the update rule.

    A subclass sets two class attributes and implements one method:

    - ``carry_names``: the names of the carry's entries, each ``[B, H]``; it must
      include ``"h"``, the cell's output.
    - ``n_gates``: how many ``H``-wide blocks the projections produce (4 for an LSTM's
      ``[i, f, g, o]``, 1 for a cell without gates).
    - ``_step(state, projected)``: the update. ``state`` is the carry (``{name: [B,
      H]}``) and ``projected`` is the input already projected, ``x W (+ b)``, shape
      ``[B, n_gates * H]``; the recurrent projection ``h U + a`` is
      ``self.recurrent_proj(state["h"])``, same shape (or ``self._recurrent(state["h"])``,
      which also applies the per-gate LayerNorm of a cell built with ``layer_norm=True``).
      It returns the next carry, a dict with the same keys and ``[B, H]`` arrays; its
      ``"h"`` is the output.

    The base class gives the subclass `__call__`, `initialize_state`, ``reset_state``,
    `replay_sequence` (the input projection of all steps in one product, then a scan),
    the argument and input checks, and the optional learned initial carry. A subclass
    with arguments of its own validates and stores them, takes the keywords every cell
    shares as ``**options: Unpack[CellOptions]`` and calls
    ``super().__init__(in_features, hidden_features, rngs=rngs, **options)``, as
    `CTRNN` does.

    Args:
        in_features: Size of the input's last axis, a positive int.
        hidden_features: Size ``H`` of each carry entry, a positive int.
        rngs: Random streams for the parameter initialisers.
        trainable_initial_state: If true, each carry entry starts an episode from a
            learned ``[H]`` parameter (initialised at zero, an `nnx.Param` in
            ``initial_state``) broadcast to the batch, instead of fixed zeros.
        kernel_init: Initialiser of ``input_proj.kernel`` ``[in_features, n_gates * H]``
            (default, or ``None``: LeCun normal).
        recurrent_kernel_init: Initialiser of each gate's ``[H, H]`` block of
            ``recurrent_proj.kernel`` (default, or ``None``: orthogonal).
        bias_init: Initialiser of the biases (default, or ``None``: zeros).
        param_dtype: Dtype of the parameters and the carry.
        input_bias: Whether ``input_proj`` has a bias of its own (``recurrent_proj``
            always has one, so a cell whose pre-activations add up needs no second).
        layer_norm: Normalise the input and the recurrent pre-activations separately,
            each H-wide gate block to zero mean and unit variance per sample, then scale
            and shift per unit (Ba et al. 2016): ``LN(x W) + LN(h U)``. The norms'
            shifts (``bias_init``) replace the projections' biases, which are dropped;
            the input norm has a shift only where ``input_bias`` is set. `_project`
            and `_recurrent` apply them. Default off: no norm is built and nothing
            changes.

    Raises:
        TypeError: If a size is not an int, ``trainable_initial_state`` or
            ``layer_norm`` not a bool, or the subclass's ``carry_names`` or ``n_gates``
            are malformed.
        ValueError: If a size is not positive.

    Attributes:
        input_proj: The input projection, an ``nnx.Linear`` ``[in_features, n_gates *
            H]``.
        recurrent_proj: The recurrent projection, an ``nnx.Linear`` ``[H, n_gates *
            H]`` with a bias (none with ``layer_norm``).
        input_norm: The per-gate LayerNorm of the input projection (``scale``, and
            ``bias`` where ``input_bias``, each ``[n_gates * H]``) with ``layer_norm``,
            else ``None``.
        recurrent_norm: The per-gate LayerNorm of the recurrent projection (``scale``,
            ``bias``) with ``layer_norm``, else ``None``.
        initial_state: ``{name: nnx.Param [H]}`` with ``trainable_initial_state``, else
            ``None``.
        sigma_rec: The recurrent noise level (0.0 unless a subclass enables noise).
        noise_key: The `RecurrentNoiseKey` (`nnx_ppo.networks.recurrent_noise`) of a
            noisy cell, else ``None``.
        deterministic: ``True`` after ``eval()``: no noise is added (a noise-free cell
            ignores it).

    Examples:
        A cell that moves ``h`` towards a candidate at a learned, input-dependent rate
        (a GRU without its reset gate), in a dozen lines:

        >>> import jax, jax.numpy as jnp
        >>> from flax import nnx
        >>> from nnx_ppo.networks.recurrent_cell import RecurrentCell
        >>> class LeakyGatedCell(RecurrentCell):
        ...     # z = sigmoid(x W_z + h U_z + a_z), n = tanh(x W_n + h U_n + a_n)
        ...     # h' = (1 - z) * h + z * n
        ...     carry_names = ("h",)
        ...     n_gates = 2  # the projections hold [z, n], each H wide
        ...
        ...     def _step(self, state, projected):
        ...         h = state["h"]
        ...         z, n = jnp.split(projected + self.recurrent_proj(h), 2, axis=-1)
        ...         z = jax.nn.sigmoid(z)
        ...         return {"h": (1.0 - z) * h + z * jnp.tanh(n)}
        >>> cell = LeakyGatedCell(3, 8, rngs=nnx.Rngs(0))
        >>> state = cell.initialize_state(batch_size=2)
        >>> out = cell(state, jnp.ones((2, 3)))
        >>> out.output.shape, out.next_state["h"].shape
        ((2, 8), (2, 8))

        Loss replay of a stored ``[T, B, in_features]`` sequence comes with it (here no
        episode ends, so it is the step-by-step rollout):

        >>> xs, done = jnp.ones((5, 2, 3)), jnp.zeros((5, 2), bool)
        >>> final, seq = cell.replay_sequence(state, xs, None, done)
        >>> seq.output.shape
        (5, 2, 8)
        >>> bool(jnp.allclose(seq.output[0], out.output))
        True
    """

    carry_names: ClassVar[tuple[str, ...]] = ("h",)
    """The carry's entries, each ``[B, H]``; must include ``"h"`` (the output)."""
    n_gates: ClassVar[int] = 1
    """How many ``H``-wide blocks the input and recurrent projections produce."""

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        rngs: nnx.Rngs,
        trainable_initial_state: bool = False,
        kernel_init: Initializer | None = None,
        recurrent_kernel_init: Initializer | None = None,
        bias_init: Initializer | None = None,
        param_dtype: Any = jnp.float32,
        input_bias: bool = False,
        layer_norm: bool = False,
    ) -> None:
        owner = type(self).__name__
        self._check_declaration(owner)
        # None selects the default, as in nnx-ppo 0.3.0's LSTM.
        kernel_init = _LECUN_NORMAL if kernel_init is None else kernel_init
        recurrent_kernel_init = (
            _ORTHOGONAL if recurrent_kernel_init is None else recurrent_kernel_init
        )
        bias_init = _ZEROS if bias_init is None else bias_init
        example = f"{owner}(8, 64, rngs=rngs)"
        self.in_features = check_features(owner, "in_features", in_features, example)
        self.hidden_features = check_features(owner, "hidden_features", hidden_features, example)
        self.initial_state: nnx.Dict | None = _learned_initial_state(
            owner, self.carry_names, self.hidden_features, trainable_initial_state, param_dtype
        )
        if not isinstance(layer_norm, bool):
            raise TypeError(
                f"{owner}: layer_norm must be True or False, got {layer_norm!r} of type "
                f"{type(layer_norm).__name__}; e.g. {owner}(8, 64, rngs=rngs, layer_norm=True)."
            )
        self.trainable_initial_state = trainable_initial_state
        self.layer_norm = layer_norm
        self.param_dtype = param_dtype
        fused = self.n_gates * self.hidden_features
        # With layer_norm the norms' shifts stand in for the projections' biases.
        self.input_proj = nnx.Linear(
            self.in_features,
            fused,
            use_bias=input_bias and not layer_norm,
            kernel_init=kernel_init,
            bias_init=bias_init,
            param_dtype=param_dtype,
            rngs=rngs,
        )
        self.recurrent_proj = self._make_recurrent_proj(
            use_bias=not layer_norm,
            kernel_init=recurrent_kernel_init,
            bias_init=bias_init,
            param_dtype=param_dtype,
            rngs=rngs,
        )

        def norm(shift: Initializer | None) -> _GateNorm | None:
            if not layer_norm:
                return None
            width = self.hidden_features
            return _GateNorm(self.n_gates, width, shift=shift, param_dtype=param_dtype, rngs=rngs)

        self.input_norm = norm(bias_init if input_bias else None)
        self.recurrent_norm = norm(bias_init)
        # No recurrent noise unless the subclass enables it (_enable_noise).
        self.sigma_rec = 0.0
        self.noise_key: recurrent_noise.RecurrentNoiseKey | None = None
        self.deterministic = False

    @property
    def noisy(self) -> bool:
        """Whether the cell adds recurrent noise (then its carry has a ``"key"`` entry)."""
        return self.noise_key is not None

    def _carry_entries(self) -> tuple[str, ...]:
        return (*self.carry_names, _NOISE_KEY) if self.noisy else self.carry_names

    def _enable_noise(self, sigma_rec: Any, rngs: nnx.Rngs) -> None:
        """Turn on recurrent noise of level ``sigma_rec`` (a subclass calls this last in
        its constructor, after every parameter is drawn, so the parameters do not depend
        on it). ``sigma_rec == 0`` leaves the cell noise-free: no key is drawn and the
        carry has no ``"key"`` entry."""
        owner = type(self).__name__
        self.sigma_rec = recurrent_noise.check_sigma_rec(owner, sigma_rec)
        if self.sigma_rec > 0:
            if _NOISE_KEY in self.carry_names:
                raise TypeError(
                    f"{owner}.carry_names holds {_NOISE_KEY!r}, the entry a noisy cell keeps "
                    "its PRNG keys in; rename that carry entry."
                )
            self.noise_key = nnx.data(recurrent_noise.draw_base_key(rngs))

    def _noise_std(self) -> Any:
        """The standard deviation of the noise added to ``h`` at each step, a float or
        ``[H]`` (the hook of a cell that calls `_enable_noise`)."""
        raise NotImplementedError(
            f"{type(self).__name__} enables recurrent noise, so it must implement "
            "_noise_std() -> the per-step standard deviation, a float or [H]."
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
        """Build ``recurrent_proj``, a module mapping ``h`` ``[B, H]`` to ``h U + a``
        ``[B, n_gates * H]``: by default an ``nnx.Linear`` with ``kernel_init`` on each
        gate's ``[H, H]`` block. A cell with structured connectivity (the low-rank cell
        of `nnx_ppo.networks.low_rank`) overrides this hook."""
        return nnx.Linear(
            self.hidden_features,
            self.n_gates * self.hidden_features,
            use_bias=use_bias,
            kernel_init=_per_gate(kernel_init, self.n_gates),
            bias_init=bias_init,
            param_dtype=param_dtype,
            rngs=rngs,
        )

    def initialize_state(self, batch_size: int) -> dict[str, jax.Array]:
        """The carry at the start of an episode.

        Args:
            batch_size: Number of environments ``B``.

        Returns:
            A dict with one ``[B, hidden_features]`` array per name in
            ``carry_names``: zeros, or the learned initial state broadcast to the batch;
            a noisy cell adds ``"key"``, ``[B, *key_shape]`` raw key data derived
            deterministically from its `RecurrentNoiseKey`.
        """
        shape = (batch_size, self.hidden_features)
        carry = _initial_carry(self.initial_state, self.carry_names, shape, self.param_dtype)
        if self.noise_key is not None:
            carry[_NOISE_KEY] = recurrent_noise.initial_keys(self.noise_key, batch_size)
        return carry

    def reset_state(self, prev_state: dict[str, jax.Array]) -> dict[str, jax.Array]:
        """The episode-start carry, shaped like the batched ``prev_state``.

        A noisy cell does not restore its initial keys (every episode would replay the
        same noise): each environment's key becomes a constant folded into its current
        one, a deterministic function of the carry, so loss replay resets alike.

        Args:
            prev_state: The batched carry.

        Returns:
            A carry with the same structure, shapes and dtypes.
        """
        if not self.noisy:
            return super().reset_state(prev_state)
        keys = prev_state[_NOISE_KEY]
        shape = (keys.shape[0], self.hidden_features)
        carry = _initial_carry(self.initial_state, self.carry_names, shape, self.param_dtype)
        carry[_NOISE_KEY] = recurrent_noise.reset_keys(keys)
        return carry

    def __call__(
        self, state: dict[str, jax.Array], x: jax.Array, rollout_extras: Any = None
    ) -> StatefulModuleOutput:
        """Advance the cell one step.

        Args:
            state: The carry, a dict of ``[B, hidden_features]`` arrays.
            x: Input, shape ``[B, in_features]``.
            rollout_extras: Ignored (the cell is deterministic given its carry, which
                holds a noisy cell's keys).

        Returns:
            A `StatefulModuleOutput` whose ``output`` is the new hidden state
            ``h``, shape ``[B, hidden_features]``, and whose ``next_state`` has the
            structure, shapes and dtypes of ``state``.

        Raises:
            ValueError: If ``state`` does not have the keys ``carry_names`` or the
                input's last axis is not ``in_features``.
        """
        del rollout_extras
        self._check(state, x)
        return self._projected_call(state, self._project(x))

    def replay_sequence(
        self, state: dict[str, jax.Array], xs: jax.Array, rollout_extras: Any, done: jax.Array
    ) -> tuple[dict[str, jax.Array], StatefulModuleOutput]:
        """Replay a stored sequence: the input projection ``x W`` of all ``T * B``
        samples in one product, then a scan over time of the recurrent part only
        (see `StatefulModule.replay_sequence`).

        Args:
            state: The carry before the first step, ``[B, hidden_features]`` arrays.
            xs: The inputs, ``[T, B, in_features]``.
            rollout_extras: Ignored.
            done: ``[T, B]`` bool: the carry is reset after step ``t`` where set.

        Returns:
            ``(final_state, out)`` with ``out.output`` ``[T, B, hidden_features]``.
        """
        self._check(state, xs)
        return replay_scanned(
            self, state, self._project(xs), rollout_extras, done, step=_projected_step
        )

    def _project(self, x: jax.Array) -> jax.Array:
        """The input's part of the pre-activations, ``x W (+ b)``, ``[..., n_gates *
        H]`` (normalised per gate with ``layer_norm``): what `_step` gets as
        ``projected``, computed for all ``T * B`` samples at once in replay."""
        projected = self.input_proj(x)
        return projected if self.input_norm is None else self.input_norm(projected)

    def _recurrent(self, h: jax.Array) -> jax.Array:
        """The recurrent part of the pre-activations, ``h U + a``, ``[B, n_gates * H]``
        (normalised per gate with ``layer_norm``, the norm's shift standing in for
        ``a``). A cell's `_step` calls it on the carry's ``"h"``."""
        recurrent = self.recurrent_proj(h)
        return recurrent if self.recurrent_norm is None else self.recurrent_norm(recurrent)

    def _step(self, state: dict[str, jax.Array], projected: jax.Array) -> dict[str, jax.Array]:
        """The cell's update (the one hook a subclass implements).

        Args:
            state: The carry, ``{name: [B, H]}`` for each name in ``carry_names``.
            projected: The projected input ``x W (+ b)``, ``[B, n_gates * H]``.

        Returns:
            The next carry: the same keys, ``[B, H]`` arrays; ``"h"`` is the output.
        """
        raise NotImplementedError(
            f"{type(self).__name__} must implement _step(state, projected) -> next carry"
        )

    @classmethod
    def _check_declaration(cls, owner: str) -> None:
        names = cls.carry_names
        if (
            not isinstance(names, tuple)
            or not all(isinstance(n, str) for n in names)
            or len(set(names)) != len(names)
            or "h" not in names
        ):
            raise TypeError(
                f"{owner}.carry_names must be a tuple of distinct str that includes 'h' "
                f"(the output), got {names!r}; declare e.g. carry_names = ('h',) or "
                "('c', 'h') in the class body."
            )
        if isinstance(cls.n_gates, bool) or not isinstance(cls.n_gates, int) or cls.n_gates < 1:
            raise TypeError(
                f"{owner}.n_gates must be a positive int (the number of H-wide blocks of "
                f"the projections), got {cls.n_gates!r}; declare e.g. n_gates = 1."
            )

    def _check(self, state: Any, x: jax.Array) -> None:
        _check_carry(type(self).__name__, state, self._carry_entries(), x, self.in_features)

    def _projected_call(
        self, state: dict[str, jax.Array], projected: jax.Array
    ) -> StatefulModuleOutput:
        if self.noisy:
            keys = state[_NOISE_KEY]
            state = {k: v for k, v in state.items() if k != _NOISE_KEY}
        next_state = self._step(state, projected)
        owner = type(self).__name__
        if not isinstance(next_state, dict) or set(next_state) != set(self.carry_names):
            got = sorted(next_state) if isinstance(next_state, dict) else type(next_state)
            raise ValueError(
                f"{owner}._step must return a dict with the keys of carry_names "
                f"{sorted(self.carry_names)}, got {got}."
            )
        for name, value in next_state.items():
            if jnp.shape(value) != jnp.shape(state[name]):
                raise ValueError(
                    f"{owner}._step returned {name!r} of shape {jnp.shape(value)}, but the "
                    f"carry's {name!r} has shape {jnp.shape(state[name])}; each entry "
                    "must keep its [B, hidden_features] shape."
                )
        if self.noisy and not self.deterministic:
            keys, xi = recurrent_noise.split_keys(keys, (self.hidden_features,))
            next_state = {**next_state, "h": next_state["h"] + self._noise_std() * xi}
        next_state = {k: v.astype(state[k].dtype) for k, v in next_state.items()}
        if self.noisy:
            next_state[_NOISE_KEY] = keys
        return StatefulModuleOutput(
            next_state=next_state,
            output=next_state["h"],
            regularization_loss=jnp.zeros(()),
            metrics={},
            rollout_extras=(),
        )


def _projected_step(
    cell: RecurrentCell, state: dict[str, jax.Array], projected: jax.Array, extras: Any
) -> StatefulModuleOutput:
    del extras
    return cell._projected_call(state, projected)
