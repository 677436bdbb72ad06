"""Recording what a network's modules compute, without changing the network.

Two tools, one idea: the network being trained is never modified, so recording costs
nothing when it is not asked for.

**Activations** (for analysis, e.g. of a trained policy's units). `with_recording`
returns a *recording copy* of a network: the same modules and the same parameter
variables (shared, not copied; training the original changes the copy), with every
leaf module wrapped in a `Recorder`. A `Recorder` calls its module unchanged and puts
the module's activation into the returned ``metrics`` under `ACTIVATION_KEY`. The
containers already nest their children's metrics by child key (``Sequential`` by
integer position, ``Parallel`` / ``Concat`` / ``Map`` / ``Merge`` by name,
``PPOAdapter`` by port), so the activations arrive at the top-level call at the path of
their module in the container tree, where `extract_activations` collects them::

    recording = with_recording(network)
    out = recording(state, obs)                  # the same output as network(state, obs)
    acts = extract_activations(out.metrics)      # {0: [B, ...], 1: {"action": {...}}}

What a module's activation is:

- a leaf module: its ``output``, ``[B, ...]`` (an `LSTM`'s new hidden state ``h``);
- an `MLP`: ``{i: output of layer i}`` for each of its `Dense` layers (the hidden layers
  and the final one), as if it were a ``Sequential`` of `Dense` layers;
- a population graph (any module with a boolean ``record_populations`` attribute, i.e.
  ``PopulationGraph``): ``{population: [B, size]}``, every population's output after
  its activation function.

Because the activations ride the ordinary ``metrics`` channel, recording works under
``jax.jit``, ``jax.vmap`` and inside ``jax.lax.scan`` (stack them as the scan's
per-step output, as ``nnx_ppo.algorithms.observe.activations.record_activations_rollout`` does),
and in loss replay (``replay_sequence``: ``[T, B, ...]``). A recording copy computes the
same arrays as the original; it only returns more. Its memory cost is what it returns:
one array per recorded unit per call, i.e. the sum of the module output sizes times the
batch (times ``T`` when stacked over time).

**Sampler calls** (for tools that must find where each action sampler's action ends up,
e.g. the trainer's distillation pairing). `record_sampler_calls` is a context manager:
while it is active, every `ActionSampler` call appends a `SamplerCall` (the sampler and
its `StatefulModuleOutput`) to the list it yields; the samplers report themselves, so
it works on the original network and on a recording copy alike. Use it while tracing a
network once (e.g. under ``jax.eval_shape``). The samplers own this record (it is
defined in `nnx_ppo.networks.sampling_layers`, and re-exported here).

Examples:
    >>> import jax, jax.numpy as jnp
    >>> from flax import nnx
    >>> from nnx_ppo.networks.factories import make_mlp_actor_critic
    >>> from nnx_ppo.networks.recording import (
    ...     extract_activations, record_sampler_calls, with_recording)
    >>> net = make_mlp_actor_critic(3, 2, (8,), (8,), rngs=nnx.Rngs(0))
    >>> with record_sampler_calls() as calls:
    ...     out = net(net.initialize_state(4), jnp.zeros((4, 3)))
    >>> [type(c.sampler).__name__ for c in calls]
    ['NormalTanhSampler']
    >>> calls[0].output.output["action"] is out.output.actions
    True
    >>> recording = with_recording(net)
    >>> acts = extract_activations(recording(net.initialize_state(4), jnp.zeros((4, 3))).metrics)
    >>> acts[1]["action"][0][0].shape, acts[1]["value"][1].shape   # actor hidden, critic out
    ((4, 8), (4, 1))
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from nnx_ppo.networks._routing import NamedContainer
from nnx_ppo.networks.containers import Sequential
from nnx_ppo.networks.feedforward import MLP
from nnx_ppo.networks.sampling_layers import (
    SamplerCall,
    record_sampler_call,
    record_sampler_calls,
)
from nnx_ppo.networks.types import (
    ACTIVATION_KEY,
    ModuleState,
    StatefulModule,
    StatefulModuleOutput,
)

__all__ = [
    "ACTIVATION_KEY",
    "Recorder",
    "SamplerCall",
    "extract_activations",
    "flatten_activations",
    "is_recording",
    "record_sampler_call",
    "record_sampler_calls",
    "with_recording",
]


# --------------------------------------------------------------------------------------
# Activations
# --------------------------------------------------------------------------------------


class Recorder(StatefulModule):
    """Wraps one module and adds its activation to the metrics of each call.

    Everything else is the wrapped module's: ``next_state``, ``output``,
    ``regularization_loss``, ``rollout_extras`` and its own metrics are returned
    unchanged (the same arrays), and `initialize_state`, `reset_state`,
    `update_statistics` and ``train()`` / ``eval()`` act on the wrapped module. The
    activation (see the module docstring: the output, an `MLP`'s per-layer outputs, or
    a graph's populations) is added as ``metrics[ACTIVATION_KEY]``.

    `with_recording` wraps every leaf of a network; wrap a module yourself to record
    only it, e.g. inside a custom module whose children the containers do not route.

    Args:
        wrapped: The module to record, a `StatefulModule` that is not already a
            `Recorder`.

    Raises:
        TypeError: If ``wrapped`` is not a `StatefulModule`.
        ValueError: If ``wrapped`` is already a `Recorder`.

    Attributes:
        wrapped: The recorded module (parameters are its own, not copies).
    """

    def __init__(self, wrapped: StatefulModule) -> None:
        if isinstance(wrapped, Recorder):
            raise ValueError(
                "Recorder: the module is already a Recorder (recording it twice would "
                "nest its activation); pass the Recorder itself where you need it."
            )
        if not isinstance(wrapped, StatefulModule):
            raise TypeError(
                f"Recorder: wrapped must be a StatefulModule, got {type(wrapped).__name__}; "
                "wrap plain functions or nnx layers in a StatelessModule first."
            )
        self.wrapped = wrapped

    def __call__(
        self, state: ModuleState, x: Any, rollout_extras: Any = None
    ) -> StatefulModuleOutput:
        """Call the wrapped module and add its activation to the metrics.

        Args:
            state: The wrapped module's carry, leaves ``[B, ...]``.
            x: Its input, leaves ``[B, ...]``.
            rollout_extras: ``None`` (rollout / inference) or what it emitted (replay).

        Returns:
            The wrapped module's `StatefulModuleOutput` with
            ``metrics[ACTIVATION_KEY]`` added (leaves ``[B, ...]``).
        """
        if _is_mlp(self.wrapped):
            return self._mlp_call(state, x)
        out = self.wrapped(state, x, rollout_extras)
        return _with_activation(self.wrapped, out)

    def _mlp_call(self, state: ModuleState, x: Any) -> StatefulModuleOutput:
        # The MLP's own forward, layer by layer (the same operations in the same order,
        # so the output is bitwise the MLP's), keeping every layer's output. A Dense
        # accepts any leading axes, so this serves replay ([T, B, ...]) too.
        layers: dict[int, Any] = {}
        for i, layer in enumerate(self.wrapped.layers):  # type: ignore[attr-defined]
            x = layer.forward(x)
            layers[i] = x
        return StatefulModuleOutput(
            next_state=state,
            output=x,
            regularization_loss=jnp.zeros(()),
            metrics={ACTIVATION_KEY: layers},
            rollout_extras=(),
        )

    def replay_sequence(
        self, state: ModuleState, xs: Any, rollout_extras: Any, done: jax.Array
    ) -> tuple[ModuleState, StatefulModuleOutput]:
        """The wrapped module's `StatefulModule.replay_sequence`, with its activations
        stacked over time (leaves ``[T, B, ...]``) added to the metrics."""
        if _is_mlp(self.wrapped):
            out = self._mlp_call(state, xs)
            reg = jnp.zeros(jnp.shape(done)[:2])
            return state, out.replace(next_state=(), regularization_loss=reg)
        final, out = self.wrapped.replay_sequence(state, xs, rollout_extras, done)
        return final, _with_activation(self.wrapped, out)

    def initialize_state(self, batch_size: int) -> ModuleState:
        """The wrapped module's initial carry."""
        return self.wrapped.initialize_state(batch_size)

    def reset_state(self, prev_state: ModuleState) -> ModuleState:
        """The wrapped module's reset carry."""
        return self.wrapped.reset_state(prev_state)

    def canonical_state(self, state: ModuleState) -> ModuleState:
        """The wrapped module's canonical carry."""
        return self.wrapped.canonical_state(state)

    def update_statistics(self, rollout_extras: Any) -> None:
        """Update the wrapped module's statistics (leaves ``[T, B, ...]``)."""
        self.wrapped.update_statistics(rollout_extras)


def _is_mlp(module: Any) -> bool:
    return (
        isinstance(module, MLP)
        and type(module).forward is MLP.forward
        and type(module).__call__ is MLP.__call__
    )


def _records_populations(module: Any) -> bool:
    return isinstance(getattr(module, "record_populations", None), bool)


def _with_activation(module: Any, out: StatefulModuleOutput) -> StatefulModuleOutput:
    metrics = dict(out.metrics)
    if _records_populations(module) and "populations" in metrics:
        activation = metrics.pop("populations")
    else:
        activation = out.output
    metrics[ACTIVATION_KEY] = activation
    return out.replace(metrics=metrics)


def is_recording(network: Any) -> bool:
    """Whether ``network`` is, or contains, a `Recorder` (e.g. it came from
    `with_recording`)."""
    return any(isinstance(m, Recorder) for _, m in nnx.iter_graph(network))


def _routed_children(module: Any) -> list[tuple[Any, Callable[[Any], None]]] | None:
    """``[(child, set_child), ...]`` of a container whose routing nests its children's
    metrics under their keys, or ``None`` for a leaf. A subclass that replaces a
    container's ``__call__`` may route differently, so it counts as a leaf."""
    if isinstance(module, Sequential):
        if type(module).__call__ is not Sequential.__call__:
            return None
        layers = module.layers
        return [(layers[i], functools.partial(layers.__setitem__, i)) for i in range(len(layers))]
    if isinstance(module, NamedContainer):
        if not type(module)._routes_calls():  # PPOAdapter's ports included
            return None
        components = getattr(module, "components", None)

        def setter(name: str) -> Callable[[Any], None]:
            if isinstance(components, nnx.Dict) and name in components:
                return functools.partial(components.__setitem__, name)
            return functools.partial(setattr, module, name)  # PPOAdapter's ports

        return [(module._child(name), setter(name)) for name in module._names]
    return None


def _is_leaf(module: Any) -> bool:
    """Whether `with_recording` wraps ``module`` in a `Recorder` as a whole: a
    `StatefulModule` that is not a container it descends into (nnx-ppo 0.3.0's name)."""
    return isinstance(module, StatefulModule) and _routed_children(module) is None


def _wrap(module: StatefulModule) -> StatefulModule:
    children = _routed_children(module)
    if children is None:  # a leaf: see _is_leaf
        if _records_populations(module):
            module.record_populations = True  # type: ignore[attr-defined]
        return Recorder(module)
    for child, set_child in children:
        set_child(_wrap(child))
    return module


def with_recording(network: StatefulModule) -> StatefulModule:
    """A recording copy of ``network``: same parameters, activations in the metrics.

    The copy shares every NNX variable with ``network`` (parameters, normalizer
    statistics, RNG streams: nothing is copied, so it always reflects the current
    training state), has the same carry structure (``network.initialize_state(B)``
    works for both) and computes ``next_state``, ``output``, ``regularization_loss``
    and ``rollout_extras`` with the same operations: called eagerly, bitwise the same
    arrays; under ``jit``, where the activations are extra outputs of the compiled
    program, XLA may fuse differently and round a value differently in the last bit.
    Its ``metrics`` gain the activations of every leaf module and every graph
    population, which `extract_activations` collects keyed by path. ``network`` itself
    is not modified: recording is off unless you call the copy.

    Containers (``Sequential``, ``Parallel``, ``Concat``, ``Map``, ``Merge``,
    ``PPOAdapter``) are descended into; every other module is a leaf and is wrapped in
    a `Recorder` as a whole (a custom module holding children of its own is recorded by
    its output; wrap its children in `Recorder` yourself to see inside).

    Args:
        network: Any `StatefulModule`.

    Returns:
        The recording copy. If ``network`` is already recording (it contains a
        `Recorder`), it is returned unchanged with a ``UserWarning``, as nnx-ppo
        0.3.0 does: wrapping it again would record every module twice.

    Raises:
        TypeError: If ``network`` is not a `StatefulModule`.
    """
    if not isinstance(network, StatefulModule):
        raise TypeError(
            f"with_recording: network must be a StatefulModule, got "
            f"{type(network).__name__}; pass the network you train or evaluate."
        )
    if is_recording(network):
        warnings.warn(
            "with_recording: the network is already recording (it contains Recorder "
            "modules), so it is returned unchanged; call with_recording on the original "
            "network, or use this one as it is.",
            UserWarning,
            stacklevel=2,
        )
        return network
    return _wrap(nnx.clone(network, variables=False))


def extract_activations(metrics: Mapping[Any, Any]) -> Any:
    """The activations in a recording network's ``metrics``, keyed by module path.

    Args:
        metrics: ``out.metrics`` of a call of a `with_recording` copy (leaves
            ``[B, ...]``), or the same stacked over time (``[T, B, ...]``).

    Returns:
        A nested dict with the container structure of the network (integer keys for a
        ``Sequential``'s positions, names for named containers and ``PPOAdapter``'s
        ports) holding each recorded module's activation at its path; other metrics and
        branches without activations are left out. The network itself being a leaf,
        its activation is returned directly.

    Raises:
        ValueError: If ``metrics`` holds no activation (the network was not made with
            `with_recording`; nnx-ppo 0.3.0 returns ``None`` here).
        TypeError: If ``metrics`` is not a dict.
    """
    if not isinstance(metrics, Mapping):
        raise TypeError(
            f"extract_activations: metrics must be the metrics dict of a network call, "
            f"got {type(metrics).__name__}; pass out.metrics."
        )
    found = _collect(metrics)
    if found is None:
        raise ValueError(
            "extract_activations: the metrics hold no activations (no "
            f"{ACTIVATION_KEY!r} entry; top-level keys: {list(metrics)}). Call the "
            "network returned by with_recording(network), not the network itself."
        )
    return found


def _collect(metrics: Any) -> Any:
    if not isinstance(metrics, Mapping):
        return None
    if ACTIVATION_KEY in metrics:
        return metrics[ACTIVATION_KEY]
    found = {}
    for key, value in metrics.items():
        sub = _collect(value)
        if sub is not None:
            found[key] = sub
    return found or None


def flatten_activations(activations: Any, separator: str = "/") -> dict[str, Any]:
    """Flatten `extract_activations`' nested dict into ``{"1/action/0/0": array}``.

    Args:
        activations: What `extract_activations` (or the rollout helper) returned.
        separator: Joins the keys of a path.

    Returns:
        A flat dict from path string to array, in the nested dict's order (a bare
        array, the activation of a single recorded leaf, is returned under ``""``).
    """
    flat: dict[str, Any] = {}

    def walk(node: Any, path: tuple[str, ...]) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                walk(value, (*path, str(key)))
        else:
            flat[separator.join(path)] = node

    walk(activations, ())
    return flat
