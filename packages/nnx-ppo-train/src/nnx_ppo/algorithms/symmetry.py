"""Mirror symmetry of a task, declared by the user: how observations and actions mirror.

A task is *mirror-symmetric* when mirroring a state (e.g. left and right swapped, or the
x axis flipped) and the action taken there gives the mirrored outcome with the same
reward. Such a task's optimal policy satisfies ``pi(mirror s) = mirror pi(s)``.
`PPOConfig.symmetry` takes a `Symmetry` and the trainer uses it in two ways (rsl_rl's
symmetry extension, Mittal et al. 2024), each optional:

- **augmentation**: every minibatch also trains on the mirrored sequences (mirrored
  observations, mirrored actions, the same advantages and value targets), each mirrored
  action's importance ratio taken against the probability the rollout's policy gave the
  real action (``Symmetry.ratio="behavior"``, rsl_rl's) or against the one it gave the
  mirrored action *on the mirrored observations* (``"mirrored"``, with a truncated
  correction weight);
- **a mirror loss**: ``mirror_loss_weight * mean |u(mirror s) - mirror u(s)|^2`` on the
  policy's distribution location ``u`` (each sampler's raw mode: for a tanh-squashed
  Gaussian the pre-``tanh`` mean, which keeps its gradient where the action saturates).

For a recurrent policy the mirrored sequences start from *mirrored carries*: the
rollout runs the network on the mirrored observations beside the real ones, so the
carry of a mirrored sequence is the one the network would have had on the mirrored
history (see `nnx_ppo.algorithms.core.mirroring`).

A `Mirror` maps one array along its last axis, ``out[..., i] = signs[i] *
x[..., permutation[i]]`` (a sign flip, a swap of left and right entries, or both); an
integer (discrete) action is a category index, mapped to ``permutation[index]``. A
mirror is an involution: applying it twice gives the input back. A dict observation or
action gets a dict of mirrors, one per key (nested dicts nest).

Examples:
    >>> import jax.numpy as jnp
    >>> flip_x = Mirror.from_signs(-1, 1)            # a point (x, y) -> (-x, y)
    >>> flip_x(jnp.array([[0.5, 2.0]])).tolist()
    [[-0.5, 2.0]]
    >>> legs = Mirror.swap(4, [(0, 1), (2, 3)])      # left and right legs swap
    >>> legs(jnp.array([1.0, 2.0, 3.0, 4.0])).tolist()
    [2.0, 1.0, 4.0, 3.0]
    >>> symmetry = Symmetry(observation=flip_x, action=flip_x, mirror_loss_weight=0.1)
    >>> symmetry.mirror_action(jnp.array([[0.3, -0.2]])).tolist()
    [[-0.30000001192092896, -0.20000000298023224]]
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, TypeAlias

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["Mirror", "MirrorTree", "Symmetry", "check_symmetry_option"]


def _ints(name: str, value: Any) -> tuple[int, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise TypeError(f"{name}={value!r} must be a sequence of ints, e.g. (1, 0, 2).")
    items = tuple(value)
    if any(isinstance(v, bool) or not isinstance(v, numbers.Integral) for v in items):
        raise TypeError(f"{name}={value!r} must hold ints (indices), e.g. (1, 0, 2).")
    return tuple(int(v) for v in items)


@dataclasses.dataclass(frozen=True)
class Mirror:
    """How one array mirrors along its last axis: ``out[..., i] = signs[i] *
    x[..., permutation[i]]``.

    A float array ``[..., n]`` is permuted and sign-flipped along its last axis; an
    integer array (a discrete action, ``[...]``) holds category indices and maps to
    ``permutation[index]`` (give no ``signs``). ``Mirror()`` is the identity, for any
    size. A mirror must be an involution (mirroring twice gives the input back):
    ``permutation[permutation[i]] == i`` and ``signs[i] == signs[permutation[i]]``.

    Args:
        permutation: ``n`` indices, a permutation of ``range(n)`` (``None``: none).
        signs: ``n`` entries, each ``1`` or ``-1`` (``None``: all ``1``).

    Raises:
        TypeError: If an argument is not a sequence of ints (signs: of +-1).
        ValueError: If ``permutation`` is not a permutation, a sign is not +-1, the two
            lengths differ, or the map is not an involution.

    Examples:
        >>> import jax.numpy as jnp
        >>> Mirror(permutation=(1, 0), signs=(-1, -1))(jnp.array([1.0, 2.0])).tolist()
        [-2.0, -1.0]
        >>> Mirror(permutation=(1, 2, 0))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
            ...
        ValueError: Mirror(permutation=(1, 2, 0), signs=None) is not an involution: ...
    """

    permutation: tuple[int, ...] | None = None
    signs: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        perm, signs = self.permutation, self.signs
        if perm is not None:
            perm = _ints("permutation", perm)
            if sorted(perm) != list(range(len(perm))):
                raise ValueError(
                    f"permutation={perm} is not a permutation of range({len(perm)}): list "
                    "each index 0..n-1 once (entry i says which entry lands at i)."
                )
            object.__setattr__(self, "permutation", perm)
        if signs is not None:
            signs = _ints("signs", signs)
            if any(s not in (1, -1) for s in signs):
                raise ValueError(f"signs={signs} must hold only 1 and -1 (keep or flip an entry).")
            object.__setattr__(self, "signs", signs)
        if perm is not None and signs is not None and len(perm) != len(signs):
            raise ValueError(
                f"permutation has {len(perm)} entries but signs has {len(signs)}: both "
                "describe the same last axis; give them the same length."
            )
        p = perm or tuple(range(len(signs or ())))
        s = signs or (1,) * len(p)
        if any(p[p[i]] != i or s[i] != s[p[i]] for i in range(len(p))):
            raise ValueError(
                f"{self!r} is not an involution: mirroring twice must give the input back, "
                "so the permutation must only swap pairs (perm[perm[i]] == i) and swapped "
                "entries must have the same sign."
            )

    @property
    def size(self) -> int | None:
        """The length of the last axis it applies to, ``None`` for the identity."""
        given = self.permutation if self.permutation is not None else self.signs
        return None if given is None else len(given)

    @classmethod
    def from_signs(cls, *signs: int) -> Mirror:
        """A sign flip without permutation: ``Mirror.from_signs(-1, 1, 1)`` negates entry 0."""
        return cls(signs=signs)

    @classmethod
    def swap(
        cls, size: int, pairs: Sequence[tuple[int, int]], negate: Sequence[int] = ()
    ) -> Mirror:
        """Swap the entries of each pair (left and right), then negate the entries
        ``negate`` (indices of the output); ``size`` is the length of the last axis.

        Examples:
            >>> Mirror.swap(3, [(0, 2)], negate=[1])
            Mirror(permutation=(2, 1, 0), signs=(1, -1, 1))
        """
        perm = list(range(size))
        for a, b in pairs:
            if not (0 <= a < size and 0 <= b < size) or a == b:
                raise ValueError(
                    f"pair ({a}, {b}) must name two different indices below size={size}."
                )
            perm[a], perm[b] = b, a
        signs = [1] * size
        for i in negate:
            if not 0 <= i < size:
                raise ValueError(f"negate index {i} is outside range({size}).")
            signs[i] = -1
        return cls(permutation=tuple(perm), signs=tuple(signs))

    def __call__(self, x: Any) -> jax.Array:
        """Mirror ``x`` (``[..., n]`` floats, or integer category indices ``[...]``)."""
        x = jnp.asarray(x)
        if jnp.issubdtype(x.dtype, jnp.integer):
            return x if self.permutation is None else jnp.asarray(self.permutation, x.dtype)[x]
        if self.permutation is not None:
            x = x[..., np.asarray(self.permutation)]
        if self.signs is not None:
            x = x * jnp.asarray(self.signs, x.dtype)
        return x


MirrorTree: TypeAlias = "Mirror | Mapping[str, MirrorTree]"
"""A `Mirror`, or a dict of them (one per key of a dict observation or action;
nested dicts nest)."""


def _freeze(name: str, tree: Any) -> MirrorTree:
    """Check a mirror tree and copy its dicts (plain dicts, keys sorted)."""
    if isinstance(tree, Mirror):
        return tree
    if isinstance(tree, Mapping):
        return {str(k): _freeze(f"{name}[{k!r}]", tree[k]) for k in sorted(tree)}
    raise TypeError(
        f"{name}={tree!r} must be a Mirror (e.g. Mirror.from_signs(-1, 1)) or a dict of "
        "them, one per key of a dict observation or action."
    )


def _apply(tree: MirrorTree, x: Any, name: str) -> Any:
    if isinstance(tree, Mirror):
        return tree(x)
    if not isinstance(x, Mapping) or set(x) != set(tree):
        keys = sorted(x) if isinstance(x, Mapping) else type(x).__name__
        raise ValueError(
            f"{name} has the keys {sorted(tree)} but the data has {keys}; give one mirror "
            "per key (Mirror() for a key that does not change)."
        )
    return {k: _apply(tree[k], x[k], f"{name}[{k!r}]") for k in tree}


def _check(tree: MirrorTree, shapes: Any, name: str, what: str) -> None:
    """Check ``tree`` against batched shapes (``[B, ...]``, `jax.ShapeDtypeStruct`)."""
    if isinstance(tree, Mapping):
        if not isinstance(shapes, Mapping) or set(shapes) != set(tree):
            keys = sorted(shapes) if isinstance(shapes, Mapping) else "an array"
            raise ValueError(
                f"{name} gives mirrors for the keys {sorted(tree)}, but the {what} has "
                f"{keys}; give one Mirror per key (Mirror() for a key that does not change)."
            )
        for k in tree:
            _check(tree[k], shapes[k], f"{name}[{k!r}]", what)
        return
    if not hasattr(shapes, "shape"):
        keys = sorted(shapes) if isinstance(shapes, Mapping) else type(shapes).__name__
        raise ValueError(
            f"{name}={tree!r} is one Mirror but the {what} is a dict with keys {keys}; "
            "give a dict of mirrors, one per key."
        )
    if jnp.issubdtype(shapes.dtype, jnp.integer):
        if tree.signs is not None:
            raise ValueError(
                f"{name}={tree!r} has signs, but the {what} is an integer (discrete) array "
                f"{list(shapes.shape)}: a category index can only be permuted; give "
                "Mirror(permutation=...) over the categories."
            )
        return
    width = shapes.shape[-1] if len(shapes.shape) > 1 else None
    if tree.size is not None and tree.size != width:
        raise ValueError(
            f"{name}={tree!r} mirrors a last axis of {tree.size} entries, but the {what} "
            f"is {jnp.dtype(shapes.dtype).name}{list(shapes.shape)} (batched): its last axis "
            f"has {width} entries; give the mirror one entry per {what} entry."
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Symmetry:
    """A task's mirror symmetry and how the trainer uses it (`PPOConfig.symmetry`).

    Args:
        observation: How an observation mirrors: a `Mirror` for an array observation
            ``[B, n]``, a dict of them for a dict observation.
        action: How an action mirrors, likewise. Samplers store raw (pre-squash)
            actions: the mirror is applied to them, which is the same for ``tanh``
            squashing (checked before compiling).
        augment: Add the mirrored sequences to every minibatch (data augmentation).
        ratio: The importance ratio of a mirrored sample ``(M s, M a)`` in the clipped
            surrogate. ``"behavior"`` (default; rsl_rl's): ``pi(M a | M s) /
            pi_old(a | s)``, against the probability with which the mirrored sample
            was drawn (by the mirror of the rollout's policy), so the trust region
            pulls ``pi(M a | M s)`` towards ``pi_old(a | s)``: it is 1 before the
            first update only where the policy is symmetric. ``"mirrored"``: ``pi(M a |
            M s) / pi_old(M a | M s)`` (1 before the first update, the old value scored
            by the rollout on the mirrored observations), the surrogate weighted by
            ``min(1, pi_old(M a | M s) / pi_old(a | s))``, the truncated importance
            correction between the two; it moves the policy only as far as the trust
            region around its own mirrored probabilities allows. On `PointMass` (2
            seeds, 16k steps, an LSTM) ``"behavior"`` halved the symmetry error of
            training without augmentation and ``"mirrored"`` doubled it.
        mirror_loss_weight: Weight of the mirror loss ``mean |u(mirror s) - mirror
            u(s)|^2`` on the samplers' raw modes ``u`` (``0``: none). The target
            ``mirror u(s)`` is held fixed (no gradient), as in rsl_rl.

    Raises:
        TypeError: If a mirror is not a `Mirror` (or dict of them) or a flag has the
            wrong type.
        ValueError: If the weight is negative or not finite, ``ratio`` is not one of
            the two, or neither augmentation nor the loss is on.

    Examples:
        >>> Symmetry(observation=Mirror(), action=Mirror(), augment=False)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
            ...
        ValueError: Symmetry(augment=False, mirror_loss_weight=0.0) does nothing: ...
    """

    observation: MirrorTree
    action: MirrorTree
    augment: bool = True
    ratio: Literal["behavior", "mirrored"] = "behavior"
    mirror_loss_weight: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "observation", _freeze("observation", self.observation))
        object.__setattr__(self, "action", _freeze("action", self.action))
        if not isinstance(self.augment, bool):
            raise TypeError(f"augment={self.augment!r} must be True or False.")
        if self.ratio not in ("behavior", "mirrored"):
            raise ValueError(
                f"ratio={self.ratio!r} is not 'behavior' (against pi_old(a | s), rsl_rl's) "
                "or 'mirrored' (against pi_old(M a | M s), weighted)."
            )
        weight = self.mirror_loss_weight
        if isinstance(weight, bool) or not isinstance(weight, numbers.Real):
            raise TypeError(f"mirror_loss_weight={weight!r} must be a real number >= 0.")
        if not math.isfinite(weight) or weight < 0:
            raise ValueError(f"mirror_loss_weight={weight} must be finite and >= 0.")
        object.__setattr__(self, "mirror_loss_weight", float(weight))
        if not self.augment and weight == 0:
            raise ValueError(
                f"Symmetry(augment=False, mirror_loss_weight={float(weight)}) does nothing: "
                "set augment=True or mirror_loss_weight > 0."
            )

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_data(), sort_keys=True))

    @classmethod
    def from_signs(
        cls, *, observation: Sequence[int], action: Sequence[int], **options: Any
    ) -> Symmetry:
        """A symmetry that flips signs of array observations and actions.

        Examples:
            >>> Symmetry.from_signs(observation=(-1, 1), action=(-1,)).action
            Mirror(permutation=None, signs=(-1,))
        """
        return cls(
            observation=Mirror(signs=tuple(observation)),
            action=Mirror(signs=tuple(action)),
            **options,
        )

    def mirror_observation(self, obs: Any) -> Any:
        """The mirrored observation (any leading axes: ``[B, ...]``, ``[T, B, ...]``)."""
        return _apply(self.observation, obs, "Symmetry.observation")

    def mirror_action(self, action: Any) -> Any:
        """The mirrored action (or raw action) tree, any leading axes."""
        return _apply(self.action, action, "Symmetry.action")

    def check(self, obs: Any, actions: Any) -> None:
        """Check the mirrors against a batched observation and action (arrays or
        `jax.ShapeDtypeStruct` trees, ``[B, ...]``).

        Raises:
            ValueError: If a dict's keys differ or a mirror's size differs from its
                array's last axis; the message names the mirror and the shapes.
        """
        _check(self.observation, obs, "Symmetry.observation", "observation")
        _check(self.action, actions, "Symmetry.action", "action")

    def to_data(self) -> dict[str, Any]:
        """JSON data of this symmetry (what a checkpoint's config stores)."""

        def data(tree: MirrorTree) -> Any:
            if isinstance(tree, Mirror):
                return {"permutation": tree.permutation, "signs": tree.signs}
            return {k: data(v) for k, v in tree.items()}

        return {
            "observation": data(self.observation),
            "action": data(self.action),
            "augment": self.augment,
            "ratio": self.ratio,
            "mirror_loss_weight": self.mirror_loss_weight,
        }

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Symmetry:
        """Rebuild a `Symmetry` from `to_data` (or the config's JSON) data.

        Examples:
            >>> s = Symmetry(observation={"x": Mirror.from_signs(-1)}, action=Mirror())
            >>> Symmetry.from_data(s.to_data()) == s
            True
        """

        def tree(node: Any) -> MirrorTree:
            if isinstance(node, Mapping) and set(node) == {"permutation", "signs"}:
                return Mirror(node["permutation"], node["signs"])
            return {k: tree(v) for k, v in node.items()}

        fields = dict(data)
        return cls(
            observation=tree(fields.pop("observation")),
            action=tree(fields.pop("action")),
            **fields,
        )


def check_symmetry_option(value: Any, *, importance_ratio: bool) -> None:
    """Check a config's ``symmetry`` field: a `Symmetry` or ``None``; where the
    algorithm has no importance ratio (distillation: the student learns the mirrored
    teacher action by likelihood), its ``ratio`` must be the default ``"behavior"``.

    Raises:
        TypeError: If ``value`` is neither.
        ValueError: If it asks for ``ratio="mirrored"`` without an importance ratio.
    """
    if not isinstance(value, Symmetry | None):
        raise TypeError(f"symmetry={value!r} must be a Symmetry or None.")
    if value is not None and not importance_ratio and value.ratio != "behavior":
        raise ValueError(
            f"symmetry has ratio={value.ratio!r}, a choice of PPO's importance ratio, which "
            "distillation does not have (the student learns the mirrored teacher action by "
            "likelihood); leave ratio at its default, 'behavior'."
        )
