"""Domain randomization: one physics model per training environment.

A *randomization function* has brax's and MuJoCo Playground's signature::

    randomization_fn(model, rng) -> (batched_model, in_axes)

``model`` is the environment's own model (a brax ``System`` at ``env.unwrapped.sys``,
a Playground ``mjx.Model`` at ``env.unwrapped._mjx_model``), ``rng`` is ``[n_envs, 2]``
raw PRNG keys, one per environment. ``batched_model`` has the model's structure; the
leaves whose ``in_axes`` entry is ``0`` have a leading ``[n_envs]`` axis (one value per
environment), those whose entry is ``None`` are shared. So ``registry.get_domain_randomizer``
and brax-style functions are used unchanged.

**Per-env models in the training state.** `train_ppo` and `train_distillation` draw the
models once, from the run's seed, and keep only the per-environment leaves in
``state.models``: a dict ``{"link/inertia/mass": [n_envs, ...], ...}`` keyed by the leaf's
path in the model (`nnx_ppo.algorithms.checkpointing.checkpointer` saves it with the rest of the
state, `nnx_ppo.algorithms.core.distributed` shards it with the environments). Shared leaves
are the environment's nominal values and are not copied per environment: a randomizer
that changes a leaf must give it ``in_axes`` ``0``. Every vmapped ``reset`` and ``step``
of the rollout (the first reset, the cached or freshly drawn resets, each step) runs each
environment with its own model (`batched`). Environment ``i`` keeps model ``i`` for the
whole run, or until it is redrawn (``redraw_every``), and a resumed run continues with the
saved models, bit for bit.

**Redraws.** With ``redraw_every=N`` the models are drawn again, inside the jitted
iteration, before iterations ``N, 2N, ...`` (from the state's key, so a resumed run
redraws the same models). With ``reset_mode="cached"`` the cached reset states are redrawn
with them (a reset may depend on the model); environments in mid-episode continue with
their new model.

**Evaluation** uses the nominal model, unless ``EvalConfig(randomized=True)``: then each
evaluation draws ``EvalConfig.n_envs`` fresh models from its own key.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from nnx_ppo.algorithms.config import EvalConfig
from nnx_ppo.algorithms.core.trees import key_path

__all__ = [
    "MODEL_ATTRIBUTES",
    "Models",
    "Randomization",
    "RandomizationFn",
    "batched",
    "make_randomization",
    "model_holder",
    "run_randomizations",
]

RandomizationFn = Callable[[Any, jax.Array], tuple[Any, Any]]
"""``randomization_fn(model, rng[n_envs, 2]) -> (batched_model, in_axes)`` (brax's and
MuJoCo Playground's signature)."""
Models = dict[str, jax.Array]
"""The per-environment leaves of the randomized models, ``{path: [n_envs, ...]}``."""

MODEL_ATTRIBUTES = (
    ("sys", "a brax PipelineEnv's System"),
    ("_mjx_model", "a MuJoCo Playground MjxEnv's mjx.Model"),
    ("params", "a GymnaxEnv's gymnax EnvParams"),
)
"""Where the model is looked for on ``env.unwrapped``, in order: ``(attribute, what)``."""

_MODEL_STREAM = 0x6D6F64  # fold_in data of the models' key: independent of the run's splits


def model_holder(env: Any, *, env_name: str = "env") -> tuple[Any, str]:
    """The object and attribute that hold ``env``'s physics model.

    Args:
        env: An unbatched environment, possibly wrapped (its ``unwrapped`` is searched).
        env_name: The argument's name in the error.

    Returns:
        ``(env.unwrapped, attribute)`` with ``attribute`` from `MODEL_ATTRIBUTES`.

    Raises:
        TypeError: If the environment has none of them.
    """
    holder = getattr(env, "unwrapped", env)
    for attribute, _ in MODEL_ATTRIBUTES:
        if getattr(holder, attribute, None) is not None:
            return holder, attribute
    looked = " and ".join(f"{env_name}.unwrapped.{a} ({what})" for a, what in MODEL_ATTRIBUTES)
    raise TypeError(
        f"{env_name} ({type(holder).__name__}) has no physics model to randomize: looked for "
        f"{looked}. Domain randomization needs a brax PipelineEnv or a MuJoCo Playground "
        "MjxEnv (possibly wrapped); pass randomization_fn=None for other environments."
    )


def _flat(tree: Any) -> dict[str, Any]:
    return {key_path(path): leaf for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


def _model_of(nominal: Any, leaves: Models) -> Any:
    """``nominal`` with the leaves named in ``leaves`` replaced (the others shared)."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(nominal)
    values = [leaves.get(key_path(path), leaf) for path, leaf in flat]
    return jax.tree.unflatten(treedef, values)


@contextlib.contextmanager
def _swapped(holder: Any, attribute: str, leaves: Models) -> Iterator[None]:
    """Run the block with ``holder.<attribute>`` replaced by the model with ``leaves``."""
    nominal = getattr(holder, attribute)
    setattr(holder, attribute, _model_of(nominal, leaves))
    try:
        yield
    finally:
        setattr(holder, attribute, nominal)


def batched(env: Any, method: str, models: Models | None) -> Callable[..., Any]:
    """``jax.vmap(getattr(env, method))``, each environment with its own model.

    With ``models`` the vmapped function swaps environment ``i``'s model (``models``'
    leaves ``[i]``, the rest nominal) into ``env.unwrapped`` while ``env.<method>`` is
    traced, and restores the nominal model afterwards (brax's
    ``DomainRandomizationVmapWrapper`` does the same per call, for the whole batch).

    Args:
        env: The unbatched environment.
        method: ``"reset"`` or ``"step"``.
        models: The per-environment leaves (``[B, ...]``), or ``None``: the plain
            ``jax.vmap``.

    Returns:
        The batched function, with the arguments of ``env.<method>`` (leaves ``[B, ...]``).
    """
    call = getattr(env, method)
    if models is None:
        return jax.vmap(call)
    holder, attribute = model_holder(env)

    def one(leaves: Models, *args: Any) -> Any:
        with _swapped(holder, attribute, leaves):
            return call(*args)

    return lambda *args: jax.vmap(one)(models, *args)


# --------------------------------------------------------------------------- checks


def _is_axis(x: Any) -> bool:
    return x is None


def _axes_by_path(in_axes: Any, model: Any) -> dict[str, Any]:
    """Every model leaf's ``in_axes`` entry (a prefix entry applies to its subtree).

    Raises:
        ValueError: If ``in_axes`` is not a prefix of the model's structure, or has
            entries other than ``0`` and ``None``.
    """
    for path, axis in jax.tree_util.tree_flatten_with_path(in_axes, is_leaf=_is_axis)[0]:
        if axis is not None and (type(axis) is not int or axis != 0):
            raise ValueError(
                f"randomization_fn's in_axes at '{key_path(path) or '<root>'}' is {axis!r}: "
                "entries must be 0 (one value per environment on the leading axis) or "
                "None (shared by all environments)."
            )
    try:
        per_subtree = jax.tree.map(
            lambda axis, sub: jax.tree.map(lambda _: axis, sub), in_axes, model, is_leaf=_is_axis
        )
    except (ValueError, TypeError) as error:
        raise ValueError(
            "randomization_fn's in_axes does not match the structure of the model it "
            f"returned ({type(model).__name__}): build it from the model, e.g. "
            "in_axes = jax.tree.map(lambda _: None, model).tree_replace({'body_mass': 0}) "
            f"(brax and Playground do so). JAX says: {error}"
        ) from None
    flat = jax.tree_util.tree_flatten_with_path(per_subtree, is_leaf=_is_axis)[0]
    return {key_path(path): axis for path, axis in flat}


def _dtype(x: Any) -> np.dtype:
    """The dtype of an array or of a Python scalar as JAX stores it (e.g. a gymnax
    ``EnvParams`` field of ``10.0`` is float32)."""
    return np.dtype(jnp.result_type(x))


def _describe(x: Any) -> str:
    return f"{tuple(np.shape(x))} {_dtype(x).name}"


def _check_fields(nominal: Any, model: Any, env_name: str) -> None:
    """Raise if ``model`` (the randomizer's) has other leaves than ``nominal``."""
    mine, theirs = _flat(nominal), _flat(model)
    unknown = sorted(set(theirs) - set(mine))
    missing = sorted(set(mine) - set(theirs))
    structures: tuple[Any, Any] = (jax.tree.structure(nominal), jax.tree.structure(model))
    same_structure = bool(structures[0] == structures[1])
    if unknown or missing or not same_structure:
        what = (
            f"fields the environment's model does not have: {unknown}"
            if unknown
            else f"lacks fields of the environment's model: {missing}"
            if missing
            else "the same fields in another structure"
        )
        raise ValueError(
            f"randomization_fn returned a {type(model).__name__} with {what} "
            f"({env_name}'s model is a {type(nominal).__name__} with fields "
            f"{sorted(mine)[:12]}{'...' if len(mine) > 12 else ''}). Randomize fields of "
            "the model it is given (model.tree_replace({...}) keeps its structure)."
        )


def _check_leaves(
    nominal: Any, model: Any, axes: dict[str, Any], n_envs: int, env_name: str
) -> tuple[str, ...]:
    """Check shapes and dtypes; the paths of the per-environment leaves, sorted."""
    mine, theirs = _flat(nominal), _flat(model)
    paths = []
    for path, leaf in theirs.items():
        base = mine[path]
        expected = (n_envs, *np.shape(base)) if axes[path] == 0 else tuple(np.shape(base))
        if axes[path] == 0 and np.shape(leaf)[:1] != (n_envs,):
            raise ValueError(
                f"randomization_fn's '{path}' has shape {tuple(np.shape(leaf))} but in_axes 0 "
                f"(one value per environment): expected {expected}, a leading axis of "
                f"n_envs={n_envs} ({env_name}'s batch size) on the model's "
                f"{tuple(np.shape(base))}. Draw one value per key of the rng argument "
                "(it holds n_envs keys), e.g. with jax.vmap."
            )
        if tuple(np.shape(leaf)) != expected or _dtype(leaf) != _dtype(base):
            kind = "in_axes 0" if axes[path] == 0 else "in_axes None (shared)"
            raise ValueError(
                f"randomization_fn's '{path}' ({kind}) is {_describe(leaf)}, expected "
                f"{expected} {_dtype(base).name} ({env_name}'s model has "
                f"{_describe(base)}); keep each field's shape and dtype."
            )
        if axes[path] == 0:
            paths.append(path)
    return tuple(sorted(paths))


# --------------------------------------------------------------------------- draws


@dataclasses.dataclass(frozen=True, eq=False)
class Randomization:
    """A checked randomization function for one environment and batch size (built by
    `make_randomization`).

    Attributes:
        fn: The randomization function.
        n_envs: The number of models each draw makes.
        nominal: The environment's own model (what ``fn`` is given).
        paths: The per-environment leaves' paths (the keys of a draw), sorted.
        redraw_every: Draw new models every this many iterations; ``0``: never.
    """

    fn: RandomizationFn
    n_envs: int
    nominal: Any
    paths: tuple[str, ...]
    redraw_every: int = 0

    def draw(self, key: jax.Array) -> Models:
        """``n_envs`` models from ``key`` (raw PRNG key; jit-able): ``{path: [n_envs,
        ...]}`` of the per-environment leaves."""
        model, _ = self.fn(self.nominal, jax.random.split(key, self.n_envs))
        flat = _flat(model)
        return {path: jnp.asarray(flat[path]) for path in self.paths}

    def initial(self, run_key: jax.Array) -> Models:
        """The run's first models, drawn (jitted) from its raw key: the key folded with a
        constant, so the run's other random streams are those of a run without
        randomization.

        Raises:
            ValueError: If ``fn`` changed a leaf it declared shared (``in_axes`` None):
                shared leaves are the environment's, so the change would be lost.
        """
        key = jax.random.fold_in(run_key, _MODEL_STREAM)

        def draw_and_compare(k: jax.Array) -> tuple[Models, dict[str, jax.Array]]:
            model, _ = self.fn(self.nominal, jax.random.split(k, self.n_envs))
            flat, base = _flat(model), _flat(self.nominal)
            changed = {
                p: ~jnp.array_equal(leaf, base[p], equal_nan=True)
                for p, leaf in flat.items()
                if p not in self.paths and leaf is not base[p]
            }
            return {p: jnp.asarray(flat[p]) for p in self.paths}, changed

        models, changed = jax.jit(draw_and_compare)(key)
        lost = sorted(p for p, flag in changed.items() if bool(flag))
        if lost:
            raise ValueError(
                f"randomization_fn changed {lost} but gave them in_axes None (shared): "
                "shared fields are the environment's own values, so the change would be "
                "lost. Give each field it changes in_axes 0 (one value per environment)."
            )
        return models


def make_randomization(
    env: Any,
    randomization_fn: RandomizationFn | None,
    n_envs: int,
    *,
    redraw_every: int | None = None,
    env_name: str = "env",
) -> Randomization | None:
    """Check ``randomization_fn`` against ``env`` and build its `Randomization`.

    The function is traced once (``jax.eval_shape``: nothing is compiled or run) and its
    result checked against the environment's model.

    Args:
        env: The unbatched environment (a brax ``PipelineEnv`` or a Playground
            ``MjxEnv``, possibly wrapped).
        randomization_fn: ``(model, rng[n_envs, 2]) -> (batched_model, in_axes)``, or
            ``None``.
        n_envs: The batch size of each draw.
        redraw_every: Redraw every this many iterations (``None`` or ``0``: never).
        env_name: The environment's argument name in errors.

    Returns:
        The `Randomization`, or ``None`` without ``randomization_fn``.

    Raises:
        TypeError: If ``randomization_fn`` is not callable, the environment has no model
            (`model_holder`) or the function does not return a pair.
        ValueError: If ``redraw_every`` is negative or given without a function, or the
            returned model or in_axes do not fit (a field the model lacks, in_axes that
            do not match the model or are not 0/None, a batch other than ``n_envs``, a
            changed shape or dtype); the message names the field and the expected shape.
    """
    if redraw_every is not None and (type(redraw_every) is not int or redraw_every < 0):
        raise ValueError(
            f"redraw_every={redraw_every!r} must be a non-negative int (iterations between "
            "redraws of the randomized models) or None (never)."
        )
    if randomization_fn is None:
        if redraw_every:
            raise ValueError(
                f"redraw_every={redraw_every} redraws randomized models, but "
                "randomization_fn is None: pass randomization_fn=... or drop redraw_every."
            )
        return None
    if not callable(randomization_fn):
        raise TypeError(
            f"randomization_fn={randomization_fn!r} must be a function "
            "(model, rng) -> (batched_model, in_axes), e.g. "
            "mujoco_playground.registry.get_domain_randomizer(name)."
        )
    holder, attribute = model_holder(env, env_name=env_name)
    nominal = getattr(holder, attribute)
    found: list[Any] = []

    def trace(key: jax.Array) -> Any:
        out = randomization_fn(nominal, jax.random.split(key, n_envs))
        if not isinstance(out, tuple | list) or len(out) != 2:
            raise TypeError(
                f"randomization_fn returned a {type(out).__name__}; it must return the "
                "pair (batched_model, in_axes), as brax's and Playground's do."
            )
        found.append(out[1])  # in_axes: Python ints and None, no tracers
        return out[0]

    try:
        shapes = jax.eval_shape(trace, jax.random.PRNGKey(0))
    except (AttributeError, KeyError) as error:
        error.add_note(
            f"(raised by randomization_fn on {env_name}'s model, a "
            f"{type(nominal).__name__} from {env_name}.unwrapped.{attribute}: does it have "
            "the fields the function randomizes?)"
        )
        raise
    _check_fields(nominal, shapes, env_name)
    axes = _axes_by_path(found[0], shapes)
    paths = _check_leaves(nominal, shapes, axes, n_envs, env_name)
    return Randomization(randomization_fn, n_envs, nominal, paths, redraw_every or 0)


def run_randomizations(
    env: Any,
    eval_env: Any,
    randomization_fn: RandomizationFn | None,
    n_envs: int,
    eval_config: EvalConfig,
    *,
    redraw_every: int | None = None,
) -> tuple[Randomization | None, Randomization | None]:
    """The training and the evaluation randomization of a run, checked before anything
    is compiled (`make_randomization`).

    Returns:
        ``(training, evaluation)``: ``training`` for ``env`` and ``n_envs`` (``None``
        without ``randomization_fn``); ``evaluation`` for ``eval_env`` and
        ``eval_config.n_envs`` if ``eval_config.randomized`` and evaluation is enabled,
        else ``None`` (the nominal model).

    Raises:
        ValueError: If ``eval_config.randomized`` is set without ``randomization_fn``,
            or as `make_randomization`.
    """
    training = make_randomization(env, randomization_fn, n_envs, redraw_every=redraw_every)
    if eval_config.randomized and randomization_fn is None:
        raise ValueError(
            "EvalConfig(randomized=True) evaluates on randomized models, but "
            "randomization_fn is None: pass randomization_fn=... or set randomized=False."
        )
    if not (eval_config.enabled and eval_config.randomized):
        return training, None
    evaluation = make_randomization(
        eval_env, randomization_fn, eval_config.n_envs, env_name="eval_env"
    )
    return training, evaluation
