"""Child: the public nnx-ppo 0.3.0 release (its own environment: its regular ``nnx_ppo``
package would shadow this workspace's namespace packages).

Its own ``EpisodeWrapper`` and ``RewardScalingWrapper`` (the episode wrapper starts each
episode at a random step counter in ``[0, episode_length / 2)``, its design). Built-in
evaluation is disabled during training (it would otherwise run at step 0); the final
evaluation calls its ``eval_rollout`` the way its ``train_ppo`` does, on the raw
environment cut at ``episode_length`` steps. ``log_fn`` is called after every
iteration, after a host synchronisation.
"""

from __future__ import annotations

import math
from typing import Any

from nnx_ppo_benchmarks.children import _common
from nnx_ppo_benchmarks.children._graph import build_ring_graph
from nnx_ppo_benchmarks.settings import NetworkFamily, RunSpec

__all__ = ["build_network", "final_evaluation", "make_train_config", "run", "wrap_env"]


def build_network(
    spec: RunSpec, obs_size: int, action_size: int, family: NetworkFamily | None = None
) -> Any:
    """The network of ``family`` (by default ``spec.family``, the one ``spec.network``
    names) from nnx-ppo 0.3.0's modules."""
    import jax.numpy as jnp
    from flax import nnx

    from nnx_ppo.networks.adapter import PPOAdapter
    from nnx_ppo.networks.containers import Sequential
    from nnx_ppo.networks.factories import make_mlp_actor_critic, make_mlp_layers
    from nnx_ppo.networks.graph import PopulationGraph
    from nnx_ppo.networks.normalizer import Normalizer
    from nnx_ppo.networks.recurrent import LSTM
    from nnx_ppo.networks.sampling_layers import NormalTanhSampler
    from nnx_ppo.networks.types import StatefulModule, StatefulModuleOutput

    family, hp = family or spec.family, spec.ppo
    rngs = nnx.Rngs(spec.seed)

    def sampler() -> Any:
        return NormalTanhSampler(rngs, entropy_weight=hp.entropy_cost, min_std=hp.min_std)

    if family.kind == "mlp":
        return make_mlp_actor_critic(
            obs_size,
            action_size,
            list(family.policy_hidden),
            list(family.value_hidden),
            rngs,
            activation=nnx.swish,
            normalize_obs=hp.normalize_observations,
            entropy_weight=hp.entropy_cost,
            min_std=hp.min_std,
        )
    front = [Normalizer(obs_size)] if hp.normalize_observations else []
    if family.kind == "lstm":
        size = family.lstm_size

        def head(hidden: tuple[int, ...], out: int) -> list[Any]:
            return make_mlp_layers(
                [size, *hidden, out], rngs, nnx.swish, activation_last_layer=False
            )

        adapter = PPOAdapter(
            action=Sequential(
                [
                    LSTM(obs_size, size, rngs),
                    *head(family.policy_hidden, 2 * action_size),
                    sampler(),
                ]
            ),
            value=Sequential([LSTM(obs_size, size, rngs), *head(family.value_hidden, 1)]),
        )
        return Sequential([*front, adapter])

    class _Pick(StatefulModule):
        """``x -> {"obs": x}`` (``key=None``) or ``x -> x[key]``."""

        def __init__(self, key: str | None) -> None:
            self.key = key

        def __call__(self, state: Any, x: Any, rollout_extras: Any = None) -> Any:
            out = {"obs": x} if self.key is None else x[self.key]
            return StatefulModuleOutput((), out, jnp.array(0.0), {}, None)

    graph = build_ring_graph(PopulationGraph(rngs), obs_size, action_size, nnx.swish)
    adapter = PPOAdapter(
        action=Sequential([_Pick("action_params"), sampler()]), value=_Pick("value")
    )
    return Sequential([*front, _Pick(None), graph, adapter])


def make_train_config(spec: RunSpec, eval_config: Any = None) -> Any:
    """Its ``TrainConfig`` with the shared hyperparameters; built-in evaluation off
    unless ``eval_config`` (one of its ``EvalConfig``) is given."""
    from nnx_ppo.algorithms.config import EvalConfig, PPOConfig, TrainConfig

    return TrainConfig(
        ppo=PPOConfig(**spec.ppo_config_fields(), normalize_advantages=True),
        eval=eval_config or EvalConfig(enabled=False),
        seed=spec.seed,
    )


def wrap_env(base: Any, spec: RunSpec) -> Any:
    """Its own episode and reward-scaling wrappers around ``base``."""
    from nnx_ppo.wrappers.episode_wrapper import EpisodeWrapper
    from nnx_ppo.wrappers.reward_scaling_wrapper import RewardScalingWrapper

    episode = EpisodeWrapper(base, spec.ppo.episode_length)
    return RewardScalingWrapper(episode, spec.ppo.reward_scaling)


def final_evaluation(base: Any, network: Any, spec: RunSpec) -> float:
    """Mean return of its ``eval_rollout`` (as its ``train_ppo`` calls it) on ``base``,
    cut at ``spec.eval.episode_length`` steps, seeded with ``spec.seed + 10_000``."""
    import jax
    from flax import nnx

    from nnx_ppo.algorithms import rollout

    network.eval()
    evaluate = nnx.jit(rollout.eval_rollout, static_argnums=(0, 2, 3, 5, 6))
    metrics = evaluate(
        base,
        network,
        spec.eval.n_envs,
        spec.eval.episode_length,
        jax.random.key(spec.seed + 10_000),
        None,
        make_train_config(spec).eval.logging_level,
    )
    network.train()
    return float(metrics["eval/episode_reward/mean"])


def run(spec: RunSpec, recorder: _common.Recorder) -> dict[str, Any]:
    """Train, then evaluate once; returns the result fields."""
    import jax
    from flax import nnx

    from nnx_ppo.algorithms.ppo import train_ppo

    with recorder.phase("setup"):
        base = _common.load_env(spec.env_name)
        env = wrap_env(base, spec)
        network = build_network(spec, base.observation_size, base.action_size)
        config = make_train_config(spec)

    def log_fn(metrics: Any, step: int) -> None:
        recorder.progress_callback(step)

    with recorder.phase("train"):
        result = train_ppo(env, network, config, log_fn=log_fn)

    with recorder.phase("eval"):
        reward = final_evaluation(base, network, spec)

    params = nnx.state(network, nnx.Param)
    return {
        "total_steps": int(result.total_steps),
        "final_eval_reward": reward,
        "n_params": sum(math.prod(x.shape) for x in jax.tree.leaves(params)),
        "versions": _common.package_versions(
            "jax", "jaxlib", "flax", "optax", "mujoco", "mujoco-mjx", "playground", "nnx-ppo"
        ),
    }


if __name__ == "__main__":
    raise SystemExit(_common.main(run))
