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
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, cast

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


def _check_sizes(fn: str, name: str, value: Any) -> tuple[int, ...]:
    if (
        isinstance(value, str | bytes)
        or not isinstance(value, Sequence)
        or not all(_is_int(v) and v > 0 for v in value)
    ):
        raise ValueError(
            f"{fn}: {name} must be a sequence of positive ints (hidden layer widths), got "
            f"{value!r}; e.g. {name}=(64, 64), or () for no hidden layer."
        )
    return tuple(int(v) for v in value)


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


def _port_keys(fn: str, name: str, value: Any, obs_size: Mapping[str, Any]) -> tuple[str, ...]:
    """The top-level keys of ``obs_size`` a port reads (``None``: all of them)."""
    available = sorted(obs_size)
    if value is None:
        return tuple(available)
    keys = (value,) if isinstance(value, str) else value
    if not isinstance(keys, Sequence) or not all(isinstance(k, str) for k in keys):
        raise TypeError(
            f"{fn}: {name}={value!r} must be a key of the dict observation or a sequence "
            f"of keys, e.g. {name}={available[0]!r}; the observation has the keys {available}."
        )
    keys = tuple(keys)
    missing = [k for k in keys if k not in obs_size]
    if not keys or missing or len(set(keys)) != len(keys):
        raise ValueError(
            f"{fn}: {name}={value!r} must name distinct keys of the observation, at least "
            f"one; not in the observation: {missing}; the observation has the keys "
            f"{available}."
        )
    return tuple(sorted(keys))


def _port_input(
    fn: str, obs_size: Mapping[str, Any], keys: Sequence[str]
) -> tuple[list[StatefulModule], int]:
    """The layers that select ``keys`` of the (normalized) observation and flatten them."""
    leaves = _obs_leaves(fn, {k: obs_size[k] for k in keys})
    features = sum(math.prod(shape) for _, shape in leaves)
    return [Filter(_SelectPaths(tuple(path for path, _ in leaves))), Flattener()], features


