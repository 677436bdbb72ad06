"""`ResidualMLP`: a normalised residual MLP (SimBa-style) for torsos and heads.

SimBa (Lee et al. 2024) scales an RL network's width and depth without losing its
simplicity bias by three choices, all here: a linear embedding, pre-LayerNorm residual
blocks ``x + MLP(LN(x))`` (each MLP widening by ``expansion``), and a LayerNorm after
the last block. (SimBa's running-statistics input normalisation is the library's
`Normalizer`, which the factories put first.) The module is stateless: its carry is
``()``, and loss replay runs it once on the ``[T * B]`` batch.

Examples:
    >>> import jax.numpy as jnp
    >>> from flax import nnx
    >>> from nnx_ppo.networks.residual import ResidualMLP
    >>> torso = ResidualMLP(6, 16, rngs=nnx.Rngs(0), n_blocks=2)
    >>> out = torso((), jnp.ones((4, 6)))
    >>> out.output.shape  # post-LN: each row has mean 0 and variance 1 (scale 1, shift 0)
    (4, 16)
    >>> bool(jnp.allclose(out.output.mean(-1), 0.0, atol=1e-5))
    True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
from flax import nnx

from nnx_ppo.networks._helpers import check_features, check_int
from nnx_ppo.networks.feedforward import Dense
from nnx_ppo.networks.types import StatelessModule

__all__ = ["ResidualMLP"]


class _ResidualBlock(nnx.Module):
    """``x + W_2 activation(W_1 LN(x) + b_1) + b_2`` (one pre-LN residual block)."""

    def __init__(
        self,
        features: int,
        expansion: int,
        activation: Callable[[jax.Array], jax.Array],
        rngs: nnx.Rngs,
    ) -> None:
        self.norm = nnx.LayerNorm(features, rngs=rngs)
        self.up = Dense(features, expansion * features, rngs=rngs, activation=activation)
        self.down = Dense(expansion * features, features, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return x + self.down.forward(self.up.forward(self.norm(x)))


class ResidualMLP(StatelessModule):
    """A SimBa-style residual MLP: embedding, pre-LN residual blocks, a final LN.

    ::

        x_0 = x W_in + b_in                                   [..., H]
        x_k = x_{k-1} + W_2 f(W_1 LN_k(x_{k-1}) + b_1) + b_2   k = 1 .. n_blocks
        y   = LN_out(x_n)                     (then y W_out + b_out with out_features)

    ``W_1`` is ``[H, expansion * H]``, ``W_2`` ``[expansion * H, H]``; each LayerNorm
    has a learned scale and shift. As a torso (``out_features=None``) the output is the
    normalised ``[..., H]`` features, ready for a recurrent cell or a head; as a head,
    ``out_features`` adds a final linear layer (``Dense(H, out_features)``) after the
    last norm, as SimBa's actor and critic do.

    Args:
        in_features: Size of the input's last axis, a positive int.
        hidden_features: Width ``H`` of the residual stream, a positive int.
        rngs: Random streams for the parameter initialisers (by keyword or third
            positional argument).
        n_blocks: Number of residual blocks, an int ``>= 0`` (default 1; 0 gives the
            embedding and the final norm only).
        expansion: Width factor of each block's hidden layer, a positive int (default
            4, SimBa's).
        activation: Elementwise function inside the blocks (default ``nnx.relu``).
        out_features: Size of a final linear layer, or ``None`` (default) for none.

    Raises:
        TypeError: If a size, ``n_blocks`` or ``expansion`` is not an int, or
            ``activation`` is not callable.
        ValueError: If a size or ``expansion`` is not positive or ``n_blocks`` is
            negative.

    Input ``x`` is ``[B, ..., in_features]``; the output is ``[B, ..., out_features]``
    (``hidden_features`` without ``out_features``).

    Attributes:
        embed: The input embedding, a `Dense` ``[in_features, H]``.
        blocks: The residual blocks, an `nnx.List` (each with ``norm``, ``up``,
            ``down``).
        final_norm: The LayerNorm after the last block.
        head: The final `Dense` with ``out_features``, else ``None``.
        out_features: Size of the output's last axis.

    Examples:
        A value head: residual features, then one linear output.

        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> head = ResidualMLP(8, 32, rngs=nnx.Rngs(0), out_features=1)
        >>> head.forward(jnp.ones((5, 8))).shape
        (5, 1)
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        rngs: nnx.Rngs,
        *,
        n_blocks: int = 1,
        expansion: int = 4,
        activation: Callable[[jax.Array], jax.Array] = nnx.relu,
        out_features: int | None = None,
    ) -> None:
        owner = "ResidualMLP"
        example = "ResidualMLP(8, 64, rngs=rngs, n_blocks=2)"
        self.in_features = check_features(owner, "in_features", in_features, example)
        self.hidden_features = check_features(owner, "hidden_features", hidden_features, example)
        self.n_blocks = check_int(owner, "n_blocks", n_blocks, minimum=0, example="n_blocks=2")
        self.expansion = check_int(owner, "expansion", expansion, minimum=1, example="expansion=4")
        if not callable(activation):
            raise TypeError(
                f"{owner}: activation must be a callable such as nnx.relu, got "
                f"{activation!r} of type {type(activation).__name__}."
            )
        head = None
        if out_features is not None:
            head = check_features(owner, "out_features", out_features, example)
        width = self.hidden_features
        self.embed = Dense(self.in_features, width, rngs=rngs)
        self.blocks = nnx.List(
            [_ResidualBlock(width, self.expansion, activation, rngs) for _ in range(self.n_blocks)]
        )
        self.final_norm = nnx.LayerNorm(width, rngs=rngs)
        self.head: Dense | None = None if head is None else Dense(width, head, rngs=rngs)
        self.out_features = width if head is None else head

    def forward(self, x: Any) -> jax.Array:
        """Apply the embedding, the blocks, the final norm (and the head).

        Args:
            x: Input, shape ``[B, ..., in_features]``.

        Returns:
            Output, shape ``[B, ..., out_features]``.
        """
        y = self.embed.forward(x)
        for block in self.blocks:
            y = block(y)
        y = self.final_norm(y)
        return y if self.head is None else self.head.forward(y)
