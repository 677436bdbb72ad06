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

from nnx_ppo.networks.types import StatefulModule, StatefulModuleOutput


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


@pytest.fixture
def testing_modules() -> types.SimpleNamespace:
    """Test-only modules and helpers.

    ``Counter``, ``StatsRecorder`` (classes), ``rollout(module, state, xs)`` and
    ``assert_trees_equal(actual, expected)``.
    """
    return types.SimpleNamespace(
        Counter=Counter,
        StatsRecorder=StatsRecorder,
        rollout=rollout,
        assert_trees_equal=assert_trees_equal,
    )
