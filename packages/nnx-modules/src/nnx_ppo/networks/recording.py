"""Recording what a network's modules return during a call, without changing it.

`record_sampler_calls` is a context manager: while it is active, every
`ActionSampler` call appends a
`SamplerCall` (the sampler and its `StatefulModuleOutput`) to the list it yields.
Nothing is recorded (and nothing costs anything) outside the block, and the network is
not modified: no wrapper, no class swap. Use it while tracing a network once (e.g.
under ``jax.eval_shape``) to find where each sampler's action and raw action end up in
the network's output and ``rollout_extras``; that is how
``nnx_ppo.algorithms.pairing`` pairs a distillation teacher's samplers with the
student's.

Examples:
    >>> import jax, jax.numpy as jnp
    >>> from flax import nnx
    >>> from nnx_ppo.networks.factories import make_mlp_actor_critic
    >>> from nnx_ppo.networks.recording import record_sampler_calls
    >>> net = make_mlp_actor_critic(3, 2, (8,), (8,), rngs=nnx.Rngs(0))
    >>> with record_sampler_calls() as calls:
    ...     out = net(net.initialize_state(4), jnp.zeros((4, 3)))
    >>> [type(c.sampler).__name__ for c in calls]
    ['NormalTanhSampler']
    >>> calls[0].output.output["action"] is out.output.actions
    True
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nnx_ppo.networks.sampling_layers import ActionSampler
    from nnx_ppo.networks.types import StatefulModuleOutput

__all__ = ["SamplerCall", "record_sampler_call", "record_sampler_calls"]

_ACTIVE: contextvars.ContextVar[list[SamplerCall] | None] = contextvars.ContextVar(
    "nnx_ppo_sampler_calls", default=None
)


@dataclasses.dataclass(frozen=True)
class SamplerCall:
    """One recorded sampler call.

    Attributes:
        sampler: The `ActionSampler` module that was called.
        output: What it returned: ``output.output["action"]`` is the action,
            ``output.rollout_extras`` the raw action it emitted for replay.
    """

    sampler: ActionSampler
    output: StatefulModuleOutput


@contextlib.contextmanager
def record_sampler_calls() -> Iterator[list[SamplerCall]]:
    """Record every sampler call made inside the block, in call order.

    Blocks nest: an inner block records its calls, and the outer one gets them too.

    Yields:
        The list the calls are appended to.
    """
    calls: list[SamplerCall] = []
    outer = _ACTIVE.get()
    token = _ACTIVE.set(calls)
    try:
        yield calls
    finally:
        _ACTIVE.reset(token)
        if outer is not None:
            outer.extend(calls)


def record_sampler_call(sampler: ActionSampler, output: StatefulModuleOutput) -> None:
    """Record one call if a `record_sampler_calls` block is active (called by
    `ActionSampler.__call__`; a no-op otherwise)."""
    calls = _ACTIVE.get()
    if calls is not None:
        calls.append(SamplerCall(sampler, output))
