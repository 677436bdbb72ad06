"""The arithmetic of one graph step (package-internal).

A finalized `PopulationGraph` steps by running its populations in the order of its
`ExecutionPlan`: each sums its incoming connection outputs (plus its observation
input), applies its activation, a leaky population mixes the result into its previous
output, and the populations read with a delay write into their circular buffers. These
functions do that work for the graph's ``__call__`` and for the staged sequence replay
in ``_replay``, so both compute with the same arithmetic; they are plain functions over
the plan, the transforms and the carry.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from nnx_ppo.networks.graph import _checks, _leak
from nnx_ppo.networks.graph.topology import Connection, ExecutionPlan, Population
from nnx_ppo.networks.types import Metrics, ModuleState, StatefulModule, StatefulModuleOutput

__all__ = [
    "ACTIVITY_DTYPE",
    "Integration",
    "batch_size",
    "call_transform",
    "integrate",
    "next_carry",
    "read_buffer",
    "read_obs",
    "write_buffer",
    "write_buffers",
]


ACTIVITY_DTYPE = jnp.float32  # of the delay buffers and the leaky populations' activity


class Integration(NamedTuple):
    """What `integrate` computed for a set of populations in one step.

    Attributes:
        outputs: ``{population: [B, size]}``, the populations' outputs after their
            activation, plus the already known outputs passed in.
        transforms: ``{connection: next carry}`` of the transforms called here.
        extras: ``{connection: rollout_extras}`` of the transforms called here.
        regularization: The summed regularization of the transforms called here,
            per sample ``[B]``.
        metrics: ``{connection: metrics}`` of the transforms called here that report
            any.
    """

    outputs: dict[str, jax.Array]
    transforms: dict[str, Any]
    extras: dict[str, Any]
    regularization: jax.Array
    metrics: Metrics


def batch_size(state: ModuleState, x: Any) -> Any:
    """The batch size ``B`` of a step: the leading axis of the first leaf of
    ``(state, x)`` (an int, or a symbolic dimension under `jax.export`)."""
    leaves = jax.tree.leaves((state, x))
    if not leaves:
        raise ValueError(
            "PopulationGraph.__call__: cannot infer the batch size; the carry is empty "
            "and the observation has no arrays. Pass the carry from initialize_state(B)."
        )
    return leaves[0].shape[0]


def read_obs(x: Any, pop: Population, batch: int) -> jax.Array:
    """``x[pop.input_from]``, checked to be ``[batch, pop.size]``."""
    key = pop.input_from
    if not isinstance(x, Mapping):
        raise TypeError(
            f"PopulationGraph: input population {pop.name!r} reads obs[{key!r}], so the "
            f"observation must be a dict, got {type(x).__name__}. Pass e.g. {{{key!r}: "
            f"array of shape [B, {pop.size}]}}."
        )
    if key not in x:
        raise ValueError(
            f"PopulationGraph: input population {pop.name!r} reads obs[{key!r}], but the "
            f"observation has keys {sorted(map(str, x))}. Provide {key!r} or change "
            f"add_input(..., input_from=...)."
        )
    value = jnp.asarray(x[key])
    if value.shape != (batch, pop.size):
        raise ValueError(
            f"PopulationGraph: obs[{key!r}] has shape {tuple(value.shape)}, but input "
            f"population {pop.name!r} has size {pop.size}, so it must be [B, {pop.size}] "
            f"with B={batch}. Declare add_input({pop.name!r}, size={value.shape[-1]}, ...) "
            "or fix the observation."
            if value.ndim
            else f"PopulationGraph: obs[{key!r}] is a scalar; it must be [B, {pop.size}]."
        )
    return value


def read_buffer(buffer: jax.Array, position: jax.Array, delay: int) -> jax.Array:
    """The entry written ``delay`` steps ago; ``buffer`` is ``[B, L, size]``, ``delay <= L``.

    ``position`` (``[B]``) is the slot this step will write; the previous step wrote
    ``position - 1`` and ``delay`` steps ago wrote ``position - delay`` (mod ``L``).
    """
    length = buffer.shape[1]
    slot = (position - delay) % length
    return jnp.take_along_axis(buffer, slot[:, None, None], axis=1)[:, 0]


def write_buffer(
    buffer: jax.Array, position: jax.Array, value: jax.Array, length: int
) -> tuple[jax.Array, jax.Array]:
    """Write ``value`` (``[B, size]``) at ``position`` and advance it (mod ``length``)."""
    hit = jnp.arange(length)[None, :] == position[:, None]  # [B, L]
    buffer = jnp.where(hit[:, :, None], value[:, None, :].astype(buffer.dtype), buffer)
    return buffer, (position + 1) % length


def write_buffers(
    plan: ExecutionPlan, state: ModuleState, outputs: Mapping[str, jax.Array]
) -> dict[str, Any]:
    """``{"buffers": ..., "positions": ...}`` after writing this step's outputs."""
    buffers: dict[str, jax.Array] = {}
    positions: dict[str, jax.Array] = {}
    for name, length, _ in plan.buffers:
        buffers[name], positions[name] = write_buffer(
            state["buffers"][name], state["positions"][name], outputs[name], length
        )
    return {"buffers": buffers, "positions": positions}


