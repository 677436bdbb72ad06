"""Per-iteration training metrics of the suite's ``ours`` child: one network, one seed.

How far each iteration moves the policy (``actor/approx_kl``, ``actor/clip_fraction``),
the entropy estimate and the rollout's reward, at the suite's settings of ``--task``
(Playground's brax-PPO settings, 256 envs, 8 minibatches, ``--steps`` rounded up to 4
chunks of whole iterations), one JSON line per iteration to ``--out``. ``--desired-kl``
and ``--learning-rate`` replace those two settings (``PPOConfig``'s fields). The
traces in ``results/suite/masked`` (its ``README.md``) compare the LSTM with the MLP on
``CartpoleBalance``. Run from the repository root::

    uv run python -m nnx_ppo_benchmarks.studies.kl_trace lstm_quickstart 0 \\
        --task CartpoleBalance --steps 307200 --out trace.jsonl
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Mapping, Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Command line (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m nnx_ppo_benchmarks.studies.kl_trace",
        description=(__doc__ or "").splitlines()[0],
    )
    parser.add_argument("network", help="a harness network family, e.g. lstm_quickstart")
    parser.add_argument("seed", type=int)
    parser.add_argument("--task", default="CartpoleBalance")
    parser.add_argument("--steps", type=int, default=307_200)
    parser.add_argument("--desired-kl", type=float, default=None)
    parser.add_argument("--learning-rate", type=float, default=None)
    parser.add_argument("--out", required=True, help="JSON lines, one per iteration")
    args = parser.parse_args(argv)

    from nnx_ppo.algorithms import train_ppo
    from nnx_ppo_benchmarks.children.ours import build_network, make_envs, make_train_config
    from nnx_ppo_benchmarks.studies._spec import suite_run

    spec = suite_run(args.task, args.network, args.seed, args.steps)
    env, _ = make_envs(spec)
    config = dataclasses.replace(make_train_config(spec), log_every_calls=1)
    changes = {"desired_kl": args.desired_kl, "learning_rate": args.learning_rate}
    changes = {k: v for k, v in changes.items() if v is not None}
    config = dataclasses.replace(config, ppo=dataclasses.replace(config.ppo, **changes))

    with open(args.out, "w") as out:

        def log(metrics: Mapping[str, float], step: int) -> None:
            record = {"step": int(step), **{k: float(v) for k, v in metrics.items()}}
            out.write(json.dumps(record) + "\n")
            out.flush()

        network = build_network(spec, env.observation_size, env.action_size)
        train_ppo(env, network, config, log_fn=log, progress=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
