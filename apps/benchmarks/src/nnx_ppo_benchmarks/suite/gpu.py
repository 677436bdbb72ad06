"""``nnx-ppo-bench --suite gpu``: ours vs brax PPO 0.14.2 on one accelerator, in minutes.

What it runs (one seed each, the suite's children in the harness's venvs):

1. ``CartpoleBalance`` and ``CheetahRun`` (Playground, ``impl="jax"``, Playground's
   per-task brax-PPO settings) at ``--n-envs`` environments (default 4096): ours and
   brax PPO with the MLP ``mlp_default`` (Playground's default network), and ours with
   the ``lstm`` family (brax PPO has no recurrent networks).
2. A K-seed sweep (default K=32) on ``CartpoleBalance`` with ``--sweep-envs`` (256)
   environments per run: ours' ``train_many`` (all K runs in one program) against one
   run of the same size by ours and by brax. Running the K seeds one after another
   takes K times one run's steady time, so the reported sweep speed-up is the sweep's
   aggregate steps/s over one run's steps/s (one sequential run is measured, not K).

It writes ``results.json`` and ``results.md`` (the docs table's format, the hardware
named: ``jax.devices()[0].device_kind`` and its memory) to ``--output-dir``. Sized to
finish in under 8 minutes on a modern GPU; ``--tiny`` runs the same plan at toy sizes
on a CPU (the test does, with ``--environments current --implementations ours``).

    uv run nnx-ppo-bench --suite gpu --output-dir apps/benchmarks/results/suite/gpu
    uv run python -m nnx_ppo_benchmarks.suite.gpu --tiny --environments current \\
        --implementations ours --output-dir /tmp/gpu-tiny
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nnx_ppo_apps_common.cli import HelpFormatter, fail, positive_int

from nnx_ppo_benchmarks.common import comma_names
from nnx_ppo_benchmarks.metrics import derive, json_safe
from nnx_ppo_benchmarks.runner import SRC_DIR
from nnx_ppo_benchmarks.settings import EvalSettings, RunSpec, chunk_plan
from nnx_ppo_benchmarks.suite.report import markdown, summarize
from nnx_ppo_benchmarks.suite.run import SUITE_IMPLEMENTATIONS, _environments, run_plan
from nnx_ppo_benchmarks.suite.tasks import task_settings
from nnx_ppo_benchmarks.venvs import DEFAULT_JAX, ENV_OF_IMPLEMENTATION, child_env_vars

__all__ = ["GpuPlan", "build_parser", "gpu_plan", "main", "probe_hardware"]

PROG = "nnx-ppo-bench --suite gpu"
TASKS = ("CartpoleBalance", "CheetahRun")
SWEEP_TASK = "CartpoleBalance"


@dataclasses.dataclass(frozen=True)
class GpuPlan:
    """The sizes of one GPU benchmark (the defaults; :meth:`tiny` for a CPU check)."""

    tasks: tuple[str, ...] = TASKS
    networks: tuple[str, ...] = ("mlp_default", "lstm")
    n_envs: int = 4096
    n_minibatches: int = 32
    total_steps: int = 2_457_600
    n_chunks: int = 4
    sweep_runs: int = 32
    sweep_envs: int = 256
    sweep_minibatches: int = 8
    sweep_steps: int = 122_880
    eval: EvalSettings = dataclasses.field(default_factory=EvalSettings)

    @classmethod
    def tiny(cls) -> GpuPlan:
        """Toy sizes: the whole plan in a minute or two on a CPU."""
        return cls(
            n_envs=8,
            n_minibatches=2,
            total_steps=480,
            n_chunks=2,
            sweep_runs=2,
            sweep_envs=4,
            sweep_minibatches=2,
            sweep_steps=240,
            eval=EvalSettings(n_envs=2, episode_length=20),
        )


def gpu_plan(plan: GpuPlan, implementations: Sequence[str]) -> tuple[list[RunSpec], RunSpec]:
    """``(side-by-side runs, the sweep's spec)``; the sweep spec's ``implementation``
    is ``"ours"`` (its single-run twins are in the first list, network ``mlp_default``
    with ``sweep_envs`` environments)."""
    specs: list[RunSpec] = []
    for task in plan.tasks:
        ppo = task_settings(task, n_envs=plan.n_envs, n_minibatches=plan.n_minibatches)
        # The tiny plan shortens the rollout so that its few steps make whole chunks.
        if plan.total_steps < ppo.steps_per_iteration * plan.n_chunks:
            ppo = dataclasses.replace(ppo, rollout_length=10, n_epochs=2)
        _, total = chunk_plan(plan.total_steps, plan.n_chunks, ppo.steps_per_iteration)
        for network in plan.networks:
            impls = [i for i in implementations if network != "lstm" or i == "ours"]
            for impl in impls:
                specs.append(RunSpec(impl, network, task, 0, total, plan.n_chunks, ppo, plan.eval))
    sweep_ppo = task_settings(
        SWEEP_TASK, n_envs=plan.sweep_envs, n_minibatches=plan.sweep_minibatches
    )
    if plan.sweep_steps < sweep_ppo.steps_per_iteration * plan.n_chunks:
        sweep_ppo = dataclasses.replace(sweep_ppo, rollout_length=10, n_epochs=2)
    _, sweep_total = chunk_plan(plan.sweep_steps, plan.n_chunks, sweep_ppo.steps_per_iteration)
    sweep = RunSpec(
        "ours", "mlp_default", SWEEP_TASK, 0, sweep_total, plan.n_chunks, sweep_ppo, plan.eval
    )
    for impl in implementations:
        specs.append(dataclasses.replace(sweep, implementation=impl, env_name=SWEEP_TASK))
    return specs, sweep


_PROBE = (
    "import json, jax; d = jax.devices()[0]; s = d.memory_stats() or {}; "
    "print(json.dumps({'platform': d.platform, 'device_kind': d.device_kind, "
    "'device_count': jax.device_count(), 'memory_bytes': s.get('bytes_limit'), "
    "'jax': jax.__version__}))"
)


def probe_hardware(python: Path) -> dict[str, Any]:
    """The accelerator as ``python`` (a benchmark venv's interpreter) sees it."""
    done = subprocess.run(
        [str(python), "-c", _PROBE], capture_output=True, text=True, check=False, timeout=300
    )
    if done.returncode:
        return {"error": done.stderr[-2000:]}
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _run_sweep(spec: RunSpec, runs: int, python: Path, output_dir: Path, timeout_s: float) -> dict:
    (output_dir / "runs").mkdir(parents=True, exist_ok=True)
    (output_dir / "logs").mkdir(parents=True, exist_ok=True)
    out = output_dir / "runs" / f"sweep{runs}__ours.json"
    out.unlink(missing_ok=True)
    command = [str(python), "-m", "nnx_ppo_benchmarks.suite.child_sweep", "--spec"]
    command += [spec.to_json(), "--runs", str(runs), "--out", str(out)]
    start = time.perf_counter()
    log_path = output_dir / "logs" / f"sweep{runs}__ours.log"
    with log_path.open("w") as log, contextlib.suppress(subprocess.TimeoutExpired):
        subprocess.run(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=child_env_vars(SRC_DIR),
            timeout=timeout_s,
            check=False,
        )
    raw = json.loads(out.read_text()) if out.is_file() else {"status": "failed"}
    raw.setdefault("error", None if raw.get("status") == "ok" else "no result (timeout?)")
    raw["process_wall_s"] = time.perf_counter() - start
    if raw.get("status") == "ok":
        raw["derived"] = derive(raw)
    out.write_text(json.dumps(json_safe(raw), indent=1, allow_nan=False))
    return raw


def sweep_summary(sweep: dict[str, Any], singles: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Aggregate steps/s of the sweep and its speed-up over one run done K times.

    Example:
        >>> s = sweep_summary({"status": "ok", "runs": 4, "derived": {"steady_sps": 50.0}},
        ...                   [{"status": "ok", "implementation": "brax",
        ...                     "derived": {"steady_sps": 40.0}}])
        >>> s["aggregate_sps"], s["speedup"]["brax"]
        (200.0, 5.0)
    """
    ok = sweep.get("status") == "ok" and sweep["derived"].get("steady_sps")
    aggregate = sweep["runs"] * sweep["derived"]["steady_sps"] if ok else None
    single = {
        r["implementation"]: r["derived"]["steady_sps"]
        for r in singles
        if r.get("status") == "ok" and r["derived"].get("steady_sps")
    }
    return {
        "runs": sweep.get("runs"),
        "aggregate_sps": aggregate,
        "single_sps": single,
        "speedup": {k: aggregate / v for k, v in single.items()} if aggregate else {},
        "wall_s": sweep.get("process_wall_s"),
        "error": sweep.get("error"),
    }


def render(results: dict[str, Any]) -> str:
    """The report's markdown: hardware line, side-by-side table, sweep table."""
    hw = results["meta"]["hardware"]
    memory = hw.get("memory_bytes")
    named = (
        f"{hw.get('device_kind', '?')} ({hw.get('platform', '?')}"
        + (f", {memory / 2**30:.1f} GiB" if memory else "")
        + f"), JAX {hw.get('jax', '?')}"
    )
    plan = results["meta"]["plan"]
    preamble = [
        f"Hardware: {named}.",
        f"Command: `{' '.join(results['meta']['command'] or [])}`; "
        f"{plan['n_envs']} envs, {results['meta']['total_steps']:,} env steps per run, seed 0; "
        f"wall time {results['meta']['wall_s']:.0f} s.",
    ]
    text = markdown(results["summary"], title="GPU benchmark", preamble=preamble)
    s = results["sweep"]
    if s.get("error") and s.get("aggregate_sps") is None:
        return text + f"\nSweep of {s.get('runs')} seeds: FAILED ({s['error']}).\n"
    rows = [
        "",
        f"K={s['runs']} seeds of {SWEEP_TASK} ({plan['sweep_envs']} envs each): ours' "
        "train_many against one run of the same size (K seeds one after another take "
        "K times as long).",
        "",
        "| sweep | aggregate steps/s | one run: steps/s | speed-up over K sequential runs |",
        "|---|---:|---:|---:|",
    ]
    for impl, sps in s["single_sps"].items():
        rows.append(
            f"| train_many K={s['runs']} vs {impl} | {s['aggregate_sps']:,.0f} | "
            f"{sps:,.0f} | {s['speedup'][impl]:.1f}x |"
        )
    return text + "\n".join(rows) + "\n"


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    p = argparse.ArgumentParser(
        prog=PROG, description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter
    )
    d = GpuPlan()
    p.add_argument("--tiny", action="store_true", help="toy sizes, for a CPU check")
    p.add_argument(
        "--tasks",
        type=comma_names(list(TASKS)),
        default=TASKS,
        help="side-by-side tasks (the sweep always runs CartpoleBalance)",
    )
    p.add_argument(
        "--networks",
        type=comma_names(["mlp_default", "lstm"]),
        default=("mlp_default", "lstm"),
        help="side-by-side networks (lstm: ours only)",
    )
    p.add_argument(
        "--implementations",
        type=comma_names(list(SUITE_IMPLEMENTATIONS)),
        default=SUITE_IMPLEMENTATIONS,
    )
    p.add_argument("--n-envs", type=positive_int, default=None, help=f"default {d.n_envs}")
    p.add_argument(
        "--sweep-runs", type=positive_int, default=None, help=f"K, default {d.sweep_runs}"
    )
    p.add_argument("--environments", choices=("isolated", "current"), default="isolated")
    p.add_argument("--jax", default=DEFAULT_JAX, help="JAX version of the isolated venvs")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per child")
    p.add_argument("--output-dir", type=Path, default=Path("outputs/gpu"))
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; 0 if every run succeeded, 1 if one failed, 2 on bad input."""
    args = build_parser().parse_args(argv)
    plan = GpuPlan.tiny() if args.tiny else GpuPlan()
    plan = dataclasses.replace(plan, tasks=args.tasks, networks=args.networks)
    if args.n_envs is not None:
        plan = dataclasses.replace(plan, n_envs=args.n_envs)
    if args.sweep_runs is not None:
        plan = dataclasses.replace(plan, sweep_runs=args.sweep_runs)
    try:
        specs, sweep_spec = gpu_plan(plan, args.implementations)
    except ValueError as e:
        return fail(PROG, str(e))
    command = ["nnx-ppo-bench", "--suite", "gpu", *(sys.argv[1:] if argv is None else argv)]
    start = time.perf_counter()
    envs = _environments(specs, args.environments, args.jax)
    hardware = probe_hardware(envs[ENV_OF_IMPLEMENTATION["ours"]].python)
    n_single = len(args.implementations)
    results = run_plan(
        specs[:-n_single],
        output_dir=args.output_dir,
        environments=args.environments,
        jax_version=args.jax,
        timeout_s=args.timeout,
        command=command,
        resume=False,
    )
    singles = run_plan(
        specs[-n_single:],
        output_dir=args.output_dir / "sweep",
        environments=args.environments,
        jax_version=args.jax,
        timeout_s=args.timeout,
        resume=False,
    )["runs"]
    sweep = _run_sweep(
        sweep_spec,
        plan.sweep_runs,
        envs[ENV_OF_IMPLEMENTATION["ours"]].python,
        args.output_dir / "sweep",
        args.timeout,
    )
    side_by_side = results["runs"]
    results["sweep_single_runs"] = singles
    results["sweep"] = sweep_summary(sweep, singles)
    results["meta"].update(
        hardware=hardware,
        plan=dataclasses.asdict(plan),
        total_steps=specs[0].total_steps,
        wall_s=time.perf_counter() - start,
    )
    results["summary"] = summarize(side_by_side)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    text = render(results)
    (args.output_dir / "results.json").write_text(
        json.dumps(json_safe(results), indent=1, allow_nan=False, default=str)
    )
    (args.output_dir / "results.md").write_text(text)
    print(text)
    failed = [r for r in [*side_by_side, *singles] if r.get("status") != "ok"]
    return 1 if failed or sweep.get("status") != "ok" else 0


if __name__ == "__main__":
    raise SystemExit(main())
