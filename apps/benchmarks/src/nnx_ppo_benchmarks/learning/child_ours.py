"""Child: one suite cell (task, family, seeds) with this workspace's trainer.

Command line ``--cell JSON --out PATH [--one-at-a-time]`` (see :mod:`.cli`). The cell's
seeds train together as one `train_many` program (`run_seeds`): one compilation, the
runs vmapped, every run's periodic evaluations its learning curve, then each run's
network (``result.network(i)``) evaluated on its own. Every network family of the suite
goes through `train_many` (their factories build one structure for every seed). With
``--one-at-a-time`` the seeds run one after another with ``train_ppo`` (`run_seed`):
the reference that run ``i`` of the sweep equals to float32 rounding.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from nnx_ppo_benchmarks.children import ours
from nnx_ppo_benchmarks.children._graph import build_layered_graph, build_ring_graph
from nnx_ppo_benchmarks.learning._child import main
from nnx_ppo_benchmarks.learning.families import FAMILIES, STACK
from nnx_ppo_benchmarks.learning.tasks import (
    TASKS,
    Task,
    lr_schedule,
    make_env,
    stagger_steps,
    staggered,
)
from nnx_ppo_benchmarks.seeds import final_return, train_seeds
from nnx_ppo_benchmarks.settings import PPOSettings, RunSpec

__all__ = ["build_network", "run_seed", "run_seeds"]


def _sampler(task: Task, rngs: Any, ppo: PPOSettings) -> tuple[Any, int]:
    """The action sampler and the parameters it takes per action dimension."""
    from nnx_ppo.networks.sampling_layers import CategoricalSampler, NormalTanhSampler

    if task.discrete:
        return CategoricalSampler(rngs, ppo.entropy_cost), 1
    return NormalTanhSampler(rngs, ppo.entropy_cost, ppo.min_std), 2


def _frame_stack(obs_size: int) -> Any:
    """``[B, F] -> [B, STACK * F]``: this step's observation and the previous ones."""
    import jax
    import jax.numpy as jnp

    from nnx_ppo.networks.containers import Concat, Sequential
    from nnx_ppo.networks.delay import Delay
    from nnx_ppo.networks.utils import Filter, Scale

    names = [f"t{k}" for k in range(STACK)]
    sample = jax.ShapeDtypeStruct((obs_size,), jnp.float32)
    lines = {"t0": Scale(1.0), **{f"t{k}": Delay(sample, k) for k in range(1, STACK)}}
    return Sequential([Filter(lambda x: dict.fromkeys(names, x)), Concat(lines)])


