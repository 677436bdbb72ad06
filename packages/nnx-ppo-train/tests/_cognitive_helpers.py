"""Policies and trial runners the cognitive-task tests share (not a test module).

`run_trials` plays balanced trials of a task with a policy written as a pure function;
`integrator` builds the ideal observer of a task with one evidence stream; `accuracy`
scores the final infos per condition value.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from nnx_ppo.envs.cognitive import CognitiveTask, Outcome


def run_trials(env: CognitiveTask, policy, n: int, seed: int = 0, memory=None):
    """Runs ``n`` balanced trials (every condition equally often) with
    ``policy(memory, obs, info) -> (memory, action)`` and returns the final info of
    every trial as numpy arrays plus the summed rewards. ``memory`` is one trial's
    initial memory (any pytree of arrays; default a float32 scalar 0)."""
    keys = jax.random.split(jax.random.key(seed), n)
    conditions = jnp.arange(n) % env.n_conditions
    state = jax.vmap(env.reset_condition)(keys, conditions)
    memory = jnp.zeros((), jnp.float32) if memory is None else memory
    memory = jax.tree.map(lambda m: jnp.broadcast_to(m, (n, *jnp.shape(m))), memory)

    def body(carry, _):
        state, memory, ended, final, total = carry
        memory, action = jax.vmap(policy)(memory, state.obs, state.info)
        nxt = jax.vmap(env.step)(state, action)
        first = (nxt.done > 0) & ~ended
        final = jax.tree.map(lambda f, x: jnp.where(first, x, f), final, nxt.info)
        total = total + jnp.where(ended, 0.0, nxt.reward)
        return (nxt, memory, ended | (nxt.done > 0), final, total), None

    init = (state, memory, jnp.zeros((n,), bool), state.info, jnp.zeros((n,)))
    (_, _, ended, final, total), _ = jax.lax.scan(
        jax.jit(body), init, None, length=env.max_trial_steps
    )
    assert bool(jnp.all(ended)), "every trial must end within max_trial_steps"
    return jax.tree.map(np.asarray, final), np.asarray(total)


def integrator(env: CognitiveTask, evidence, in_stimulus, respond):
    """A policy that sums ``evidence(obs) * dt`` while ``in_stimulus(info)`` and, in a
    response epoch (``respond(info)``), picks action 2 if the sum is > 0, else 1."""

    def policy(memory, obs, info):
        memory = memory + jnp.where(in_stimulus(info), evidence(obs) * env.dt, 0.0)
        action = jnp.where(respond(info), jnp.where(memory > 0, 2, 1), 0)
        return memory, action.astype(jnp.int32)

    return policy


def accuracy(final, by: str):
    """Fraction correct among decisions, per value of condition ``by``."""
    decided = np.isin(final["outcome"], [Outcome.CORRECT, Outcome.WRONG])
    correct = final["outcome"] == Outcome.CORRECT
    values = final["condition"][by]
    return {float(v): correct[decided & (values == v)].mean() for v in np.unique(values[decided])}
