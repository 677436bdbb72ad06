"""Run the benchmark: every (network, repeat, implementation) in its own child process.

Runs alternate between implementations: for each network family and repeat, every
implementation runs once, in an order rotated by one each repeat (A B C, B C A, ...),
so slow drifts of the machine load spread over all of them. ``env-only`` (the physical
limit) does not depend on the network and runs in the first family's cycles.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from nnx_ppo_benchmarks.common import git_state, load_average
from nnx_ppo_benchmarks.metrics import derive, json_safe
from nnx_ppo_benchmarks.settings import (
    IMPLEMENTATIONS,
    NETWORKS,
    EvalSettings,
    PPOSettings,
    RunSpec,
    chunk_plan,
)
from nnx_ppo_benchmarks.venvs import (
    DEFAULT_JAX,
    ENV_OF_IMPLEMENTATION,
    Environment,
    child_env_vars,
    current_environment,
    ensure_environments,
)

__all__ = [
    "BenchOptions",
    "child_environments",
    "finish",
    "plan_runs",
    "print_progress",
    "rotated",
    "run_benchmark",
    "run_child",
    "run_logged",
    "run_name",
    "start_meta",
]

CHILD_MODULES = {
    "ours": "ours",
    "ours-minibatch-gae": "ours",
    "brax": "brax_ppo",
    "nnx-ppo-0.3.0": "nnx_ppo_030",
    "env-only": "env_only",
}
SRC_DIR = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class BenchOptions:
    """What to run (the command line, as data).

    Attributes:
        implementations: Keys of :data:`~nnx_ppo_benchmarks.settings.IMPLEMENTATIONS`.
        networks: Keys of :data:`~nnx_ppo_benchmarks.settings.NETWORKS`.
        repeats: Cycles over the implementations per network family.
        total_steps: Requested training budget (rounded up by
            :func:`~nnx_ppo_benchmarks.settings.chunk_plan`).
        n_chunks: Progress reports per run (>= 2 for a steady-state rate).
        seed: Seed of repeat 0 (repeat ``r`` uses ``seed + r``).
        env_name: MuJoCo Playground environment.
        ppo: Shared hyperparameters.
        eval: Final evaluation.
        environments: ``"isolated"`` (one uv venv per implementation, same JAX) or
            ``"current"`` (this interpreter for all; for smoke tests).
        jax_version: JAX of the isolated environments.
        iterations_per_call: ``ours`` only (``None``: the trainer's default).
        timeout_s: Limit per child process.
        output_dir: Where results, per-run JSON and logs go.
    """

    implementations: tuple[str, ...] = (
        "ours",
        "ours-minibatch-gae",
        "brax",
        "nnx-ppo-0.3.0",
        "env-only",
    )
    networks: tuple[str, ...] = ("mlp_small", "mlp_default")
    repeats: int = 3
    total_steps: int = 1_024_000
    n_chunks: int = 10
    seed: int = 0
    env_name: str = "CartpoleBalance"
    ppo: PPOSettings = dataclasses.field(default_factory=PPOSettings)
    eval: EvalSettings = dataclasses.field(default_factory=EvalSettings)
    environments: str = "isolated"
    jax_version: str = DEFAULT_JAX
    iterations_per_call: int | None = None
    timeout_s: float = 3600.0
    output_dir: Path = Path("outputs/benchmarks")

    def __post_init__(self) -> None:
        for impl in self.implementations:
            if impl not in IMPLEMENTATIONS:
                raise ValueError(
                    f"unknown implementation {impl!r}; choose from {', '.join(IMPLEMENTATIONS)}"
                )
        for net in self.networks:
            if net not in NETWORKS:
                raise ValueError(f"unknown network {net!r}; choose from {', '.join(NETWORKS)}")
        if self.repeats < 1:
            raise ValueError(f"repeats={self.repeats} must be >= 1")
        if self.n_chunks < 2:
            raise ValueError(
                f"n_chunks={self.n_chunks} must be >= 2: the steady-state rate is measured "
                "between the first and the last progress report"
            )
        if self.environments not in ("isolated", "current"):
            raise ValueError(f"environments={self.environments!r} must be 'isolated' or 'current'")
        if self.ppo.n_envs % self.ppo.n_minibatches:
            raise ValueError(
                f"n_envs={self.ppo.n_envs} must be divisible by "
                f"n_minibatches={self.ppo.n_minibatches}"
            )


def plan_runs(options: BenchOptions) -> list[RunSpec]:
    """The child runs in execution order (see the module docstring).

    Example:
        >>> plan = plan_runs(BenchOptions(implementations=("ours", "brax"),
        ...                               networks=("mlp_small", "lstm"), repeats=2))
        >>> [(s.network, s.implementation, s.seed) for s in plan]  # doctest: +NORMALIZE_WHITESPACE
        [('mlp_small', 'ours', 0), ('mlp_small', 'brax', 0),
         ('mlp_small', 'brax', 1), ('mlp_small', 'ours', 1),
         ('lstm', 'ours', 0), ('lstm', 'ours', 1)]
    """
    _, total = chunk_plan(options.total_steps, options.n_chunks, options.ppo.steps_per_iteration)
    specs = []
    for index, network in enumerate(options.networks):
        family = NETWORKS[network]
        impls = [
            i
            for i in options.implementations
            if i in family.implementations or (i == "env-only" and index == 0)
        ]
        for repeat in range(options.repeats):
            for impl in rotated(impls, repeat):
                specs.append(
                    RunSpec(
                        implementation=impl,
                        network=network,
                        env_name=options.env_name,
                        seed=options.seed + repeat,
                        total_steps=total,
                        n_chunks=options.n_chunks,
                        ppo=options.ppo,
                        eval=options.eval,
                        iterations_per_call=options.iterations_per_call,
                    )
                )
    return specs


def rotated(items: list[str], k: int) -> list[str]:
    """``items`` rotated left by ``k``: the order of the implementations in cycle ``k``
    (A B C, B C A, ...), so that slow drifts of the machine load spread over all of them.

    Example:
        >>> rotated(["a", "b", "c"], 4)
        ['b', 'c', 'a']
    """
    shift = k % len(items) if items else 0
    return items[shift:] + items[:shift]


def run_name(spec: RunSpec) -> str:
    """``<network>__<implementation>__seed<seed>``: the stem of a run's result and log."""
    return f"{spec.network}__{spec.implementation}__seed{spec.seed}"


def run_logged(command: list[str], log_path: Path, timeout_s: float) -> str | None:
    """Run a child of the harness (``command``, with `child_env_vars`), its output in
    ``log_path``; returns why it failed (``"exit status N"``, ``"timed out after S s"``)
    or ``None``."""
    with log_path.open("w") as log:
        try:
            process = subprocess.run(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=child_env_vars(SRC_DIR),
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return f"timed out after {timeout_s:.0f} s"
    return f"exit status {process.returncode}" if process.returncode != 0 else None


def run_child(spec: RunSpec, environment: Environment, output_dir: Path, timeout_s: float) -> dict:
    """Run one child process and return its raw result plus the derived numbers.

    The child's output goes to ``output_dir/logs/<run>.log`` and its JSON to
    ``output_dir/runs/<run>.json``. A crash, a timeout or a missing result is
    recorded as ``{"status": "failed", "error": ...}``, never raised.
    """
    name = run_name(spec)
    (output_dir / "runs").mkdir(parents=True, exist_ok=True)
    (output_dir / "logs").mkdir(parents=True, exist_ok=True)
    result_path = output_dir / "runs" / f"{name}.json"
    log_path = output_dir / "logs" / f"{name}.log"
    result_path.unlink(missing_ok=True)
    module = f"nnx_ppo_benchmarks.children.{CHILD_MODULES[spec.implementation]}"
    command = [str(environment.python), "-m", module, "--spec", spec.to_json()]
    command += ["--out", str(result_path)]
    start = time.perf_counter()
    error = run_logged(command, log_path, timeout_s)
    wall = time.perf_counter() - start
    if result_path.exists():
        raw = json.loads(result_path.read_text())
    else:
        raw = {"status": "failed", "error": error or "no result written"}
    raw.update(
        implementation=spec.implementation,
        network=spec.network,
        seed=spec.seed,
        environment=environment.name,
        process_wall_s=wall,
        log=str(log_path),
    )
    if raw.get("status") == "ok":
        raw["derived"] = derive(raw)
    elif "error" not in raw:
        raw["error"] = error or "unknown failure"
    result_path.write_text(json.dumps(json_safe(raw), indent=1, allow_nan=False))
    return raw


def _describe(raw: dict[str, Any]) -> str:
    if raw.get("status") != "ok":
        return f"FAILED: {raw.get('error')}"
    d = raw["derived"]
    parts = []
    if d["steady_sps"] is not None:
        parts.append(f"{d['steady_sps']:,.0f} steps/s")
    if d["compile_s"] is not None:
        parts.append(f"compile {d['compile_s']:.1f} s")
    if d["e2e_s"] is not None:
        parts.append(f"e2e {d['e2e_s']:.1f} s")
    if d["final_eval_reward"] is not None:
        parts.append(f"eval return {d['final_eval_reward']:.1f}")
    return ", ".join(parts)


def run_benchmark(options: BenchOptions, *, command: list[str] | None = None) -> dict[str, Any]:
    """Run every planned child and return the raw results with the run metadata.

    Args:
        options: What to run.
        command: The command line, recorded in the metadata.

    Returns:
        ``{"meta": {...}, "runs": [raw result, ...]}`` (see :mod:`.report`).
    """
    specs = plan_runs(options)
    environments = child_environments(specs, options.environments, options.jax_version)
    meta = start_meta(command, options.environments, options.jax_version)
    meta.update(
        env_name=options.env_name,
        repeats=options.repeats,
        total_steps=specs[0].total_steps if specs else 0,
        n_chunks=options.n_chunks,
        iterations_per_chunk=specs[0].iterations_per_chunk if specs else 0,
        ppo=dataclasses.asdict(options.ppo),
        eval=dataclasses.asdict(options.eval),
        iterations_per_call=options.iterations_per_call,
    )
    runs = []
    for index, spec in enumerate(specs, 1):
        environment = environments[ENV_OF_IMPLEMENTATION[spec.implementation]]
        raw = run_child(spec, environment, options.output_dir, options.timeout_s)
        raw["load_after"] = load_average()
        runs.append(raw)
        what = f"{spec.network} {spec.implementation} seed {spec.seed}"
        print_progress(index, len(specs), what, _describe(raw))
    return finish(meta, runs)


# What the harnesses share (this benchmark, the control suite, the GPU benchmark) ------


def child_environments(
    specs: list[RunSpec], environments: str, jax_version: str
) -> dict[str, Environment]:
    """The environment of each implementation: this interpreter for all
    (``environments="current"``), or the isolated venvs ``specs`` need (made if missing)."""
    if environments == "current":
        return {name: current_environment() for name in ENV_OF_IMPLEMENTATION.values()}
    needed = {ENV_OF_IMPLEMENTATION[s.implementation] for s in specs}
    return ensure_environments(needed, jax_version)


def start_meta(command: list[str] | None, environments: str, jax_version: str) -> dict[str, Any]:
    """The metadata a harness records before its runs: the command, the time, the load,
    the machine, the code and the environments."""
    return {
        "command": command,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "load_before": load_average(),
        "cpu_count": os.cpu_count(),
        "git": git_state(),
        "platform": sys.platform,
        "environments": environments,
        "jax_version": jax_version if environments == "isolated" else None,
    }


def print_progress(index: int, total: int, what: str, outcome: str) -> None:
    """``[index/total] what: outcome`` on stderr, as each run finishes."""
    print(f"[{index}/{total}] {what}: {outcome}", file=sys.stderr, flush=True)


def finish(meta: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """``{"meta", "runs"}``, the end time and the load after the runs added to ``meta``."""
    meta["load_after"] = load_average()
    meta["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    return {"meta": meta, "runs": runs}
