"""Where one PPO update moves a policy: KL by time step, carry drift, parameter groups.

For one network and seed at the suite's settings of ``--task`` (Playground's brax-PPO
settings, 256 envs, 8 minibatches; ``--set FIELD=VALUE`` replaces `PPOConfig` fields,
``--stagger`` staggers the training episodes as ``ablations`` does), every iteration is
run as training runs it, and on every ``--every``-th one the update is measured on the
rollout it was given (the same keys, so the same rollout):

- ``kl_by_t``: ``KL(old || new)`` at each of the rollout's ``T`` steps (the estimator
  ``(r - 1) - log r`` of ``actor/approx_kl``, averaged over the environments), the new
  policy replayed over the whole rollout from its stored first carry, as the loss does;
- ``direct_kl_by_t``: the same with every step started from the carry the *old*
  parameters had there (the rollout's own carries), so the difference between the two is
  what the update changed through the carry (zero for a network without one);
- ``entropy_by_t``: ``-log pi_old(a_t)`` of the taken actions (the entropy estimate);
- ``update``: per module with parameters (its path, kernel and bias together), the
  update's norm relative to the module's parameter norm before it.

One JSON line per measured iteration to ``--out``, then one with the final return
(128 deterministic episodes). Run from the repository root::

    uv run python -m nnx_ppo_benchmarks.studies.policy_shift lstm_quickstart 0 \\
        --task CartpoleBalance/masked --steps 307200 --stagger --set n_epochs=4 \\
        --out shift.jsonl
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["main", "measure_update"]


def _kl_by_t(new_ll: Any, old_ll: Any) -> Any:
    """``[T]``: the approx-KL estimator at each step, averaged over environments."""
    import jax
    import jax.numpy as jnp

    log_ratio = sum(jax.tree.leaves(jax.tree.map(jnp.subtract, new_ll, old_ll)))
    return jnp.mean(jnp.expm1(log_ratio) - log_ratio, axis=1)


def _group_norms(params: Any) -> dict[str, Any]:
    """Squared norms of the parameter leaves summed per module (the path without its
    last two parts, the variable's name and ``.value``)."""
    import jax
    import jax.numpy as jnp

    groups: dict[str, Any] = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(params):
        parts = [str(getattr(p, "key", getattr(p, "idx", p))) for p in path]
        name = "/".join(parts[:-2])
        groups[name] = groups.get(name, 0.0) + jnp.sum(jnp.square(leaf))
    return groups


def measure_update(env: Any, graphdef: Any, config: Any, iteration: Any, state: Any) -> Any:
    """``(new_state, measurements)``: ``iteration(state)`` and what it did to the policy
    on its own rollout (see the module docstring); pure, for ``jax.jit``."""
    import jax
    import jax.numpy as jnp

    from nnx_ppo.algorithms.core.phases import cut_sequences, replay_minibatch, rollout_phase

    _, rollout_key, refresh_key, _ = jax.random.split(state.rng, 4)
    # The iteration's own rollout (its keys), with the carry stored at every step.
    probe = dataclasses.replace(config, sequence_length=1)
    phase = rollout_phase(
        env, graphdef, state, rollout_key, refresh_key, probe,
        bootstrap_on_truncation=config.bootstrap_on_truncation,
    )  # fmt: skip
    new_state, _ = iteration(state)
    old, level = phase.transitions, config.log_level

    def replayed(params: Any) -> Any:
        out, _ = replay_minibatch(
            graphdef, params, state.network_state, phase.rollout.initial_carry, old, level
        )
        return out.log_likelihood

    steps, carries = cut_sequences(1, old, phase.rollout.chunk_carries)
    direct, _ = replay_minibatch(
        graphdef, new_state.params, state.network_state, carries, steps, level
    )
    n_steps = jnp.shape(old.done)[0]
    # Sequences are ordered by environment first: [1, B * T] -> [B, T] -> [T, B].
    direct_ll = jax.tree.map(lambda x: x.reshape(-1, n_steps).T, direct.log_likelihood)
    before, change = (
        _group_norms(state.params),
        _group_norms(jax.tree.map(jnp.subtract, new_state.params, state.params)),
    )
    old_ll = old.log_likelihood
    return new_state, {
        "replay_kl_before": jnp.max(_kl_by_t(replayed(state.params), old_ll)),
        "kl_by_t": _kl_by_t(replayed(new_state.params), old_ll),
        "direct_kl_by_t": _kl_by_t(direct_ll, old_ll),
        "entropy_by_t": -jnp.mean(sum(jax.tree.leaves(old_ll)), axis=1),
        "update": {k: jnp.sqrt(change[k] / jnp.maximum(before[k], 1e-12)) for k in before},
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Command line (see the module docstring)."""
    from nnx_ppo_benchmarks.studies.ablations import parse_assignment, parse_value

    parser = argparse.ArgumentParser(
        prog="python -m nnx_ppo_benchmarks.studies.policy_shift",
        description=(__doc__ or "").splitlines()[0],
    )
    parser.add_argument("network", help="a harness network family, e.g. lstm_quickstart")
    parser.add_argument("seed", type=int)
    parser.add_argument("--task", default="CartpoleBalance/masked")
    parser.add_argument("--steps", type=int, default=307_200)
    parser.add_argument("--every", type=int, default=1, help="measure every N-th iteration")
    parser.add_argument("--set", action="append", default=[], help="FIELD=VALUE")
    parser.add_argument("--stagger", action="store_true", help="staggered training episodes")
    parser.add_argument("--out", required=True, help="JSON lines (appended)")
    args = parser.parse_args(argv)

    import jax
    import numpy as np

    from nnx_ppo.algorithms.core.rollout import eval_copy
    from nnx_ppo.algorithms.ppo.iteration import (
        init_train_state,
        make_optimizer,
        make_training_iteration,
    )
    from nnx_ppo_benchmarks.children.ours import build_network, make_envs, make_train_config
    from nnx_ppo_benchmarks.seeds import final_return
    from nnx_ppo_benchmarks.studies._spec import suite_run

    spec = suite_run(args.task, args.network, args.seed, args.steps)
    if args.stagger:
        spec = dataclasses.replace(spec, stagger=spec.ppo.episode_length // 2)
    env, eval_env = make_envs(spec)
    fixed = {
        field: parse_value(value)
        for field, value in (parse_assignment(text, "--set") for text in args.set)
    }
    config = dataclasses.replace(make_train_config(spec).ppo, **fixed)
    network = build_network(spec, env.observation_size, env.action_size)
    optimizer = make_optimizer(config)
    graphdef, state = init_train_state(
        env, network, config, optimizer, jax.random.PRNGKey(args.seed)
    )
    iteration = make_training_iteration(env, graphdef, optimizer, config)
    plain = jax.jit(iteration, donate_argnums=0)
    measured = jax.jit(lambda s: measure_update(env, graphdef, config, iteration, s))
    head = {"task": args.task, "network": args.network, "seed": args.seed, "settings": fixed}
    start = time.time()
    with open(args.out, "a") as out:
        for i in range(config.n_iterations):
            if i % args.every:
                state, _ = plain(state)
                continue
            state, found = measured(state)
            found = jax.tree.map(lambda x: np.asarray(x).round(6).tolist(), found)
            record = {**head, "iteration": i, "step": (i + 1) * config.steps_per_iteration}
            out.write(json.dumps({**record, **found}) + "\n")
            out.flush()
        trained = eval_copy(network)
        from flax import nnx

        nnx.update(trained, state.params, state.network_state)
        final = final_return(eval_env, trained, args.seed, n_envs=128, max_episode_length=1000)
        summary = {**head, "final_return": float(final), "train_s": round(time.time() - start)}
        print(json.dumps(summary), flush=True)
        out.write(json.dumps(summary) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
