"""Running mean / standard-deviation normalization: `Normalizer`.

A `Normalizer` maps its input ``x`` to ``(x - mean) / std`` (optionally clipped)
with the mean and variance of **all data seen so far**. It follows the replay contract
of `nnx_ppo.networks.types`:

- ``__call__`` never writes the statistics. It emits its raw input as
  ``rollout_extras``; the trainer stacks those to ``[T, B, ...]`` and, once per
  iteration after the gradient phase, calls `Normalizer.update_statistics`. So
  during a rollout and its loss replay the same statistics are used and replay
  reproduces the rollout exactly.
- The statistics are `NormalizerStatistic` variables, not `nnx.Param`,
  so ``nnx.grad`` and optimizers that filter on ``nnx.Param`` never touch them.

Merging a batch into the running statistics uses the parallel form of Welford's
algorithm (Chan, Golub & LeVeque, 1979). With the running count, mean and (population)
variance ``n_a, m_a, v_a`` and a batch's ``n_b, m_b, v_b``, ``n = n_a + n_b``,
``w_a = n_a / n``, ``w_b = n_b / n`` and ``d = m_b - m_a``::

    m = m_a + w_b * d
    v = w_a * v_a + w_b * v_b + w_a * w_b * d**2

The variance is stored (not the sum of squared deviations, which grows without bound
in float32) and the batch's own variance is taken in two passes, so no step subtracts
two large numbers.

**The count is exact.** A float32 count stops being exact at ``2**24`` (about 16.7
million samples, minutes of a PPO run) and int64 needs ``jax_enable_x64``. The count
is therefore kept as two int32 words ``[high, low]`` with ``count = high * 2**30 +
low`` and ``0 <= low < 2**30``; every addition carries from the low word, so it stays
exact up to ``2**61`` samples. Only the weights ``w_a, w_b`` are computed in float32
(relative error ``~1e-7``, harmless in a weight).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp
from flax import nnx

from nnx_ppo.networks.types import StatefulModule, StatefulModuleOutput

__all__ = ["Normalizer", "NormalizerStatistic", "NormalizerStatistics"]

_WORD = 2**30  # base of the two-word exact count

Path = tuple[str, ...]


class NormalizerStatistic(nnx.Variable):
    """A running statistic of a `Normalizer` (mean, variance or count).

    Changed only by `Normalizer.update_statistics`; never a trainable parameter
    (it is not an `nnx.Param`, so gradient transforms and ``nnx.Param``-filtered
    optimizers leave it alone). Select all of them with
    ``nnx.state(model, NormalizerStatistic)``.
    """


NormalizerStatistics = NormalizerStatistic
"""nnx-ppo 0.3.0's name of `NormalizerStatistic` (the same class), e.g. for
``nnx.state(model, NormalizerStatistics)``."""


def _parse_shape(value: Any, path: Path) -> tuple[int, ...] | None:
    """``value`` as a shape if it is an int or a sequence of ints, else ``None``."""
    where = f" at {'/'.join(path)!r}" if path else ""
    fix = 'pass an int (vector size), a tuple of ints (a shape) or a dict of those, e.g. {"x": 8}'
    if isinstance(value, bool):
        raise TypeError(
            f"Normalizer: shape{where} must be an int or a tuple of ints, got {value!r}; {fix}."
        )
    if isinstance(value, numbers.Integral):
        dims: tuple[Any, ...] = (value,)
    elif isinstance(value, tuple | list) and all(
        isinstance(d, numbers.Integral) and not isinstance(d, bool) for d in value
    ):
        dims = tuple(value)
    else:
        return None
    if any(d <= 0 for d in dims):
        raise ValueError(f"Normalizer: every size{where} must be positive, got {value!r}; {fix}.")
    return tuple(int(d) for d in dims)


def _parse_spec(spec: Any, path: Path = ()) -> list[tuple[Path, tuple[int, ...]]]:
    """Flatten a shape spec into ``[(path, shape), ...]`` in sorted-key order."""
    shape = _parse_shape(spec, path)
    if shape is not None:
        return [(path, shape)]
    where = f" at {'/'.join(path)!r}" if path else ""
    if isinstance(spec, Mapping):
        if not spec:
            raise ValueError(
                f"Normalizer: the shape dict{where} is empty; give at least one entry, "
                'e.g. {"x": 8}.'
            )
        leaves = []
        for key in sorted(spec):
            if not isinstance(key, str):
                raise TypeError(
                    f"Normalizer: dict keys must be strings, got {key!r}{where}; use the "
                    "observation's string keys."
                )
            leaves.extend(_parse_spec(spec[key], (*path, key)))
        return leaves
    raise TypeError(
        f"Normalizer: shape{where} must be an int, a tuple of ints or a dict of those, got "
        f"{spec!r} of type {type(spec).__name__}; e.g. Normalizer(8), Normalizer((3, 4)) "
        'or Normalizer({"x": 8, "y": (3,)}).'
    )


def _get(tree: Any, path: Path, what: str) -> Any:
    for depth, key in enumerate(path):
        where = "/".join(path[:depth]) or "the top level"
        if not isinstance(tree, Mapping):
            raise TypeError(
                f"Normalizer: expected a dict at {where} of the {what} (to read key "
                f"{key!r}), got {type(tree).__name__}; pass a dict shaped like the "
                "Normalizer's shape spec."
            )
        if key not in tree:
            raise KeyError(
                f"Normalizer: the {what} has no key {key!r} at {where}; keys present: "
                f"{sorted(tree)}. Pass an input with that key or drop it from the spec."
            )
        tree = tree[key]
    return tree


def _set(tree: Any, path: Path, value: Any) -> Any:
    """Return a copy of the nested dict ``tree`` with ``value`` at ``path``."""
    if not path:
        return value
    out = dict(tree)
    out[path[0]] = _set(tree[path[0]], path[1:], value)
    return out


def _mirror(leaves: list[tuple[Path, Any]]) -> Any:
    """Build the nested dict (or bare leaf) holding ``value`` at each ``path``."""
    if len(leaves) == 1 and not leaves[0][0]:
        return leaves[0][1]
    tree: dict[str, Any] = {}
    for path, value in leaves:
        tree = _set_new(tree, path, value)
    return tree


def _set_new(tree: dict[str, Any], path: Path, value: Any) -> dict[str, Any]:
    if len(path) == 1:
        return {**tree, path[0]: value}
    return {**tree, path[0]: _set_new(tree.get(path[0], {}), path[1:], value)}


def _nnx_tree(tree: Any) -> Any:
    """Wrap nested dicts of variables in `nnx.Dict` so NNX tracks them."""
    if isinstance(tree, dict):
        return nnx.Dict({k: _nnx_tree(v) for k, v in tree.items()})
    return tree


class Normalizer(StatefulModule):
    """Normalize an input (array or dict of arrays) by running mean and std.

    Args:
        shape_or_tree: The per-environment shape of what is normalized: an int ``n``
            (a vector ``[n]``), a tuple of ints (any shape), or a (nested) dict of those
            for dict inputs, e.g. ``{"x": 8, "y": (3,)}``. Keys of a dict input that are
            not in the spec pass through unchanged (and are not emitted as extras).
        epsilon: Variance floor: the divisor is ``sqrt(max(var, epsilon))``, so
            ``std >= sqrt(epsilon)``. Must be positive.
        clip: If given, the normalized output is clipped to ``[-clip, clip]``. Must be
            positive.

    Raises:
        TypeError: If the spec is not an int, tuple of ints or dict of those, or a
            number argument has the wrong type.
        ValueError: If a size, ``epsilon`` or ``clip`` is not positive, or a dict in the
            spec is empty.

    The output has the structure of the input; the normalized leaves are float32 with
    the input's shape ``[B, *shape]``. Before the first `update_statistics` the
    mean is 0 and the variance 1, so the output equals the (clipped) input. The carry is
    ``()``; ``rollout_extras`` is the raw input restricted to the spec's keys.

    Attributes:
        mean: Running mean per spec leaf, `NormalizerStatistic` ``[*shape]``
            (an `nnx.Dict` of them for a dict spec).
        var: Running population variance, same layout as ``mean``.
        count_words: The exact sample count as int32 ``[high, low]``; see `count`.

    Examples:
        >>> import jax.numpy as jnp
        >>> norm = Normalizer({"x": 2})
        >>> data = jnp.array([[[0.0, 1.0]], [[2.0, 5.0]]])   # [T=2, B=1, 2]
        >>> norm.update_statistics({"x": data})
        >>> norm.mean["x"][...].tolist(), norm.var["x"][...].tolist(), norm.count
        ([1.0, 3.0], [1.0, 4.0], 2)
        >>> out = norm((), {"x": jnp.array([[3.0, 3.0]]), "other": jnp.ones(1)})
        >>> out.output["x"].tolist(), out.output["other"].tolist()
        ([[2.0, 0.0]], [1.0])
    """

    def __init__(
        self, shape_or_tree: Any, *, epsilon: float = 1e-8, clip: float | None = None
    ) -> None:
        self._leaves = tuple(_parse_spec(shape_or_tree))
        for name, value, optional in (("epsilon", epsilon, False), ("clip", clip, True)):
            if optional and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise TypeError(
                    f"Normalizer: {name} must be a positive float, got {value!r} of type "
                    f"{type(value).__name__}."
                )
            if not value > 0 or not math.isfinite(value):
                raise ValueError(
                    f"Normalizer: {name} must be a positive finite float, got {value!r}; "
                    + ("e.g. epsilon=1e-8." if name == "epsilon" else "e.g. clip=10.0, or None.")
                )
        self.epsilon = float(epsilon)
        self.clip = None if clip is None else float(clip)
        self.mean = _nnx_tree(
            _mirror([(p, NormalizerStatistic(jnp.zeros(s, jnp.float32))) for p, s in self._leaves])
        )
        self.var = _nnx_tree(
            _mirror([(p, NormalizerStatistic(jnp.ones(s, jnp.float32))) for p, s in self._leaves])
        )
        self.count_words = NormalizerStatistic(jnp.zeros((2,), jnp.int32))

    @property
    def count(self) -> int:
        """The number of samples (per element) merged so far, as an exact Python int.

        Reads concrete values; inside a jitted function use ``count_words`` instead.
        """
        high, low = (int(w) for w in self.count_words[...])
        return high * _WORD + low

    def _stat(self, tree: Any, path: Path) -> NormalizerStatistic:
        for key in path:
            tree = tree[key]
        return tree

    def __call__(self, state: Any, x: Any, rollout_extras: Any = None) -> StatefulModuleOutput:
        """Normalize ``x`` with the current statistics (never changes them).

        Args:
            state: The carry, ``()``.
            x: The input: an array ``[B, *shape]`` or a dict holding the spec's keys
                (with leaves ``[B, *shape]``) and possibly others.
            rollout_extras: Ignored; the statistics do not change between a rollout and
                its replay, and the input is the same.

        Returns:
            A `StatefulModuleOutput` with the normalized ``output`` and the raw
            input (spec keys only) as ``rollout_extras``.
        """
        del rollout_extras
        output = x
        raw = []
        for path, shape in self._leaves:
            leaf = _get(x, path, "input")
            self._check_shape(leaf, path, shape, "input", batch_dims=1)
            raw.append((path, leaf))
            mean = self._stat(self.mean, path)[...]
            std = jnp.sqrt(jnp.maximum(self._stat(self.var, path)[...], self.epsilon))
            y = (jnp.asarray(leaf, jnp.float32) - mean) / std
            if self.clip is not None:
                y = jnp.clip(y, -self.clip, self.clip)
            output = _set(output, path, y)
        return StatefulModuleOutput(
            next_state=state,
            output=output,
            regularization_loss=jnp.zeros(()),
            metrics={},
            rollout_extras=_mirror(raw),
        )

    def update_statistics(self, rollout_extras: Any) -> None:
        """Merge a rollout's raw inputs into the running statistics.

        Args:
            rollout_extras: What `__call__` emitted, stacked over the rollout:
                leaves ``[T, B, *shape]`` (any number of leading axes is accepted; all
                of them count as samples). Every leaf must have the same number of
                samples.
        """
        n_b = None
        batches = []
        for path, shape in self._leaves:
            leaf = jnp.asarray(_get(rollout_extras, path, "rollout_extras"), jnp.float32)
            self._check_shape(leaf, path, shape, "rollout_extras", batch_dims=None)
            n = math.prod(leaf.shape[: leaf.ndim - len(shape)])
            if n_b is not None and n != n_b:
                raise ValueError(
                    f"Normalizer: every leaf of rollout_extras must hold the same number "
                    f"of samples; {'/'.join(path)!r} has {n}, an earlier leaf {n_b}."
                )
            n_b = n
            batches.append((path, leaf.reshape(n, *shape)))
        assert n_b is not None  # _leaves is never empty
        if n_b == 0:
            return

        high, low = self.count_words[0], self.count_words[1]
        n_a = high.astype(jnp.float32) * float(_WORD) + low.astype(jnp.float32)
        w_b = n_b / (n_a + n_b)
        w_a = n_a / (n_a + n_b)
        for path, data in batches:
            # Batch moments in two passes, then Chan's merge (see the module docstring).
            m_b = data.mean(axis=0)
            v_b = jnp.mean(jnp.square(data - m_b), axis=0)
            mean, var = self._stat(self.mean, path), self._stat(self.var, path)
            m_a, v_a = mean[...], var[...]
            delta = m_b - m_a
            mean[...] = m_a + w_b * delta
            var[...] = w_a * v_a + w_b * v_b + w_a * w_b * jnp.square(delta)

        # Exact two-word count: add n_b's words, carry the low word's overflow.
        add_high, add_low = divmod(n_b, _WORD)
        low = low + add_low  # < 2**31: no int32 overflow
        carry = (low >= _WORD).astype(jnp.int32)
        self.count_words[...] = jnp.stack([high + add_high + carry, low - carry * _WORD])

    @staticmethod
    def _check_shape(
        leaf: Any, path: Path, shape: tuple[int, ...], what: str, batch_dims: int | None
    ) -> None:
        where = f" {'/'.join(path)!r}" if path else ""
        actual = tuple(getattr(leaf, "shape", ()))
        lead = len(actual) - len(shape)
        ok = lead >= 1 and actual[lead:] == shape
        if batch_dims is not None:
            ok = ok and lead == batch_dims
        if not ok:
            expected = "[B, *shape]" if batch_dims == 1 else "[T, B, *shape]"
            raise ValueError(
                f"Normalizer: the {what}{where} has shape {actual}, expected {expected} with "
                f"shape={shape}; make the Normalizer's spec match the data."
            )
