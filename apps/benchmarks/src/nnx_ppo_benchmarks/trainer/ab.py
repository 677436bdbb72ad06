"""Side-by-side A/B of two variants of our trainer: whole iterations, interleaved.

Both variants are compiled first; then ``--reps`` rounds run one donated iteration of
each in turn (same machine load), and the report gives each variant's median and
minimum and the round-wise time ratio A/B (median, min, max). This is a benchmark, not a
test::

    uv run python -m nnx_ppo_benchmarks.trainer.ab advantages --network mlp_default
    uv run python -m nnx_ppo_benchmarks.trainer.ab replay --network encoder_lstm

Comparisons:

- ``advantages``: ``PPOConfig.advantage_estimation="rollout"`` (A) against
  ``"minibatch"`` (B, the rollout skips the critic);
- ``replay``: the loss replay as one scan over time of the whole network (A, what the
  trainer did before `StatefulModule.replay_sequence`: the network wrapped in
  `ScannedReplay`) against the trainer's sequence replay (B: stateless layers batched
  over ``[T * b]``, only modules with a carry scanned).

The environment, networks and settings are the side-by-side benchmark's.
``--network`` is one of its families (``nnx_ppo_benchmarks.settings.NETWORKS``) or
``encoder_lstm``: a 256x256 MLP encoder, an LSTM(128) and two 64-unit heads, the usual
shape of a recurrent controller. This uses the trainer's internal building blocks and
is meant for developers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nnx_ppo.networks.types import StatefulModule, StatefulModuleOutput, replay_scanned
from nnx_ppo_benchmarks.settings import NETWORKS, PPOSettings, RunSpec

__all__ = ["COMPARISONS", "ScannedReplay", "compare", "main"]

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


class ScannedReplay(StatefulModule):
    """``network`` whose loss replay is one scan over time of its whole step
    (`replay_scanned`), as the trainer replayed before
    `StatefulModule.replay_sequence`; everything else is ``network``'s."""

    def __init__(self, network: StatefulModule) -> None:
        self.network = network

    def __call__(self, state: Any, x: Any, rollout_extras: Any = None) -> StatefulModuleOutput:
        return self.network(state, x, rollout_extras)

    def initialize_state(self, batch_size: int) -> Any:
        return self.network.initialize_state(batch_size)

    def reset_state(self, prev_state: Any) -> Any:
        return self.network.reset_state(prev_state)

    def update_statistics(self, rollout_extras: Any) -> None:
        self.network.update_statistics(rollout_extras)

    def replay_sequence(
        self, state: Any, xs: Any, rollout_extras: Any, done: Any
    ) -> tuple[Any, StatefulModuleOutput]:
        return replay_scanned(self.network, state, xs, rollout_extras, done)


def compare(comparison: str, spec: RunSpec, reps: int = 15, warmup: int = 2) -> dict[str, Any]:
    """Time variant A against variant B of ``comparison`` (see the module docstring).

    Returns:
        ``{"comparison", "network", "variants": {name: {"median_ms", "min_ms"}},
        "ratio_a_over_b": {"median", "min", "max"}}``.
    """
    import jax

    from nnx_ppo.algorithms.ppo.iteration import (
        init_train_state,
        make_optimizer,
        make_training_iteration,
    )
    from nnx_ppo.algorithms.trainer.skeleton import make_train_call
    from nnx_ppo_benchmarks.children.ours import build_network, make_envs, make_train_config

    if comparison not in COMPARISONS:
        raise ValueError(f"comparison={comparison!r} is not one of {COMPARISONS}")
    env, _ = make_envs(spec)
    if spec.network == "encoder_lstm":
        network = _encoder_lstm(env.observation_size, env.action_size, spec)
    else:
        network = build_network(spec, env.observation_size, env.action_size)
    ppo = make_train_config(spec).ppo
    optimizer = make_optimizer(ppo)
    # Each variant: its config and its network (the same variables: a wrapper shares them).
    variants: dict[str, tuple[Any, Any]]
    if comparison == "advantages":
        variants = {
            mode: (dataclasses.replace(ppo, advantage_estimation=mode), network)
            for mode in ("rollout", "minibatch")
        }
    else:
        variants = {"time_scan": (ppo, ScannedReplay(network)), "sequence": (ppo, network)}
    calls, states = {}, {}
    for name, (config, variant) in variants.items():
        variant.train()
        # The same key: every variant starts from the same state (its own copy).
        graphdef, states[name] = init_train_state(
            env, variant, config, optimizer, jax.random.PRNGKey(spec.seed)
        )
        call = make_train_call(make_training_iteration(env, graphdef, optimizer, config))
        for _ in range(warmup):  # compiles on the first call
            states[name], metrics = call(states[name])
        jax.block_until_ready(metrics)
        calls[name] = call
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


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``COMPARISON --network --reps --env --output``."""
    p = argparse.ArgumentParser(
        prog="python -m nnx_ppo_benchmarks.trainer.ab", description=(__doc__ or "").split("\n")[0]
    )
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
