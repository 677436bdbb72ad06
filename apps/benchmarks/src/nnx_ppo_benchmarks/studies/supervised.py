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

    from nnx_ppo_cognitive.cli import make_network_factory, parse_args, train_config
    from nnx_ppo_cognitive.tasks import resolve_task

    from nnx_ppo.algorithms import train_many
    from nnx_ppo.algorithms.supervised import SupervisedConfig, train_supervised

    seeds = [int(s) for s in args.seeds.split(",")]
    # The app's task, network and PPO settings, as `nnx-ppo-cognitive --task pdm` has them.
    app = parse_args(["--task", "pdm", "--network", "gru", "--dt", str(args.dt),
                      "--hidden", str(args.hidden), "--steps", str(max(args.ppo_steps, 1)),
                      "--output-dir", "unused"])  # fmt: skip
    task = resolve_task(app.task).make(dt=app.dt)
    make = make_network_factory(app, task)
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
        start = time.perf_counter()
        tuned = train_many(task, result.make_network, train_config(app), seeds=seeds)
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
