"""Child: brax PPO (``brax.training.agents.ppo.train``), as MuJoCo Playground runs it.

Playground's ``wrap_for_brax_training`` (vmap, episode and cached auto-reset wrappers),
one rollout of ``unroll_length`` per environment per training step
(``batch_size * num_minibatches == num_envs``), and ``num_evals = n_chunks + 1`` with
``run_evals=False``: brax then calls ``progress_fn`` after each training epoch without
evaluating. The final evaluation uses brax's own ``acting.Evaluator`` afterwards.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from nnx_ppo_benchmarks.children import _common
from nnx_ppo_benchmarks.settings import RunSpec

__all__ = ["run"]


def run(spec: RunSpec, recorder: _common.Recorder) -> dict[str, Any]:
    """Train, then evaluate once; returns the result fields."""
    import jax

    from nnx_ppo_benchmarks.brax_compat import apply

    apply()  # JAX >= 0.10 removed jax.device_put_replicated, which brax's PPO calls
    from brax.training import acting
    from brax.training.agents.ppo import networks as ppo_networks
    from brax.training.agents.ppo import train as ppo

    family, hp = spec.family, spec.ppo
    if "brax" not in family.implementations:
        raise ValueError(f"brax PPO has no {spec.network!r} network (MLPs only)")
    if hp.n_envs % hp.n_minibatches:
        raise ValueError(f"n_envs={hp.n_envs} must be divisible by {hp.n_minibatches}")

    with recorder.phase("setup"):
        env = _common.load_env(spec.env_name)
        wrap = _common.brax_training_wrapper(spec.env_name)
        network_factory = functools.partial(
            ppo_networks.make_ppo_networks,
            policy_hidden_layer_sizes=family.policy_hidden,
            value_hidden_layer_sizes=family.value_hidden,
        )

    def progress_fn(step: int, metrics: Any) -> None:
        recorder.progress_callback(step)

    with recorder.phase("train"):
        make_policy, params, _ = ppo.train(
            environment=env,
            num_timesteps=spec.total_steps,
            num_evals=spec.n_chunks + 1,
            run_evals=False,
            episode_length=hp.episode_length,
            wrap_env_fn=wrap,
            num_envs=hp.n_envs,
            unroll_length=hp.rollout_length,
            batch_size=hp.n_envs // hp.n_minibatches,
            num_minibatches=hp.n_minibatches,
            num_updates_per_batch=hp.n_epochs,
            num_resets_per_eval=0,
            learning_rate=hp.learning_rate,
            entropy_cost=hp.entropy_cost,
            discounting=hp.discounting,
            gae_lambda=hp.gae_lambda,
            clipping_epsilon=hp.clip_range,
            vf_loss_coefficient=hp.critic_loss_weight,
            reward_scaling=hp.reward_scaling,
            normalize_observations=hp.normalize_observations,
            network_factory=network_factory,
            seed=spec.seed,
            progress_fn=progress_fn,
        )

    with recorder.phase("eval"):
        eval_env = wrap(env, episode_length=spec.eval.episode_length)
        evaluator = acting.Evaluator(
            eval_env,
            functools.partial(make_policy, deterministic=True),
            num_eval_envs=spec.eval.n_envs,
            episode_length=spec.eval.episode_length,
            action_repeat=1,
            key=jax.random.PRNGKey(spec.seed + 10_000),
        )
        metrics = evaluator.run_evaluation(params, training_metrics={})

    n_params = sum(math.prod(x.shape) for x in jax.tree.leaves((params[1], params[2])))
    return {
        "total_steps": recorder.progress[-1][1] if recorder.progress else 0,
        "final_eval_reward": float(metrics["eval/episode_reward"]),
        "n_params": n_params,
        "versions": _common.package_versions(
            "jax", "jaxlib", "flax", "optax", "mujoco", "mujoco-mjx", "playground", "brax"
        ),
    }


if __name__ == "__main__":
    raise SystemExit(_common.main(run))
