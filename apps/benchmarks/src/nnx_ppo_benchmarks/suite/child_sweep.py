"""Child: K seeds of ours in one program (`nnx_ppo.algorithms.sweeps.many.train_many`).

``python -m nnx_ppo_benchmarks.suite.child_sweep --spec JSON --runs K --out PATH``. The
environment, network and settings are the ``ours`` child's for ``spec``
(`nnx_ppo_benchmarks.children.ours`), seeds ``spec.seed .. spec.seed + K - 1``. Progress
is recorded from run 0's log calls (all runs advance together); the result's ``runs``
field is K, so the aggregate rate is ``K * steady_sps``. No evaluation (throughput only).
"""

from __future__ import annotations

import argparse
import json
import traceback
from pathlib import Path
from typing import Any

__all__ = ["main"]


def _train(spec: Any, runs: int, recorder: Any) -> dict[str, Any]:
    from nnx_ppo.algorithms.sweeps.many import train_many
    from nnx_ppo_benchmarks.children._common import package_versions
    from nnx_ppo_benchmarks.children.ours import build_network, make_envs, make_train_config

    with recorder.phase("setup"):
        env, _ = make_envs(spec)
        config = make_train_config(spec)

    def log_fn(metrics: Any, step: int, run: int) -> None:
        if run == 0:
            recorder.progress_callback(step)

    with recorder.phase("train"):
        train_many(
            env,
            lambda rngs: build_network(spec, env.observation_size, env.action_size, rngs=rngs),
            config,
            seeds=[spec.seed + i for i in range(runs)],
            log_fn=log_fn,
            progress=False,
        )
    return {
        "runs": runs,
        "total_steps": recorder.progress[-1][1] if recorder.progress else 0,
        "final_eval_reward": None,
        "versions": package_versions("jax", "jaxlib", "flax", "optax", "nnx-ppo-train"),
    }


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module docstring); failures are written to ``--out``."""
    from nnx_ppo_benchmarks.children._common import Recorder, write_result
    from nnx_ppo_benchmarks.settings import RunSpec

    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", required=True, help="RunSpec as JSON")
    parser.add_argument("--runs", type=int, required=True, help="K, seeds in the sweep")
    parser.add_argument("--out", required=True, help="where to write the result JSON")
    args = parser.parse_args(argv)
    spec = RunSpec.from_json(args.spec)
    try:
        recorder = Recorder()
        fields = _train(spec, args.runs, recorder)
        write_result(args.out, spec, recorder, **fields)
    except Exception as e:
        Path(args.out).write_text(
            json.dumps(
                {
                    "status": "failed",
                    "error": f"{type(e).__name__}: {e}",
                    "traceback": traceback.format_exc(),
                }
            )
        )
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
