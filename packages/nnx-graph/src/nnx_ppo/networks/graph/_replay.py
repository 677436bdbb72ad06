"""The staged sequence replay of a `PopulationGraph` (package-internal).

Loss replay runs a graph over a stored ``[T, B, ...]`` sequence. Only the populations
that need the history (a buffer, a leak, a transform's carry, or an input from those)
must be scanned over time; the others are computed once for all ``T * B`` samples. The
result equals the step-by-step replay because every stage calls the same per-step
arithmetic (``_step.integrate``).

The three stages (*before*, the scanned *core*, *after*) are described in
`PopulationGraph.replay_sequence`; `stages` decides them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from nnx_ppo.networks.graph import _leak, _step
from nnx_ppo.networks.graph.topology import Connection, ExecutionPlan
from nnx_ppo.networks.types import (
    Metrics,
    ModuleState,
    StatefulModule,
    StatefulModuleOutput,
    replay_scanned,
)

__all__ = ["StagedReplay", "replay_staged", "stages"]


class StagedReplay(NamedTuple):
    """What `replay_staged` computed over a ``[T, B]`` sequence.

    Attributes:
        final_state: The carry after the last step (what the step-by-step replay ends
            with).
        outputs: ``{population: [T, B, size]}`` for every population.
        regularization: The transforms' summed regularization, per sample ``[T, B]``.
        metrics: ``{connection: metrics}`` of the transforms that report any, each
            leaf with a leading time axis ``[T, ...]``.
    """

    final_state: ModuleState
    outputs: dict[str, jax.Array]
    regularization: jax.Array
    metrics: Metrics


def stages(
    plan: ExecutionPlan, connections: Sequence[Connection], carry_less: set[str]
) -> tuple[set[str], set[str]]:
    """The populations a sequence replay computes before and after its scan.

    Args:
        plan: The graph's execution plan.
        connections: All connections.
        carry_less: Names of the connections whose transform has no carry.

    Returns:
        ``(before, after)``. *Before*: not leaky, no delayed input, and every input
        from a *before* population through a connection without carry. *After*: not
        *before*, not leaky, no delayed input, not read through a delayed connection,
        every input through a connection without carry, and read (at ``delay=0``) only
        by *after* populations.
    """
    delayed_in = {c.dst for c in connections if c.delay > 0}
    delayed_out = {c.src for c in connections if c.delay > 0}
    leaky = {name for name, _ in plan.leaky}
    before: set[str] = set()
    for pop, incoming in zip(plan.order, plan.incoming, strict=True):
        if (
            pop.name not in leaky
            and pop.name not in delayed_in
            and all(c.src in before and c.name in carry_less for c in incoming)
        ):
            before.add(pop.name)
    after: set[str] = set()
    for pop, incoming in reversed(list(zip(plan.order, plan.incoming, strict=True))):
        if (
            pop.name not in before
            and pop.name not in leaky
            and pop.name not in delayed_in
            and pop.name not in delayed_out
            and all(c.name in carry_less for c in incoming)
            and all(c.dst in after for c in connections if c.src == pop.name)
        ):
            after.add(pop.name)
    return before, after


def replay_staged(
    graph: StatefulModule,
    plan: ExecutionPlan,
    connections: Sequence[Connection],
    state: ModuleState,
    xs: Any,
    rollout_extras: Any,
    done: jax.Array,
) -> StagedReplay:
    """Replay ``graph`` over a stored sequence, scanning only the *core* stage.

    Args:
        graph: The finalized graph; its ``transforms`` (an ``nnx.Dict`` by connection
            name) are called, and it is the module the core's scan carries.
        plan: The graph's execution plan.
        connections: The graph's connections.
        state: The carry at the start of the sequence (leaves ``[B, ...]``).
        xs: The observations, leaves ``[T, B, ...]``.
        rollout_extras: The extras the rollout emitted, leaves ``[T, B, ...]``.
        done: ``[T, B]``, true where an episode ended at that step (the carry is reset
            after it, as in the step-by-step replay).

    Returns:
        The `StagedReplay`.
    """
    t, b = jnp.shape(done)[:2]
    carry_less = {c.name for c in connections if not jax.tree.leaves(state["transforms"][c.name])}
    before, after = stages(plan, connections, carry_less)
    core = {p.name for p in plan.order} - before - after
    transforms = graph.transforms  # type: ignore[attr-defined]

    def flat(tree: Any) -> Any:  # [T, B, ...] -> [T * B, ...]
        return jax.tree.map(lambda v: jnp.reshape(v, (t * b, *jnp.shape(v)[2:])), tree)

    def unflat(tree: Any) -> Any:  # [T * B, ...] -> [T, B, ...]
        return jax.tree.map(lambda v: jnp.reshape(v, (t, b, *jnp.shape(v)[1:])), tree)

    def per_step(metrics: Any) -> Any:  # a batched call's metrics, repeated T times
        return jax.tree.map(lambda m: jnp.broadcast_to(m, (t, *jnp.shape(m))), metrics)

    carries = {"transforms": state["transforms"]}
    flat_xs, flat_extras = flat(xs), flat(rollout_extras)
    # 1. Before the scan: the "before" populations and their carry-free delay=0
    #    connections into the core, for all T * B samples at once.
    first = _step.integrate(plan, transforms, before, carries, flat_xs, flat_extras, t * b)
    reg_first, metrics_first = first.regularization, dict(first.metrics)
    projected = {}
    for pop, incoming in zip(plan.order, plan.incoming, strict=True):
        if pop.name not in core:
            continue
        for c in incoming:
            if c.delay == 0 and c.src in before and c.name in carry_less:
                out = _step.call_transform(
                    transforms, c, pop.size, carries, first.outputs[c.src], flat_extras, t * b
                )
                projected[c.name] = out.output
                reg_first = reg_first + out.regularization_loss
                if out.metrics:
                    metrics_first[c.name] = out.metrics

    # 2. The core, scanned over time (resets as in the step-by-step replay).
    def step(module: StatefulModule, carry: Any, inputs: Any, extras: Any) -> Any:
        x, given, given_inputs = inputs
        # Every noisy population is leaky, so in the core: its draws come from the
        # carried keys, as in a step.
        noise, noise_keys = _leak.draw_noise(plan, carry, module.deterministic)  # type: ignore[attr-defined]
        result = _step.integrate(
            plan,
            module.transforms,  # type: ignore[attr-defined]
            core,
            carry,
            x,
            extras,
            b,
            outputs=given,
            inputs=given_inputs,
            leaks=_leak.leak_factors(plan, module.dt, module.raw_tau),  # type: ignore[attr-defined]
            noise=noise,
        )
        # Every leaky population is in the core, so its activity is in result.outputs.
        next_state = _step.next_carry(
            plan, carry, result.outputs, {**carry["transforms"], **result.transforms}, noise_keys
        )
        return StatefulModuleOutput(
            next_state=next_state,
            output={name: result.outputs[name] for name in core},
            regularization_loss=result.regularization,
            metrics=result.metrics,
            rollout_extras=(),
        )

    final, scanned = replay_scanned(
        graph,
        state,
        (xs, unflat(first.outputs), unflat(projected)),
        rollout_extras,
        done,
        step=step,
    )

    # 3. After the scan: the "after" populations, for all samples at once.
    last = _step.integrate(
        plan,
        transforms,
        after,
        carries,
        flat_xs,
        flat_extras,
        t * b,
        outputs={**first.outputs, **flat(scanned.output)},
    )
    regularization = (
        unflat(jnp.broadcast_to(reg_first + last.regularization, (t * b,)))
        + scanned.regularization_loss
    )
    metrics = {**per_step(metrics_first), **scanned.metrics, **per_step(last.metrics)}
    return StagedReplay(final, unflat(last.outputs), regularization, metrics)
