"""``nnx-ppo-bench --suite gpu``: ours vs brax PPO 0.14.2 on one accelerator, in minutes.

What it runs (one seed each, every run in a child process of its own):

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
named from ``jax.devices()``: device kind, platform, memory, JAX version) to
``--output-dir``, rewritten after every child, so a run cut short still leaves the
table of what finished. Sized to finish in under 8 minutes on a modern GPU;
``--time-budget`` caps the whole run (what does not fit is listed as not run) and
``--parts`` runs the table or the sweep alone, to split it over calls.

``--environments isolated`` (the default) runs each side in the harness's uv venv on
``--jax``; ``--environments current`` runs both in this interpreter, which is what a
machine without network needs (a TPU VM with its preinstalled JAX): brax PPO then runs
on that JAX through :mod:`nnx_ppo_benchmarks.brax_compat`. A TPU admits one process at
a time: the parent never opens the device, and a child that finds it still held by
the previous one is retried once. ``--tiny`` runs the same plan at toy sizes on a CPU.

    uv run nnx-ppo-bench --suite gpu --output-dir apps/benchmarks/results/suite/gpu
    uv run python -m nnx_ppo_benchmarks.suite.gpu --tiny --environments current \\
        --tasks CartpoleBalance --output-dir /tmp/gpu-tiny
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nnx_ppo_apps_common.cli import HelpFormatter, fail, positive_int

from nnx_ppo_benchmarks.common import comma_names, git_state, load_average
from nnx_ppo_benchmarks.metrics import derive, json_safe
from nnx_ppo_benchmarks.runner import child_environments, run_child, run_logged
from nnx_ppo_benchmarks.settings import EvalSettings, RunSpec, chunk_plan
from nnx_ppo_benchmarks.suite.report import markdown, summarize
from nnx_ppo_benchmarks.suite.run import SUITE_IMPLEMENTATIONS, outcome, task_dir
from nnx_ppo_benchmarks.suite.tasks import task_settings
from nnx_ppo_benchmarks.venvs import (
    DEFAULT_JAX,
    ENV_OF_IMPLEMENTATION,
    Environment,
)

__all__ = [
    "GpuPlan",
    "build_parser",
    "gpu_plan",
    "hardware_name",
    "main",
    "probe_hardware",
    "render",
    "sweep_summary",
]

PROG = "nnx-ppo-bench --suite gpu"
TASKS = ("CartpoleBalance", "CheetahRun")
SWEEP_TASK = "CartpoleBalance"
PARTS = ("side-by-side", "sweep")


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
            sweep_envs=8,  # the sweep's single runs are then the table's MLP runs
            sweep_minibatches=2,
            sweep_steps=480,
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


MIN_CHILD_S = 60.0
"""A child is not started with less time than this left of ``--time-budget`` (opening
the accelerator and compiling PPO alone take tens of seconds); it is recorded as not run."""

_DEVICE_BUSY = ("libtpu multi-process lockfile", "TPU is already in use", "already in use by")
"""Log lines of a child that found the chip still held by the previous process."""


def _budget_spent(left_s: float) -> str:
    return f"time budget spent ({max(left_s, 0.0):.0f} s left, under {MIN_CHILD_S:.0f} s)"


def _not_run(spec: RunSpec, reason: str) -> dict[str, Any]:
    return {
        "status": "not run",
        "error": reason,
        "implementation": spec.implementation,
        "network": spec.network,
        "seed": spec.seed,
        "env_name": spec.env_name,
    }


def _device_busy(raw: dict[str, Any]) -> bool:
    log = Path(str(raw.get("log", "")))
    text = log.read_text(errors="replace") if log.is_file() else ""
    return raw.get("status") != "ok" and any(line in text for line in _DEVICE_BUSY)


def _run_one(spec: RunSpec, env: Environment, output_dir: Path, timeout_s: float) -> dict[str, Any]:
    """One child (its folder as the control suite's), retried once after 5 s if the
    accelerator was still held by the previous child (a TPU admits one process)."""
    if timeout_s < MIN_CHILD_S:
        return _not_run(spec, _budget_spent(timeout_s))
    folder = task_dir(output_dir, spec.env_name)
    start = time.perf_counter()
    raw = run_child(spec, env, folder, timeout_s)
    if _device_busy(raw) and timeout_s - (time.perf_counter() - start) > MIN_CHILD_S:
        time.sleep(5.0)
        raw = run_child(spec, env, folder, timeout_s - (time.perf_counter() - start))
        raw["retried_device_busy"] = True
    raw["env_name"] = spec.env_name
    raw["load_after"] = load_average()
    print(f"{spec.env_name} {spec.network} {spec.implementation}: {outcome(raw)}", file=sys.stderr)
    return raw


def _run_sweep(
    spec: RunSpec, runs: int, python: Path, output_dir: Path, timeout_s: float
) -> dict[str, Any]:
    if timeout_s < MIN_CHILD_S:
        return {"status": "not run", "runs": runs, "error": _budget_spent(timeout_s)}
    (output_dir / "runs").mkdir(parents=True, exist_ok=True)
    (output_dir / "logs").mkdir(parents=True, exist_ok=True)
    out = output_dir / "runs" / f"sweep{runs}__ours.json"
    out.unlink(missing_ok=True)
    command = [str(python), "-m", "nnx_ppo_benchmarks.suite.child_sweep", "--spec"]
    command += [spec.to_json(), "--runs", str(runs), "--out", str(out)]
    start = time.perf_counter()
    log_path = output_dir / "logs" / f"sweep{runs}__ours.log"
    run_logged(command, log_path, timeout_s)  # the result file says whether it succeeded
    raw = json.loads(out.read_text()) if out.is_file() else {"status": "failed", "runs": runs}
    raw.setdefault("error", None if raw.get("status") == "ok" else "no result (timeout?)")
    raw["process_wall_s"] = time.perf_counter() - start
    raw["log"] = str(log_path)
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
        "status": sweep.get("status"),
        "runs": sweep.get("runs"),
        "aggregate_sps": aggregate,
        "single_sps": single,
        "speedup": {k: aggregate / v for k, v in single.items()} if aggregate else {},
        "wall_s": sweep.get("process_wall_s"),
        "error": sweep.get("error"),
    }


def hardware_name(hw: dict[str, Any]) -> str:
    """``"TPU v5 lite (tpu, 15.7 GiB), JAX 0.10.2"`` from :func:`probe_hardware`'s record
    (the device count is named when there is more than one).

    Example:
        >>> hardware_name({"device_kind": "NVIDIA H100", "platform": "gpu",
        ...                "memory_bytes": 80 * 2**30, "device_count": 2, "jax": "0.9.2"})
        'NVIDIA H100 x2 (gpu, 80.0 GiB each), JAX 0.9.2'
    """
    if "error" in hw:
        return f"unknown (the probe failed: {hw['error'].strip().splitlines()[-1:]})"
    memory, count = hw.get("memory_bytes"), hw.get("device_count") or 1
    return (
        f"{hw.get('device_kind', '?')}{f' x{count}' if count > 1 else ''} "
        f"({hw.get('platform', '?')}"
        + (f", {memory / 2**30:.1f} GiB{' each' if count > 1 else ''}" if memory else "")
        + f"), JAX {hw.get('jax', '?')}"
    )


def render(results: dict[str, Any]) -> str:
    """The report's markdown: hardware line, side-by-side table, sweep table."""
    meta = results["meta"]
    plan = meta["plan"]
    preamble = [
        f"Hardware: {hardware_name(meta['hardware'])}.",
        f"Command: `{' '.join(meta['command'] or [])}`; "
        f"{plan['n_envs']} envs, {meta['total_steps']:,} env steps per run, seed 0; "
        f"wall time {meta['wall_s']:.0f} s.",
    ]
    text = markdown(results["summary"], title="GPU benchmark", preamble=preamble)
    s = results.get("sweep")
    if s is None:  # --parts without sweep
        return text
    if s.get("aggregate_sps") is None:
        state = "not run" if s.get("status") == "not run" else "FAILED"
        return text + f"\nSweep of {s.get('runs')} seeds: {state} ({s.get('error')}).\n"
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
    p.add_argument(
        "--parts",
        type=comma_names(list(PARTS)),
        default=PARTS,
        help="what to run: the side-by-side table, the K-seed sweep, or both",
    )
    t = GpuPlan.tiny()
    p.add_argument(
        "--n-envs",
        type=positive_int,
        default=None,
        help=f"environments per side-by-side run (default: {d.n_envs}; --tiny {t.n_envs})",
    )
    p.add_argument(
        "--steps",
        type=positive_int,
        default=None,
        help=f"env steps per side-by-side run (default: {d.total_steps:,}; --tiny {t.total_steps})",
    )
    p.add_argument(
        "--sweep-runs",
        type=positive_int,
        default=None,
        help=f"K, the sweep's seeds (default: {d.sweep_runs}; --tiny {t.sweep_runs})",
    )
    p.add_argument(
        "--environments",
        choices=("isolated", "current"),
        default="isolated",
        help="isolated: one uv venv per side on --jax (needs uv and PyPI the first time); "
        "current: both sides in this interpreter (no venv, no network: a TPU VM's "
        "preinstalled JAX; brax PPO runs on JAX >= 0.10 through brax_compat)",
    )
    p.add_argument("--jax", default=DEFAULT_JAX, help="JAX version of the isolated venvs")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per child")
    p.add_argument(
        "--time-budget",
        type=float,
        default=None,
        help="seconds for the whole benchmark: each child's timeout is cut to what is "
        f"left, and no child starts with under {MIN_CHILD_S:.0f} s left (recorded as "
        "not run); the table is rewritten after every child, so it survives a kill "
        "(default: no limit)",
    )
    p.add_argument("--output-dir", type=Path, default=Path("outputs/gpu"))
    return p


def _write(results: dict[str, Any], output_dir: Path, start: float) -> str:
    """Refresh the summaries, write ``results.json`` and ``results.md``; the markdown."""
    results["meta"]["wall_s"] = time.perf_counter() - start
    results["summary"] = summarize(results["runs"])
    singles = results["sweep_single_runs"]
    sweep = results.get("sweep_raw")
    results["sweep"] = None if sweep is None else sweep_summary(sweep, singles)
    output_dir.mkdir(parents=True, exist_ok=True)
    text = render(results)
    saved = {k: v for k, v in results.items() if k != "sweep_raw"}
    (output_dir / "results.json").write_text(
        json.dumps(json_safe(saved), indent=1, allow_nan=False, default=str)
    )
    (output_dir / "results.md").write_text(text)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; 0 if every run succeeded, 1 if one failed or was not run, 2 on bad
    input."""
    args = build_parser().parse_args(argv)
    plan = GpuPlan.tiny() if args.tiny else GpuPlan()
    plan = dataclasses.replace(plan, tasks=args.tasks, networks=args.networks)
    if args.n_envs is not None:
        plan = dataclasses.replace(plan, n_envs=args.n_envs)
    if args.steps is not None:
        plan = dataclasses.replace(plan, total_steps=args.steps)
    if args.sweep_runs is not None:
        plan = dataclasses.replace(plan, sweep_runs=args.sweep_runs)
    if args.time_budget is not None and args.time_budget <= 0:
        return fail(PROG, f"--time-budget {args.time_budget} must be positive (seconds)")
    try:
        specs, sweep_spec = gpu_plan(plan, args.implementations)
    except ValueError as e:
        return fail(PROG, str(e))
    n_single = len(args.implementations)
    side = specs[:-n_single] if "side-by-side" in args.parts else []
    singles = specs[-n_single:] if "sweep" in args.parts else []
    command = ["nnx-ppo-bench", "--suite", "gpu", *(sys.argv[1:] if argv is None else argv)]
    start = time.perf_counter()

    def time_left() -> float:
        if args.time_budget is None:
            return args.timeout
        return min(args.timeout, args.time_budget - (time.perf_counter() - start))

    envs = child_environments([*side, *singles], args.environments, args.jax)
    ours = envs[ENV_OF_IMPLEMENTATION["ours"]]
    results: dict[str, Any] = {
        "meta": {
            "command": command,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "hardware": probe_hardware(ours.python),
            "plan": dataclasses.asdict(plan),
            "parts": list(args.parts),
            "total_steps": specs[0].total_steps,
            "time_budget_s": args.time_budget,
            "environments": args.environments,
            "jax_version": args.jax if args.environments == "isolated" else None,
            "cpu_count": os.cpu_count(),
            "load_before": load_average(),
            "git": git_state(),
        },
        "runs": [],
        "sweep_single_runs": [],
    }
    for spec in side:
        env = envs[ENV_OF_IMPLEMENTATION[spec.implementation]]
        results["runs"].append(_run_one(spec, env, args.output_dir, time_left()))
        _write(results, args.output_dir, start)
    ran = {s.to_json(): r for s, r in zip(side, results["runs"], strict=True)}
    for spec in singles:
        env = envs[ENV_OF_IMPLEMENTATION[spec.implementation]]
        same = ran.get(spec.to_json(), {})
        if same.get("status") == "ok":  # the same run is in the table (--tiny): reuse it
            record = {**same, "reused": "side-by-side"}
        else:
            record = _run_one(spec, env, args.output_dir / "sweep", time_left())
        results["sweep_single_runs"].append(record)
        _write(results, args.output_dir, start)
    if "sweep" in args.parts:
        sweep_dir = args.output_dir / "sweep"
        results["sweep_raw"] = {
            "status": "not run",
            "runs": plan.sweep_runs,
            "error": "stopped before it finished",
        }
        _write(results, args.output_dir, start)  # what a killed benchmark leaves
        results["sweep_raw"] = _run_sweep(
            sweep_spec, plan.sweep_runs, ours.python, sweep_dir, time_left()
        )
    results["meta"]["load_after"] = load_average()
    results["meta"]["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    print(_write(results, args.output_dir, start))
    records = [*results["runs"], *results["sweep_single_runs"]]
    failed = [r for r in records if r.get("status") != "ok"]
    sweep_failed = "sweep" in args.parts and results["sweep_raw"].get("status") != "ok"
    return 1 if failed or sweep_failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
