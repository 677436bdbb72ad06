"""``nnx-ppo-export-latency``: per-step latency of an exported policy at batch size 1.

Compares, for the quickstart's MLP and LSTM presets (inverted_pendulum sizes: 4
observations, 1 action):

- ``jax.jit``: the jitted `DeterministicPolicy` step in the training process (JAX CPU);
- ``stablehlo``: the StableHLO artefact loaded with ``jax.export.deserialize``, jitted;
- ``onnxruntime``: the ONNX artefact in onnxruntime's CPU provider (one intra-op thread,
  as a controller process would run it), the carry fed back between calls.

Each row is the median (and 10th / 90th percentile) wall time of one call, including the
host-device copy of the result, over ``--steps`` calls after a warm-up. This is a
benchmark, not a test: numbers depend on the machine and its load. ONNX rows need the
``onnx`` extra, which this app installs (``uv run nnx-ppo-export-latency``).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from nnx_ppo_apps_common.cli import HelpFormatter, non_negative_int, positive_int

__all__ = ["main", "measure", "parse_args"]

OBS_SIZE, ACTION_SIZE = 4, 1


def _time(call: Callable[[], Any], steps: int, warmup: int) -> dict[str, float]:
    for _ in range(warmup):
        call()
    samples = np.empty(steps)
    for i in range(steps):
        start = time.perf_counter()
        call()
        samples[i] = time.perf_counter() - start
    us = samples * 1e6
    return {
        "median_us": float(np.median(us)),
        "p10_us": float(np.percentile(us, 10)),
        "p90_us": float(np.percentile(us, 90)),
    }


def _jax_row(policy: Any, steps: int, warmup: int) -> dict[str, float]:
    import jax

    step = jax.jit(policy.step)
    obs = np.zeros((1, OBS_SIZE), np.float32)
    state = {"carry": policy.initial_carry(1)}

    def call() -> None:
        carry, action = step(state["carry"], obs)
        np.asarray(action)  # the action reaches the host, as a controller needs it
        state["carry"] = carry

    return _time(call, steps, warmup)


def _stablehlo_row(out: Path, steps: int, warmup: int) -> dict[str, float]:
    import jax

    from nnx_ppo.networks.export import load_stablehlo

    loaded = load_stablehlo(out)
    exported = loaded._fns["step"]
    pairs = loaded.manifest["carry"]
    call_step = jax.jit(exported.call)
    names = [t["name"] for t in loaded.manifest["step"]["inputs"]]
    outs = [t["name"] for t in loaded.manifest["step"]["outputs"]]
    state = {"inputs": {"obs": np.zeros((1, OBS_SIZE), np.float32), **loaded.initial_carry(1)}}

    def call() -> None:
        result = dict(zip(outs, call_step(*(state["inputs"][n] for n in names)), strict=True))
        np.asarray(result["action"])
        state["inputs"].update({c["input"]: result[c["output"]] for c in pairs})

    return _time(call, steps, warmup)


def _onnx_row(out: Path, steps: int, warmup: int) -> dict[str, float]:
    import onnxruntime

    manifest = json.loads((out / "policy.json").read_text())
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(
        str(out / "step.onnx"), options, providers=["CPUExecutionProvider"]
    )
    outs = [o.name for o in session.get_outputs()]
    feed = {
        t["name"]: np.zeros([1 if d == "B" else d for d in t["shape"]], t["dtype"])
        for t in manifest["step"]["inputs"]
    }
    pairs = manifest["carry"]

    def call() -> None:
        result = dict(zip(outs, session.run(None, feed), strict=True))
        feed.update({c["input"]: result[c["output"]] for c in pairs})

    return _time(call, steps, warmup)


def measure(steps: int = 2000, warmup: int = 200, onnx: bool = True) -> list[dict[str, Any]]:
    """Latency rows ``{"network", "runtime", "median_us", "p10_us", "p90_us"}``."""
    from nnx_ppo_quickstart.networks import make_network

    from nnx_ppo.networks.export import DeterministicPolicy, export_policy

    rows = []
    for preset in ("mlp", "lstm"):
        network = make_network(preset, OBS_SIZE, ACTION_SIZE, seed=0)
        policy = DeterministicPolicy(network, OBS_SIZE)
        rows.append({"network": preset, "runtime": "jax.jit", **_jax_row(policy, steps, warmup)})
        with tempfile.TemporaryDirectory() as tmp:
            out = export_policy(policy, None, Path(tmp) / "shlo", format="stablehlo")
            rows.append(
                {"network": preset, "runtime": "stablehlo", **_stablehlo_row(out, steps, warmup)}
            )
            if onnx:
                out = export_policy(policy, None, Path(tmp) / "onnx", format="onnx")
                rows.append(
                    {"network": preset, "runtime": "onnxruntime", **_onnx_row(out, steps, warmup)}
                )
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line (``--help`` lists every option with its default)."""
    parser = argparse.ArgumentParser(
        prog="nnx-ppo-export-latency",
        description="Per-step latency at batch size 1 of the quickstart's MLP and LSTM "
        "policies: jitted JAX, the StableHLO artefact and the ONNX artefact in onnxruntime "
        "(median, 10th and 90th percentile of one call).",
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "--steps", type=positive_int, default=2000, help="timed calls per network and runtime"
    )
    parser.add_argument(
        "--warmup", type=non_negative_int, default=200, help="untimed calls before them"
    )
    parser.add_argument("--no-onnx", action="store_true", help="skip the ONNX rows")
    parser.add_argument(
        "--json", type=Path, default=None, help="also write the rows here (default: print only)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point: print a table (and write JSON with ``--json``)."""
    args = parse_args(argv)
    rows = measure(args.steps, args.warmup, onnx=not args.no_onnx)
    print(f"{'network':8} {'runtime':12} {'median us':>10} {'p10 us':>8} {'p90 us':>8}")
    for r in rows:
        print(
            f"{r['network']:8} {r['runtime']:12} {r['median_us']:10.1f} "
            f"{r['p10_us']:8.1f} {r['p90_us']:8.1f}"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
