"""Run the control suite: every (task, network, seed, implementation) in its own child.

The children are the side-by-side benchmark's (`nnx_ppo_benchmarks.children.ours`,
`nnx_ppo_benchmarks.children.brax_ppo`), launched by
:func:`nnx_ppo_benchmarks.runner.run_child` in the same isolated venvs (one JAX version
for all). Per task and network, the implementations alternate seed by seed (the order
rotated by one each seed), so slow drifts of the machine load spread over both. A run
whose result file already says ``"ok"`` is not run again (an interrupted suite
resumes where it stopped). A network family an implementation cannot build (brax PPO
has MLP policies only) is not run for it; :func:`refusals` names each such cell and
why, and the report lists it.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from nnx_ppo_benchmarks.common import load_average
from nnx_ppo_benchmarks.metrics import derive
from nnx_ppo_benchmarks.runner import (
    child_environments,
    finish,
    print_progress,
    rotated,
    run_child,
    run_name,
    start_meta,
)
from nnx_ppo_benchmarks.settings import NETWORKS, EvalSettings, RunSpec, chunk_plan
from nnx_ppo_benchmarks.suite.tasks import CONTROL_TASKS, DEFAULT_TASKS, task_settings
from nnx_ppo_benchmarks.venvs import DEFAULT_JAX, ENV_OF_IMPLEMENTATION, Environment

__all__ = [
    "SuiteOptions",
    "collect",
    "outcome",
    "plan_suite",
    "refusals",
    "run_plan",
    "same_spec",
    "task_dir",
]

SUITE_IMPLEMENTATIONS = ("ours", "brax")
"""The implementations the suite compares."""

_CANNOT = {"brax": "brax PPO 0.14.2 has MLP policies only (no recurrent or graph policy)"}
"""Why an implementation cannot build a family that is not in its ``implementations``."""


def _reason(implementation: str, network: str) -> str:
    return _CANNOT.get(implementation, f"{implementation} cannot build the {network} family")


@dataclasses.dataclass(frozen=True)
class SuiteOptions:
    """What the control suite runs (the command line, as data).

    Attributes:
        tasks: Keys of :data:`~nnx_ppo_benchmarks.suite.tasks.CONTROL_TASKS` (default:
            every task with its full observation; ``CartpoleBalance/masked`` and the
            other variants on request).
        networks: Keys of :data:`~nnx_ppo_benchmarks.settings.NETWORKS`; a family an
            implementation does not support (brax: LSTM, graph) runs for ours only and
            is listed by :func:`refusals`; one that no chosen implementation supports
            is an error.
        implementations: A subset of ``("ours", "brax")``.
        seeds: One run per seed and implementation.
        total_steps: Env-step budget per run (rounded up by
            :func:`~nnx_ppo_benchmarks.settings.chunk_plan`; the same for every task).
        n_chunks: Progress reports per run (>= 2, for the steady-state rate).
        n_envs: Parallel environments per run.
        n_minibatches: Minibatches per epoch.
        eval: The final deterministic evaluation.
        environments: ``"isolated"`` (the harness's venvs) or ``"current"``.
        jax_version: JAX of the isolated venvs.
        timeout_s: Limit per child.
        output_dir: ``<output_dir>/<task>/runs|logs`` per task, plus the report.
        stagger: Start each training episode at a random step in the first half of the
            episode (`RunSpec.stagger`, the quickstart's way), instead of at step 0 as
            brax PPO does; ours only (evaluation plays whole episodes from step 0).
    """

    tasks: tuple[str, ...] = DEFAULT_TASKS
    networks: tuple[str, ...] = ("mlp_default", "lstm_quickstart", "graph_quickstart")
    implementations: tuple[str, ...] = SUITE_IMPLEMENTATIONS
    seeds: tuple[int, ...] = (0, 1, 2)
    total_steps: int = 2_048_000
    n_chunks: int = 8
    n_envs: int = 256
    n_minibatches: int = 8
    eval: EvalSettings = dataclasses.field(default_factory=EvalSettings)
    environments: str = "isolated"
    jax_version: str = DEFAULT_JAX
    timeout_s: float = 7200.0
    output_dir: Path = Path("outputs/suite")
    stagger: bool = False

    def __post_init__(self) -> None:
        for task in self.tasks:
            if task not in CONTROL_TASKS:
                raise ValueError(f"unknown task {task!r}; choose from {', '.join(CONTROL_TASKS)}")
        for net in self.networks:
            if net not in NETWORKS:
                raise ValueError(f"unknown network {net!r}; choose from {', '.join(NETWORKS)}")
        for impl in self.implementations:
            if impl not in SUITE_IMPLEMENTATIONS:
                raise ValueError(
                    f"implementation {impl!r} is not in the suite; choose from "
                    f"{', '.join(SUITE_IMPLEMENTATIONS)}"
                )
        for net in self.networks:
            able = [i for i in SUITE_IMPLEMENTATIONS if i in NETWORKS[net].implementations]
            if not set(able) & set(self.implementations):
                reasons = "; ".join(_reason(i, net) for i in self.implementations)
                raise ValueError(
                    f"network {net!r} cannot run with implementations="
                    f"{', '.join(self.implementations)} ({reasons}); add "
                    f"{' or '.join(able)} to the implementations or leave the network out"
                )
        if self.stagger and "brax" in self.implementations:
            raise ValueError(
                "stagger=True: brax PPO 0.14.2 starts every training episode at step 0, so "
                "its runs would not match; give implementations=('ours',) (--implementations "
                "ours) or leave stagger off"
            )
        if not self.seeds:
            raise ValueError("seeds=() is empty; give at least one seed (3-5 for an interval)")
        if self.n_chunks < 2:
            raise ValueError(f"n_chunks={self.n_chunks} must be >= 2 (steady-state rate)")
        if self.environments not in ("isolated", "current"):
            raise ValueError(f"environments={self.environments!r} must be 'isolated' or 'current'")


def plan_suite(options: SuiteOptions, *, published: dict[str, Any] | None = None) -> list[RunSpec]:
    """The child runs in execution order.

    Args:
        options: What to run.
        published: Settings to use for every task instead of Playground's (tests).

    Example:
        >>> common = {"discounting": 0.99, "learning_rate": 1e-3, "entropy_cost": 0.01,
        ...           "reward_scaling": 1.0, "normalize_observations": True,
        ...           "episode_length": 100, "unroll_length": 10, "num_updates_per_batch": 2}
        >>> plan = plan_suite(SuiteOptions(tasks=("CheetahRun",), networks=("mlp_small", "lstm"),
        ...                                seeds=(0, 1), n_envs=16, n_minibatches=4,
        ...                                total_steps=1000, n_chunks=2), published=common)
        >>> [(s.network, s.implementation, s.seed) for s in plan]  # doctest: +NORMALIZE_WHITESPACE
        [('mlp_small', 'ours', 0), ('mlp_small', 'brax', 0),
         ('mlp_small', 'brax', 1), ('mlp_small', 'ours', 1),
         ('lstm', 'ours', 0), ('lstm', 'ours', 1)]
        >>> plan[0].total_steps, plan[0].ppo.rollout_length, plan[0].stagger
        (1280, 10, 0)
        >>> staggered = SuiteOptions(tasks=("CheetahRun",), networks=("lstm",),
        ...                          implementations=("ours",), stagger=True)
        >>> plan_suite(staggered, published=common)[0].stagger  # half of episode_length
        50
    """
    specs = []
    for task in options.tasks:
        ppo = task_settings(
            task,
            n_envs=options.n_envs,
            n_minibatches=options.n_minibatches,
            published=published,
        )
        _, total = chunk_plan(options.total_steps, options.n_chunks, ppo.steps_per_iteration)
        evaluation = dataclasses.replace(
            options.eval, episode_length=min(options.eval.episode_length, ppo.episode_length)
        )
        for network in options.networks:
            impls = [i for i in options.implementations if i in NETWORKS[network].implementations]
            for index, seed in enumerate(options.seeds):
                for impl in rotated(impls, index):
                    specs.append(
                        RunSpec(
                            implementation=impl,
                            network=network,
                            env_name=task,
                            seed=seed,
                            total_steps=total,
                            n_chunks=options.n_chunks,
                            ppo=ppo,
                            eval=evaluation,
                            stagger=ppo.episode_length // 2 if options.stagger else 0,
                        )
                    )
    return specs


def refusals(options: SuiteOptions) -> list[dict[str, Any]]:
    """The (task, network, implementation) cells the plan leaves out, each as a run
    record with ``status="unsupported"`` and the reason in ``error`` (the report lists
    them as rows of their own).

    Example:
        >>> [cell] = refusals(SuiteOptions(tasks=("CartpoleBalance/masked",),
        ...                                networks=("mlp_default", "lstm_quickstart")))
        >>> cell["env_name"], cell["network"], cell["implementation"]
        ('CartpoleBalance/masked', 'lstm_quickstart', 'brax')
        >>> cell["error"]
        'brax PPO 0.14.2 has MLP policies only (no recurrent or graph policy)'
    """
    return [
        {
            "env_name": task,
            "network": network,
            "implementation": impl,
            "status": "unsupported",
            "error": _reason(impl, network),
        }
        for task in options.tasks
        for network in options.networks
        for impl in options.implementations
        if impl not in NETWORKS[network].implementations
    ]


def task_dir(output_dir: Path, env_name: str) -> Path:
    """The folder of one task's runs (``brax/hopper`` -> ``brax-hopper``,
    ``CartpoleBalance/masked`` -> ``CartpoleBalance-masked``)."""
    return output_dir / env_name.replace("/", "-")


def _finished(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    raw = json.loads(path.read_text())
    return raw if raw.get("status") == "ok" else None


def run_plan(
    specs: list[RunSpec],
    *,
    output_dir: Path,
    environments: str = "isolated",
    jax_version: str = DEFAULT_JAX,
    timeout_s: float = 7200.0,
    command: list[str] | None = None,
    resume: bool = True,
) -> dict[str, Any]:
    """Run ``specs`` (each in its child) and return ``{"meta", "runs"}``.

    Each run record carries its task (``env_name``); results of an earlier call with
    the same output folder are reused when ``resume`` (their ``"resumed": true``).
    """
    envs: dict[str, Environment] = child_environments(specs, environments, jax_version)
    meta = start_meta(command, environments, jax_version)
    runs = []
    for index, spec in enumerate(specs, 1):
        folder = task_dir(output_dir, spec.env_name)
        previous = _finished(folder / "runs" / f"{run_name(spec)}.json") if resume else None
        if previous is not None and same_spec(previous.get("spec"), spec):
            raw = {**previous, "resumed": True}
        else:
            env = envs[ENV_OF_IMPLEMENTATION[spec.implementation]]
            raw = run_child(spec, env, folder, timeout_s)
            raw["load_after"] = load_average()
        raw["env_name"] = spec.env_name
        if raw.get("status") == "ok":
            raw["derived"] = derive(raw)
        runs.append(raw)
        what = f"{spec.env_name} {spec.network} {spec.implementation} seed {spec.seed}"
        print_progress(index, len(specs), what, outcome(raw))
    return finish(meta, runs)


def outcome(raw: dict[str, Any]) -> str:
    """One run's line in the progress output: its final return and speed, or why it
    failed."""
    d = raw.get("derived") or {}
    if raw.get("status") != "ok":
        return f"FAILED: {raw.get('error')}"
    return f"return {d.get('final_eval_reward')}, {d.get('steady_sps') or 0:,.0f} steps/s"


def same_spec(recorded: Any, spec: RunSpec) -> bool:
    """Whether a run file's ``spec`` record is ``spec``. A field added to `RunSpec` after
    the file was written (``stagger``) is missing from it, and matches only at its
    default (the file's run was made without it).

    Example:
        >>> spec = RunSpec("ours", "mlp_small")
        >>> old = {k: v for k, v in json.loads(spec.to_json()).items() if k != "stagger"}
        >>> same_spec(old, spec), same_spec(old, dataclasses.replace(spec, stagger=50))
        (True, False)
    """
    if not isinstance(recorded, dict):
        return False
    current = json.loads(spec.to_json())
    default = json.loads(RunSpec(spec.implementation, spec.network).to_json())
    missing = current.keys() - recorded.keys()
    kept = {name: value for name, value in current.items() if name not in missing}
    return recorded == kept and all(current[name] == default[name] for name in missing)


def collect(specs: list[RunSpec], output_dir: Path, *, command: list[str] | None = None) -> dict:
    """``{"meta", "runs"}`` from the result files already in ``output_dir`` (no training);
    a planned run without a finished result is recorded as ``"not run"``."""
    runs = []
    for spec in specs:
        raw = _finished(task_dir(output_dir, spec.env_name) / "runs" / f"{run_name(spec)}.json")
        if raw is None or not same_spec(raw.get("spec"), spec):
            raw = {"status": "not run", "error": "no finished result with this spec"}
        raw.update(
            env_name=spec.env_name,
            network=spec.network,
            implementation=spec.implementation,
            seed=spec.seed,
        )
        if raw["status"] == "ok":
            raw["derived"] = derive(raw)
        runs.append(raw)
    meta = {"command": command, "collected": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    meta["load"] = load_average()
    return {"meta": meta, "runs": runs}
