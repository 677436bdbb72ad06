"""Where an iteration's time goes, per network family, side by side in one process.

For each family of ``--networks`` at the suite's settings of ``--task`` (Playground's
brax-PPO settings with ``--n-envs`` environments and 8 minibatches), four jitted
programs are timed on the same state, each the median of ``--repeats`` calls after a
warm-up call (compilation excluded):

- ``rollout_ms``: the rollout phase (``T`` steps of the environments and the network);
- ``replay_ms``: the network replayed over the whole rollout from its first carry, as
  the loss replays it (forward only);
- ``replay_grad_ms``: the same with the gradient of the summed log-likelihoods and
  values (forward and backward), i.e. one epoch's replays without the optimizer;
- ``iteration_ms``: one whole training iteration (rollout, advantages, every epoch's
  minibatch updates, statistics), and ``steps_per_s`` from it.

One JSON line per family to ``--out``, with the machine's load average at the start and
the end (the times are only comparable within one run). Run from the repository root::

    uv run python -m nnx_ppo_benchmarks.studies.step_costs \\
        --networks mlp_default,lstm_quickstart,lru,mingru --out costs.jsonl
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["main", "median_ms"]


def median_ms(fn: Callable[[], Any], repeats: int) -> float:
    """The median wall time of ``fn()`` in milliseconds over ``repeats`` calls, after one
    warm-up call (which compiles); ``fn`` must return JAX arrays to wait for."""
    import jax
    import numpy as np

    jax.block_until_ready(fn())
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e3)


def _costs(spec: Any, config: Any, repeats: int) -> dict[str, float]:
    import jax
    import jax.numpy as jnp

    from nnx_ppo.algorithms.core.phases import replay_minibatch, rollout_phase
    from nnx_ppo.algorithms.ppo.iteration import (
        init_train_state,
        make_optimizer,
        make_training_iteration,
    )
    from nnx_ppo_benchmarks.children.ours import build_network, make_envs

    env, _ = make_envs(spec)
    network = build_network(spec, env.observation_size, env.action_size)
    optimizer = make_optimizer(config)
    key = jax.random.PRNGKey(spec.seed)
    graphdef, state = init_train_state(env, network, config, optimizer, key)
    keys = jax.random.split(state.rng, 2)

    @jax.jit
    def rollout(state: Any) -> Any:
        phase = rollout_phase(
            env, graphdef, state, keys[0], keys[1], config,
            bootstrap_on_truncation=config.bootstrap_on_truncation,
        )  # fmt: skip
        return phase.transitions, phase.rollout.initial_carry

    transitions, carry = rollout(state)
    level = config.log_level

    def replayed(params: Any) -> Any:
        out, _ = replay_minibatch(graphdef, params, state.network_state, carry, transitions, level)
        leaves = jax.tree.leaves((out.log_likelihood, out.value))
        return sum(jnp.sum(leaf) for leaf in leaves)

    replay = jax.jit(replayed)
    replay_grad = jax.jit(jax.grad(replayed))
    iteration = jax.jit(make_training_iteration(env, graphdef, optimizer, config))
    found = {
        "rollout_ms": median_ms(lambda: rollout(state), repeats),
        "replay_ms": median_ms(lambda: replay(state.params), repeats),
        "replay_grad_ms": median_ms(lambda: replay_grad(state.params), repeats),
        "iteration_ms": median_ms(lambda: iteration(state)[1], repeats),
    }
    found["steps_per_s"] = config.steps_per_iteration / (found["iteration_ms"] / 1e3)
    return {k: round(v, 2) for k, v in found.items()}


def main(argv: Sequence[str] | None = None) -> int:
    """Command line (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m nnx_ppo_benchmarks.studies.step_costs",
        description=(__doc__ or "").splitlines()[0],
    )
    parser.add_argument("--networks", default="mlp_default,lstm_quickstart,lru,mingru")
    parser.add_argument("--task", default="CartpoleBalance/masked")
    parser.add_argument("--n-envs", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", required=True, help="JSON lines, one per family (appended)")
    args = parser.parse_args(argv)

    import jax

    from nnx_ppo_benchmarks.children.ours import make_train_config
    from nnx_ppo_benchmarks.suite.run import SuiteOptions, plan_suite

    networks = args.networks.split(",")
    specs = plan_suite(
        SuiteOptions(
            tasks=(args.task,),
            networks=tuple(networks),
            implementations=("ours",),
            seeds=(0,),
            total_steps=1,
            n_chunks=2,
            n_envs=args.n_envs,
            n_minibatches=8,
        )
    )
    load_before = os.getloadavg()[0]
    with open(args.out, "a") as out:
        for spec in specs:
            config = make_train_config(spec).ppo
            config = dataclasses.replace(config, total_steps=config.steps_per_iteration)
            record = {
                "task": args.task,
                "network": spec.network,
                "n_envs": args.n_envs,
                "device": jax.devices()[0].device_kind,
                **_costs(spec, config, args.repeats),
            }
            print(json.dumps(record), flush=True)
            out.write(json.dumps(record) + "\n")
        out.write(json.dumps({"load_average": [load_before, os.getloadavg()[0]]}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
