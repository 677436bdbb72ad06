"""Measurement helpers shared by the child processes (stdlib + jax only).

Each child builds its implementation's environment and network, then wraps the
training call in a :class:`Recorder`:

- compile time: JAX's own monitoring events (tracing, lowering to MLIR and XLA backend
  compilation), summed over every program compiled while recording;
- progress: ``(seconds since the training call started, env steps)`` at each progress
  callback (the callbacks come after the device work of a chunk has finished), and
  the time and duration of every compile event during training, so that chunks with
  a (re)compilation can be left out of the steady-state rate;
- peak RSS: ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` at the end.

The child writes one JSON file (see :func:`write_result`); the parent derives the
reported numbers from it (:mod:`nnx_ppo_benchmarks.metrics`).
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from importlib import metadata
from pathlib import Path
from typing import Any

from nnx_ppo_benchmarks.metrics import json_safe
from nnx_ppo_benchmarks.settings import BRAX_PREFIX, RunSpec, is_brax_env

__all__ = ["Recorder", "main", "package_versions", "write_result"]

_COMPILE_EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace_s",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_s",
    "/jax/core/compile/backend_compile_duration": "backend_s",
}


class Recorder:
    """Collects compile events, progress points and phase timings of one run."""

    def __init__(self) -> None:
        import jax

        self.compile: dict[str, dict[str, float]] = {}
        self._phase: str | None = None
        self._t0 = time.perf_counter()
        self.progress: list[tuple[float, int]] = []
        self.timings: dict[str, float] = {}
        self.train_compile_events: list[tuple[float, float]] = []
        self._train_start: float | None = None
        jax.monitoring.register_event_duration_secs_listener(self._on_event)

    def _on_event(self, event: str, duration_secs: float, **_: str | int) -> None:
        name = _COMPILE_EVENTS.get(event)
        if name is None or self._phase is None:
            return
        phase = self.compile.setdefault(
            self._phase, {"trace_s": 0.0, "lower_s": 0.0, "backend_s": 0.0, "programs": 0}
        )
        phase[name] += float(duration_secs)
        if name == "backend_s":
            phase["programs"] += 1
        # Events under 10 ms (eager single-op programs) only count in the totals.
        if self._phase == "train" and self._train_start is not None and duration_secs >= 0.01:
            # (seconds since the training call started, at the event's end; duration)
            end = time.perf_counter() - self._train_start
            self.train_compile_events.append((round(end, 4), round(float(duration_secs), 4)))

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a phase (``setup``, ``train``, ``eval``) and attribute compiles to it."""
        self._phase = name
        start = time.perf_counter()
        if name == "train":
            self._train_start = start
        try:
            yield
        finally:
            self.timings[f"{name}_s"] = time.perf_counter() - start
            self._phase = None

    def progress_callback(self, step: int) -> None:
        """Record a progress point; call it when a chunk's device work has finished."""
        if self._train_start is None:
            raise RuntimeError("progress_callback called outside the 'train' phase")
        self.progress.append((time.perf_counter() - self._train_start, int(step)))


def load_env(env_name: str) -> Any:
    """The unwrapped environment: Playground's ``registry.load(name, impl="jax")``, or
    for ``brax/<name>`` brax's ``envs.get_environment(name, backend="generalized")``; a
    control-suite variant (``CartpoleBalance/masked``) is its task's environment behind
    the variant's observation wrappers (`nnx_ppo_benchmarks.suite.variants`)."""
    from nnx_ppo_benchmarks.suite.variants import base_task, load_variant

    name = base_task(env_name)
    if is_brax_env(name):
        from brax import envs

        env = envs.get_environment(name[len(BRAX_PREFIX) :], backend="generalized")
    else:
        from mujoco_playground import registry

        env = registry.load(name, config_overrides={"impl": "jax"})
    return load_variant(env, env_name)


def brax_training_wrapper(env_name: str) -> Callable[..., Any]:
    """brax PPO's environment wrapper for ``env_name``: Playground's
    ``wrap_for_brax_training`` (what Playground's own training scripts pass), or brax's
    ``envs.training.wrap`` for a brax environment. Both add vmap, the episode limit and
    brax's cached auto-reset."""
    if is_brax_env(env_name):
        from brax.envs import training

        return training.wrap  # type: ignore[no-any-return]
    from mujoco_playground import wrapper

    return wrapper.wrap_for_brax_training  # type: ignore[no-any-return]


def package_versions(*names: str) -> dict[str, str]:
    """Installed versions of ``names`` (missing ones are left out)."""
    versions = {"python": platform.python_version()}
    for name in names:
        with suppress(metadata.PackageNotFoundError):
            versions[name] = metadata.version(name)
    return versions


def _peak_rss_mb() -> float:
    # ru_maxrss is in KiB on Linux and in bytes on macOS.
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024.0 * 1024.0) if sys.platform == "darwin" else rss / 1024.0


def write_result(path: str | Path, spec: RunSpec, recorder: Recorder, **fields: Any) -> None:
    """Write the child's JSON result (raw measurements plus ``fields``)."""
    import jax

    result = {
        "status": "ok",
        "implementation": spec.implementation,
        "network": spec.network,
        "seed": spec.seed,
        "spec": json.loads(spec.to_json()),
        "device": str(jax.devices()[0]),
        "timings": recorder.timings,
        "compile": recorder.compile,
        "progress": recorder.progress,
        "train_compile_events": recorder.train_compile_events,
        "peak_rss_mb": _peak_rss_mb(),
        **fields,
    }
    Path(path).write_text(json.dumps(json_safe(result), indent=1, allow_nan=False))


def main(run: Callable[[RunSpec, Recorder], dict[str, Any]]) -> int:
    """Command line of every child: ``--spec JSON --out PATH``.

    ``run(spec, recorder)`` does the work and returns extra result fields (at least
    ``total_steps``, ``final_eval_reward`` and ``versions``). Failures are written to
    the result file too, with the traceback, and exit with status 1.
    """
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", required=True, help="RunSpec as JSON")
    parser.add_argument("--out", required=True, help="where to write the result JSON")
    args = parser.parse_args()
    spec = RunSpec.from_json(args.spec)
    try:
        recorder = Recorder()
        fields = run(spec, recorder)
        write_result(args.out, spec, recorder, **fields)
    except Exception as e:
        Path(args.out).write_text(
            json.dumps(
                {
                    "status": "failed",
                    "implementation": spec.implementation,
                    "network": spec.network,
                    "seed": spec.seed,
                    "error": f"{type(e).__name__}: {e}",
                    "traceback": traceback.format_exc(),
                },
                indent=1,
            )
        )
        traceback.print_exc()
        return 1
    return 0
