"""`SignedDense`: an affine layer whose weights keep one sign (Dale's law).

A population declared ``sign="excitatory"`` or ``sign="inhibitory"`` in a
`PopulationGraph` gets a `SignedDense` as the default transform of each outgoing
connection, so every weight leaving it stays ``>= 0`` or ``<= 0`` however it is trained.

**Parametrisation.** The layer stores an unconstrained ``kernel`` and uses the weight
``sign * |kernel|``. The absolute value is chosen over ``softplus``:

- the effective weight's magnitude is the kernel's, so the layer starts with the usual
  LeCun-normal scale (the kernel is drawn from ``kernel_init`` and stored as its absolute
  value) and the graph's fan-in rescaling applies to it unchanged;
- the gradient reaches the kernel with magnitude one wherever it is, small weights
  included. With ``softplus`` the gradient is ``sigmoid(kernel)``, which vanishes as a
  weight approaches zero: a weight pushed towards zero slows down, never reaches it, and
  is slow to grow again;
- at ``kernel == 0`` JAX differentiates ``|x|`` as ``+1`` (the ``x >= 0`` branch), so a
  weight at exactly zero still gets the gradient of the effective weight and is never
  stuck. An update that pushes a weight across zero reflects it: the effective weight
  stays on its side, with the overshoot as its magnitude, so a weight the loss wants on
  the other side settles near zero (within about one step size) instead of crossing.

The bias is not constrained: it is the destination's offset, not a signal from the
source (with a silent source it contributes the same whatever the source's sign).

Dale's law fixes the sign of what a population *sends*; its biological meaning needs a
non-negative activity as well (e.g. ``activation=nnx.relu``), which the graph leaves to
you.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from nnx_ppo.networks.types import StatelessModule

__all__ = ["SIGNS", "SignedDense", "check_sign"]

#: The accepted signs and the factor each applies to the weights' magnitude.
SIGNS: dict[str, float] = {"excitatory": 1.0, "inhibitory": -1.0}

Initializer = Callable[..., jax.Array]

_LECUN_NORMAL = nnx.initializers.lecun_normal()
_ZEROS = nnx.initializers.zeros_init()


def check_sign(call: str, value: Any, *, optional: bool = True) -> str | None:
    """Validate a sign: ``"excitatory"``, ``"inhibitory"`` (or ``None`` if optional).

    Raises:
        ValueError: On any other value, naming the accepted ones.
    """
    if value is None and optional:
        return None
    if not isinstance(value, str) or value not in SIGNS:
        allowed = "'excitatory' or 'inhibitory'" + (" (or None)" if optional else "")
        raise ValueError(
            f"{call}: sign must be {allowed}, got {value!r}; an excitatory population's "
            "outgoing weights stay >= 0, an inhibitory one's <= 0"
            + (", and None leaves them unconstrained." if optional else ".")
        )
    return value


def _check_features(argument: str, value: Any) -> int:
    message = (
        f"SignedDense: {argument} must be a positive int, got {value!r}; e.g. "
        "SignedDense(8, 32, sign='excitatory', rngs=rngs)."
    )
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(message)
    if value < 1:
        raise ValueError(message)
    return int(value)


class SignedDense(StatelessModule):
    """An affine layer with sign-constrained weights: ``x @ (sign * |kernel|) + bias``.

    See the module docstring for why the absolute value, and what happens to the
    gradient at zero.

    Args:
        in_features: Size of the input's last axis, a positive int.
        out_features: Size of the output's last axis, a positive int.
        sign: ``"excitatory"`` (weights ``>= 0``) or ``"inhibitory"`` (``<= 0``).
        rngs: Random streams for the initialisers.
        use_bias: Whether to add a (sign-free) bias.
        kernel_init: Initialiser of the kernel ``[in_features, out_features]``; the
            layer stores the absolute value of its draw. Default LeCun normal, as
            ``Dense``.
        bias_init: Initialiser of the bias ``[out_features]``; default zeros.

    Raises:
        TypeError: If a size is not an int.
        ValueError: If a size is not positive or ``sign`` is not one of the two.

    Attributes:
        kernel: The unconstrained ``nnx.Param`` ``[in_features, out_features]``; the
            weights are `weight`.
        bias: ``nnx.Param`` ``[out_features]``, or ``None`` without bias.

    Input ``x`` is ``[B, ..., in_features]``; the output is ``[B, ..., out_features]``.

    Examples:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> layer = SignedDense(3, 2, sign="inhibitory", rngs=nnx.Rngs(0))
        >>> bool(jnp.all(layer.weight <= 0))
        True
        >>> layer.kernel[...] = jnp.array([[1.0, -2.0], [0.0, 3.0], [-1.0, 0.5]])
        >>> layer.forward(jnp.ones((1, 3))).tolist()
        [[-2.0, -5.5]]
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        sign: str,
        rngs: nnx.Rngs,
        use_bias: bool = True,
        kernel_init: Initializer = _LECUN_NORMAL,
        bias_init: Initializer = _ZEROS,
    ) -> None:
        self.in_features = _check_features("in_features", in_features)
        self.out_features = _check_features("out_features", out_features)
        self.sign = check_sign("SignedDense", sign, optional=False)
        shape = (self.in_features, self.out_features)
        self.kernel = nnx.Param(jnp.abs(kernel_init(rngs.params(), shape, jnp.float32)))
        self.bias = (
            nnx.Param(bias_init(rngs.params(), (self.out_features,), jnp.float32))
            if use_bias
            else None
        )

    @property
    def weight(self) -> jax.Array:
        """The effective weights ``sign * |kernel|``, ``[in_features, out_features]``."""
        return SIGNS[self.sign] * jnp.abs(self.kernel[...])  # type: ignore[index]

    def forward(self, x: jax.Array) -> jax.Array:
        """Apply the layer.

        Args:
            x: Input, shape ``[B, ..., in_features]``.

        Returns:
            ``x @ weight + bias``, shape ``[B, ..., out_features]``.
        """
        if x.shape[-1:] != (self.in_features,):
            raise ValueError(
                f"SignedDense: the input's last axis must have size in_features="
                f"{self.in_features}, got an input of shape {tuple(x.shape)}."
            )
        y = jnp.dot(x, self.weight)
        return y if self.bias is None else y + self.bias[...]
