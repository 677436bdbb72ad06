"""Child: the physical limit, environment steps alone (implementation ``env-only``).

The same ``n_envs`` as training, uniformly random actions in ``[-1, 1]``, Playground's
``wrap_for_brax_training`` (vmap, episode, cached auto-reset: what brax trains on), and
one jitted ``lax.scan`` per progress chunk over ``iterations_per_chunk *
rollout_length`` steps, so a chunk covers the same env steps as a training chunk.
"""

from __future__ import annotations

from typing import Any

from nnx_ppo_benchmarks.children import _common
from nnx_ppo_benchmarks.settings import RunSpec

__all__ = ["run"]


def run(spec: RunSpec, recorder: _common.Recorder) -> dict[str, Any]:
    """Step the environment for the budget; returns the result fields."""
    import jax
    import jax.numpy as jnp

    hp = spec.ppo
    with recorder.phase("setup"):
        base = _common.load_env(spec.env_name)
        env = _common.brax_training_wrapper(spec.env_name)(base, episode_length=hp.episode_length)
        length = spec.iterations_per_chunk * hp.rollout_length

    def chunk(state: Any, key: jax.Array) -> tuple[Any, jax.Array, jax.Array]:
        def step(carry: Any, _: Any) -> tuple[Any, None]:
            state, key, reward = carry
            key, action_key = jax.random.split(key)
            action = jax.random.uniform(
                action_key, (hp.n_envs, env.action_size), minval=-1.0, maxval=1.0
            )
            state = env.step(state, action)
            return (state, key, reward + jnp.sum(state.reward)), None

        (state, key, reward), _ = jax.lax.scan(
            step, (state, key, jnp.zeros(())), None, length=length
        )
        return state, key, reward

    with recorder.phase("train"):
        key, reset_key = jax.random.split(jax.random.PRNGKey(spec.seed))
        state = jax.jit(env.reset)(jax.random.split(reset_key, hp.n_envs))
        run_chunk = jax.jit(chunk, donate_argnums=0)
        step = 0
        total = 0.0
        for _ in range(spec.n_chunks):
            state, key, reward = run_chunk(state, key)
            total += float(reward)  # synchronises
            step += length * hp.n_envs
            recorder.progress_callback(step)

    return {
        "total_steps": step,
        "final_eval_reward": None,
        "mean_random_reward": total / step,
        "n_params": 0,
        "versions": _common.package_versions("jax", "jaxlib", "mujoco", "mujoco-mjx", "playground"),
    }


if __name__ == "__main__":
    raise SystemExit(_common.main(run))
