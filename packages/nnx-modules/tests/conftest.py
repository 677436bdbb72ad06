"""Shared fixtures for the nnx-modules tests.

Test-only modules whose every effect is easy to derive by hand, so container routing
(carry, extras, statistics, losses, metrics) can be checked with exact numbers. They
are exposed through fixtures (the test suite runs with ``--import-mode=importlib``, so
test files cannot import this module by name).
"""

from __future__ import annotations

import types
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nnx_ppo.networks.types import StatefulModule, StatefulModuleOutput, reset_where


class RecordedStat(nnx.Variable):
    """Test-only statistic written by :class:`StatsRecorder.update_statistics`."""


class Counter(StatefulModule):
    """A stateful module with a per-environment step counter.

    - carry: ``{"count": [B] int32}``, starting at ``start``; ``next_state`` adds 1;
    - output: ``x + count[:, None]`` (``x`` is ``[B, F]``);
    - regularization: ``reg_weight * count``, per sample ``[B]``;
    - metrics: ``{"count": mean(count)}``;
    - rollout_extras: ``count`` ``[B]`` (in replay the stored count is used instead of
      the carry's, so the routing of extras is visible in the output).
    """

    def __init__(self, start: int = 0, reg_weight: float = 1.0):
        self.start = start
        self.reg_weight = reg_weight

    def initialize_state(self, batch_size: int) -> dict[str, jax.Array]:
        return {"count": jnp.full((batch_size,), self.start, jnp.int32)}

    def __call__(self, state: Any, x: Any, rollout_extras: Any = None) -> StatefulModuleOutput:
        count = state["count"]
        used = count if rollout_extras is None else rollout_extras
        return StatefulModuleOutput(
            next_state={"count": count + 1},
            output=x + used[:, None].astype(x.dtype),
            regularization_loss=self.reg_weight * used.astype(jnp.float32),
            metrics={"count": jnp.mean(used.astype(jnp.float32))},
            rollout_extras=count,
        )


class StatsRecorder(StatefulModule):
    """A stateless module with running statistics, like a normalizer.

    - carry ``()``; output ``2 * x`` in rollout, ``2 * rollout_extras`` in replay;
    - rollout_extras: the raw input ``x``;
    - :meth:`update_statistics` (extras ``[T, B, ...]``) adds 1 to ``calls``, the sum
      of all entries to ``total`` and ``T * B`` to ``samples``. ``__call__`` writes
      nothing.
    """

    def __init__(self) -> None:
        self.calls = RecordedStat(jnp.zeros((), jnp.int32))
        self.total = RecordedStat(jnp.zeros((), jnp.float32))
        self.samples = RecordedStat(jnp.zeros((), jnp.int32))

    def __call__(self, state: Any, x: Any, rollout_extras: Any = None) -> StatefulModuleOutput:
        used = x if rollout_extras is None else rollout_extras
        return StatefulModuleOutput(
            next_state=state,
            output=2.0 * used,
            regularization_loss=jnp.zeros(()),
            metrics={},
            rollout_extras=x,
        )

    def update_statistics(self, rollout_extras: Any) -> None:
        self.calls[...] = self.calls[...] + 1
        self.total[...] = self.total[...] + jnp.sum(rollout_extras)
        self.samples[...] = self.samples[...] + rollout_extras.shape[0] * rollout_extras.shape[1]


def rollout(module: StatefulModule, state: Any, xs: list[Any]) -> tuple[list[Any], Any]:
    """Run ``module`` eagerly over the inputs ``xs``; return the outputs and the
    extras stacked along a new leading time axis ``[T, B, ...]``."""
    outputs, extras = [], []
    for x in xs:
        out = module(state, x)
        state = out.next_state
        outputs.append(out)
        extras.append(out.rollout_extras)
    return outputs, jax.tree.map(lambda *leaves: jnp.stack(leaves), *extras)


def assert_trees_equal(actual: Any, expected: Any) -> None:
    """Same tree structure and (numerically) equal leaves."""
    assert jax.tree.structure(actual) == jax.tree.structure(expected)
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=1e-6, atol=1e-6)


def jit_scan(module: StatefulModule, state: Any, xs: Any) -> tuple[Any, StatefulModuleOutput]:
    """Step ``module`` over ``xs`` (leaves ``[T, B, ...]``) in one ``nnx.jit``-ed
    ``lax.scan``; return the final carry and every step's output, stacked ``[T, ...]``."""

    @nnx.jit
    def scan(module: StatefulModule, state: Any, xs: Any) -> tuple[Any, StatefulModuleOutput]:
        def step(state: Any, x: Any) -> tuple[Any, StatefulModuleOutput]:
            out = module(state, x)
            return out.next_state, out

        return jax.lax.scan(step, state, xs)

    return scan(module, state, xs)


def collect(
    graphdef: Any, params: Any, carry0: Any, obs: Any, done: jax.Array
) -> tuple[Any, StatefulModuleOutput]:
    """A rollout of ``nnx.merge(graphdef, params)`` over ``obs`` (leaves ``[T, B, ...]``),
    each env's carry reset where ``done`` (``[T, B]``) and the module state (a sampler's
    RNG stream) threaded through the scan, as the trainer collects one. Returns the final
    module state and every step's output, stacked ``[T, ...]``; jit it with
    ``static_argnums=0``."""

    def step(loop: Any, inputs: Any) -> tuple[Any, StatefulModuleOutput]:
        params, carry = loop
        obs_t, done_t = inputs
        model = nnx.merge(graphdef, params)
        out = model(carry, obs_t)
        carry = reset_where(model, done_t, out.next_state)
        return (nnx.state(model), carry), out

    (params, _), outputs = jax.lax.scan(step, (params, carry0), (obs, done))
    return params, outputs


def artefact_carry(manifest: dict[str, Any], outputs: dict[str, Any]) -> dict[str, Any]:
    """The carry inputs of an exported artefact's next call, from a call's ``outputs``."""
    return {c["input"]: outputs[c["output"]] for c in manifest["carry"]}


def artefact_initial_carry(
    manifest: dict[str, Any], call_reset: Any, batch_size: int
) -> dict[str, Any]:
    """An exported artefact's initial carry from its manifest alone:
    ``reset(zeros, done=True)`` (``{}`` for an artefact without a carry)."""
    if manifest["reset"] is None:
        return {}
    zeros = {
        t["name"]: np.zeros((batch_size, *t["shape"][1:]), t["dtype"])
        for t in manifest["reset"]["inputs"]
        if t["name"] != "done"
    }
    return artefact_carry(manifest, call_reset({**zeros, "done": np.ones((batch_size,), bool)}))


@pytest.fixture(scope="session")
def testing_modules() -> types.SimpleNamespace:
    """Test-only modules and helpers.

    ``Counter``, ``StatsRecorder`` (classes), ``rollout(module, state, xs)``,
    ``assert_trees_equal(actual, expected)``, the jitted loops over time
    ``jit_scan(module, state, xs)`` and ``collect(graphdef, params, carry0, obs,
    done)``, and an exported artefact's carry from its manifest,
    ``artefact_initial_carry(manifest, call_reset, batch_size)`` and
    ``artefact_carry(manifest, outputs)``.
    """
    return types.SimpleNamespace(
        Counter=Counter,
        StatsRecorder=StatsRecorder,
        rollout=rollout,
        assert_trees_equal=assert_trees_equal,
        jit_scan=jit_scan,
        collect=collect,
        artefact_carry=artefact_carry,
        artefact_initial_carry=artefact_initial_carry,
    )