def build_network(task: Task, family: str, obs_size: int, action_size: int, rngs: Any) -> Any:
    """The network of ``family`` (a key of :data:`~.families.FAMILIES`) for ``task``,
    its parameters drawn from ``rngs`` (an ``nnx.Rngs``; the suite passes
    ``nnx.Rngs(seed)``, the factory `train_many` calls once per seed)."""
    from flax import nnx

    from nnx_ppo.networks.adapter import PPOAdapter
    from nnx_ppo.networks.containers import Sequential
    from nnx_ppo.networks.factories import make_lstm_actor_critic, make_mlp_actor_critic
    from nnx_ppo.networks.feedforward import MLP
    from nnx_ppo.networks.graph import PopulationGraph, make_graph_actor_critic
    from nnx_ppo.networks.normalizer import Normalizer
    from nnx_ppo.networks.recurrent import GRU, SimpleRNN
    from nnx_ppo.networks.utils import Filter

    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; choose from {', '.join(FAMILIES)}")
    ppo = PPOSettings()
    spec = FAMILIES[family]
    kind, policy, value = spec.network_family, spec.policy_hidden, spec.value_hidden
    width = spec.recurrent_size
    common: dict[str, Any] = dict(
        rngs=rngs,
        activation=nnx.swish,
        entropy_weight=ppo.entropy_cost,
        min_std=ppo.min_std,
        action_distribution="categorical" if task.discrete else "normal_tanh",
    )
    if kind == "mlp":
        return make_mlp_actor_critic(obs_size, action_size, policy, value, **common)
    if kind == "lstm":
        return make_lstm_actor_critic(obs_size, action_size, width, policy, value, **common)
    if kind == "graph_rnn":
        # The library's recommended graph: per port, a tanh population with a delay-1
        # self-loop, then the heads (the rnn family as PopulationGraphs).
        return make_graph_actor_critic(obs_size, action_size, width, policy, value, **common)
    sampler, per_action = _sampler(task, rngs, ppo)
    head_out = per_action * action_size
    if kind in ("gru", "rnn"):
        cell = GRU if kind == "gru" else SimpleRNN
        adapter = PPOAdapter(
            action=Sequential(
                [
                    cell(obs_size, width, rngs=rngs),
                    MLP(width, policy, head_out, activation=nnx.swish, rngs=rngs),
                    sampler,
                ]
            ),
            value=Sequential(
                [
                    cell(obs_size, width, rngs=rngs),
                    MLP(width, value, 1, activation=nnx.swish, rngs=rngs),
                ]
            ),
        )
        return Sequential([Normalizer(obs_size), adapter])
    if kind == "graph_mlp":
        # The mlp family as one feedforward chain of populations per port, with the
        # library's default initialisation.
        def chain(output: str, size: int, hidden: tuple[int, ...]) -> Any:
            return build_layered_graph(
                PopulationGraph(rngs), obs_size, output, size, hidden, nnx.swish
            )

        adapter = PPOAdapter(
            action=Sequential(
                [chain("action_params", head_out, policy), Filter("action_params"), sampler]
            ),
            value=Sequential([chain("value", 1, value), Filter("value")]),
        )
        return Sequential([Normalizer(obs_size), Filter(lambda x: {"obs": x}), adapter])
    if kind == "mlp_stack":
        stacked = STACK * obs_size
        adapter = PPOAdapter(
            action=Sequential([MLP(stacked, policy, head_out, rngs=rngs), sampler]),
            value=MLP(stacked, value, 1, rngs=rngs),
        )
        return Sequential([Normalizer(obs_size), _frame_stack(obs_size), adapter])
    if kind in ("graph", "graph_split"):

        def ring() -> Any:
            return build_ring_graph(
                PopulationGraph(rngs), obs_size, action_size, nnx.swish, per_action
            )

        front = [Normalizer(obs_size), Filter(lambda x: {"obs": x})]
        if kind == "graph_split":
            adapter = PPOAdapter(
                action=Sequential([ring(), Filter("action_params"), sampler]),
                value=Sequential([ring(), Filter("value")]),
            )
            return Sequential([*front, adapter])
        adapter = PPOAdapter(
            action=Sequential([Filter("action_params"), sampler]), value=Filter("value")
        )
        return Sequential([*front, ring(), adapter])
    raise ValueError(f"family {family!r} builds an unknown kind of network {kind!r}")


def _setup(cell: dict[str, Any]) -> tuple[Task, Any, Any, Any, Any]:
    """The cell's task, training and evaluation environments, network factory and base
    ``TrainConfig`` (seed 0; every run replaces it with its own)."""
    import dataclasses
    import functools

    from nnx_ppo.algorithms.config import EvalConfig
    from nnx_ppo.algorithms.core.schedules import linear_decay
    from nnx_ppo.wrappers import EpisodeWrapper, RewardScalingWrapper

    task = TASKS[cell["task"]]
    ppo = PPOSettings(**cell["ppo"])
    base = make_env(task)
    eval_env = EpisodeWrapper(base, task.episode_length)
    # Staggered: nnx-ppo 0.3.0's treatment, a fresh reset (a new first step) per episode.
    stagger = stagger_steps(task, staggered(cell))
    episodes = EpisodeWrapper(base, task.episode_length, stagger=stagger)
    env = RewardScalingWrapper(episodes, ppo.reward_scaling)
    family = FAMILIES[cell["family"]]
    make_network = functools.partial(
        build_network, task, family.name, base.observation_size, base.action_size
    )
    # The benchmark's configuration (shared hyperparameters, no bootstrap at timeouts),
    # with one progress chunk per evaluation.
    spec = RunSpec(
        implementation="ours",
        network="mlp_small",
        seed=0,
        total_steps=cell["total_steps"],
        n_chunks=task.n_evals,
        ppo=ppo,
    )
    config = ours.make_train_config(spec)
    reset_mode = "fresh" if stagger else config.ppo.reset_mode
    config = dataclasses.replace(
        config,
        ppo=dataclasses.replace(
            config.ppo, normalize_values=family.normalize_values, reset_mode=reset_mode
        ),
        eval=EvalConfig(
            every_steps=cell["total_steps"] // task.n_evals,
            n_envs=cell["eval_envs"],
            max_episode_length=task.episode_length,
        ),
    )
    if lr_schedule(cell) == "linear":
        rate = linear_decay(config)
        config = dataclasses.replace(
            config, ppo=dataclasses.replace(config.ppo, learning_rate=rate)
        )
    return task, env, eval_env, make_network, config


