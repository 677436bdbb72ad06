"""`assemble_actor_critic`: the one assembly behind every ready-made actor-critic.

Every factory (`nnx_ppo.networks.factories.make_mlp_actor_critic`,
`make_lstm_actor_critic`, nnx-graph's ``make_graph_actor_critic``) builds the same
shape of network and differs only in the layers of its two ports::

    Sequential([*observation layers, *trunk, PPOAdapter(
        action=Sequential([*action, sampler]),
        value=value,                      # or Sequential([*value]) for a list
    )])

`assemble_actor_critic` owns what they share: the checks of ``rngs``,
``normalize_obs``, ``action_distribution``, ``obs_size`` and ``action_size``; the
observation layers (a `Normalizer`, then for a tuple or dict ``obs_size`` the selection
and flattening to one ``[B, F]`` vector); the choice of sampler and the width of the
parameters it takes; and the order of the random draws: the sampler's stream is forked
from ``rngs`` first, then ``ports`` draws the layers' parameters. A factory validates
its own arguments, then passes a function that builds its ports, so a network of your
own gets the same checks and layout in a few lines.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from flax import nnx

from nnx_ppo.networks.adapter import PPOAdapter
from nnx_ppo.networks.containers import Sequential
from nnx_ppo.networks.normalizer import Normalizer
from nnx_ppo.networks.sampling_layers import (
    ActionSampler,
    CategoricalSampler,
    NormalSampler,
    NormalTanhSampler,
)
from nnx_ppo.networks.types import StatefulModule
from nnx_ppo.networks.utils import Filter, Flattener

__all__ = ["ActionDistribution", "ActorCriticPorts", "assemble_actor_critic"]

ActionDistribution = Literal["normal_tanh", "normal", "categorical"]
"""Which sampler ends the action port: ``"normal_tanh"`` (`NormalTanhSampler`,
actions in ``(-1, 1)``), ``"normal"`` (`NormalSampler`, unbounded) or
``"categorical"`` (`CategoricalSampler`, ``action_size`` discrete actions)."""

ObsSize = int | tuple[int, ...] | Mapping[str, Any]
Path = tuple[str, ...]
Layers = StatefulModule | Sequence[StatefulModule]


@dataclasses.dataclass(frozen=True)
class ActorCriticPorts:
    """The layers that make one actor-critic differ from another.

    Attributes:
        action: The action port before its sampler: one module or a sequence of
            layers, mapping the trunk's output to the sampler's parameters
            ``[B, action_params]``.
        value: The value port: one module, used as the port itself, or a sequence of
            layers, put in a `Sequential`; its output is ``[B]`` or ``[B, 1]``.
        trunk: Layers shared by both ports, between the observation layers and the
            `PPOAdapter` (e.g. one recurrent trunk); empty by default.
    """

    action: Layers
    value: Layers
    trunk: Sequence[StatefulModule] = ()


# -- validation ---------------------------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _obs_leaves(fn: str, obs_size: Any, path: Path = ()) -> list[tuple[Path, tuple[int, ...]]]:
    """``obs_size`` as ``[(path, shape)]`` in sorted-key (= Flattener) order."""
    where = f"obs_size[{']['.join(repr(k) for k in path)}]" if path else "obs_size"
    fix = 'pass an int (vector size), a tuple of ints (a shape) or a dict of those, e.g. {"x": 8}'
    if _is_int(obs_size) or (
        isinstance(obs_size, tuple) and obs_size and all(_is_int(d) for d in obs_size)
    ):
        shape = (obs_size,) if _is_int(obs_size) else tuple(obs_size)
        if any(d <= 0 for d in shape):
            raise ValueError(f"{fn}: {where}={obs_size!r} has a non-positive size; {fix}.")
        return [(path, shape)]
    if isinstance(obs_size, Mapping):
        if not obs_size:
            raise ValueError(f"{fn}: {where} is an empty dict; {fix}.")
        leaves = []
        for key in sorted(obs_size):
            if not isinstance(key, str):
                raise TypeError(f"{fn}: {where} has a non-string key {key!r}; {fix}.")
            leaves += _obs_leaves(fn, obs_size[key], (*path, key))
        return leaves
    raise TypeError(f"{fn}: {where}={obs_size!r} ({type(obs_size).__name__}) is invalid; {fix}.")


def _check_size(fn: str, name: str, value: Any) -> int:
    if not _is_int(value) or value <= 0:
        raise ValueError(f"{fn}: {name} must be a positive int, got {value!r}; e.g. {name}=8.")
    return int(value)


def _check_common(fn: str, rngs: Any, action_distribution: Any, normalize_obs: Any) -> None:
    if not isinstance(rngs, nnx.Rngs):
        raise TypeError(
            f"{fn}: rngs must be an nnx.Rngs, got {type(rngs).__name__}; "
            "pass e.g. rngs=nnx.Rngs(0)."
        )
    if action_distribution not in ("normal_tanh", "normal", "categorical"):
        raise ValueError(
            f"{fn}: action_distribution={action_distribution!r} is not one of "
            "'normal_tanh', 'normal', 'categorical'."
        )
    if not isinstance(normalize_obs, bool):
        raise TypeError(f"{fn}: normalize_obs must be True or False, got {normalize_obs!r}.")


# -- building blocks ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _SelectPaths:
    """Pure function keeping only the listed key paths of a nested dict (hashable)."""

    paths: tuple[Path, ...]

    def __call__(self, x: Any) -> Any:
        out: dict[str, Any] = {}
        for path in self.paths:
            node, target = x, out
            for key in path[:-1]:
                node = node[key]
                target = target.setdefault(key, {})
            target[path[-1]] = node[path[-1]]
        return out


def _obs_layers(
    fn: str, obs_size: ObsSize, normalize_obs: bool
) -> tuple[list[StatefulModule], int]:
    """The layers mapping raw observations to one ``[B, F]`` vector, and ``F``."""
    leaves = _obs_leaves(fn, obs_size)
    features = sum(math.prod(shape) for _, shape in leaves)
    layers: list[StatefulModule] = [Normalizer(obs_size)] if normalize_obs else []
    if isinstance(obs_size, Mapping):
        layers.append(Filter(_SelectPaths(tuple(path for path, _ in leaves))))
    if isinstance(obs_size, Mapping | tuple):
        layers.append(Flattener())
    return layers, features


def _sampler(
    action_distribution: str,
    rngs: nnx.Rngs,
    entropy_weight: float,
    min_std: float,
    std_scale: float = 1.0,
) -> tuple[ActionSampler, int]:
    """The sampler and how many parameters per action dimension it takes."""
    if action_distribution == "categorical":
        return CategoricalSampler(rngs, entropy_weight), 1
    cls = NormalTanhSampler if action_distribution == "normal_tanh" else NormalSampler
    return cls(rngs, entropy_weight, min_std, std_scale), 2


def _layers(port: Layers) -> list[StatefulModule]:
    return [port] if isinstance(port, StatefulModule) else list(port)


# -- the assembly -------------------------------------------------------------------------


def assemble_actor_critic(
    ports: Callable[[int, int], ActorCriticPorts],
    obs_size: ObsSize,
    action_size: int,
    *,
    rngs: nnx.Rngs,
    normalize_obs: bool = True,
    action_distribution: ActionDistribution = "normal_tanh",
    entropy_weight: float = 1e-2,
    min_std: float = 1e-3,
    std_scale: float = 1.0,
    caller: str = "assemble_actor_critic",
) -> Sequential:
    """An actor-critic from the layers of its ports, with the factories' checks.

    Builds::

        Sequential([
            Normalizer(obs_size),            # if normalize_obs
            *selection and flattening,       # for a tuple or dict obs_size
            *ports.trunk,
            PPOAdapter(action=Sequential([*ports.action, sampler]), value=ports.value),
        ])

    in this order: the arguments are checked, the sampler's RNG stream is forked from
    ``rngs``, then ``ports(features, action_params)`` builds the layers (drawing their
    parameters from the same ``rngs``). ``features`` is the width ``F`` of the
    observation vector the trunk (or the ports) receive, ``action_params`` the width
    the action port must output: ``2 * action_size`` (mean and std) for the Gaussian
    samplers, ``action_size`` (logits) for ``"categorical"``.

    Args:
        ports: ``ports(features, action_params) -> ActorCriticPorts``, called once.
        obs_size: Observation size: an int (``[B, obs_size]``), a tuple shape, or a
            (nested) dict of those for dict observations (keys not listed are dropped;
            the leaves are flattened in sorted-key order).
        action_size: Action dimensions ``A`` (the number of discrete actions for
            ``action_distribution="categorical"``).
        rngs: The sampler's RNG stream is forked from it, before ``ports`` runs.
        normalize_obs: Put a `Normalizer` first.
        action_distribution: ``"normal_tanh"``, ``"normal"`` or ``"categorical"``.
        entropy_weight: The sampler's entropy-bonus weight.
        min_std: The Gaussian samplers' std floor (ignored for categorical).
        std_scale: Multiplies the Gaussian samplers' std (ignored for categorical).
        caller: The name error messages start with (a factory passes its own).

    Returns:
        The network; called as ``network(state, obs)`` it returns a
        `PPONetworkOutput` with actions ``[B, A]`` (``[B]`` int32 for categorical),
        log-likelihoods ``[B]`` and values ``[B]``.

    Raises:
        TypeError: If ``obs_size``, ``rngs`` or ``normalize_obs`` has the wrong type,
            or ``ports`` does not return an `ActorCriticPorts`.
        ValueError: If a size is not positive or ``action_distribution`` is unknown.

    Examples:
        A one-layer actor and critic behind a normalizer:

        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from nnx_ppo.networks.feedforward import Dense
        >>> rngs = nnx.Rngs(0)
        >>> def ports(features, action_params):
        ...     return ActorCriticPorts(
        ...         action=Dense(features, action_params, rngs=rngs),
        ...         value=Dense(features, 1, rngs=rngs),
        ...     )
        >>> net = assemble_actor_critic(ports, 3, 2, rngs=rngs)
        >>> [type(layer).__name__ for layer in net.layers]
        ['Normalizer', 'PPOAdapter']
        >>> net.layers[1].action.layers[0].out_features  # mean and std of 2 actions
        4
        >>> out = net(net.initialize_state(5), jnp.zeros((5, 3))).output
        >>> out.actions.shape, out.value_estimates.shape
        ((5, 2), (5,))
    """
    _check_common(caller, rngs, action_distribution, normalize_obs)
    layers, features = _obs_layers(caller, obs_size, normalize_obs)
    action_size = _check_size(caller, "action_size", action_size)
    sampler, params_per_action = _sampler(
        action_distribution, rngs, entropy_weight, min_std, std_scale
    )
    built = ports(features, params_per_action * action_size)
    if not isinstance(built, ActorCriticPorts):
        raise TypeError(
            f"{caller}: ports(features, action_params) must return an ActorCriticPorts, "
            f"got {type(built).__name__}; return ActorCriticPorts(action=..., value=...)."
        )
    value = built.value
    adapter = PPOAdapter(
        action=Sequential([*_layers(built.action), sampler]),
        value=value if isinstance(value, StatefulModule) else Sequential(list(value)),
    )
    return Sequential([*layers, *built.trunk, adapter])
