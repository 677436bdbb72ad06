"""Ready-made actor-critic networks.

Both factories return a `Sequential` ending in a
`PPOAdapter`, i.e. an ordinary module that
``train_ppo`` (or your own loop) can use directly and that you can inspect or take
apart like any hand-built network. Both are written on
`nnx_ppo.networks.actor_critic.assemble_actor_critic`, which owns the observation
layers, the sampler and the shared checks:

- `make_mlp_actor_critic`: ``Sequential([Normalizer, PPOAdapter(action=
  Sequential([MLP, sampler]), value=MLP)])``, the network of the spec's minimal example.
- `make_lstm_actor_critic`: the same with an LSTM, either one per port or one
  shared trunk in front of the adapter.
- `make_recurrent_actor_critic`: the same with any memory cell (`LSTM`, `GRU`,
  `MinGRU`, `LRU`, optionally layer-normalised) behind a SimBa-style `ResidualMLP`
  torso.

`make_mlp` and `make_mlp_layers` build plain stacks of `Dense` layers (a `Sequential`,
or the list of layers to splice into one), with nnx-ppo 0.3.0's signatures.

Observations may be an array ``[B, obs_size]``, an array with a multi-dimensional
shape (``obs_size`` a tuple), or a (nested) dict of those (``obs_size`` a dict of
sizes). Non-vector observations are selected (dict keys not in ``obs_size`` are
dropped), normalized per leaf and flattened to one vector (dict keys in sorted order)
before the adapter.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypedDict, Unpack, cast

import jax
from flax import nnx

from nnx_ppo.networks._helpers import check_int
from nnx_ppo.networks.actor_critic import (
    ActionDistribution,
    ActorCriticPorts,
    ObsSize,
    _check_size,
    _is_int,
    assemble_actor_critic,
)
from nnx_ppo.networks.containers import Sequential
from nnx_ppo.networks.feedforward import MLP, Dense
from nnx_ppo.networks.linear_recurrent import LRU, MinGRU
from nnx_ppo.networks.recurrent import GRU, LSTM
from nnx_ppo.networks.residual import ResidualMLP
from nnx_ppo.networks.types import StatefulModule

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

MemoryCell = Literal["lstm", "gru", "mingru", "lru"]
"""The memory of `make_recurrent_actor_critic`: ``"lstm"`` (`LSTM`), ``"gru"`` (`GRU`),
``"mingru"`` (`MinGRU`) or ``"lru"`` (`LRU`); the last two replay in parallel in time."""


# -- validation ---------------------------------------------------------------------------


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


def _check_shared(fn: str, name: str, shared: Any, options: RecurrentOptions) -> None:
    if not isinstance(shared, bool):
        raise TypeError(f"{fn}: {name} must be True or False, got {shared!r}.")
    actor_obs, critic_obs = options.get("actor_obs"), options.get("critic_obs")
    if shared and (actor_obs is not None or critic_obs is not None):
        raise ValueError(
            f"{fn}: {name}=True feeds one memory to both ports, so the actor cannot read "
            f"other keys than the critic (actor_obs={actor_obs!r}, critic_obs="
            f"{critic_obs!r}); use {name}=False for separate actor and critic inputs."
        )


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


class RecurrentOptions(TypedDict, total=False):
    """The keywords `make_lstm_actor_critic` and `make_recurrent_actor_critic` share.

    Both take them as ``**options``; `make_lstm_actor_critic` forwards them to
    `make_recurrent_actor_critic`, which checks them (its errors name it).

    Attributes:
        activation: Hidden activation of the MLP heads and the torso blocks (default
            ``nnx.swish``).
        normalize_obs: Put a `Normalizer` first (default ``True``).
        entropy_weight: The sampler's entropy-bonus weight (default ``1e-2``).
        min_std: The Gaussian samplers' std floor (default ``1e-3``).
        action_distribution: ``"normal_tanh"`` (default), ``"normal"`` or
            ``"categorical"``.
        trainable_initial_state: Learn the cells' initial carry (default ``False``).
        actor_obs: The key(s) of a dict observation the actor reads (default ``None``:
            all), as in `make_mlp_actor_critic`; needs one memory per port.
        critic_obs: The key(s) of a dict observation the critic reads (default
            ``None``: all).
    """

    activation: Callable[[jax.Array], jax.Array]
    normalize_obs: bool
    entropy_weight: float
    min_std: float
    action_distribution: ActionDistribution
    trainable_initial_state: bool
    actor_obs: str | Sequence[str] | None
    critic_obs: str | Sequence[str] | None


def make_lstm_actor_critic(
    obs_size: ObsSize,
    action_size: int,
    lstm_size: int = 128,
    actor_hidden_sizes: Sequence[int] = (64, 64),
    critic_hidden_sizes: Sequence[int] = (256, 256),
    *,
    rngs: nnx.Rngs,
    shared_lstm: bool = False,
    **options: Unpack[RecurrentOptions],
) -> Sequential:
    """A recurrent actor-critic: LSTM memory followed by MLP heads.

    With ``shared_lstm=False`` (the default) each port owns its LSTM, so the critic's
    gradients never reshape the actor's memory::

        Sequential([Normalizer(obs_size), PPOAdapter(
            action=Sequential([LSTM(obs, lstm_size), MLP(lstm_size, actor_hidden, 2A), sampler]),
            value=Sequential([LSTM(obs, lstm_size), MLP(lstm_size, critic_hidden, 1)]),
        )])

    With ``shared_lstm=True`` one LSTM trunk feeds both heads (half the recurrent
    compute; the critic's gradients also train the shared memory)::

        Sequential([Normalizer(obs_size), LSTM(obs, lstm_size), PPOAdapter(
            action=Sequential([MLP(lstm_size, actor_hidden, 2A), sampler]),
            value=MLP(lstm_size, critic_hidden, 1),
        )])

    Observations are handled as in `make_mlp_actor_critic`. The carry holds the
    LSTM states ``{"h": [B, lstm_size], "c": [B, lstm_size]}`` at the matching positions
    and starts at zeros (or learned values with ``trainable_initial_state``). The
    network is ``make_recurrent_actor_critic(obs_size, action_size, lstm_size,
    actor_hidden_sizes, critic_hidden_sizes, rngs=rngs, cell="lstm", torso_blocks=0,
    shared=shared_lstm, **options)``.

    Args:
        obs_size: Observation size (int, tuple shape or dict of those).
        action_size: Action dimensions ``A`` (discrete actions for categorical).
        lstm_size: LSTM hidden width.
        actor_hidden_sizes: Hidden widths of the actor head MLP (``()`` for linear).
        critic_hidden_sizes: Hidden widths of the critic head MLP.
        rngs: Parameter initialization and the sampler's RNG stream.
        shared_lstm: One LSTM for both ports instead of one per port.
        **options: `RecurrentOptions`: ``activation`` (of the MLP heads),
            ``normalize_obs``, ``entropy_weight``, ``min_std``,
            ``action_distribution``, ``trainable_initial_state`` (the LSTMs' initial
            carry), ``actor_obs`` and ``critic_obs`` (need ``shared_lstm=False``).

    Returns:
        The network (see `make_mlp_actor_critic` for the output).

    Raises:
        TypeError: If ``obs_size``, ``rngs`` or a flag has the wrong type.
        ValueError: If a size is not positive or ``action_distribution`` is unknown.

    Examples:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> net = make_lstm_actor_critic(6, 2, 8, (16,), (16,), rngs=nnx.Rngs(0))
        >>> state = net.initialize_state(3)
        >>> state[1]["action"][0]["h"].shape
        (3, 8)
        >>> net(state, jnp.zeros((3, 6))).output.actions.shape
        (3, 2)
    """
    fn = "make_lstm_actor_critic"
    _check_shared(fn, "shared_lstm", shared_lstm, options)
    lstm_size = _check_size(fn, "lstm_size", lstm_size)
    return make_recurrent_actor_critic(
        obs_size, action_size, lstm_size, actor_hidden_sizes, critic_hidden_sizes,
        rngs=rngs, cell="lstm", torso_blocks=0, shared=shared_lstm, **options,
    )  # fmt: skip


_CELLS: dict[str, Callable[..., StatefulModule]] = {
    "lstm": LSTM,
    "gru": GRU,
    "mingru": MinGRU,
    "lru": LRU,
}


def make_recurrent_actor_critic(
    obs_size: ObsSize,
    action_size: int,
    hidden_size: int = 128,
    actor_hidden_sizes: Sequence[int] = (64, 64),
    critic_hidden_sizes: Sequence[int] = (256, 256),
    *,
    rngs: nnx.Rngs,
    cell: MemoryCell = "lstm",
    layer_norm: bool = False,
    torso_size: int | None = None,
    torso_blocks: int = 1,
    shared: bool = False,
    **options: Unpack[RecurrentOptions],
) -> Sequential:
    """A recurrent actor-critic: a residual torso, a memory cell, MLP heads.

    Each port (or, with ``shared=True``, one trunk in front of the adapter) is::

        ResidualMLP(obs, torso_size, n_blocks=torso_blocks)   SimBa-style, post-LN output
        cell(torso_size, hidden_size)                         LSTM | GRU | MinGRU | LRU
        MLP(hidden_size, actor_hidden_sizes | critic_hidden_sizes, ...)

    behind the observation normalizer, laid out as `make_lstm_actor_critic` lays out its
    LSTMs (``shared=False``: one memory per port, so the critic's gradients never
    reshape the actor's). ``cell="mingru"`` and ``cell="lru"`` replay the loss in
    parallel in time (`nnx_ppo.networks.linear_recurrent`); ``layer_norm=True`` builds
    the LayerNorm `LSTM` or `GRU`. With ``torso_blocks=0`` there is no torso: the cell
    reads the observation itself. Observations are handled as in
    `make_mlp_actor_critic`.

    Args:
        obs_size: Observation size (int, tuple shape or dict of those).
        action_size: Action dimensions ``A`` (discrete actions for categorical).
        hidden_size: Width of the cell's output (and of its state, for `LRU`).
        actor_hidden_sizes: Hidden widths of the actor head MLP (``()`` for linear).
        critic_hidden_sizes: Hidden widths of the critic head MLP.
        rngs: Parameter initialization and the sampler's RNG stream.
        cell: The memory, a `MemoryCell` name: ``"lstm"`` (default), ``"gru"``,
            ``"mingru"`` or ``"lru"``.
        layer_norm: Layer-normalise the cell's gates (``"lstm"`` and ``"gru"`` only).
        torso_size: Width of the torso's residual stream (default: ``hidden_size``).
        torso_blocks: Residual blocks of the torso, an int ``>= 0`` (0: no torso).
        shared: One torso and cell for both ports instead of one per port.
        **options: `RecurrentOptions`: ``activation`` (of the torso blocks and the
            heads), ``normalize_obs``, ``entropy_weight``, ``min_std``,
            ``action_distribution``, ``trainable_initial_state`` (the cells' initial
            carry), ``actor_obs`` and ``critic_obs`` (need ``shared=False``).

    Returns:
        The network (see `make_mlp_actor_critic` for the output).

    Raises:
        TypeError: If ``obs_size``, ``rngs`` or a flag has the wrong type.
        ValueError: If a size is not positive, ``cell`` or ``action_distribution`` is
            unknown, ``layer_norm=True`` is asked of a cell without gates to normalise,
            or ``shared=True`` is combined with ``actor_obs`` / ``critic_obs``.

    Examples:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> net = make_recurrent_actor_critic(6, 2, 8, (16,), (16,), rngs=nnx.Rngs(0),
        ...                                   cell="lru")
        >>> [type(layer).__name__ for layer in net.layers[1].action.layers]
        ['ResidualMLP', 'LRU', 'MLP', 'NormalTanhSampler']
        >>> state = net.initialize_state(3)
        >>> state[1]["action"][1]["h_re"].shape
        (3, 8)
        >>> net(state, jnp.zeros((3, 6))).output.actions.shape
        (3, 2)
    """
    fn = "make_recurrent_actor_critic"
    if cell not in _CELLS:
        raise ValueError(
            f"{fn}: cell={cell!r} is not one of {list(_CELLS)}; e.g. cell='lstm', or "
            "cell='lru' for a memory whose loss replay runs in parallel in time."
        )
    if not isinstance(layer_norm, bool):
        raise TypeError(f"{fn}: layer_norm must be True or False, got {layer_norm!r}.")
    if layer_norm and cell not in ("lstm", "gru"):
        raise ValueError(
            f"{fn}: layer_norm=True normalises the gate pre-activations of an LSTM or GRU; "
            f"cell={cell!r} has no recurrent gates to normalise (its input comes "
            "normalised from the torso's final LayerNorm). Use cell='lstm' or cell='gru' "
            "with layer_norm=True, or layer_norm=False."
        )
    _check_shared(fn, "shared", shared, options)
    hidden = _check_size(fn, "hidden_size", hidden_size)
    torso = hidden if torso_size is None else _check_size(fn, "torso_size", torso_size)
    blocks = check_int(fn, "torso_blocks", torso_blocks, minimum=0, example="torso_blocks=1")
    actor_hidden = _check_sizes(fn, "actor_hidden_sizes", actor_hidden_sizes)
    critic_hidden = _check_sizes(fn, "critic_hidden_sizes", critic_hidden_sizes)
    activation = options.get("activation", nnx.swish)
    make_cell = functools.partial(
        _CELLS[cell],
        rngs=rngs,
        trainable_initial_state=options.get("trainable_initial_state", False),
        **({"layer_norm": True} if layer_norm else {}),
    )

    def memory(width: int) -> list[StatefulModule]:
        if not blocks:
            return [make_cell(width, hidden)]
        return [
            ResidualMLP(width, torso, rngs, n_blocks=blocks, activation=activation),
            make_cell(torso, hidden),
        ]

    def ports(
        features: int, action_params: int, value_features: int | None = None
    ) -> ActorCriticPorts:
        # Drawn in this order: the heads, then the memory (the trunk, or action's, value's).
        actor = MLP(hidden, actor_hidden, action_params, rngs=rngs, activation=activation)
        critic = MLP(hidden, critic_hidden, 1, rngs=rngs, activation=activation)
        if shared:
            return ActorCriticPorts(action=actor, value=critic, trunk=memory(features))
        value_in = features if value_features is None else value_features
        return ActorCriticPorts(
            action=[*memory(features), actor], value=[*memory(value_in), critic]
        )

    return assemble_actor_critic(
        ports,
        obs_size,
        action_size,
        rngs=rngs,
        normalize_obs=options.get("normalize_obs", True),
        action_distribution=options.get("action_distribution", "normal_tanh"),
        entropy_weight=options.get("entropy_weight", 1e-2),
        min_std=options.get("min_std", 1e-3),
        caller=fn,
        actor_obs=options.get("actor_obs"),
        critic_obs=options.get("critic_obs"),
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
