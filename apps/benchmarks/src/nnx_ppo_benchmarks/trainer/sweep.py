"""K runs in one program (`train_many`) against the same K runs one after another.

This is a benchmark, not a test::

    uv run python -m nnx_ppo_benchmarks.trainer.sweep --network mlp_small --runs 8

Each side runs in its own child process (this module again, so each has its own peak
RSS) on the side-by-side benchmark's environment, networks and settings
(``nnx_ppo_benchmarks.settings``, CartpoleBalance, Playground ``impl="jax"``, 256 envs
per run, Playground's brax PPO hyperparameters):

- ``sequential``: ``train_ppo`` of seeds ``0..K-1``, one after another;
- ``sweep``: ``train_many`` of the same seeds in one program.

The steady-state rate of a training call is read from its log records (one per
progress chunk): env steps between the first and the last record over the time between
them, so compilation and the first chunk are left out. The sweep's aggregate rate counts
the env steps of all its runs; the sequential side's aggregate is its single runs' steps
over their summed steady time (the rate of one run). The report prints both, their
ratio, the wall time of each side (compilation included), peak RSS and the machine load.
An ``--env-only`` baseline (random actions, a jitted scan, 256 environments) measures the
environment's own rate, which caps what any PPO run on it reaches.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from nnx_ppo_benchmarks.settings import NETWORKS, RunSpec

__all__ = ["main"]


def _spec(network: str, total_steps: int, n_chunks: int) -> RunSpec:
    return RunSpec(
        implementation="ours", network=network, total_steps=total_steps, n_chunks=n_chunks
    )


def _steady(times: list[tuple[float, int]]) -> tuple[float, int]:
    """``(seconds, env steps)`` between the first and the last log record."""
    (t0, s0), (t1, s1) = times[0], times[-1]
    return t1 - t0, s1 - s0


def _child(mode: str, network: str, runs: int, total_steps: int, n_chunks: int) -> dict[str, Any]:
    import jax

    from nnx_ppo.algorithms.ppo.train import train_ppo
    from nnx_ppo.algorithms.sweeps.many import train_many
    from nnx_ppo_benchmarks.children.ours import build_network, make_envs, make_train_config

    spec = _spec(network, total_steps, n_chunks)
    env, _ = make_envs(spec)
    config = make_train_config(spec)
    seeds = list(range(runs))
    began = time.perf_counter()
    out: dict[str, Any] = {"mode": mode}
    if mode == "env-only":
        n_envs, length = spec.ppo.n_envs, 200

        def scan(key):
            state = jax.vmap(env.reset)(jax.random.split(key, n_envs))

            def step(carry, key):
                action = jax.random.uniform(key, (n_envs, env.action_size), minval=-1, maxval=1)
                return jax.vmap(env.step)(carry, action), None

            state, _ = jax.lax.scan(step, state, jax.random.split(key, length))
            return state.reward

        fn = jax.jit(scan)
        jax.block_until_ready(fn(jax.random.PRNGKey(0)))
        start = time.perf_counter()
        for i in range(5):
            jax.block_until_ready(fn(jax.random.PRNGKey(i + 1)))
        seconds = time.perf_counter() - start
        out.update(steady_s=seconds, steady_steps=5 * n_envs * length)
    elif mode == "sequential":
        steady_s, steady_steps = 0.0, 0
        for seed in seeds:
            times: list[tuple[float, int]] = []
            network_ = build_network(
                dataclasses.replace(spec, seed=seed), env.observation_size, env.action_size
            )
            run_config = dataclasses.replace(config, seed=seed)
            train_ppo(
                env, network_, run_config, progress=False,
                log_fn=lambda m, step, times=times: times.append((time.perf_counter(), step)),
            )  # fmt: skip
            seconds, steps = _steady(times)
            steady_s, steady_steps = steady_s + seconds, steady_steps + steps
        out.update(steady_s=steady_s, steady_steps=steady_steps)
    else:
        times = []

        def log_fn(metrics: Any, step: int, run: int) -> None:
            if run == 0:
                times.append((time.perf_counter(), step))

        train_many(
            env,
            lambda rngs: build_network(spec, env.observation_size, env.action_size, rngs=rngs),
            config,
            seeds=seeds,
            log_fn=log_fn,
            progress=False,
        )
        seconds, steps = _steady(times)
        out.update(steady_s=seconds, steady_steps=steps * runs)
    out["wall_s"] = time.perf_counter() - began
    out["sps"] = out["steady_steps"] / out["steady_s"]
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["device"] = str(jax.devices()[0].platform)
    return out


def _run_child(args: argparse.Namespace, mode: str) -> dict[str, Any]:
    command = [
        sys.executable, "-m", "nnx_ppo_benchmarks.trainer.sweep", "--child", mode,
        "--network", args.network, "--runs", str(args.runs),
        "--total-steps", str(args.total_steps), "--chunks", str(args.chunks),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{mode} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: Sequence[str] | None = None) -> int:
    """Command line (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m nnx_ppo_benchmarks.trainer.sweep",
        description=(__doc__ or "").split("\n")[0],
    )
    parser.add_argument("--network", choices=sorted(NETWORKS), default="mlp_small")
    parser.add_argument("--runs", type=int, default=8, help="K, runs per side")
    parser.add_argument("--total-steps", type=int, default=102_400, help="env steps per run")
    parser.add_argument("--chunks", type=int, default=4, help="log records per run")
    parser.add_argument("--env-only", action="store_true", help="also measure the env alone")
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        result = _child(args.child, args.network, args.runs, args.total_steps, args.chunks)
        print(json.dumps(result))
        return 0
    load_before = os.getloadavg()
    modes = (["env-only"] if args.env_only else []) + ["sequential", "sweep"]
    results = {mode: _run_child(args, mode) for mode in modes}
    load_after = os.getloadavg()
    single, many = results["sequential"]["sps"], results["sweep"]["sps"]
    print(
        f"{args.network}, K={args.runs} runs x {args.total_steps} env steps, "
        f"device {results['sweep']['device']}, load {load_before[0]:.2f} -> {load_after[0]:.2f}"
    )
    print("| side | steady env-steps/s (all runs) | wall s (with compile) | peak RSS MiB |")
    print("|---|---|---|---|")
    for mode, r in results.items():
        print(f"| {mode} | {r['sps']:,.0f} | {r['wall_s']:.1f} | {r['peak_rss_mib']:.0f} |")
    print(f"sweep / one run: {many / single:.2f}x")
    if "env-only" in results:
        cap = results["env-only"]["sps"] / single
        print(
            f"env alone: {results['env-only']['sps']:,.0f} steps/s = {cap:.2f}x one run "
            f"(the cap); the sweep reached {many / single / cap:.0%} of it"
        )
    if args.out:
        with open(args.out, "w", encoding="utf-8") as file:
            json.dump({"args": vars(args), "load": [load_before, load_after], **results}, file)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