def _record(
    cell: dict[str, Any],
    task: Task,
    eval_env: Any,
    seed: int,
    network: Any,
    history: list[tuple[int, dict[str, float]]],
    total_steps: int,
) -> dict[str, Any]:
    """One run's record: its curve (the periodic evaluations), the final return of a
    deterministic evaluation on ``final_eval_envs`` fresh episodes, and the same on each
    of the task's ``cross_eval`` tasks (``final_on``), keyed by the seed."""
    from nnx_ppo.wrappers import EpisodeWrapper

    def final(env: Any) -> float:
        n_envs = cell["final_eval_envs"]
        return final_return(
            env, network, seed, n_envs=n_envs, max_episode_length=task.episode_length
        )

    record = {
        "seed": seed,
        "curve": [[step, m["eval/episode_reward/mean"]] for step, m in history],
        "final": final(eval_env),
        "total_steps": int(total_steps),
    }
    if task.cross_eval:
        record["final_on"] = {
            other: final(EpisodeWrapper(make_env(TASKS[other]), TASKS[other].episode_length))
            for other in task.cross_eval
        }
    return record


def run_seeds(cell: dict[str, Any], seeds: Sequence[int]) -> list[dict[str, Any]]:
    """Train ``seeds`` of ``cell`` as one `train_many` program and evaluate every run.

    Run ``i`` is the run `run_seed` trains for ``seeds[i]`` (the same initial network,
    keys and updates; `train_many` agrees with ``train_ppo`` to float32 rounding).

    Returns:
        One record per seed, in order: ``seed``, ``curve``, ``final``, ``total_steps``,
        ``train_s`` (the sweep's wall time, compilation included, divided by the number
        of runs: this run's share), ``sweep_s`` (that whole wall time) and
        ``sweep_runs`` (the number of runs trained together).
    """
    task, env, eval_env, make_network, config = _setup(cell)
    result, sweep_s = train_seeds(env, make_network, config, seeds, eval_env=eval_env)
    records = []
    for i, seed in enumerate(result.seeds):
        history = result.eval_histories[i]
        record = _record(cell, task, eval_env, seed, result.network(i), history, result.total_steps)
        record.update(train_s=sweep_s / result.n_runs, sweep_s=sweep_s, sweep_runs=result.n_runs)
        records.append(record)
    return records


def run_seed(cell: dict[str, Any], seed: int) -> dict[str, Any]:
    """Train and evaluate one seed of ``cell`` with ``train_ppo`` (the reference path:
    ``--one-at-a-time`` runs a cell's seeds so, one after another).

    Returns:
        The record of `run_seeds`, with ``train_s`` this run's own wall time
        (compilation included) and ``sweep_runs`` 1.
    """
    import dataclasses

    from flax import nnx

    from nnx_ppo.algorithms.ppo.train import train_ppo

    task, env, eval_env, make_network, config = _setup(cell)
    network = make_network(nnx.Rngs(seed))
    start = time.perf_counter()
    result = train_ppo(
        env, network, dataclasses.replace(config, seed=seed), eval_env=eval_env, progress=False
    )
    train_s = time.perf_counter() - start
    record = _record(cell, task, eval_env, seed, network, result.eval_history, result.total_steps)
    record.update(train_s=train_s, sweep_s=train_s, sweep_runs=1)
    return record


if __name__ == "__main__":
    raise SystemExit(main(run_seed, sweep_fn=run_seeds))