def _takes_value_features(ports: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(ports).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: let the call decide
        return True
    return any(
        p.name == "value_features" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params
    )


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
    actor_obs: str | Sequence[str] | None = None,
    critic_obs: str | Sequence[str] | None = None,
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

    **Separate actor and critic observations** (an asymmetric, "privileged" critic).
    With ``actor_obs`` or ``critic_obs`` set, ``obs_size`` must be a dict and each port
    reads only its own top-level keys::

        Sequential([
            Normalizer({keys either port reads}),      # if normalize_obs
            PPOAdapter(
                action=Sequential([select actor_obs, Flattener(), *ports.action, sampler]),
                value=Sequential([select critic_obs, Flattener(), *ports.value]),
            ),
        ])

    ``ports`` is then called as ``ports(features, action_params,
    value_features=critic_features)``, ``features`` being the width of the actor's
    flattened keys; it must accept that keyword and return no trunk (a shared trunk
    would feed the critic's keys to the actor). The actions never depend on a key only
    the critic reads, so `nnx_ppo.networks.export.DeterministicPolicy` (and every
    exported artefact) leaves such a key out of the policy's inputs.

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
        actor_obs: The top-level key(s) of a dict observation the actor reads, e.g.
            ``"state"``; ``None`` (default): every key of ``obs_size``.
        critic_obs: The key(s) the critic reads, e.g. ``("state",
            "privileged_state")``; ``None`` (default): every key of ``obs_size``.

    Returns:
        The network; called as ``network(state, obs)`` it returns a
        `PPONetworkOutput` with actions ``[B, A]`` (``[B]`` int32 for categorical),
        log-likelihoods ``[B]`` and values ``[B]``.

    Raises:
        TypeError: If ``obs_size``, ``rngs`` or ``normalize_obs`` has the wrong type,
            or ``ports`` does not return an `ActorCriticPorts`.
        ValueError: If a size is not positive, ``action_distribution`` is unknown,
            ``actor_obs`` / ``critic_obs`` names a key ``obs_size`` does not have (the
            message lists the keys it has) or is given for a non-dict ``obs_size``, or
            ``ports`` returns a trunk for separate actor and critic observations.

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
    split = actor_obs is not None or critic_obs is not None
    if split:  # each port selects and flattens its own keys after the normalizer
        layers, (actor_in, features), (critic_in, value_features) = _split_inputs(
            caller, obs_size, normalize_obs, actor_obs, critic_obs
        )
    else:
        layers, features = _obs_layers(caller, obs_size, normalize_obs)
        actor_in, critic_in, value_features = [], [], None
    action_size = _check_size(caller, "action_size", action_size)
    sampler, params_per_action = _sampler(
        action_distribution, rngs, entropy_weight, min_std, std_scale
    )
    action_params = params_per_action * action_size
    if not split:
        call = "ports(features, action_params)"
        built = ports(features, action_params)
    elif _takes_value_features(ports):
        call = "ports(features, action_params, value_features=...)"
        with_value_features = cast(Callable[..., ActorCriticPorts], ports)
        built = with_value_features(features, action_params, value_features=value_features)
    else:
        raise TypeError(
            f"{caller}: with actor_obs / critic_obs the ports function is called as "
            "ports(features, action_params, value_features=...), the critic's input "
            "width; add the keyword value_features to it."
        )
    if not isinstance(built, ActorCriticPorts):
        raise TypeError(
            f"{caller}: {call} must return an ActorCriticPorts, got {type(built).__name__}; "
            "return ActorCriticPorts(action=..., value=...)."
        )
    if split and built.trunk:
        raise ValueError(
            f"{caller}: ports returned a trunk, but with actor_obs={actor_obs!r} / "
            f"critic_obs={critic_obs!r} the actor and the critic read different keys, and a "
            "shared trunk would feed the critic's keys to the actor; put the layers in "
            "each port instead (e.g. shared_lstm=False)."
        )
    value = built.value
    if split or not isinstance(value, StatefulModule):
        value = Sequential([*critic_in, *_layers(value)])
    adapter = PPOAdapter(
        action=Sequential([*actor_in, *_layers(built.action), sampler]), value=value
    )
    return Sequential([*layers, *built.trunk, adapter])


def _split_inputs(
    caller: str,
    obs_size: ObsSize,
    normalize_obs: bool,
    actor_obs: str | Sequence[str] | None,
    critic_obs: str | Sequence[str] | None,
) -> tuple[
    list[StatefulModule], tuple[list[StatefulModule], int], tuple[list[StatefulModule], int]
]:
    """For each port reading its own keys of a dict observation: the shared observation
    layers (the normalizer of every key read), and per port the layers selecting and
    flattening its keys with their width, ``(actor_in, F_actor)`` and ``(critic_in,
    F_critic)``."""
    if not isinstance(obs_size, Mapping):
        raise ValueError(
            f"{caller}: actor_obs={actor_obs!r} / critic_obs={critic_obs!r} select keys of "
            f"a dict observation, but obs_size={obs_size!r} is not a dict; pass the env's "
            'dict observation_size (e.g. {"state": 8, "privileged_state": 12}) or leave '
            "actor_obs and critic_obs unset."
        )
    _obs_leaves(caller, obs_size)  # the sizes' own checks first
    actor_keys = _port_keys(caller, "actor_obs", actor_obs, obs_size)
    critic_keys = _port_keys(caller, "critic_obs", critic_obs, obs_size)
    read = {k: obs_size[k] for k in sorted({*actor_keys, *critic_keys})}
    layers: list[StatefulModule] = [Normalizer(read)] if normalize_obs else []
    return (
        layers,
        _port_input(caller, obs_size, actor_keys),
        _port_input(caller, obs_size, critic_keys),
    )
