"""How far an iteration is from the machine's limit: the environment alone, the rollout,
the update and the whole iteration, side by side in one process, against a roofline.

For each task of ``--tasks``, each environment count of ``--n-envs`` and each family of
``--networks``, at the suite's settings of the task (Playground's brax-PPO settings,
``--n-minibatches`` minibatches), four jitted programs are timed on the same state,
each the median of ``--repeats`` calls after a warm-up call (compilation excluded):

- ``env``: the environment alone, ``T`` steps of uniformly random actions in
  ``[-1, 1]`` with the training wrapper's cached auto-reset (the physical limit);
- ``rollout``: the rollout phase (the environments and the network,
  `nnx_ppo.algorithms.core.phases.rollout_phase`);
- ``update``: one PPO update on that rollout (advantages, ``n_epochs`` x
  ``n_minibatches`` replayed minibatches with their optimizer steps, statistics:
  `update_phase` with PPO's loss, the same numbers as the iteration's update);
- ``iteration``: one whole training iteration (`make_training_iteration`).

Each gets ``*_ms`` and ``*_steps_per_s`` (the iteration's ``T * B`` env steps over its
time). With the peaks known, each part also gets a roofline floor ``*_floor_ms`` =
``max(flops / peak_flops, bytes / peak_bandwidth)``, with the FLOPs and bytes from XLA's
cost analysis of the compiled program (``jit(f).lower(...).compile().cost_analysis()``),
and ``iteration_floor_ms`` = rollout's + update's, ``*_of_floor`` the measured time
over its floor. XLA's cost analysis counts a loop's body once, whatever its trip count,
so the costs come from *unit programs* with one trip per loop, scaled by the trip
counts: one env step and one rollout step of the ``B`` environments (x ``T``), and one
minibatch update of a one-step rollout of ``B / M`` environments (x ``T * E * M``; the
once-per-iteration parts, advantages and statistics, are counted with it, an
overestimate of parts that are small).

The peaks default to one TPU v5e chip (``--peak-flops 197e12``, bf16, and
``--peak-bandwidth 819e9`` B/s) when the device is a TPU; on any other device (the CPU,
a GPU) give them, or the roofline columns are left out. ``--no-roofline`` leaves them
out everywhere (the four unit programs per cell not compiled).

``--brax`` also trains brax PPO (`nnx_ppo_benchmarks.children.brax_ppo`, the harness's
settings) for ``repeats + 2`` iterations per MLP cell of a Playground task and reports
``brax_iteration_ms`` (its steady rate over the iterations without a compilation, as
the harness measures it: brax compiles its step again after the first iteration) and
``iteration_speedup`` (brax's time over ours).

``--tasks pointmass`` is a tiny cell for a CPU: our `PointMass` (episodes of 50 steps)
with the network and settings of ``CartpoleBalance``'s cell, except ``T = 8`` and two
epochs.

One JSON line per cell to ``--out``, with the machine's load average at its start and
end, and the device kind. On a TPU (`apps/benchmarks/tpu/README.md`)::

    uv run python -m nnx_ppo_benchmarks.studies.limits --tasks CartpoleBalance,CheetahRun \\
        --n-envs 1024,4096,16384 --networks mlp_default,lru --brax --out limits.jsonl
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Callable, Sequence
from typing import Any

from nnx_ppo_benchmarks.studies.step_costs import median_ms

__all__ = ["TPU_V5E_PEAK_BANDWIDTH", "TPU_V5E_PEAK_FLOPS", "main", "make_programs", "xla_cost"]

TPU_V5E_PEAK_FLOPS = 197e12
"""One TPU v5e chip's peak bf16 FLOP/s (Google's published figure)."""
TPU_V5E_PEAK_BANDWIDTH = 819e9
"""One TPU v5e chip's peak HBM bandwidth in bytes/s (Google's published figure)."""


def xla_cost(fn: Callable[..., Any], *args: Any) -> tuple[float, float]:
    """``(flops, bytes accessed)`` of ``jax.jit(fn)`` compiled for ``args``, from XLA's
    cost analysis (a loop's body counted once, whatever its trip count)."""
    import jax

    analysis = jax.jit(fn).lower(*args).compile().cost_analysis()
    if isinstance(analysis, list | tuple):  # older JAX: one dict per device program
        analysis = analysis[0]
    analysis = analysis or {}
    return float(analysis.get("flops", 0.0)), float(analysis.get("bytes accessed", 0.0))


@dataclasses.dataclass(frozen=True)
class Programs:
    """The four programs of one cell (unjitted) and the state they start from.

    Attributes:
        state: The `TrainState` of ``init_train_state``.
        env: ``env(env_state, key) -> summed reward``: ``T`` random-action steps.
        rollout: ``rollout(state) -> RolloutPhase``, with the iteration's keys.
        update: ``update(state, phase) -> (state, metrics)``: the iteration's update.
        iteration: ``iteration(state) -> (state, metrics)``.
    """

    state: Any
    env: Callable[..., Any]
    rollout: Callable[..., Any]
    update: Callable[..., Any]
    iteration: Callable[..., Any]


def make_programs(env: Any, network: Any, config: Any, key: Any) -> Programs:
    """The programs of `Programs` for ``env`` (the training env, wrapped), ``network``
    and ``config`` (a `PPOConfig`), from a state initialised with ``key``.

    The update is PPO's default path (advantages once per rollout, no symmetry, no
    value normalization, whole-rollout sequences): with the rollout of the same state
    it reproduces ``iteration(state)`` (same keys, same minibatches).

    Raises:
        ValueError: If ``config`` asks for another path of the update.
    """
    import jax
    import jax.numpy as jnp

    from nnx_ppo.algorithms.core.losses import ppo_loss
    from nnx_ppo.algorithms.core.phases import replay_minibatch, rollout_phase, update_phase
    from nnx_ppo.algorithms.core.randomization import batched
    from nnx_ppo.algorithms.core.rollout import reset_envs
    from nnx_ppo.algorithms.ppo.advantages import gae
    from nnx_ppo.algorithms.ppo.iteration import (
        init_train_state,
        make_optimizer,
        make_training_iteration,
    )
    from nnx_ppo.wrappers.auto_reset import reset_done

    other = {
        "symmetry": config.symmetry is not None,
        "normalize_values": config.normalize_values,
        "sequence_length": config.sequence_length is not None,
        "advantage_estimation": config.advantage_estimation != "rollout",
    }
    if any(other.values()):
        raise ValueError(
            f"config sets {[k for k, v in other.items() if v]}: the limits study times "
            "PPO's default update only; leave these fields at their defaults."
        )
    optimizer = make_optimizer(config)
    graphdef, state = init_train_state(env, network, config, optimizer, key)
    n_envs, level = config.n_envs, config.log_level

    def keys(state: Any) -> Any:  # the iteration's: rng, rollout, refresh, shuffle
        return jax.random.split(state.rng, 4)

    cached = state.reset_state
    if cached is None:  # reset_mode="fresh": restart from one batched reset instead
        cached = reset_envs(env, jax.random.fold_in(key, 1), n_envs)
    step = batched(env, "step", None)
    redraw_starts = getattr(env, "redraw_starts", None)

    def env_only(env_state: Any, key: Any) -> Any:
        def one(carry: Any, _: Any) -> tuple[Any, None]:
            env_state, key, total = carry
            key, action_key, start_key = jax.random.split(key, 3)
            shape = (n_envs, env.action_size)
            action = jax.random.uniform(action_key, shape, minval=-1.0, maxval=1.0)
            env_state = step(env_state, action)
            done = jnp.asarray(env_state.done) > 0
            restarted = reset_done(env_state, cached)
            if redraw_starts is not None:
                restarted = redraw_starts(restarted, done, start_key)
            reward = sum(jnp.sum(r) for r in jax.tree.leaves(env_state.reward))
            return (restarted, key, total + reward), None

        start = (env_state, key, jnp.zeros(()))
        (_, _, total), _ = jax.lax.scan(one, start, None, length=config.rollout_length)
        return total

    def rollout(state: Any) -> Any:
        _, rollout_key, refresh_key, _ = keys(state)
        return rollout_phase(
            env, graphdef, state, rollout_key, refresh_key, config,
            bootstrap_on_truncation=config.bootstrap_on_truncation,
        )  # fmt: skip

    def loss(params: Any, network_state: Any, minibatch: Any) -> Any:
        (transitions, advantages, targets), (initial_carry,) = minibatch
        out, network_metrics = replay_minibatch(
            graphdef, params, network_state, initial_carry, transitions, level
        )
        value, metrics = ppo_loss(
            out.log_likelihood, out.value, out.regularization, transitions.log_likelihood,
            transitions.value, advantages, targets, clip_range=config.clip_range,
            critic_loss_weight=config.critic_loss_weight,
            value_clip_range=config.value_clip_range,
            normalize=config.normalize_advantages, advantage_mode=config.advantage_mode,
        )  # fmt: skip
        return value, {**metrics, **network_metrics}

    def update(state: Any, phase: Any) -> Any:
        rng, _, _, shuffle_key = keys(state)
        t = phase.transitions
        advantages, targets = gae(
            t.reward, t.value, phase.rollout.bootstrap_value, t.termination, t.truncation,
            discounting_factor=config.discounting_factor, gae_lambda=config.gae_lambda,
            final_values=t.final_value,
        )  # fmt: skip
        labels, starts = (t, advantages, targets), (phase.rollout.initial_carry,)
        return update_phase(
            loss, optimizer, graphdef, state, phase, labels, starts, shuffle_key, rng,
            config, value_stats=state.value_stats,
        )  # fmt: skip

    iteration = make_training_iteration(env, graphdef, optimizer, config)
    return Programs(state, env_only, rollout, update, iteration)


def _unit_costs(env: Any, make_network: Callable[[], Any], config: Any, key: Any) -> dict:
    """FLOPs and bytes of each part per iteration, from unit programs (module doc)."""
    import jax

    steps, epochs, minibatches = config.rollout_length, config.n_epochs, config.n_minibatches
    one_step = dataclasses.replace(config, rollout_length=1, total_steps=config.n_envs)
    p = make_programs(env, make_network(), one_step, key)
    env_cost = xla_cost(p.env, p.state.env_state, key)
    rollout_cost = xla_cost(p.rollout, p.state)
    b = config.n_envs // minibatches
    one_minibatch = dataclasses.replace(
        one_step, n_envs=b, n_minibatches=1, n_epochs=1, total_steps=b
    )
    q = make_programs(env, make_network(), one_minibatch, key)
    update_cost = xla_cost(q.update, q.state, jax.jit(q.rollout)(q.state))
    return {
        "env": tuple(c * steps for c in env_cost),
        "rollout": tuple(c * steps for c in rollout_cost),
        "update": tuple(c * steps * epochs * minibatches for c in update_cost),
    }


def measure_cell(
    env: Any,
    make_network: Callable[[], Any],
    config: Any,
    key: Any,
    repeats: int,
    peaks: tuple[float, float] | None,
) -> dict[str, Any]:
    """The study's numbers for one cell (module doc): times, steps/s, and with
    ``peaks=(flops/s, bytes/s)`` the FLOPs, bytes and roofline floors."""
    import jax

    p = make_programs(env, make_network(), config, key)
    state = p.state
    env_fn, rollout, update = jax.jit(p.env), jax.jit(p.rollout), jax.jit(p.update)
    iteration = jax.jit(p.iteration)
    phase = rollout(state)
    found = {
        "env_ms": median_ms(lambda: env_fn(state.env_state, key), repeats),
        "rollout_ms": median_ms(lambda: rollout(state).transitions.reward, repeats),
        "update_ms": median_ms(lambda: update(state, phase)[1], repeats),
        "iteration_ms": median_ms(lambda: iteration(state)[1], repeats),
    }
    steps = config.n_envs * config.rollout_length
    record: dict[str, Any] = {k: round(v, 3) for k, v in found.items()}
    for part in ("env", "rollout", "update", "iteration"):
        record[f"{part}_steps_per_s"] = round(steps / (found[f"{part}_ms"] / 1e3), 1)
    if peaks is None:
        return record
    costs = _unit_costs(env, make_network, config, key)
    floors = {}
    for part, (flops, nbytes) in costs.items():
        floors[part] = max(flops / peaks[0], nbytes / peaks[1]) * 1e3
        record[f"{part}_flops"], record[f"{part}_bytes"] = flops, nbytes
    floors["iteration"] = floors["rollout"] + floors["update"]
    for part, floor in floors.items():
        record[f"{part}_floor_ms"] = round(floor, 4)
        record[f"{part}_of_floor"] = round(found[f"{part}_ms"] / floor, 2) if floor else None
    return record


def brax_iteration_ms(spec: Any) -> float | None:
    """brax PPO's steady iteration in milliseconds at ``spec``'s settings (a ``brax``
    run of the harness, `nnx_ppo_benchmarks.children.brax_ppo`, one iteration per
    progress report): the harness's steady rate (`nnx_ppo_benchmarks.metrics.derive`,
    which leaves out the reports with a compilation; brax compiles its training step
    again after the first) turned into one iteration's time; ``None`` if no report was
    clean."""
    from nnx_ppo_benchmarks.children import brax_ppo
    from nnx_ppo_benchmarks.children._common import Recorder
    from nnx_ppo_benchmarks.metrics import derive

    recorder = Recorder()
    brax_ppo.run(spec, recorder)
    raw = {"progress": recorder.progress, "train_compile_events": recorder.train_compile_events}
    steady = derive(raw)["steady_sps"]
    return None if not steady else spec.ppo.steps_per_iteration / steady * 1e3


def _tiny_env() -> Any:
    from nnx_ppo.envs import PointMass
    from nnx_ppo.wrappers import EpisodeWrapper

    return EpisodeWrapper(PointMass(), episode_length=50)


def _peaks(args: argparse.Namespace, platform: str) -> tuple[float, float] | None:
    if args.no_roofline:
        return None
    flops, bandwidth = args.peak_flops, args.peak_bandwidth
    if platform == "tpu":  # the defaults are one TPU v5e chip's
        flops = TPU_V5E_PEAK_FLOPS if flops is None else flops
        bandwidth = TPU_V5E_PEAK_BANDWIDTH if bandwidth is None else bandwidth
    if flops is None or bandwidth is None:
        return None
    return flops, bandwidth


def main(argv: Sequence[str] | None = None) -> int:
    """Command line (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m nnx_ppo_benchmarks.studies.limits",
        description=(__doc__ or "").splitlines()[0],
    )
    parser.add_argument("--tasks", default="CartpoleBalance,CheetahRun")
    parser.add_argument("--n-envs", default="1024,4096,16384", help="comma-separated")
    parser.add_argument("--networks", default="mlp_default,lru")
    parser.add_argument("--n-minibatches", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--peak-flops", type=float, default=None,
        help="the chip's peak FLOP/s (default on a TPU: 197e12, a v5e's bf16 peak; "
        "elsewhere none, and no roofline columns)",
    )  # fmt: skip
    parser.add_argument(
        "--peak-bandwidth", type=float, default=None,
        help="the chip's peak memory bandwidth in bytes/s (default on a TPU: 819e9, a "
        "v5e's HBM)",
    )  # fmt: skip
    parser.add_argument("--no-roofline", action="store_true", help="no cost analysis")
    parser.add_argument("--brax", action="store_true", help="also time brax PPO (MLP cells)")
    parser.add_argument("--out", required=True, help="JSON lines, one per cell (appended)")
    args = parser.parse_args(argv)

    import jax

    from nnx_ppo_benchmarks.children.ours import build_network, make_envs, make_train_config
    from nnx_ppo_benchmarks.settings import NETWORKS, EvalSettings
    from nnx_ppo_benchmarks.suite.run import SuiteOptions, plan_suite

    device = jax.devices()[0]
    peaks = _peaks(args, device.platform)
    networks = tuple(args.networks.split(","))
    with open(args.out, "a") as out:
        for task in args.tasks.split(","):
            for n_envs in (int(n) for n in args.n_envs.split(",")):
                tiny = task == "pointmass"  # the suite's cell of CartpoleBalance, on PointMass
                options = SuiteOptions(
                    tasks=("CartpoleBalance" if tiny else task,), networks=networks,
                    implementations=("ours",), seeds=(0,), total_steps=1, n_chunks=2, n_envs=n_envs,
                    n_minibatches=args.n_minibatches,
                )  # fmt: skip
                for spec in plan_suite(options):
                    load = os.getloadavg()[0]
                    env, _ = (_tiny_env(), None) if tiny else make_envs(spec)
                    config = make_train_config(spec).ppo
                    sizes = {"rollout_length": 8, "n_epochs": 2} if tiny else {}
                    config = dataclasses.replace(config, total_steps=1, **sizes)
                    config = dataclasses.replace(config, total_steps=config.steps_per_iteration)

                    def network(spec: Any = spec, env: Any = env) -> Any:
                        return build_network(spec, env.observation_size, env.action_size)

                    key = jax.random.PRNGKey(spec.seed)
                    record: dict[str, Any] = {
                        "task": task, "network": spec.network, "n_envs": n_envs,
                        "rollout_length": config.rollout_length,
                        "n_epochs": config.n_epochs, "n_minibatches": config.n_minibatches,
                        "device": device.device_kind,
                        **measure_cell(env, network, config, key, args.repeats, peaks),
                    }  # fmt: skip
                    if peaks is not None:
                        record["peaks"] = list(peaks)
                    if args.brax and "brax" in NETWORKS[spec.network].implementations:
                        # Two iterations compile; then `repeats` clean ones. Its final
                        # evaluation (the harness's) is cut to one short episode.
                        brax_options = dataclasses.replace(
                            options, networks=(spec.network,), implementations=("brax",),
                            total_steps=(args.repeats + 2) * config.steps_per_iteration,
                            n_chunks=args.repeats + 2,
                            eval=EvalSettings(n_envs=1, episode_length=10),
                        )  # fmt: skip
                        [brax_spec] = plan_suite(brax_options)
                        brax_ms = brax_iteration_ms(brax_spec)
                        if brax_ms is not None:
                            speedup = brax_ms / record["iteration_ms"]
                            record["brax_iteration_ms"] = round(brax_ms, 3)
                            record["iteration_speedup"] = round(speedup, 3)
                    record["load_average"] = [load, os.getloadavg()[0]]
                    print(json.dumps(record), flush=True)
                    out.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
