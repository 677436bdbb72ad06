"""The cost of ``--reset fresh`` against ``--reset cached`` with staggered starts, on the
quickstart itself (``results/suite/reset/README.md`` has the result).

Runs ``nnx-ppo-quickstart --env CheetahRun`` (its Playground preset, at 256 environments
so that it fits a 2-core CPU) once per mode and round, alternating the modes, each with
one evaluation at the end; reads every iteration's env steps per second from the run's
``metrics.jsonl`` and reports, per mode, the median over the iterations of the run's
second half (by then staggered episodes end at almost every step) and the ratio
cached/fresh per round. Both modes share one compilation cache folder.

Run from the repository root, in the workspace's environment (which has the
quickstart)::

    uv run python -m nnx_ppo_benchmarks.studies.reset_modes \\
        --out apps/benchmarks/results/suite/reset/CheetahRun-cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main", "run_once"]


def run_once(mode: str, args: argparse.Namespace, folder: Path) -> dict:
    """One quickstart run with ``--reset mode`` in a new folder under ``folder``: its
    wall time, the median env steps/s of its second half, the first iterations' rates
    and the final evaluation's reward."""
    out = folder / f"{mode}-{time.time_ns()}"
    command = [
        sys.executable, "-m", "nnx_ppo_quickstart.cli", "--env", args.env,
        "--n-envs", str(args.n_envs), "--steps", str(args.steps),
        "--eval-every", str(args.steps), "--eval-envs", "16",
        "--checkpoint-every", str(args.steps), "--reset", mode, "--no-progress",
        "--output-dir", str(out),
    ]  # fmt: skip
    env = {**os.environ, "NNX_PPO_CACHE_DIR": str(folder / "cache")}
    start = time.perf_counter()
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    sps = [(r["step"], r["throughput/sps"]) for r in rows if r.get("throughput/sps")]
    late = [v for step, v in sps if step > args.steps // 2]
    summary = json.loads((out / "summary.json").read_text())
    return {
        "mode": mode,
        "wall_s": round(wall, 1),
        "second_half_sps_median": statistics.median(late),
        "first_iterations_sps": [round(v) for _, v in sps[1:4]],
        "final_eval_reward": summary["final_eval_reward"],
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Command line (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m nnx_ppo_benchmarks.studies.reset_modes",
        description=(__doc__ or "").splitlines()[0],
    )
    parser.add_argument("--env", default="CheetahRun")
    parser.add_argument("--n-envs", type=int, default=256)
    parser.add_argument("--steps", type=int, default=307_200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    runs = []
    with tempfile.TemporaryDirectory() as folder:
        for round_ in range(args.rounds):
            for mode in ("fresh", "cached") if round_ % 2 == 0 else ("cached", "fresh"):
                runs.append({"round": round_, **run_once(mode, args, Path(folder))})
                print(json.dumps(runs[-1]), flush=True)
    ratios = []
    for round_ in range(args.rounds):
        by_mode = {r["mode"]: r for r in runs if r["round"] == round_}
        ratios.append(
            by_mode["cached"]["second_half_sps_median"] / by_mode["fresh"]["second_half_sps_median"]
        )
    result = {
        "settings": {k: str(v) for k, v in vars(args).items()},
        "load_average_at_end": os.getloadavg(),
        "runs": runs,
        "cached_over_fresh_second_half_sps": [round(r, 2) for r in ratios],
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print("cached/fresh (second half, per round):", result["cached_over_fresh_second_half_sps"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