def next_carry(
    plan: ExecutionPlan,
    state: ModuleState,
    outputs: Mapping[str, jax.Array],
    transforms: Mapping[str, Any],
    noise_keys: jax.Array | None = None,
) -> dict[str, Any]:
    """The graph's carry after a step: the buffers written with ``outputs``
    (``{population: [B, size]}``), the leaky populations' activity (only when the graph
    has some), the transforms' carries and the noise keys (only when given: a graph
    with noisy populations)."""
    carry = write_buffers(plan, state, outputs)
    if plan.leaky:
        carry["activity"] = {name: outputs[name].astype(ACTIVITY_DTYPE) for name, _ in plan.leaky}
    carry["transforms"] = dict(transforms)
    if noise_keys is not None:
        carry[_leak.NOISE_KEY] = noise_keys
    return carry


def call_transform(
    transforms: Mapping[str, StatefulModule],
    c: Connection,
    size: int,
    state: ModuleState,
    source: jax.Array,
    rollout_extras: Any,
    batch: int,
) -> StatefulModuleOutput:
    """Call connection ``c``'s transform on ``source`` (``[batch, c.src size]``) and
    check that it returns ``[batch, size]`` (the size of ``c.dst``)."""
    extras = None if rollout_extras is None else rollout_extras["transforms"][c.name]
    out = transforms[c.name](state["transforms"][c.name], source, extras)
    _checks.check_call_output(c, out.output, batch, size)
    return out


def integrate(
    plan: ExecutionPlan,
    transforms: Mapping[str, StatefulModule],
    names: Collection[str],
    state: ModuleState,
    x: Any,
    rollout_extras: Any,
    batch: int,
    *,
    outputs: Mapping[str, jax.Array] | None = None,
    inputs: Mapping[str, jax.Array] | None = None,
    leaks: Mapping[str, Any] | None = None,
    noise: Mapping[str, jax.Array] | None = None,
) -> Integration:
    """One step of the populations in ``names``, in execution order.

    Args:
        plan: The graph's execution plan.
        transforms: The graph's transforms, by connection name.
        names: The populations to compute; the others are skipped.
        state: The carry; only ``"buffers"``/``"positions"`` (for delayed reads),
            ``"activity"`` (for the leaky populations computed here) and
            ``"transforms"`` (for the transforms called here) are read.
        x: The observation dict (leaves ``[batch, ...]``).
        rollout_extras: ``None`` in rollouts, else ``{"transforms": {...}}``.
        batch: The batch size ``B`` (``T * B`` when a replay flattens time).
        outputs: Already known population outputs (``[batch, size]``), read by
            ``delay=0`` connections out of populations not in ``names``.
        inputs: Already computed connection outputs (``[batch, dst size]``), used
            instead of calling those connections' transforms.
        leaks: ``{population: dt / tau}`` (see `_leak.leak_factors`); needed when
            ``names`` holds a leaky population.
        noise: ``{population: [batch, size]}`` standard-normal draws of the noisy
            populations computed here (see `_leak.draw_noise`), or ``None`` for none.

    Returns:
        The `Integration`; its carries, extras, regularization and metrics are those
        of the transforms called here.
    """
    outputs = dict(outputs or {})
    inputs = inputs or {}
    next_carries: dict[str, Any] = {}
    extras: dict[str, Any] = {}
    metrics: Metrics = {}
    regularization = jnp.zeros((batch,))
    for pop, incoming in zip(plan.order, plan.incoming, strict=True):
        if pop.name not in names:
            continue
        total = None if pop.input_from is None else read_obs(x, pop, batch)
        for c in incoming:
            if c.name in inputs:
                value = inputs[c.name]
            else:
                if c.delay == 0:
                    source = outputs[c.src]
                else:
                    source = read_buffer(
                        state["buffers"][c.src], state["positions"][c.src], c.delay
                    )
                out = call_transform(transforms, c, pop.size, state, source, rollout_extras, batch)
                value = out.output
                next_carries[c.name] = out.next_state
                extras[c.name] = out.rollout_extras
                regularization = regularization + out.regularization_loss
                if out.metrics:
                    metrics[c.name] = out.metrics
            total = value if total is None else total + value
        if total is None:  # build_plan rejects populations without any input
            raise RuntimeError(f"internal error: population {pop.name!r} has no input")
        value = total if pop.activation is None else pop.activation(total)
        if pop.tau is not None:
            if leaks is None:
                raise RuntimeError(f"internal error: no leak factor for {pop.name!r}")
            value = _leak.mix(state["activity"][pop.name], value, leaks[pop.name])
            if noise is not None and pop.name in noise:
                value = _leak.add_noise(value, pop, leaks[pop.name], noise[pop.name])
        outputs[pop.name] = value
    return Integration(outputs, next_carries, extras, regularization, metrics)
