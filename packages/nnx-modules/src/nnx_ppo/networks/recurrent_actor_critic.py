"""Ready-made recurrent actor-critics: a memory cell per port (or one shared trunk).

- `make_recurrent_actor_critic`: a SimBa-style `ResidualMLP` torso, then any memory
  cell (`LSTM`, `GRU`, `MinGRU`, `LRU`, optionally layer-normalised), then MLP heads.
- `make_lstm_actor_critic`: the same with an LSTM and no torso, either one per port or
  one shared trunk in front of the adapter.

`MemoryCell` names the cells and `RecurrentOptions` the keywords both factories share.
Both are written on `nnx_ppo.networks.actor_critic.assemble_actor_critic`, which owns
the observation layers, the sampler and the shared checks; observations are handled as
in `nnx_ppo.networks.factories.make_mlp_actor_critic`. `nnx_ppo.networks.factories`
re-exports every name here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypedDict, Unpack

import jax
from flax import nnx

from nnx_ppo.networks._helpers import check_int
from nnx_ppo.networks.actor_critic import (
    ActionDistribution,
    ActorCriticPorts,
    ObsSize,
    _check_size,
    _check_sizes,
    assemble_actor_critic,
)
from nnx_ppo.networks.containers import Sequential
from nnx_ppo.networks.feedforward import MLP
from nnx_ppo.networks.linear_recurrent import LRU, MinGRU
from nnx_ppo.networks.recurrent import GRU, LSTM
from nnx_ppo.networks.residual import ResidualMLP
from nnx_ppo.networks.types import StatefulModule

__all__ = [
    "MemoryCell",
    "RecurrentOptions",
    "make_lstm_actor_critic",
    "make_recurrent_actor_critic",
]

MemoryCell = Literal["lstm", "gru", "mingru", "lru"]
"""The memory of `make_recurrent_actor_critic`: ``"lstm"`` (`LSTM`), ``"gru"`` (`GRU`),
``"mingru"`` (`MinGRU`) or ``"lru"`` (`LRU`); the last two replay in parallel in time."""


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
