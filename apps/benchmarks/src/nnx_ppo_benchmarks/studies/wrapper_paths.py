"""One environment, two training wrappers: does ours' path through an episode differ
from brax PPO's?

Steps ``brax/hopper`` (backend ``generalized``) behind the suite's two training paths with
the same actions: ours (the ``ours`` child's ``make_envs``: `EpisodeWrapper` and
`RewardScalingWrapper`, vmapped, finished environments restarted from the cached first
reset with `reset_done`, as ours' rollout does with ``reset_mode="cached"``) and brax's
(``brax.envs.training.wrap``: episode limit, vmap and brax's cached auto-reset, which
brax's PPO steps). Both reset from the same keys; the actions are uniform in [-1, 1],
drawn per step. Compares, per step and environment, what each trainer stores in its
rollout: the reward (ours' divided by the reward scale), ``done``, the truncation flag and
the next observation (after the restart). Prints one JSON line per episode length
(``results/suite/cpu-tasks/wrapper_paths-hopper.jsonl``).

Run from the repository root in the workspace's environment (brax's environments work
with its JAX)::

    uv run python -m nnx_ppo_benchmarks.studies.wrapper_paths
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

__all__ = ["compare", "main"]


def compare(episode_length: int, n_envs: int, n_steps: int, seed: int = 0) -> dict[str, Any]:
    """Steps both paths ``n_steps`` times and returns the largest differences."""
    import dataclasses

    import jax
    import jax.numpy as jnp
    from brax.envs import training

    from nnx_ppo.algorithms.core.rollout import reset_envs
    from nnx_ppo.wrappers.auto_reset import reset_done
    from nnx_ppo_benchmarks.children._common import load_env
    from nnx_ppo_benchmarks.children.ours import make_envs
    from nnx_ppo_benchmarks.studies._spec import suite_run

    task = "brax/hopper"
    spec = suite_run(task, "mlp_small", seed)
    spec = dataclasses.replace(
        spec, ppo=dataclasses.replace(spec.ppo, episode_length=episode_length)
    )
    ours_env, _ = make_envs(spec)
    brax_env = training.wrap(load_env(task), episode_length=episode_length, action_repeat=1)
    scale = spec.ppo.reward_scaling

    key = jax.random.PRNGKey(seed)
    ours_first = reset_envs(ours_env, key, n_envs)
    brax_first = brax_env.reset(jax.random.split(key, n_envs))
    ours_step = jax.vmap(ours_env.step)

    def step(carry: Any, action_key: jax.Array) -> tuple[Any, dict[str, jax.Array]]:
        ours, brax = carry
        actions = jax.random.uniform(action_key, (n_envs, ours_env.action_size), minval=-1.0)
        ours_next = ours_step(ours, actions)
        brax_next = brax_env.step(brax, actions)
        ours_trunc = ours_next.info["truncation"] * ours_next.done
        diff = {
            "reward": jnp.max(jnp.abs(ours_next.reward / scale - brax_next.reward)),
            "done": jnp.max(jnp.abs(ours_next.done - brax_next.done)),
            "truncation": jnp.max(jnp.abs(ours_trunc - brax_next.info["truncation"])),
            "dones": jnp.sum(brax_next.done),
            "truncations": jnp.sum(brax_next.info["truncation"]),
        }
        ours_next = reset_done(ours_next, ours_first)
        diff["next_obs"] = jnp.max(jnp.abs(ours_next.obs - brax_next.obs))
        return (ours_next, brax_next), diff

    action_keys = jax.random.split(jax.random.PRNGKey(seed + 1), n_steps)
    _, diffs = jax.jit(lambda c, k: jax.lax.scan(step, c, k))((ours_first, brax_first), action_keys)
    counts = {name: int(jnp.sum(diffs.pop(name))) for name in ("dones", "truncations")}
    worst = {"first_obs": float(jnp.max(jnp.abs(ours_first.obs - brax_first.obs)))}
    worst.update({name: float(jnp.max(value)) for name, value in diffs.items()})
    return {
        "task": task,
        "episode_length": episode_length,
        "n_envs": n_envs,
        "steps": n_steps,
        "max_abs_difference": worst,
        **counts,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: no arguments; one JSON line per episode length (1000 and 40)."""
    argparse.ArgumentParser(
        prog="python -m nnx_ppo_benchmarks.studies.wrapper_paths",
        description=(__doc__ or "").splitlines()[0],
    ).parse_args(argv)
    for episode_length in (1000, 40):
        print(json.dumps(compare(episode_length, n_envs=16, n_steps=1200)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
