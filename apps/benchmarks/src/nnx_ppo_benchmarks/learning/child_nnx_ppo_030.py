"""Child: one suite cell with nnx-ppo 0.3.0's ``train_ppo`` (in its own environment).

Networks as in the speed benchmark's child (:mod:`nnx_ppo_benchmarks.children.
nnx_ppo_030`), its own episode and reward-scaling wrappers (its episode wrapper
staggers the starts; for a cell with ``stagger`` off, `_from_step_zero` sets them
back to 0), its built-in periodic
evaluation (on the masked environment, cut at the task's episode length) for the
learning curve and its ``eval_rollout`` for the final return. It has no GRU and no
discrete-action sampler, so the runner never gives it those cells.
"""

from __future__ import annotations

import importlib
import time
from typing import Any

from nnx_ppo_benchmarks.children import nnx_ppo_030
from nnx_ppo_benchmarks.learning._child import main
from nnx_ppo_benchmarks.learning.families import FAMILIES, STACK
from nnx_ppo_benchmarks.learning.tasks import TASKS, make_env, staggered
from nnx_ppo_benchmarks.settings import EvalSettings, NetworkFamily, PPOSettings, RunSpec

__all__ = ["build_network", "run_seed"]


def build_network(family: str, spec: RunSpec, obs_size: int, action_size: int) -> Any:
    """``family``'s network (a key of :data:`~.families.FAMILIES`) from nnx-ppo 0.3.0's
    modules: the speed benchmark's builder for the MLP, LSTM and graph kinds, with the
    family's head sizes."""
    this = FAMILIES[family]
    kind = this.network_family
    if kind in ("mlp", "lstm", "graph"):
        network = NetworkFamily(
            this.name,
            this.description,
            kind,
            policy_hidden=this.policy_hidden,
            value_hidden=this.value_hidden,
            lstm_size=this.recurrent_size,
        )
        return nnx_ppo_030.build_network(spec, obs_size, action_size, network)
    if kind != "mlp_stack":
        raise ValueError(f"nnx-ppo 0.3.0 cannot build family {family!r}")
    import jax.numpy as jnp
    from flax import nnx

    from nnx_ppo.networks.adapter import PPOAdapter
    from nnx_ppo.networks.containers import Concat, Sequential
    from nnx_ppo.networks.delay import Delay
    from nnx_ppo.networks.factories import make_mlp_layers
    from nnx_ppo.networks.normalizer import Normalizer
    from nnx_ppo.networks.sampling_layers import NormalTanhSampler
    from nnx_ppo.networks.utils import Filter, Scale

    hp, rngs = spec.ppo, nnx.Rngs(spec.seed)
    sample = jnp.zeros((obs_size,), jnp.float32)
    names = [f"t{k}" for k in range(STACK)]
    lines = {"t0": Scale(1.0), **{f"t{k}": Delay(sample, k) for k in range(1, STACK)}}
    stack = [Filter({name: (lambda x: x) for name in names}), Concat(lines)]
    width = STACK * obs_size
    actor = make_mlp_layers([width, *this.policy_hidden, 2 * action_size], rngs, nnx.swish, False)
    critic = make_mlp_layers([width, *this.value_hidden, 1], rngs, nnx.swish, False)
    sampler = NormalTanhSampler(rngs, entropy_weight=hp.entropy_cost, min_std=hp.min_std)
    adapter = PPOAdapter(action=Sequential([*actor, sampler]), value=Sequential(critic))
    return Sequential([Normalizer(obs_size), *stack, adapter])


def _from_step_zero(env: Any) -> Any:
    """``env`` (nnx-ppo 0.3.0's reward scaling around its episode wrapper) with every
    episode starting at step 0, the way ours does without ``stagger``."""
    import jax.numpy as jnp

    episodes = env.env
    draw = episodes.reset

    def reset(rng: Any) -> Any:
        state = draw(rng)
        state.info["step_counter"] = jnp.zeros_like(state.info["step_counter"])
        return state

    episodes.reset = reset
    return env


def run_seed(cell: dict[str, Any], seed: int) -> dict[str, Any]:
    """Train and evaluate one seed of ``cell``; returns its curve and final return."""
    # nnx-ppo 0.3.0's modules have this workspace's import paths; the type checker sees
    # the workspace's, so they are looked up untyped here.
    eval_config: Any = importlib.import_module("nnx_ppo.algorithms.config").EvalConfig
    train_ppo: Any = importlib.import_module("nnx_ppo.algorithms.ppo").train_ppo

    task = TASKS[cell["task"]]
    ppo = PPOSettings(**{**cell["ppo"], "episode_length": task.episode_length})
    spec = RunSpec(
        implementation="nnx-ppo-0.3.0",
        network="mlp_small",
        seed=seed,
        total_steps=cell["total_steps"],
        ppo=ppo,
        eval=EvalSettings(n_envs=cell["final_eval_envs"], episode_length=task.episode_length),
    )
    base = make_env(task)
    network = build_network(cell["family"], spec, base.observation_size, base.action_size)
    config = nnx_ppo_030.make_train_config(
        spec,
        eval_config(
            every_steps=cell["total_steps"] // task.n_evals,
            n_envs=cell["eval_envs"],
            max_episode_length=task.episode_length,
            logging_percentiles=None,
        ),
    )
    start = time.perf_counter()
    env = nnx_ppo_030.wrap_env(base, spec)
    env = env if staggered(cell) else _from_step_zero(env)
    result = train_ppo(env, network, config, eval_env=base)
    train_s = time.perf_counter() - start
    return {
        "seed": seed,
        "curve": [[m["step"], float(m["eval/episode_reward/mean"])] for m in result.eval_history],
        "final": nnx_ppo_030.final_evaluation(base, network, spec),
        "total_steps": int(result.total_steps),
        "train_s": train_s,
    }


if __name__ == "__main__":
    raise SystemExit(main(run_seed))
