"""Where does an iteration of ``train_ppo`` spend its time? Phase timings.

Runs the pieces of one PPO iteration as separate jitted programs on the side-by-side
benchmark's environment, networks and settings (CartpoleBalance, 256 envs x 20 steps;
``nnx_ppo_benchmarks.settings`` and ``nnx_ppo_benchmarks.children.ours``), and times
each (median of ``--reps`` calls after one compiling call). This is a benchmark, not a
test::

    uv run python -m nnx_ppo_benchmarks.trainer.profile_iteration --network mlp_small
    uv run python -m nnx_ppo_benchmarks.trainer.profile_iteration \\
        --network mlp_default --output profile.json --trace /tmp/trace

Pieces (all per iteration of ``n_envs * rollout_length`` env steps):

- ``iteration_donated``: the trainer's jitted iteration as ``train_ppo`` calls it
  (``make_train_call``, state donated, one iteration per call);
- ``iteration``: the same iteration jitted without donation;
- ``iteration_log_none``: the same with ``LogLevel.NONE`` (the cost of the metrics);
- ``iteration_in_call_of_K``: per iteration, K iterations in one device call;
- ``rollout``: the rollout scan (env steps + network + auto-reset + bookkeeping);
- ``rollout_env_only``: the same scan with random actions and no network;
- ``rollout_network_only``: ``rollout_length`` network calls on fixed observations
  (actions, log-likelihoods, values and extras);
- ``gae``: advantages and targets;
- ``update``: ``n_epochs x n_minibatches`` minibatch updates (shuffle, replay, PPO
  loss, gradient, Adam), as the trainer does them (a network without a carry, e.g. the
  MLP families, is replayed as one batched call over ``[T * b]`` samples);
- ``update_time_scan_replay`` (networks without a carry only): the same with the
  replay as a scan over the ``T`` time steps, as the trainer did before.

This uses the trainer's internal building blocks (``nnx_ppo.algorithms.core.rollout``,
``iteration``, ``gae``, ``losses``): it is a diagnostic for developers, and a piece
that fails because an internal signature changed is reported, not fatal.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nnx_ppo_benchmarks.settings import NETWORKS, RunSpec

__all__ = ["main", "profile"]


def _call(fn: Callable[[], Any]) -> float:
    import jax

    start = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - start


def _top_ops(fn: Callable[[], Any], trace_dir: Path, calls: int, top: int = 25) -> list[dict]:
    """XLA thunks of ``fn`` by total time: a ``jax.profiler`` trace (perfetto JSON)."""
    import gzip

    import jax

    with jax.profiler.trace(str(trace_dir), create_perfetto_trace=True):
        for _ in range(calls):
            _call(fn)
    [path] = sorted(trace_dir.glob("**/*.trace.json.gz"))[-1:]
    with gzip.open(path) as f:
        trace = json.loads(f.read())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    total: dict[str, float] = {}
    count: dict[str, int] = {}
    skip = ("ThunkExecutor", "$", "Pjit", "PjRt", "Slinky", "ParseArguments")
    for e in events:
        name = e.get("name", "")
        if e.get("ph") != "X" or name.startswith(skip) or "PjRt" in name:
            continue
        total[name] = total.get(name, 0.0) + e.get("dur", 0) / 1e3 / calls
        count[name] = count.get(name, 0) + 1
    ranked = sorted(total, key=total.__getitem__, reverse=True)[:top]
    return [{"op": n, "ms_per_iteration": total[n], "count": count[n] / calls} for n in ranked]


def profile(
    spec: RunSpec,
    reps: int = 20,
    per_call: int = 10,
    warmup: int = 5,
    trace_dir: Path | None = None,
) -> dict[str, Any]:
    """Time the pieces of one iteration (see the module docstring).

    Every piece is compiled (its first call) first; then ``reps`` rounds call each piece
    once in turn, so that all pieces see the same machine load. All pieces start from
    the training state after ``warmup`` iterations (mid-episode environments, updated
    normalizer). With ``trace_dir``, a ``jax.profiler`` trace of three donated
    iterations is written there and its most expensive XLA operations are returned
    (``top_ops``; loops are listed as a whole and by the operations inside them).
    """
    import dataclasses

    import jax
    import jax.numpy as jnp
    import optax

    from nnx_ppo.algorithms.config import LogLevel
    from nnx_ppo.algorithms.core.losses import ppo_loss
    from nnx_ppo.algorithms.core.rollout import network_step, replay, unroll
    from nnx_ppo.algorithms.ppo.advantages import gae
    from nnx_ppo.algorithms.ppo.iteration import (
        init_train_state,
        make_optimizer,
        make_training_iteration,
    )
    from nnx_ppo.algorithms.trainer.skeleton import make_train_call
    from nnx_ppo.wrappers import reset_done
    from nnx_ppo_benchmarks.children.ours import build_network, make_envs, make_train_config

    env, _ = make_envs(spec)
    network = build_network(spec, env.observation_size, env.action_size)
    network.train()
    ppo = make_train_config(spec).ppo
    optimizer = make_optimizer(ppo)
    graphdef, state = init_train_state(env, network, ppo, optimizer, jax.random.PRNGKey(0))
    T, B, M = ppo.rollout_length, ppo.n_envs, ppo.n_minibatches
    key = jax.random.PRNGKey(1)
    results: dict[str, Any] = {}
    pieces: dict[str, Callable[[], Any]] = {}

    def run(name: str, fn: Callable[[], Any]) -> None:
        try:
            results[name] = {"first_call_s": _call(fn)}
            pieces[name] = fn
        except Exception as e:  # a changed internal API: report and go on
            results[name] = {"error": f"{type(e).__name__}: {e}"}
            traceback.print_exc()
        print(f"compiled {name:28s} {results[name]}", file=sys.stderr, flush=True)

    # Warm up: a few donated iterations, as train_ppo runs them.
    donated = make_train_call(make_training_iteration(env, graphdef, optimizer, ppo), 1)
    warm = jax.tree.map(jnp.copy, state)
    for _ in range(warmup):
        warm, _ = donated(warm)
    state = jax.tree.map(jnp.copy, warm)
    holder = {"state": warm}

    def donated_once() -> Any:
        holder["state"], metrics = donated(holder["state"])
        return metrics

    run("iteration_donated", donated_once)
    iteration = jax.jit(make_training_iteration(env, graphdef, optimizer, ppo))
    run("iteration", lambda: iteration(state))
    quiet = dataclasses.replace(ppo, log_level=LogLevel.NONE)
    iteration_quiet = jax.jit(make_training_iteration(env, graphdef, optimizer, quiet))
    run("iteration_log_none", lambda: iteration_quiet(state))

    def rollout_only(s: Any) -> Any:
        return unroll(
            env,
            graphdef,
            s.params,
            s.network_state,
            s.env_state,
            s.carry,
            s.episodes,
            key,
            s.reset_state,
            length=T,
            bootstrap_on_truncation=ppo.bootstrap_on_truncation,
        )

    rollout_fn = jax.jit(rollout_only)
    run("rollout", lambda: rollout_fn(state))
    *_, rollout = rollout_fn(state)
    transitions = rollout.transitions

    def env_only(s: Any) -> Any:
        def step(loop: Any, k: Any) -> Any:
            env_s = loop
            action = jax.random.uniform(k, (B, env.action_size), minval=-1.0, maxval=1.0)
            nxt = jax.vmap(env.step)(env_s, action)
            return reset_done(nxt, s.reset_state), jnp.sum(nxt.reward)

        return jax.lax.scan(step, s.env_state, jax.random.split(key, T))

    env_only_fn = jax.jit(env_only)
    run("rollout_env_only", lambda: env_only_fn(state))

    def network_only(s: Any, obs: Any) -> Any:
        def step(loop: Any, o: Any) -> Any:
            net_state, carry = loop
            net_state, out = network_step(graphdef, s.params, net_state, carry, o)
            ppo_out = out.output  # everything the rollout stores, so XLA keeps it all
            return (net_state, out.next_state), (
                ppo_out.actions,
                ppo_out.loglikelihoods,
                ppo_out.value_estimates,
                out.rollout_extras,
            )

        return jax.lax.scan(step, (s.network_state, s.carry), obs)

    network_only_fn = jax.jit(network_only)
    run("rollout_network_only", lambda: network_only_fn(state, transitions.obs))

    gae_fn = jax.jit(
        lambda tr, bootstrap: gae(
            tr.reward,
            tr.value,
            bootstrap,
            tr.termination,
            tr.truncation,
            discounting_factor=ppo.discounting_factor,
            gae_lambda=ppo.gae_lambda,
            final_values=tr.final_value,
        )
    )
    run("gae", lambda: gae_fn(transitions, rollout.bootstrap_value))
    advantages, targets = gae_fn(transitions, rollout.bootstrap_value)

    def make_update(time_scan: bool) -> Callable[..., Any]:
        def loss(params: Any, network_state: Any, mb: Any) -> Any:
            tr, carry0, adv, tgt = mb
            if time_scan:  # a carry-less network replayed step by step (the old way)
                n = tr.done.shape[1]

                def step(_: Any, xs: Any) -> Any:
                    _, out = network_step(graphdef, params, network_state, carry0, *xs)
                    reg = jnp.broadcast_to(jnp.asarray(out.regularization_loss), (n,))
                    return None, (out.output.loglikelihoods, out.output.value_estimates, reg)

                _, (ll, value, reg) = jax.lax.scan(step, None, (tr.obs, tr.rollout_extras))
            else:  # as the trainer replays (batched over [T * b] without a carry)
                replayed = replay(graphdef, params, network_state, carry0, tr)
                ll, value, reg = replayed.log_likelihood, replayed.value, replayed.regularization
            total, _ = ppo_loss(
                ll,
                value,
                reg,
                tr.log_likelihood,
                tr.value,
                adv,
                tgt,
                clip_range=ppo.clip_range,
                critic_loss_weight=ppo.critic_loss_weight,
                value_clip_range=ppo.value_clip_range,
                normalize=ppo.normalize_advantages,
                advantage_mode=ppo.advantage_mode,
            )
            return total

        def update(params: Any, opt_state: Any, network_state: Any, data: Any, k: Any) -> Any:
            tr, carry0, adv, tgt = data

            def epoch(c: Any, ek: Any) -> Any:
                perm = jax.random.permutation(ek, B)

                def tm(x: Any) -> Any:
                    x = jnp.take(x, perm, axis=1)
                    return jnp.swapaxes(x.reshape(x.shape[0], M, -1, *x.shape[2:]), 0, 1)

                def bm(x: Any) -> Any:
                    return jnp.take(x, perm, axis=0).reshape(M, -1, *x.shape[1:])

                mbs = (
                    jax.tree.map(tm, tr),
                    jax.tree.map(bm, carry0),
                    jax.tree.map(tm, adv),
                    jax.tree.map(tm, tgt),
                )

                def mb_step(c2: Any, mb: Any) -> Any:
                    p, o = c2
                    g = jax.grad(loss)(p, network_state, mb)
                    u, o = optimizer.update(g, o, p)
                    return (optax.apply_updates(p, u), o), None

                return jax.lax.scan(mb_step, c, mbs)[0], None

            return jax.lax.scan(epoch, (params, opt_state), jax.random.split(k, ppo.n_epochs))[0]

        return jax.jit(update)

    data = (transitions, rollout.initial_carry, advantages, targets)
    update = make_update(False)
    run("update", lambda: update(state.params, state.opt_state, state.network_state, data, key))
    if not jax.tree.leaves(state.carry):
        update_scan = make_update(True)
        run(
            "update_time_scan_replay",
            lambda: update_scan(state.params, state.opt_state, state.network_state, data, key),
        )

    # K iterations per device call (donating, so each call consumes the previous state).
    call = make_train_call(make_training_iteration(env, graphdef, optimizer, ppo), per_call)
    holder_k = {"state": jax.tree.map(jnp.copy, state)}

    def call_once() -> Any:
        holder_k["state"], metrics = call(holder_k["state"])
        return metrics

    name_k = f"iteration_in_call_of_{per_call}"
    run(name_k, call_once)

    # Interleaved rounds: every piece once per round.
    times: dict[str, list[float]] = {name: [] for name in pieces}
    for _ in range(reps):
        for name, fn in pieces.items():
            times[name].append(_call(fn) / (per_call if name == name_k else 1))
    for name, samples in times.items():
        results[name].update(
            median_ms=1e3 * statistics.median(samples),
            min_ms=1e3 * min(samples),
            max_ms=1e3 * max(samples),
        )
    if name_k in times:
        results[name_k]["note"] = f"per iteration (one call runs {per_call})"

    ops = _top_ops(donated_once, trace_dir, calls=3) if trace_dir else None

    steps = ppo.steps_per_iteration
    for entry in results.values():
        if "median_ms" in entry:
            entry["steps_per_s"] = steps / (entry["median_ms"] / 1e3)
    return {
        "network": spec.network,
        "steps_per_iteration": steps,
        "devices": [str(d) for d in jax.devices()],
        "jax": jax.__version__,
        "pieces": results,
        "top_ops": ops,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``--network``, ``--reps``, ``--per-call``, ``--output``."""
    p = argparse.ArgumentParser(
        prog="python -m nnx_ppo_benchmarks.trainer.profile_iteration",
        description=(__doc__ or "").split("\n")[0],
    )
    p.add_argument("--network", choices=list(NETWORKS), default="mlp_small")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--per-call", type=int, default=10)
    p.add_argument("--env", default="CartpoleBalance")
    p.add_argument("--output", type=Path, default=None)
    p.add_argument("--trace", type=Path, default=None, help="write a jax.profiler trace here")
    args = p.parse_args(argv)
    spec = RunSpec(implementation="ours", network=args.network, env_name=args.env)
    result = profile(spec, args.reps, args.per_call, trace_dir=args.trace)
    for name, entry in result["pieces"].items():
        if "median_ms" in entry:
            print(
                f"{name:28s} {entry['median_ms']:9.2f} ms  ({entry['min_ms']:.2f}-"
                f"{entry['max_ms']:.2f})  {entry['steps_per_s']:>12,.0f} steps/s"
            )
        else:
            print(f"{name:28s} {entry['error']}")
    for op in result["top_ops"] or []:
        print(f"  {op['ms_per_iteration']:9.2f} ms  {op['count']:6.0f}x  {op['op']}")
    if args.output:
        args.output.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
