"""Ready-made actor-critic networks.

Every factory returns a `Sequential` ending in a
`PPOAdapter`, i.e. an ordinary module that
``train_ppo`` (or your own loop) can use directly and that you can inspect or take
apart like any hand-built network. All are written on
`nnx_ppo.networks.actor_critic.assemble_actor_critic`, which owns the observation
layers, the sampler and the shared checks:

- `make_mlp_actor_critic`: ``Sequential([Normalizer, PPOAdapter(action=
  Sequential([MLP, sampler]), value=MLP)])``, the network of the spec's minimal example.
- `make_lstm_actor_critic`: the same with an LSTM, either one per port or one
  shared trunk in front of the adapter.
- `make_recurrent_actor_critic`: the same with any memory cell (`LSTM`, `GRU`,
  `MinGRU`, `LRU`, optionally layer-normalised) behind a SimBa-style `ResidualMLP`
  torso.

The two recurrent factories, with `MemoryCell` and `RecurrentOptions`, are defined in
`nnx_ppo.networks.recurrent_actor_critic` and re-exported here, so every factory can be
imported from this module.

`make_mlp` and `make_mlp_layers` build plain stacks of `Dense` layers (a `Sequential`,
or the list of layers to splice into one), with nnx-ppo 0.3.0's signatures.

Observations may be an array ``[B, obs_size]``, an array with a multi-dimensional
shape (``obs_size`` a tuple), or a (nested) dict of those (``obs_size`` a dict of
sizes). Non-vector observations are selected (dict keys not in ``obs_size`` are
dropped), normalized per leaf and flattened to one vector (dict keys in sorted order)
before the adapter.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any, cast

import jax
from flax import nnx

from nnx_ppo.networks.actor_critic import (
    ActionDistribution,
    ActorCriticPorts,
    ObsSize,
    _check_sizes,
    assemble_actor_critic,
)
from nnx_ppo.networks.containers import Sequential
from nnx_ppo.networks.feedforward import MLP, Dense
from nnx_ppo.networks.recurrent_actor_critic import (
    MemoryCell,
    RecurrentOptions,
    make_lstm_actor_critic,
    make_recurrent_actor_critic,
)

__all__ = [
    "ActionDistribution",
    "MemoryCell",
    "RecurrentOptions",
    "make_lstm_actor_critic",
    "make_mlp",
    "make_mlp_actor_critic",
    "make_mlp_layers",
    "make_recurrent_actor_critic",
]


# -- validation ---------------------------------------------------------------------------


_ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "relu": nnx.relu,
    "swish": nnx.swish,
    "silu": nnx.silu,
    "tanh": nnx.tanh,
    "elu": nnx.elu,
    "gelu": nnx.gelu,
}


def _activation(fn: str, activation: Any) -> Callable[[jax.Array], jax.Array]:
    """A callable activation, or one named as in nnx-ppo 0.3.0 (``"relu"``, ...)."""
    if isinstance(activation, str):
        if activation not in _ACTIVATIONS:
            raise ValueError(
                f"{fn}: activation={activation!r} is not a known name; use one of "
                f"{sorted(_ACTIVATIONS)} or pass a callable such as nnx.swish."
            )
        return _ACTIVATIONS[activation]
    if not callable(activation):
        raise TypeError(
            f"{fn}: activation must be a callable (e.g. nnx.swish) or a name such as "
            f"'relu', got {activation!r} of type {type(activation).__name__}."
        )
    return activation  # type: ignore[no-any-return]


def _kernel_init(fn: str, initializer_scale: Any) -> dict[str, Any]:
    """``kernel_init`` for ``initializer_scale`` (nnx-ppo's fan-in uniform scaling)."""
    if initializer_scale is None:
        return {}
    if isinstance(initializer_scale, bool) or not isinstance(initializer_scale, int | float):
        raise TypeError(
            f"{fn}: initializer_scale must be a positive float or None, got {initializer_scale!r}."
        )
    if not (initializer_scale > 0 and math.isfinite(initializer_scale)):
        raise ValueError(
            f"{fn}: initializer_scale must be positive and finite, got {initializer_scale!r}; "
            "e.g. initializer_scale=1.0, or None for the default (LeCun normal) init."
        )
    init = nnx.initializers.variance_scaling(float(initializer_scale), "fan_in", "uniform")
    return {"kernel_init": init}


# -- factories ----------------------------------------------------------------------------


def make_mlp_actor_critic(
    obs_size: ObsSize,
    action_size: int,
    actor_hidden_sizes: Sequence[int] = (32,) * 4,
    critic_hidden_sizes: Sequence[int] = (256,) * 5,
    rngs: nnx.Rngs | None = None,
    activation: Callable[[jax.Array], jax.Array] | str = nnx.swish,
    normalize_obs: bool = True,
    initializer_scale: float | None = None,
    entropy_weight: float = 1e-2,
    min_std: float = 1e-3,
    std_scale: float = 1.0,
    *,
    action_distribution: ActionDistribution = "normal_tanh",
    actor_obs: str | Sequence[str] | None = None,
    critic_obs: str | Sequence[str] | None = None,
) -> Sequential:
    """An MLP actor and an MLP critic behind an observation normalizer.

    For a vector observation the result is exactly the spec's minimal network::

        Sequential([
            Normalizer(obs_size),
            PPOAdapter(
                action=Sequential([MLP(obs_size, actor_hidden_sizes, 2 * action_size),
                                   NormalTanhSampler(rngs, entropy_weight, min_std)]),
                value=MLP(obs_size, critic_hidden_sizes, 1),
            ),
        ])

    A tuple or dict ``obs_size`` adds the selection / flattening layers described in
    the module docstring after the normalizer; ``normalize_obs=False`` drops the
    normalizer.

    For a dict observation, ``actor_obs`` and ``critic_obs`` give each port its own
    keys: a privileged critic reads ``critic_obs=("state", "privileged_state")`` while
    the actor reads ``actor_obs="state"``, and the exported policy then takes the
    actor's keys only (see `assemble_actor_critic` for the layout).

    Args:
        obs_size: Observation size: an int (``[B, obs_size]``), a tuple shape, or a
            (nested) dict of those for dict observations.
        action_size: Action dimensions ``A`` (the number of discrete actions for
            ``action_distribution="categorical"``).
        actor_hidden_sizes: Hidden widths of the actor MLP.
        critic_hidden_sizes: Hidden widths of the critic MLP.
        rngs: Parameter initialization and the sampler's RNG stream (required; by
            keyword or, as in nnx-ppo 0.3.0, fifth positional argument).
        activation: Hidden activation of both MLPs: a callable, or one of the names
            ``"relu"``, ``"swish"``, ``"silu"``, ``"tanh"``, ``"elu"``, ``"gelu"``.
        normalize_obs: Put a `Normalizer` first.
        initializer_scale: ``None`` (default): every kernel starts LeCun normal. A
            float ``s``: every kernel starts from
            ``variance_scaling(s, "fan_in", "uniform")``, nnx-ppo 0.3.0's
            initialisation (its default is ``s = 1.0``).
        entropy_weight: The sampler's entropy-bonus weight.
        min_std: The Gaussian samplers' std floor (ignored for categorical).
        std_scale: Multiplies the Gaussian samplers' std (ignored for categorical).
        action_distribution: ``"normal_tanh"``, ``"normal"`` or ``"categorical"``.
        actor_obs: The key(s) of a dict observation the actor reads (``None``: all).
        critic_obs: The key(s) of a dict observation the critic reads (``None``: all).

    Returns:
        The network; called as ``network(state, obs)`` it returns a
        `PPONetworkOutput` with actions ``[B, A]``
        (``[B]`` int32 for categorical), log-likelihoods ``[B]`` and values ``[B]``.

    Raises:
        TypeError: If ``obs_size`` or ``rngs`` has the wrong type.
        ValueError: If a size is not positive, ``action_distribution`` is unknown, or
            ``actor_obs`` / ``critic_obs`` names a key the observation does not have.

    Examples:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> net = make_mlp_actor_critic({"pos": 3, "vel": 2}, 2, (16,), (16,), rngs=nnx.Rngs(0))
        >>> obs = {"pos": jnp.zeros((4, 3)), "vel": jnp.zeros((4, 2))}
        >>> out = net(net.initialize_state(4), obs).output
        >>> out.actions.shape, out.loglikelihoods.shape, out.value_estimates.shape
        ((4, 2), (4,), (4,))

        A privileged critic: the actor reads ``"state"``, the critic both keys.

        >>> sizes = {"state": 3, "privileged_state": 5}
        >>> net = make_mlp_actor_critic(sizes, 2, (16,), (16,), rngs=nnx.Rngs(0),
        ...                             actor_obs="state",
        ...                             critic_obs=("state", "privileged_state"))
        >>> adapter = net.layers[-1]
        >>> adapter.action.layers[2].in_features, adapter.value.layers[2].in_features
        (3, 8)
    """
    fn = "make_mlp_actor_critic"
    activation = _activation(fn, activation)
    init = _kernel_init(fn, initializer_scale)
    actor_hidden = _check_sizes(fn, "actor_hidden_sizes", actor_hidden_sizes)
    critic_hidden = _check_sizes(fn, "critic_hidden_sizes", critic_hidden_sizes)
    rngs = cast(nnx.Rngs, rngs)  # checked by assemble_actor_critic before ports runs

    def ports(
        features: int, action_params: int, value_features: int | None = None
    ) -> ActorCriticPorts:
        value_in = features if value_features is None else value_features
        actor = MLP(features, actor_hidden, action_params, rngs=rngs, activation=activation, **init)
        critic = MLP(value_in, critic_hidden, 1, rngs=rngs, activation=activation, **init)
        return ActorCriticPorts(action=actor, value=critic)

    return assemble_actor_critic(
        ports,
        obs_size,
        action_size,
        rngs=rngs,
        normalize_obs=normalize_obs,
        action_distribution=action_distribution,
        entropy_weight=entropy_weight,
        min_std=min_std,
        std_scale=std_scale,
        caller=fn,
        actor_obs=actor_obs,
        critic_obs=critic_obs,
    )


def make_mlp_layers(
    sizes: Sequence[int],
    rngs: nnx.Rngs,
    activation: Callable[[jax.Array], jax.Array] | str = nnx.relu,
    activation_last_layer: bool = True,
    **linear_kwargs: Any,
) -> list[Dense]:
    """The `Dense` layers of an MLP, to splice into a `Sequential` of your own.

    ``sizes`` lists every width, input and output included: ``[4, 32, 2]`` gives
    ``Dense(4, 32)`` and ``Dense(32, 2)``. Every layer applies ``activation``, the last
    one only if ``activation_last_layer`` (nnx-ppo 0.3.0's signature and defaults).

    Args:
        sizes: At least two positive ints: the input width, the hidden widths, the
            output width.
        rngs: Random streams for the initialisers.
        activation: A callable or a name (``"relu"``, ``"swish"``, ``"tanh"``, ...).
        activation_last_layer: Whether the last layer applies ``activation`` too.
        **linear_kwargs: Passed on to every `nnx.Linear` (``kernel_init``, ...).

    Returns:
        ``len(sizes) - 1`` `Dense` layers.

    Raises:
        ValueError: If ``sizes`` has fewer than two entries or a size is not positive.
        TypeError: If ``rngs`` or ``activation`` has the wrong type.

    Examples:
        >>> from flax import nnx
        >>> from nnx_ppo.networks.containers import Sequential
        >>> from nnx_ppo.networks.utils import Flattener
        >>> net = Sequential([Flattener(), *make_mlp_layers([6, 16, 2], nnx.Rngs(0))])
        >>> [type(layer).__name__ for layer in net.layers]
        ['Flattener', 'Dense', 'Dense']
    """
    fn = "make_mlp_layers"
    widths = _check_sizes(fn, "sizes", sizes)
    if len(widths) < 2:
        raise ValueError(
            f"{fn}: sizes must list the input and output widths (at least two ints), got "
            f"{sizes!r}; e.g. sizes=[obs_size, 64, action_size]."
        )
    if not isinstance(rngs, nnx.Rngs):
        raise TypeError(
            f"{fn}: rngs must be an nnx.Rngs, got {type(rngs).__name__}; pass e.g. nnx.Rngs(0)."
        )
    act = _activation(fn, activation)
    if not isinstance(activation_last_layer, bool):
        raise TypeError(
            f"{fn}: activation_last_layer must be True or False, got {activation_last_layer!r}."
        )
    last = len(widths) - 2
    return [
        Dense(
            d_in, d_out, rngs, act if (i < last or activation_last_layer) else None, **linear_kwargs
        )
        for i, (d_in, d_out) in enumerate(itertools.pairwise(widths))
    ]


def make_mlp(
    sizes: Sequence[int],
    rngs: nnx.Rngs,
    activation: Callable[[jax.Array], jax.Array] | str = nnx.relu,
    activation_last_layer: bool = True,
    **linear_kwargs: Any,
) -> Sequential:
    """An MLP as a `Sequential` of `Dense` layers (nnx-ppo 0.3.0's ``make_mlp``).

    The layers are ``make_mlp_layers(sizes, rngs, activation, activation_last_layer,
    **linear_kwargs)``. Mind the defaults (ReLU, and the last layer activated too),
    which differ from `MLP`'s (swish, last layer linear). In a `Sequential` every
    layer's output keeps its own path: `nnx_ppo.networks.recording.with_recording`
    records them under ``0``, ``1``, ...

    Args:
        sizes: At least two positive ints: the input width, the hidden widths, the
            output width.
        rngs: Random streams for the initialisers.
        activation: A callable or a name (``"relu"``, ``"swish"``, ``"tanh"``, ...).
        activation_last_layer: Whether the last layer applies ``activation`` too.
        **linear_kwargs: Passed on to every `nnx.Linear`.

    Returns:
        ``Sequential(make_mlp_layers(...))``; its carry is a list of ``()``.

    Raises:
        ValueError: If ``sizes`` has fewer than two entries or a size is not positive.
        TypeError: If ``rngs`` or ``activation`` has the wrong type.

    Examples:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> mlp = make_mlp([3, 8, 2], nnx.Rngs(0), activation_last_layer=False)
        >>> mlp(mlp.initialize_state(5), jnp.ones((5, 3))).output.shape
        (5, 2)
    """
    return Sequential(
        make_mlp_layers(sizes, rngs, activation, activation_last_layer, **linear_kwargs)
    )
