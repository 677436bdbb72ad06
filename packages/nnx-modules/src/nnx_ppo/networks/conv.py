"""Convolutional layers for image observations: `Conv` and `ConvEncoder`.

Both are stateless (carry ``()``, no ``rollout_extras``, no regularization, no
metrics), so they compose with the containers like `Dense` and are replayed as one
batched call over ``[T * B]`` images. Images are NHWC: ``[B, H, W, C]``.

`ConvEncoder` is the piece a policy usually needs: conv layers, a flatten and an
optional dense head, with its output size (`ConvEncoder.out_features`) known at
construction so the next layer can be sized. It is also **the one place where an
image observation changes dtype**: a bool or integer image (MinAtar's bool grids,
Atari's uint8 frames) is cast to float32 there, then multiplied by ``scale`` if one is
given (``scale=1/255`` for uint8 frames). Images are usually scaled like this rather
than passed through a `Normalizer`; see `ConvEncoder` for what a normalizer does to
them.

Examples:
    >>> import jax.numpy as jnp
    >>> from flax import nnx
    >>> from nnx_ppo.networks.conv import ConvEncoder
    >>> encoder = ConvEncoder.minatar((10, 10, 4), rngs=nnx.Rngs(0))
    >>> encoder.out_features
    128
    >>> grid = jnp.zeros((5, 10, 10, 4), bool)      # a batch of MinAtar observations
    >>> encoder((), grid).output.shape
    (5, 128)
"""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any, Literal

import jax
import jax.numpy as jnp
from flax import nnx

from nnx_ppo.networks._helpers import check_features
from nnx_ppo.networks.feedforward import Dense
from nnx_ppo.networks.types import StatelessModule

__all__ = ["Conv", "ConvEncoder", "Padding"]

Activation = Callable[[jax.Array], jax.Array]
Padding = Literal["SAME", "VALID"]
"""How a `Conv` pads its input: ``"SAME"`` (zero-pad so that the output is
``ceil(H / stride)`` high) or ``"VALID"`` (no padding: ``(H - kernel) // stride + 1``)."""

_PADDINGS = ("SAME", "VALID")


def _check_activation(owner: str, activation: Any) -> None:
    if activation is not None and not callable(activation):
        raise TypeError(
            f"{owner}: activation must be a callable such as nnx.relu or None, got "
            f"{activation!r} of type {type(activation).__name__}."
        )


