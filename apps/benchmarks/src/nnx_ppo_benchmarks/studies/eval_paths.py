"""One network, two evaluators: does brax's evaluation path score a policy as ours does?

Trains the suite's ``ours`` child on ``brax/hopper`` for one seed (its settings, 307,200
steps, ``mlp_small``), then evaluates the trained network three times each (128
environments x 1000 steps, deterministic, keys ``seed + 10_000 + k``) with ours'
``evaluate`` and with brax 0.14.2's ``acting.Evaluator`` on brax's training wrapper
(how the harness's ``brax`` child scores brax PPO), and prints one JSON line
(``results/suite/cpu-tasks/eval_paths-hopper-seed9.json``). Run from the repository
root with the harness's venv of ours (it has brax)::

    PYTHONPATH=apps/benchmarks/src ~/.cache/nnx-ppo-bench/venvs/ours-jax0.9.2-py311/bin/python \\
        -m nnx_ppo_benchmarks.studies.eval_paths 9
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
from collections.abc import Sequence
from typing import Any

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``SEED``."""
    parser = argparse.ArgumentParser(
        prog="python -m nnx_ppo_benchmarks.studies.eval_paths",
        description=(__doc__ or "").splitlines()[0],
    )
    parser.add_argument("seed", type=int, help="the training seed")
    seed = parser.parse_args(argv).seed

    import jax
    from brax.training import acting

    from nnx_ppo.algorithms import train_ppo
    from nnx_ppo.algorithms.observe.evaluation import evaluate
    from nnx_ppo_benchmarks.children._common import brax_training_wrapper, load_env
    from nnx_ppo_benchmarks.children.ours import build_network, make_envs, make_train_config
    from nnx_ppo_benchmarks.studies._spec import suite_run

    task = "brax/hopper"
    spec = suite_run(task, "mlp_small", seed)
    env, eval_env = make_envs(spec)
    network = build_network(spec, env.observation_size, env.action_size)
    config = dataclasses.replace(make_train_config(spec), log_every_calls=10**6)
    train_ppo(env, network, config, progress=False)
    keys = [jax.random.PRNGKey(seed + 10_000 + k) for k in range(3)]
    ours = [
        float(evaluate(eval_env, network, key, n_envs=128)["eval/episode_reward/mean"])
        for key in keys
    ]

    network.eval()  # the samplers' mean action, as brax's deterministic policy

    def make_policy(params: Any, deterministic: bool = True) -> Any:
        del params, deterministic

        def policy(obs: Any, key: Any) -> tuple[Any, dict[str, Any]]:
            out = network(network.initialize_state(obs.shape[0]), obs)
            return out.output.actions, {}

        return policy

    wrap = brax_training_wrapper(task)
    brax = []
    for key in keys:
        evaluator = acting.Evaluator(
            wrap(load_env(task), episode_length=1000),
            functools.partial(make_policy, deterministic=True),
            num_eval_envs=128,
            episode_length=1000,
            action_repeat=1,
            key=key,
        )
        metrics = evaluator.run_evaluation(None, training_metrics={})
        brax.append(float(metrics["eval/episode_reward"]))
    print(json.dumps({"task": task, "seed": seed, "ours_evaluate": ours, "brax_evaluator": brax}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
