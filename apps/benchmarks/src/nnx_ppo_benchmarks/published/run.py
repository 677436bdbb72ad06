"""Train one benchmark's family for all seeds as one `train_many` program.

`run_cell` builds the benchmark's environment (`GymnaxEnv` behind `MaskObservation`
and `wrap_for_training`), the family's network for every seed, and the translated
`TrainConfig`; trains the seeds together; then evaluates every run's final
deterministic policy on fresh episodes.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from nnx_ppo_benchmarks.published.tasks import Benchmark
from nnx_ppo_benchmarks.seeds import final_return, train_seeds

__all__ = ["build_network", "make_config", "make_envs", "run_cell"]

N_CURVE_POINTS = 10
"""Evaluations during training (plus one before it)."""


def make_envs(bench: Benchmark) -> tuple[Any, Any]:
    """``(train_env, eval_env)``: the gymnax environment through the public adapter, its
    velocities masked, wrapped for training (staggered starts) and for evaluation
    (whole episodes)."""
    from nnx_ppo.envs import GymnaxEnv
    from nnx_ppo.wrappers import EpisodeWrapper, MaskObservation, wrap_for_training

    if bench.env == "tmaze":
        from nnx_ppo_benchmarks.published.tmaze import TMaze

        base: Any = GymnaxEnv(TMaze(), time_limit=False)
    elif bench.env == "pixel_tmaze":
        from nnx_ppo_benchmarks.published.pixel_tmaze import PixelTMaze

        # The image's width is the corridor's cells plus the start and the junction.
        assert bench.image is not None
        base = GymnaxEnv(PixelTMaze(hallway_length=bench.image[1] - 2), time_limit=False)
    else:
        base = GymnaxEnv.make(bench.env, time_limit=False)
    if bench.keep is not None:
        base = MaskObservation(base, keep=bench.keep)
    train_env = wrap_for_training(base, episode_length=bench.episode_length)
    return train_env, EpisodeWrapper(base, bench.episode_length)


def build_network(bench: Benchmark, family: str, obs_size: int, action_size: int, rngs: Any) -> Any:
    """The network of ``family`` (one of ``bench.families``) for ``bench``, its
    parameters drawn from ``rngs``."""
    from flax import nnx

    from nnx_ppo.networks.adapter import PPOAdapter
    from nnx_ppo.networks.containers import Sequential
    from nnx_ppo.networks.conv import ConvEncoder
    from nnx_ppo.networks.feedforward import MLP, Dense
    from nnx_ppo.networks.normalizer import Normalizer
    from nnx_ppo.networks.recurrent import GRU, LSTM
    from nnx_ppo.networks.sampling_layers import CategoricalSampler, NormalTanhSampler

    if family not in bench.families:
        raise ValueError(
            f"family={family!r} is not one of {bench.name}'s families; choose from "
            f"{', '.join(bench.families)}"
        )
    activation = {"relu": nnx.relu, "tanh": nnx.tanh}[bench.activation]
    width = bench.recurrent_size
    if bench.discrete:
        sampler: Any = CategoricalSampler(rngs, bench.entropy_cost)
        outputs = action_size
    else:
        sampler = NormalTanhSampler(
            rngs,
            bench.entropy_cost,
            resample_every=bench.resample_every,
            action_size=action_size,
        )
        outputs = 2 * action_size

    def port(out: int) -> list[Any]:
        if bench.image is not None:
            # A small conv torso (the MinAtar paper's 3x3 conv of 16, "SAME" so the
            # 3-row image keeps its arms), then memory or a dense layer of its width.
            encoder = ConvEncoder(bench.image, rngs, channels=(16,), kernel_sizes=3, dense=(width,))
            middle: Any = (
                LSTM(width, width, rngs=rngs)
                if family == "conv_lstm"
                else Dense(width, width, rngs, activation=activation)
            )
            head = MLP(width, bench.heads, out, rngs=rngs, activation=activation)
            return [encoder, middle, head]
        if family == "mlp":
            return [MLP(obs_size, (width, *bench.heads), out, rngs=rngs, activation=activation)]
        cell = (LSTM if family == "lstm" else GRU)(obs_size, width, rngs=rngs)
        return [cell, MLP(width, bench.heads, out, rngs=rngs, activation=activation)]

    adapter = PPOAdapter(action=Sequential([*port(outputs), sampler]), value=Sequential(port(1)))
    return Sequential([Normalizer(obs_size), adapter]) if bench.normalize_obs else adapter


def make_config(bench: Benchmark, total_steps: int, eval_envs: int) -> Any:
    """The translated `TrainConfig` (seed 0; `train_many` gives each run its own) for
    ``total_steps`` rounded up to whole iterations, with about `N_CURVE_POINTS`
    evaluations."""
    import dataclasses

    from nnx_ppo.algorithms import EvalConfig, PPOConfig, TrainConfig
    from nnx_ppo.algorithms.core.schedules import linear_decay

    fields = dict(bench.ppo)
    per_iteration = fields["n_envs"] * fields["rollout_length"]
    iterations = max(1, -(-total_steps // per_iteration))
    every = max(1, iterations // N_CURVE_POINTS)
    # Device calls of whole iterations that divide the run: the budget is exactly the
    # published one rounded up to whole rollouts, as SB3's `learn` rounds it.
    per_call = max(d for d in range(1, every + 1) if iterations % d == 0)
    ppo = PPOConfig(
        total_steps=iterations * per_iteration,
        reset_mode="fresh",
        iterations_per_call=per_call,
        **fields,
    )
    if bench.linear_decay:
        ppo = dataclasses.replace(ppo, learning_rate=linear_decay(ppo))
    return TrainConfig(
        ppo=ppo,
        eval=EvalConfig(
            every_steps=every * per_iteration,
            n_envs=eval_envs,
            max_episode_length=bench.episode_length,
        ),
    )


def run_cell(
    bench: Benchmark,
    family: str,
    seeds: Sequence[int],
    *,
    total_steps: int | None = None,
    eval_envs: int = 32,
    final_eval_envs: int = 128,
) -> list[dict[str, Any]]:
    """Train ``seeds`` of ``family`` on ``bench`` as one `train_many` program.

    Args:
        bench: The benchmark.
        family: ``"lstm"``, ``"gru"`` or ``"mlp"``.
        seeds: One run per seed.
        total_steps: Budget override (``None``: the published budget).
        eval_envs: Episodes per evaluation during training.
        final_eval_envs: Episodes of each run's final deterministic evaluation.

    Returns:
        One record per seed: ``seed``, ``curve`` (``[[step, mean return], ...]``),
        ``final`` (mean return of the final evaluation), ``total_steps`` and
        ``sweep_s`` (the sweep's wall time, compilation included).
    """
    env, eval_env = make_envs(bench)
    budget = bench.total_steps if total_steps is None else total_steps
    config = make_config(bench, budget, eval_envs)
    make_network = functools.partial(
        build_network, bench, family, env.observation_size, env.action_size
    )
    result, sweep_s = train_seeds(env, make_network, config, seeds, eval_env=eval_env)
    records = []
    for i, seed in enumerate(result.seeds):
        final = final_return(
            eval_env,
            result.network(i),
            seed,
            n_envs=final_eval_envs,
            max_episode_length=bench.episode_length,
        )
        records.append(
            {
                "seed": seed,
                "curve": [
                    [step, m["eval/episode_reward/mean"]] for step, m in result.eval_histories[i]
                ],
                "final": float(final),
                "total_steps": int(result.total_steps),
                "sweep_s": sweep_s,
            }
        )
    return records
