"""Side-by-side A/B of two variants of our trainer: whole iterations, interleaved.

Both variants are compiled first; then ``--reps`` rounds run one donated iteration of
each in turn (same machine load), and the report gives each variant's median and
minimum and the round-wise time ratio A/B (median, min, max). This is a benchmark, not a
test::

    uv run python packages/nnx-ppo-train/benchmarks/ab.py advantages --network mlp_default
    uv run python packages/nnx-ppo-train/benchmarks/ab.py replay --network encoder_lstm

Comparisons:

- ``advantages``: ``PPOConfig.advantage_estimation="rollout"`` (A) against
  ``"minibatch"`` (B, the rollout skips the critic);
- ``replay``: the loss replay as one scan over time of the whole network (A, what the
  trainer did before `StatefulModule.replay_sequence`) against the trainer's sequence
  replay (B: stateless layers batched over ``[T * b]``, only modules with a carry
  scanned).

The environment, networks and settings are the side-by-side benchmark's
(``apps/benchmarks``, which the workspace's environment installs). ``--network`` is one
of its families (``nnx_ppo_benchmarks.settings.NETWORKS``) or ``encoder_lstm``: a
256x256 MLP encoder, an LSTM(128) and two 64-unit heads, the usual shape of a recurrent
controller. This uses the trainer's internal building blocks and is meant for
developers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nnx_ppo_benchmarks.settings import NETWORKS, PPOSettings, RunSpec

__all__ = ["COMPARISONS", "compare", "main"]

COMPARISONS = ("advantages", "replay")
EXTRA_NETWORKS = ("encoder_lstm",)


def _encoder_lstm(obs_size: int, action_size: int, spec: RunSpec) -> Any:
    from flax import nnx

    from nnx_ppo.networks.adapter import PPOAdapter
    from nnx_ppo.networks.containers import Sequential
    from nnx_ppo.networks.feedforward import MLP
    from nnx_ppo.networks.normalizer import Normalizer
    from nnx_ppo.networks.recurrent import LSTM
    from nnx_ppo.networks.sampling_layers import NormalTanhSampler

    rngs, ppo = nnx.Rngs(spec.seed), spec.ppo
    sampler = NormalTanhSampler(rngs, ppo.entropy_cost, ppo.min_std)
    return Sequential(
        [
            Normalizer(obs_size),
            MLP(obs_size, (256, 256), 128, rngs=rngs, activation=nnx.swish),
            LSTM(128, 128, rngs=rngs),
            PPOAdapter(
                action=Sequential([MLP(128, (64,), 2 * action_size, rngs=rngs), sampler]),
                value=MLP(128, (64,), 1, rngs=rngs),
            ),
        ]
    )


def _scanned_replay(
    graphdef: Any,
    params: Any,
    network_state: Any,
    initial_carry: Any,
    transitions: Any,
    *,
    collect_metrics: bool = False,
) -> Any:
    """`nnx_ppo.algorithms.rollout.replay` as one scan over time of the whole network."""
    import jax.numpy as jnp
    from flax import nnx

    from nnx_ppo.algorithms.rollout import ReplayOutput
    from nnx_ppo.networks.types import replay_scanned

    model = nnx.merge(graphdef, params, network_state)
    final, out = replay_scanned(
        model, initial_carry, transitions.obs, transitions.rollout_extras, transitions.done
    )
    return ReplayOutput(
        log_likelihood=out.output.loglikelihoods,
        value=out.output.value_estimates,
        regularization=jnp.broadcast_to(out.regularization_loss, transitions.done.shape),
        metrics=out.metrics if collect_metrics else {},
        final_carry=final,
    )


def compare(comparison: str, spec: RunSpec, reps: int = 15, warmup: int = 2) -> dict[str, Any]:
    """Time variant A against variant B of ``comparison`` (see the module docstring).

    Returns:
        ``{"comparison", "network", "variants": {name: {"median_ms", "min_ms"}},
        "ratio_a_over_b": {"median", "min", "max"}}``.
    """
    import jax
    import jax.numpy as jnp
    from nnx_ppo_benchmarks.children.ours import build_network, make_envs, make_train_config

    from nnx_ppo.algorithms import iteration, phases, trainer

    if comparison not in COMPARISONS:
        raise ValueError(f"comparison={comparison!r} is not one of {COMPARISONS}")
    env, _ = make_envs(spec)
    if spec.network == "encoder_lstm":
        network = _encoder_lstm(env.observation_size, env.action_size, spec)
    else:
        network = build_network(spec, env.observation_size, env.action_size)
    network.train()
    ppo = make_train_config(spec).ppo
    optimizer = iteration.make_optimizer(ppo)
    graphdef, state = iteration.init_train_state(
        env, network, ppo, optimizer, jax.random.PRNGKey(spec.seed)
    )
    trainer_replay = phases.replay
    variants: dict[str, tuple[Any, Callable[..., Any]]]
    if comparison == "advantages":
        variants = {
            mode: (dataclasses.replace(ppo, advantage_estimation=mode), trainer_replay)
            for mode in ("rollout", "minibatch")
        }
    else:
        variants = {"time_scan": (ppo, _scanned_replay), "sequence": (ppo, trainer_replay)}
    calls, states = {}, {}
    try:
        for name, (config, replay) in variants.items():
            phases.replay = replay  # read when the iteration is traced (below)
            call = trainer.make_train_call(
                iteration.make_training_iteration(env, graphdef, optimizer, config)
            )
            states[name] = jax.tree.map(jnp.copy, state)
            for _ in range(warmup):  # compiles on the first call
                states[name], metrics = call(states[name])
            jax.block_until_ready(metrics)
            calls[name] = call
    finally:
        phases.replay = trainer_replay
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(reps):
        for name, call in calls.items():
            start = time.perf_counter()
            states[name], metrics = call(states[name])
            jax.block_until_ready(metrics)
            times[name].append(time.perf_counter() - start)
    a, b = list(times)
    ratios = [x / y for x, y in zip(times[a], times[b], strict=True)]
    return {
        "comparison": comparison,
        "network": spec.network,
        "variants": {
            name: {"median_ms": 1e3 * statistics.median(t), "min_ms": 1e3 * min(t)}
            for name, t in times.items()
        },
        "ratio_a_over_b": {
            "median": statistics.median(ratios),
            "min": min(ratios),
            "max": max(ratios),
        },
    }


def main(argv: list[str] | None = None) -> int:
    """Command line: ``COMPARISON --network --reps --env --output``."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("comparison", choices=COMPARISONS)
    p.add_argument("--network", choices=[*NETWORKS, *EXTRA_NETWORKS], default="mlp_default")
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--env", default="CartpoleBalance")
    p.add_argument("--n-envs", type=int, default=PPOSettings.n_envs)
    p.add_argument("--output", type=Path, default=None)
    args = p.parse_args(argv)
    spec = RunSpec(
        implementation="ours",
        network=args.network,
        env_name=args.env,
        ppo=PPOSettings(n_envs=args.n_envs),
    )
    result = compare(args.comparison, spec, args.reps)
    for name, entry in result["variants"].items():
        print(f"{name:12s} median {entry['median_ms']:8.2f} ms  min {entry['min_ms']:8.2f} ms")
    r = result["ratio_a_over_b"]
    a, b = result["variants"]
    print(f"{a}/{b} time ratio: median {r['median']:.3f} (min {r['min']:.3f}, max {r['max']:.3f})")
    if args.output:
        args.output.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
