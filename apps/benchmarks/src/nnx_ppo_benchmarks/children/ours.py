"""Child: this workspace's ``train_ppo`` (implementation ``ours``)."""

from __future__ import annotations

import math
from typing import Any

from nnx_ppo_benchmarks.children import _common
from nnx_ppo_benchmarks.children._graph import build_ring_graph
from nnx_ppo_benchmarks.seeds import final_return
from nnx_ppo_benchmarks.settings import RunSpec

__all__ = ["build_network", "make_envs", "make_train_config", "run"]


def make_envs(spec: RunSpec) -> tuple[Any, Any]:
    """``(train_env, eval_env)``: the environment (see `load_env`) with our episode and
    reward scaling wrappers (training episodes staggered by ``spec.stagger``);
    evaluation sees the raw rewards of whole episodes from step 0."""
    from nnx_ppo.wrappers import EpisodeWrapper, RewardScalingWrapper

    base = _common.load_env(spec.env_name)
    episode = EpisodeWrapper(base, spec.ppo.episode_length)
    train = EpisodeWrapper(base, spec.ppo.episode_length, stagger=spec.stagger)
    return RewardScalingWrapper(train, spec.ppo.reward_scaling), episode


def build_network(spec: RunSpec, obs_size: int, action_size: int, rngs: Any = None) -> Any:
    """The network of ``spec.network``, seeded with ``spec.seed`` (or built from
    ``rngs``, e.g. the ``nnx.Rngs(seed)`` a sweep's factory is given)."""
    from flax import nnx

    from nnx_ppo.networks.factories import make_lstm_actor_critic, make_mlp_actor_critic

    family, ppo = spec.family, spec.ppo
    rngs = nnx.Rngs(spec.seed) if rngs is None else rngs
    common = dict(
        rngs=rngs,
        activation=nnx.swish,
        normalize_obs=ppo.normalize_observations,
        entropy_weight=ppo.entropy_cost,
        min_std=ppo.min_std,
    )
    if family.kind == "mlp":
        return make_mlp_actor_critic(
            obs_size, action_size, family.policy_hidden, family.value_hidden, **common
        )
    if family.kind == "lstm":
        return make_lstm_actor_critic(
            obs_size,
            action_size,
            family.lstm_size,
            family.policy_hidden,
            family.value_hidden,
            **common,
        )
    if family.kind == "recurrent":
        from nnx_ppo.networks.factories import make_recurrent_actor_critic

        return make_recurrent_actor_critic(
            obs_size,
            action_size,
            family.lstm_size,
            family.policy_hidden,
            family.value_hidden,
            cell=family.cell,  # type: ignore[arg-type]
            layer_norm=family.layer_norm,
            torso_blocks=family.torso_blocks,
            **common,
        )
    if family.kind == "graph_rnn":
        from nnx_ppo.networks.graph import make_graph_actor_critic

        return make_graph_actor_critic(
            obs_size,
            action_size,
            family.memory_size,
            family.policy_hidden,
            family.value_hidden,
            **common,
        )
    from nnx_ppo.networks.adapter import PPOAdapter
    from nnx_ppo.networks.containers import Sequential
    from nnx_ppo.networks.graph import PopulationGraph
    from nnx_ppo.networks.normalizer import Normalizer
    from nnx_ppo.networks.sampling_layers import NormalTanhSampler
    from nnx_ppo.networks.utils import Filter

    graph = build_ring_graph(PopulationGraph(rngs), obs_size, action_size, nnx.swish)
    layers = [Normalizer(obs_size)] if ppo.normalize_observations else []
    return Sequential(
        [
            *layers,
            Filter(lambda x: {"obs": x}),
            graph,
            PPOAdapter(
                action=Sequential(
                    [
                        Filter("action_params"),
                        NormalTanhSampler(rngs, ppo.entropy_cost, ppo.min_std),
                    ]
                ),
                value=Filter("value"),
            ),
        ]
    )


def make_train_config(spec: RunSpec) -> Any:
    """The ``TrainConfig``: shared hyperparameters, brax's no-bootstrap-at-timeout,
    no evaluation during training, a log call at the end of every chunk."""
    from nnx_ppo.algorithms.config import EvalConfig, PPOConfig, TrainConfig

    per_call = spec.iterations_per_call
    extra = {} if per_call is None else {"iterations_per_call": per_call}
    config = PPOConfig(
        **spec.ppo_config_fields(),
        bootstrap_on_truncation=False,
        advantage_estimation="minibatch"
        if spec.implementation == "ours-minibatch-gae"
        else "rollout",
        **extra,
    )
    per_call = config.iterations_per_call
    if spec.iterations_per_chunk % per_call:
        raise ValueError(
            f"iterations_per_call={per_call} must divide the "
            f"{spec.iterations_per_chunk} iterations of a progress chunk."
        )
    return TrainConfig(
        ppo=config,
        eval=EvalConfig(enabled=False),
        seed=spec.seed,
        log_every_calls=spec.iterations_per_chunk // per_call,
    )


def _n_params(network: Any) -> int:
    from flax import nnx

    state = nnx.state(network, nnx.Param)
    import jax

    return sum(math.prod(x.shape) for x in jax.tree.leaves(state))


def run(spec: RunSpec, recorder: _common.Recorder) -> dict[str, Any]:
    """Train, then evaluate once; returns the result fields."""
    import jax

    from nnx_ppo.algorithms.ppo.train import train_ppo

    with recorder.phase("setup"):
        env, eval_env = make_envs(spec)
        network = build_network(spec, env.observation_size, env.action_size)
        config = make_train_config(spec)

    def log_fn(metrics: Any, step: int) -> None:
        recorder.progress_callback(step)

    with recorder.phase("train"):
        if spec.profile_dir:
            jax.profiler.start_trace(spec.profile_dir)
        try:
            result = train_ppo(env, network, config, log_fn=log_fn, progress=False)
        finally:
            if spec.profile_dir:
                jax.profiler.stop_trace()

    with recorder.phase("eval"):
        reward = final_return(
            eval_env,
            network,
            spec.seed,
            n_envs=spec.eval.n_envs,
            max_episode_length=spec.eval.episode_length,
        )
    return {
        "total_steps": int(result.total_steps),
        "final_eval_reward": reward,
        "n_params": _n_params(network),
        "iterations_per_call": config.ppo.iterations_per_call,
        "versions": _common.package_versions(
            "jax",
            "jaxlib",
            "flax",
            "optax",
            "mujoco",
            "mujoco-mjx",
            "playground",
            "nnx-modules",
            "nnx-graph",
            "nnx-ppo-train",
        ),
    }


if __name__ == "__main__":
    raise SystemExit(_common.main(run))
