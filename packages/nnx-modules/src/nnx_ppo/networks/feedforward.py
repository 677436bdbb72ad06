"""Feed-forward layers: `Dense` and the `MLP` helper.

Both are stateless: their carry is ``()``, they emit no ``rollout_extras``, no
regularization and no metrics.

Examples:
    >>> import jax.numpy as jnp
    >>> from flax import nnx
    >>> from nnx_ppo.networks.feedforward import MLP
    >>> mlp = MLP(4, (32, 32), 2, rngs=nnx.Rngs(0))
    >>> out = mlp((), jnp.ones((5, 4)))
    >>> out.output.shape
    (5, 2)
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import jax
from flax import nnx

from nnx_ppo.networks._helpers import check_features
from nnx_ppo.networks.types import StatelessModule

__all__ = ["MLP", "Dense"]

Activation = Callable[[jax.Array], jax.Array]


def _check_activation(owner: str, activation: Any) -> None:
    if activation is not None and not callable(activation):
        raise TypeError(
            f"{owner}: activation must be a callable such as nnx.swish or None, got "
            f"{activation!r} of type {type(activation).__name__}."
        )


class Dense(StatelessModule):
    """An affine layer ``activation(x @ kernel + bias)`` (a wrapped `nnx.Linear`).

    Args:
        in_features: Size of the input's last axis, a positive int.
        out_features: Size of the output's last axis, a positive int.
        rngs: Random streams for the parameter initialisers (by keyword or, as in
            nnx-ppo 0.3.0, third positional argument: ``Dense(8, 32, rngs)``).
        activation: Optional elementwise function applied after the affine map, e.g.
            ``nnx.swish``; ``None`` (default) keeps the layer linear.
        **linear_kwargs: Passed on to `nnx.Linear`, e.g. ``kernel_init``,
            ``bias_init``, ``use_bias``, ``dtype``, ``param_dtype``.

    Raises:
        TypeError: If a size is not an int or ``activation`` is not callable.
        ValueError: If a size is not positive.

    Input ``x`` is ``[B, ..., in_features]``; the output is ``[B, ..., out_features]``.

    Examples:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> layer = Dense(3, 2, rngs=nnx.Rngs(0), bias_init=nnx.initializers.ones)
        >>> layer.forward(jnp.zeros((4, 3))).tolist()[0]
        [1.0, 1.0]
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        rngs: nnx.Rngs,
        activation: Activation | None = None,
        **linear_kwargs: Any,
    ) -> None:
        example = "Dense(8, 32, rngs=rngs)"
        self.in_features = check_features("Dense", "in_features", in_features, example)
        self.out_features = check_features("Dense", "out_features", out_features, example)
        _check_activation("Dense", activation)
        self.activation = activation
        self.linear = nnx.Linear(self.in_features, self.out_features, rngs=rngs, **linear_kwargs)

    def forward(self, x: jax.Array) -> jax.Array:
        """Apply the layer.

        Args:
            x: Input, shape ``[B, ..., in_features]``.

        Returns:
            Output, shape ``[B, ..., out_features]``.
        """
        if x.shape[-1:] != (self.in_features,):
            raise ValueError(
                f"Dense: the input's last axis must have size in_features="
                f"{self.in_features}, got an input of shape {tuple(x.shape)}; build the "
                f"layer as Dense({x.shape[-1] if x.ndim else '?'}, {self.out_features}, ...) "
                "or fix the upstream output."
            )
        y = self.linear(x)
        return y if self.activation is None else self.activation(y)


class MLP(StatelessModule):
    """A stack of `Dense` layers.

    Layer sizes are ``in_features -> *hidden_sizes -> out_features``. Every hidden
    layer applies ``activation``; the final layer applies it only if
    ``activate_final`` is true.

    Args:
        in_features: Size of the input's last axis, a positive int.
        hidden_sizes: Sizes of the hidden layers, a sequence of positive ints (may be
            empty, which gives a single `Dense`).
        out_features: Size of the output's last axis, a positive int.
        rngs: Random streams for the parameter initialisers.
        activation: Elementwise function after each hidden layer (default
            ``nnx.swish``); ``None`` makes the whole stack linear.
        activate_final: Whether the final layer applies ``activation`` too.
        **linear_kwargs: Passed on to every `nnx.Linear` (``kernel_init``, ...).

    Raises:
        TypeError: If ``hidden_sizes`` is not a sequence of ints, a size is not an int,
            or ``activation`` is not callable.
        ValueError: If a size is not positive.

    Input ``x`` is ``[B, ..., in_features]``; the output is ``[B, ..., out_features]``.

    Attributes:
        layers: The `Dense` layers, an `nnx.List`.
    """

    def __init__(
        self,
        in_features: int,
        hidden_sizes: Sequence[int],
        out_features: int,
        rngs: nnx.Rngs,
        *,
        activation: Activation | None = nnx.swish,
        activate_final: bool = False,
        **linear_kwargs: Any,
    ) -> None:
        example = "MLP(8, (64, 64), 2, rngs=rngs)"
        if isinstance(hidden_sizes, str | bytes) or not isinstance(hidden_sizes, Sequence):
            raise TypeError(
                f"MLP: hidden_sizes must be a sequence of positive ints, got {hidden_sizes!r}; "
                f"for one hidden layer of 64 units write hidden_sizes=(64,), e.g. {example}."
            )
        sizes = [check_features("MLP", "in_features", in_features, example)]
        for i, size in enumerate(hidden_sizes):
            sizes.append(check_features("MLP", f"hidden_sizes[{i}]", size, example))
        sizes.append(check_features("MLP", "out_features", out_features, example))
        _check_activation("MLP", activation)
        self.in_features = sizes[0]
        self.out_features = sizes[-1]
        self.layers = nnx.List(
            [
                Dense(
                    d_in,
                    d_out,
                    rngs=rngs,
                    activation=activation if (i < len(sizes) - 2 or activate_final) else None,
                    **linear_kwargs,
                )
                for i, (d_in, d_out) in enumerate(itertools.pairwise(sizes))
            ]
        )

    def forward(self, x: jax.Array) -> jax.Array:
        """Apply the layers in order.

        Args:
            x: Input, shape ``[B, ..., in_features]``.

        Returns:
            Output, shape ``[B, ..., out_features]``.
        """
        for layer in self.layers:
            x = layer.forward(x)
        return x
