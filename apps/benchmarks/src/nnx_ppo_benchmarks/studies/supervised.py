"""Supervised training against the ideal observer, and PPO fine-tuning after it (issue
65): perceptual decision making (fixed duration) with the cognitive app's GRU.

K seeds train in one `train_supervised` program (``--updates`` Adam steps on fresh
batches of ``--batch`` trials); each trained network is then scored as the cognitive
app scores its runs (`evaluate_trials`, deterministic, ``--trials-per-condition`` trials
of every condition, key ``seed + 10_000``) against the task's ideal observer (the mean
over conditions and drawn stimulus durations of ``Phi(c / 100 * sqrt(D) / (sqrt(2) *
sigma))``, durations floored to whole steps as the task floors them). With
``--ppo-steps`` every seed is then fine-tuned with PPO at the app's settings
(`train_many` from the supervised networks, ``make_network=result.make_network``) and
scored again. One JSON line goes to ``--out`` (and stdout).

Run from the repository root (the measurement quoted in the how-to *Supervised
training on a cognitive task*: a CPU)::

    PYTHONPATH=apps/benchmarks/src:apps/cognitive/src JAX_PLATFORMS=cpu \\
        python -m nnx_ppo_benchmarks.studies.supervised --seeds 0,1,2 --updates 1500 \\
        --ppo-steps 200000 --out supervised.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from typing import Any

import numpy as np

__all__ = ["ideal_observer", "main"]


def ideal_observer(task: Any, n: int = 200_000, seed: int = 0) -> float:
    """The ideal observer's accuracy on `PerceptualDecisionMaking` (fixed duration):
    conditions equally often, durations drawn as the task draws them (Monte Carlo over
    ``n`` durations per condition)."""
    import jax

    duration = task.durations["stimulus"]
    draws = jax.vmap(duration.sample)(jax.random.split(jax.random.key(seed), n))
    ms = np.asarray(duration.steps(draws, task.dt), np.float64) * task.dt
    phi = lambda x: 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))
    per_condition = [
        float(np.mean(phi(c / 100.0 * np.sqrt(ms) / (math.sqrt(2.0) * task.sigma))))
        for c in task.conditions["coherence"]
    ]
    return statistics.fmean(per_condition)


def _score(task: Any, network: Any, seed: int, trials: int) -> dict[str, float]:
    import jax

    from nnx_ppo.algorithms import evaluate_trials

    results = evaluate_trials(
        task, network, trials_per_condition=trials, key=jax.random.key(seed + 10_000)
    )
    return {"accuracy": results.accuracy, "decision_rate": results.decision_rate}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        prog="python -m nnx_ppo_benchmarks.studies.supervised",
        description=(__doc__ or "").split("\n\n")[0],
    )
    parser.add_argument("--dt", type=float, default=20.0, help="ms per step (the app's)")
    parser.add_argument("--hidden", type=int, default=100, help="GRU units (the app's)")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    parser.add_argument("--updates", type=int, default=1500, help="supervised Adam steps")
    parser.add_argument("--batch", type=int, default=64, help="trials per update")
    parser.add_argument("--lr", type=float, default=1e-3, help="supervised learning rate")
    parser.add_argument("--trials-per-condition", type=int, default=500, help="scoring")
    parser.add_argument("--ppo-steps", type=int, default=0, help="PPO fine-tuning env steps")
    parser.add_argument("--out", default=None, help="append the JSON line here")
    args = parser.parse_args(argv)

    from nnx_ppo_cognitive.networks import make_gru_actor_critic

    from nnx_ppo.algorithms import (
        EvalConfig,
        LogLevel,
        PPOConfig,
        TrainConfig,
        train_many,
    )
    from nnx_ppo.algorithms.supervised import SupervisedConfig, train_supervised
    from nnx_ppo.envs.cognitive import PerceptualDecisionMaking

    seeds = [int(s) for s in args.seeds.split(",")]
    task = PerceptualDecisionMaking(dt=args.dt)
    make = lambda rngs: make_gru_actor_critic(
        task.observation_size, task.action_size, rngs=rngs, hidden=args.hidden,
        entropy_weight=0.05,
    )  # fmt: skip
    config = SupervisedConfig(n_updates=args.updates, batch_size=args.batch,
                              learning_rate=args.lr)  # fmt: skip
    start = time.perf_counter()
    result = train_supervised(task, make, config, seeds=seeds)
    supervised_s = time.perf_counter() - start
    scores = [_score(task, result.network(i), s, args.trials_per_condition)
              for i, s in enumerate(seeds)]  # fmt: skip
    line: dict[str, Any] = {
        "task": "PerceptualDecisionMaking", "dt": args.dt, "hidden": args.hidden,
        "seeds": seeds, "updates": args.updates, "batch": args.batch, "lr": args.lr,
        "trials_per_condition": args.trials_per_condition,
        "ideal_observer": ideal_observer(task),
        "supervised_seconds": round(supervised_s, 1),
        "supervised_trials": args.updates * args.batch,
        "supervised": scores,
        "supervised_median_accuracy": statistics.median(s["accuracy"] for s in scores),
        "final_batch_accuracy": [float(np.mean(a[-50:])) for a in result.curves["accuracy"]],
        "machine": f"{os.cpu_count()} CPU cores, load {os.getloadavg()[0]:.1f}",
    }  # fmt: skip
    if args.ppo_steps:
        ppo = PPOConfig(
            n_envs=128,
            rollout_length=64,
            n_minibatches=4,
            n_epochs=4,
            learning_rate=1e-3,
            discounting_factor=0.99,
            gae_lambda=0.98,
            max_grad_norm=1.0,
            total_steps=args.ppo_steps,
            reset_mode="fresh",
            log_level=LogLevel.DEFAULT,
        )  # fmt: skip: the cognitive app's settings
        start = time.perf_counter()
        tuned = train_many(task, result.make_network, TrainConfig(ppo=ppo,
                           eval=EvalConfig(enabled=False)), seeds=seeds)  # fmt: skip
        line["ppo_seconds"] = round(time.perf_counter() - start, 1)
        line["ppo_steps"] = args.ppo_steps
        line["fine_tuned"] = [_score(task, tuned.network(i), s, args.trials_per_condition)
                              for i, s in enumerate(seeds)]  # fmt: skip
        line["fine_tuned_median_accuracy"] = statistics.median(
            s["accuracy"] for s in line["fine_tuned"]
        )
    text = json.dumps(line)
    print(text, flush=True)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text + "\n")
    return line


if __name__ == "__main__":
    main()