def _pair(owner: str, name: str, value: Any, example: str) -> tuple[int, int]:
    """An int or a pair of ints (height, width), each positive, as a pair."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        items: tuple[Any, ...] = (value, value)
    elif isinstance(value, Sequence) and not isinstance(value, str | bytes) and len(value) == 2:
        items = tuple(value)
    else:
        raise TypeError(
            f"{owner}: {name} must be a positive int or a pair (height, width) of them, got "
            f"{value!r}; e.g. {example}."
        )
    for item in items:
        if isinstance(item, bool) or not isinstance(item, numbers.Integral):
            raise TypeError(
                f"{owner}: {name} must be a positive int or a pair (height, width) of them, "
                f"got {value!r}; e.g. {example}."
            )
        if item <= 0:
            raise ValueError(f"{owner}: {name} must be positive, got {value!r}; e.g. {example}.")
    return int(items[0]), int(items[1])


def _check_padding(owner: str, name: str, value: Any) -> Padding:
    if not isinstance(value, str) or value.upper() not in _PADDINGS:
        raise ValueError(
            f"{owner}: {name} must be 'SAME' or 'VALID', got {value!r}; 'SAME' keeps "
            "ceil(H / stride) rows, 'VALID' uses no padding."
        )
    return "SAME" if value.upper() == "SAME" else "VALID"


def _check_image_shape(owner: str, value: Any, example: str) -> tuple[int, int, int]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence) or len(value) != 3:
        raise TypeError(
            f"{owner}: input_shape must be the shape of one image (height, width, "
            f"channels), got {value!r}; e.g. {example}."
        )
    h, w, c = (check_features(owner, f"input_shape[{i}]", d, example) for i, d in enumerate(value))
    return h, w, c


def _to_float(x: Any, scale: float | None) -> jax.Array:
    """The one dtype conversion of an image: bool/int -> float32, then ``* scale``."""
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.float32)
    return x if scale is None else x * jnp.asarray(scale, x.dtype)


class Conv(StatelessModule):
    """A 2-D convolution over NHWC images, ``activation(conv(x) + bias)`` (a wrapped
    `nnx.Conv`).

    Args:
        in_features: The number of input channels ``C``, a positive int.
        out_features: The number of output channels, a positive int.
        kernel_size: Kernel height and width: an int (square) or a pair.
        rngs: Random streams for the parameter initialisers.
        strides: Step between kernel applications: an int or a pair, positive.
        padding: ``"SAME"`` (zero padding; output ``ceil(H / stride)`` high) or
            ``"VALID"`` (none; ``(H - kernel) // stride + 1``), see `Padding`.
        activation: Optional elementwise function after the convolution, e.g.
            ``nnx.relu``; ``None`` (default) keeps the layer linear.
        **conv_kwargs: Passed on to `nnx.Conv`, e.g. ``kernel_init``, ``bias_init``,
            ``use_bias``, ``dtype``, ``param_dtype``.

    Raises:
        TypeError: If a size is not an int (or a pair of ints), or ``activation`` is
            not callable.
        ValueError: If a size or stride is not positive, or ``padding`` is neither
            ``"SAME"`` nor ``"VALID"``.

    Input ``x`` is ``[B, H, W, in_features]`` (float; cast bool or integer images with
    `ConvEncoder` or yourself); the output is ``[B, H', W', out_features]`` with
    ``(H', W') = output_size(H, W)``.

    Examples:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> conv = Conv(3, 8, 4, rngs=nnx.Rngs(0), strides=2, padding="VALID")
        >>> conv.output_size(10, 10)
        (4, 4)
        >>> conv((), jnp.ones((2, 10, 10, 3))).output.shape
        (2, 4, 4, 8)
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        kernel_size: int | Sequence[int],
        rngs: nnx.Rngs,
        *,
        strides: int | Sequence[int] = 1,
        padding: Padding = "SAME",
        activation: Activation | None = None,
        **conv_kwargs: Any,
    ) -> None:
        example = "Conv(4, 16, 3, rngs=rngs, strides=1, padding='SAME')"
        self.in_features = check_features("Conv", "in_features", in_features, example)
        self.out_features = check_features("Conv", "out_features", out_features, example)
        self.kernel_size = _pair("Conv", "kernel_size", kernel_size, example)
        self.strides = _pair("Conv", "strides", strides, example)
        self.padding: Padding = _check_padding("Conv", "padding", padding)
        _check_activation("Conv", activation)
        self.activation = activation
        self.conv = nnx.Conv(
            self.in_features,
            self.out_features,
            self.kernel_size,
            self.strides,
            padding=self.padding,
            rngs=rngs,
            **conv_kwargs,
        )

    def output_size(self, height: int, width: int) -> tuple[int, int]:
        """The output's ``(H', W')`` for an input ``height x width`` high and wide.

        Raises:
            ValueError: With ``"VALID"`` padding, if the kernel is larger than the input.
        """
        return (
            self._output_length("height", height, self.kernel_size[0], self.strides[0]),
            self._output_length("width", width, self.kernel_size[1], self.strides[1]),
        )

    def _output_length(self, axis: str, size: int, kernel: int, stride: int) -> int:
        if self.padding == "SAME":
            return -(-size // stride)
        if kernel > size:
            raise ValueError(
                f"Conv: the kernel ({kernel} along the {axis}) is larger than the input's "
                f"{axis} {size} with padding='VALID', which leaves no output; use a smaller "
                "kernel_size, padding='SAME', or a larger image."
            )
        return (size - kernel) // stride + 1

    def forward(self, x: jax.Array) -> jax.Array:
        """Apply the convolution.

        Args:
            x: Images, shape ``[B, H, W, in_features]``.

        Returns:
            Output, shape ``[B, H', W', out_features]``.
        """
        shape = tuple(jnp.shape(x))
        if len(shape) < 4:
            raise ValueError(
                f"Conv: the input must be a batch of NHWC images [B, H, W, {self.in_features}], "
                f"got shape {shape}; add the batch axis (x[None]) or reshape a flattened "
                "image (ConvEncoder accepts flattened images)."
            )
        if shape[-1] != self.in_features:
            raise ValueError(
                f"Conv: the input's last axis must be in_features={self.in_features} "
                f"channels (NHWC), got an input of shape {shape}; build the layer as "
                f"Conv({shape[-1]}, {self.out_features}, ...) or move the channel axis last."
            )
        self.output_size(shape[-3], shape[-2])  # a VALID kernel larger than the image
        y = self.conv(x)
        return y if self.activation is None else self.activation(y)


def _per_layer(owner: str, name: str, value: Any, n: int, example: str) -> list[Any]:
    """``value`` for each of ``n`` layers: a single value (an int, or a string for
    padding) is used for every layer; a list or tuple must hold one entry per layer."""
    if isinstance(value, list | tuple):
        if len(value) != n:
            raise ValueError(
                f"{owner}: {name} must be one value for every layer, or a list with one entry "
                f"per conv layer ({n}, as many as channels), got {value!r}; for a non-square "
                f"kernel or stride write one (height, width) pair per layer, e.g. "
                f"{name}=[(3, 5)] * {n}, or see {example}."
            )
        return list(value)
    return [value] * n


class ConvEncoder(StatelessModule):
    """Conv layers, a flatten and an optional dense head: images to a feature vector.

    Layer ``i`` is a `Conv` with ``channels[i]`` output channels, kernel
    ``kernel_sizes[i]``, stride ``strides[i]`` and ``padding[i]``, followed by
    ``activation``; the last conv output ``[B, H', W', C']`` is flattened (row-major)
    to ``[B, H' * W' * C']`` and passed through a `Dense` layer per entry of ``dense``.
    Every layer, the last included, applies ``activation`` unless ``activate_final``
    is false (then the last layer is linear): an encoder's features feed the policy
    and value heads.

    **Input dtype and scale: the one conversion.** The encoder accepts images of any
    dtype. A bool or integer image (MinAtar's bool grids, Atari's uint8 frames) is cast
    to float32 here, first thing; a float image keeps its dtype. Then, if ``scale`` is
    given, it is multiplied by it (``scale=1/255`` maps uint8 frames onto ``[0, 1]``).
    No other module of the library changes an image's dtype, so an observation can be
    stored and sent in its compact form and converted only here.

    **Scale, don't normalize.** Image observations are usually scaled to a fixed range,
    not passed through a `Normalizer`. A normalizer keeps a mean and variance *per
    pixel*: a pixel that has always been 0 has variance 0, and the first time it lights
    up it is divided by ``sqrt(epsilon)`` (``1e4`` with the default ``epsilon=1e-8``)
    unless the normalizer clips. It works (it converts bool and integer images to
    float32 too), but if you use one, give it a ``clip`` (e.g. ``Normalizer(shape,
    clip=5.0)``) and expect the first iterations to see large inputs.

    **Flattened images.** Besides ``[B, H, W, C]`` the encoder accepts an image
    flattened row-major to ``[B, H * W * C]`` (what ``nnx_ppo.envs.GymnaxEnv`` and other
    vector-observation adapters give), and reshapes it to ``input_shape``.

    Args:
        input_shape: The shape of one image, ``(H, W, C)``.
        rngs: Random streams for the parameter initialisers.
        channels: Output channels of each conv layer, a non-empty sequence of positive
            ints.
        kernel_sizes: The kernel of every conv layer (an int: square), or a list or
            tuple with one entry per layer, each an int or a ``(height, width)`` pair
            (``[(3, 5)]`` for one non-square kernel).
        strides: The stride of every conv layer (an int), or one entry per layer (an
            int or a pair).
        padding: ``"SAME"`` or ``"VALID"`` (`Padding`) for every conv layer, or one
            per layer.
        activation: Elementwise function after each layer (default ``nnx.relu``);
            ``None`` makes the encoder linear.
        dense: Sizes of the dense layers after the flatten (``None`` or ``()``: none;
            the output is then the flattened conv features).
        activate_final: Whether the last layer applies ``activation`` too (default
            true).
        scale: A factor applied to the (float) image before the first conv, e.g.
            ``1/255``; ``None`` (default) leaves it as it is.
        **layer_kwargs: Passed on to every `nnx.Conv` and `nnx.Linear`
            (``kernel_init``, ``bias_init``, ``use_bias``, ``dtype``, ``param_dtype``).

    Raises:
        TypeError: If ``input_shape``, ``channels``, ``dense``, a kernel size or a stride
            is not made of ints, ``scale`` is not a number or ``activation`` is not
            callable.
        ValueError: If a size, kernel size or stride is not positive, ``channels`` is
            empty, a per-layer list has the wrong length, a padding is not ``"SAME"`` or
            ``"VALID"``, ``scale`` is not finite and non-zero, or a ``"VALID"`` kernel is
            larger than the image reaching it.

    Input ``x`` is ``[B, H, W, C]`` or ``[B, H * W * C]``, any dtype; the output is
    ``[B, out_features]`` float.

    Attributes:
        input_shape: ``(H, W, C)``.
        in_features: ``H * W * C``, the size of a flattened image.
        out_features: The size of the output's last axis (the last dense size, or the
            number of flattened conv features).
        conv_output_shape: ``(H', W', C')`` of the last conv layer's output.
        convs: The `Conv` layers, an `nnx.List`.
        dense: The `Dense` layers of the head, an `nnx.List` (empty without a head).

    Examples:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> encoder = ConvEncoder(
        ...     (12, 12, 3), rngs=nnx.Rngs(0), channels=(8, 16), kernel_sizes=3,
        ...     strides=(1, 2), dense=(32,), scale=1 / 255)
        >>> encoder.conv_output_shape, encoder.out_features
        ((6, 6, 16), 32)
        >>> frames = jnp.full((2, 12, 12, 3), 255, jnp.uint8)
        >>> encoder((), frames).output.shape
        (2, 32)
    """

    def __init__(
        self,
        input_shape: Sequence[int],
        rngs: nnx.Rngs,
        *,
        channels: Sequence[int],
        kernel_sizes: int | Sequence[Any],
        strides: int | Sequence[Any] = 1,
        padding: Padding | Sequence[Padding] = "SAME",
        activation: Activation | None = nnx.relu,
        dense: Sequence[int] | None = None,
        activate_final: bool = True,
        scale: float | None = None,
        **layer_kwargs: Any,
    ) -> None:
        owner = "ConvEncoder"
        example = (
            "ConvEncoder((10, 10, 4), rngs=rngs, channels=(16,), kernel_sizes=3, "
            "strides=1, dense=(128,))"
        )
        self.input_shape = _check_image_shape(owner, input_shape, example)
        if isinstance(channels, str | bytes) or not isinstance(channels, Sequence):
            raise TypeError(
                f"{owner}: channels must be a sequence of positive ints (one per conv "
                f"layer), got {channels!r}; for one layer of 16 write channels=(16,), e.g. "
                f"{example}."
            )
        if not channels:
            raise ValueError(
                f"{owner}: channels is empty, so there is no conv layer; give at least one, "
                f"e.g. {example} (for a dense-only network use MLP)."
            )
        widths = [
            check_features(owner, f"channels[{i}]", c, example) for i, c in enumerate(channels)
        ]
        n = len(widths)
        kernels = _per_layer(owner, "kernel_sizes", kernel_sizes, n, example)
        steps = _per_layer(owner, "strides", strides, n, example)
        pads = (
            [padding] * n
            if isinstance(padding, str)
            else _per_layer(owner, "padding", padding, n, example)
        )
        if dense is None:
            dense = ()
        if isinstance(dense, str | bytes) or not isinstance(dense, Sequence):
            raise TypeError(
                f"{owner}: dense must be None or a sequence of positive ints (the sizes of "
                f"the dense layers after the flatten), got {dense!r}; e.g. dense=(128,)."
            )
        dense_sizes = [
            check_features(owner, f"dense[{i}]", d, example) for i, d in enumerate(dense)
        ]
        _check_activation(owner, activation)
        if scale is not None:
            if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
                raise TypeError(
                    f"{owner}: scale must be a number or None, got {scale!r} of type "
                    f"{type(scale).__name__}; e.g. scale=1/255 for uint8 frames."
                )
            if not math.isfinite(scale) or scale == 0:
                raise ValueError(
                    f"{owner}: scale must be finite and non-zero, got {scale!r}; e.g. "
                    "scale=1/255 for uint8 frames, or None to leave the image as it is."
                )
        self.scale = None if scale is None else float(scale)
        self.activation = activation
        self.activate_final = bool(activate_final)

        last = n + len(dense_sizes) - 1

        def act(i: int) -> Activation | None:
            return activation if (i < last or self.activate_final) else None

        h, w, c = self.input_shape
        convs = []
        for i, (width, kernel, stride, pad) in enumerate(
            zip(widths, kernels, steps, pads, strict=True)
        ):
            layer_example = f"kernel_sizes[{i}]/strides[{i}] of {example}"
            conv = Conv(
                c,
                width,
                _pair(owner, f"kernel_sizes[{i}]", kernel, layer_example),
                rngs,
                strides=_pair(owner, f"strides[{i}]", stride, layer_example),
                padding=_check_padding(owner, f"padding[{i}]", pad),
                activation=act(i),
                **layer_kwargs,
            )
            try:
                h, w = conv.output_size(h, w)
            except ValueError as error:
                raise ValueError(f"{owner}: conv layer {i} gets a {h}x{w} image; {error}") from None
            c = width
            convs.append(conv)
        self.convs = nnx.List(convs)
        self.conv_output_shape = (h, w, c)
        features = h * w * c
        sizes = [features, *dense_sizes]
        self.dense = nnx.List(
            [
                Dense(d_in, d_out, rngs, activation=act(n + j), **layer_kwargs)
                for j, (d_in, d_out) in enumerate(itertools.pairwise(sizes))
            ]
        )
        self.in_features = math.prod(self.input_shape)
        self.out_features = sizes[-1]

    @classmethod
    def minatar(cls, input_shape: Sequence[int], rngs: nnx.Rngs, **overrides: Any) -> ConvEncoder:
        """The network of the MinAtar paper (Young & Tian, 2019): one 3x3 conv with 16
        channels, stride 1, no padding (``"VALID"``), then a dense layer of 128, ReLU
        after both. A 10x10 grid gives 8x8x16 = 1024 conv features.

        Args:
            input_shape: ``(H, W, C)``, e.g. ``(10, 10, 4)`` for Breakout-MinAtar.
            rngs: Random streams for the parameter initialisers.
            **overrides: Any `ConvEncoder` argument, replacing the preset's.
        """
        preset: dict[str, Any] = {
            "channels": (16,),
            "kernel_sizes": 3,
            "strides": 1,
            "padding": "VALID",
            "dense": (128,),
        }
        return cls(input_shape, rngs, **{**preset, **overrides})

    @classmethod
    def nature_dqn(
        cls,
        input_shape: Sequence[int] = (84, 84, 4),
        rngs: nnx.Rngs | None = None,
        **overrides: Any,
    ) -> ConvEncoder:
        """The Nature-DQN network (Mnih et al., 2015): 8x8 conv with 32 channels,
        stride 4; 4x4, 64, stride 2; 3x3, 64, stride 1 (all ``"VALID"``); dense 512;
        ReLU after each. ``scale=1/255`` by default (uint8 frames). An 84x84x4 stack
        of frames gives 7x7x64 = 3136 conv features.

        Args:
            input_shape: ``(H, W, C)``, by default Atari's ``(84, 84, 4)``.
            rngs: Random streams for the parameter initialisers (required).
            **overrides: Any `ConvEncoder` argument, replacing the preset's.
        """
        if rngs is None:
            raise TypeError(
                "ConvEncoder.nature_dqn: rngs is required, e.g. "
                "ConvEncoder.nature_dqn((84, 84, 4), rngs=nnx.Rngs(0))."
            )
        preset: dict[str, Any] = {
            "channels": (32, 64, 64),
            "kernel_sizes": (8, 4, 3),
            "strides": (4, 2, 1),
            "padding": "VALID",
            "dense": (512,),
            "scale": 1 / 255,
        }
        return cls(input_shape, rngs, **{**preset, **overrides})

    def _image(self, x: Any) -> jax.Array:
        """``x`` as float ``[B, H, W, C]`` (cast, scaled and, if flat, reshaped)."""
        shape = tuple(jnp.shape(x))
        h, w, c = self.input_shape
        if len(shape) == 2 and shape[1] == self.in_features:
            x = jnp.reshape(x, (shape[0], h, w, c))
        elif len(shape) != 4 or shape[1:] != self.input_shape:
            raise ValueError(
                f"ConvEncoder: the input must be images [B, {h}, {w}, {c}] (NHWC, matching "
                f"input_shape={self.input_shape}) or images flattened to [B, {self.in_features}], "
                f"got shape {shape}; build the encoder with the image's shape, or move the "
                "channel axis last (x.transpose(0, 2, 3, 1) for NCHW)."
            )
        return _to_float(x, self.scale)

    def forward(self, x: Any) -> jax.Array:
        """Encode a batch of images.

        Args:
            x: Images ``[B, H, W, C]`` or ``[B, H * W * C]``, any dtype (bool and integer
                images are cast to float32, then scaled by ``scale``).

        Returns:
            Features, shape ``[B, out_features]``.
        """
        y = self._image(x)
        for conv in self.convs:
            y = conv.forward(y)
        y = jnp.reshape(y, (y.shape[0], -1))
        for layer in self.dense:
            y = layer.forward(y)
        return y
