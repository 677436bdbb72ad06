"""The ``README.md`` of an artefact folder, generated from its ``policy.json``.

Everything in it is read off the manifest (tensor names, shapes, dtypes, carry pairs,
provenance), so it cannot disagree with the files next to it. Its Python loop steps the
policy through ``obs.npz`` (an observation sequence recorded with the JAX policy's
actions; `export_policy`'s ``reference``) and prints the largest difference, so the
same text that explains the artefact checks it on the target machine.
"""

from __future__ import annotations

from typing import Any

__all__ = ["REFERENCE_FILE", "render_readme"]

REFERENCE_FILE = "obs.npz"
"""The recorded rollout an artefact may hold: every observation tensor ``[T, B, ...]``,
``done`` ``[T, B]`` and ``expected/<action>`` ``[T, B, ...]``, the JAX policy's actions."""

_LOADERS = {
    "stablehlo": (
        "from jax import export  # StableHLO needs only jax, on a platform it was lowered for",
        "",
        'spec = json.loads(Path("policy.json").read_text())',
        "load = lambda f: export.deserialize(bytearray(Path(f).read_bytes()))",
        'fns = {fn: load(f) for fn, f in spec["files"].items()}',
        "",
        "",
        "def call(fn, feed):  # named tensors in and out, in policy.json's order",
        '    ins = [np.asarray(feed[t["name"]], t["dtype"]) for t in spec[fn]["inputs"]]',
        '    return {t["name"]: np.asarray(o) for t, o in zip(spec[fn]["outputs"], '
        "fns[fn].call(*ins))}",
    ),
    "onnx": (
        "import onnxruntime as ort",
        "",
        'spec = json.loads(Path("policy.json").read_text())',
        'cpu = ["CPUExecutionProvider"]',
        'fns = {fn: ort.InferenceSession(f, providers=cpu) for fn, f in spec["files"].items()}',
        "",
        "",
        "def call(fn, feed):  # named tensors in and out, in policy.json's order",
        '    ins = {t["name"]: np.asarray(feed[t["name"]], t["dtype"]) '
        'for t in spec[fn]["inputs"]}',
        '    return dict(zip([t["name"] for t in spec[fn]["outputs"]], fns[fn].run(None, ins)))',
    ),
}


def _shape(shape: list[Any]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _signature(function: dict[str, Any]) -> list[str]:
    """A function's input and output tables."""
    return [
        "Inputs:", "", *_table(function["inputs"]), "",
        "Outputs:", "", *_table(function["outputs"]), "",
    ]  # fmt: skip


def _table(tensors: list[dict[str, Any]]) -> list[str]:
    rows = ["| # | name | shape | dtype |", "|---|------|-------|-------|"]
    for i, t in enumerate(tensors):
        rows.append(f"| {i} | `{t['name']}` | `{_shape(t['shape'])}` | {t['dtype']} |")
    return rows


def _notes(manifest: dict[str, Any]) -> list[str]:
    """What each observation tensor holds (``observation_notes``), if recorded."""
    notes = manifest.get("observation_notes") or {}
    if not notes:
        return []
    return [
        "What the observation tensors hold:",
        "",
        *[f"- `{name}`: {text}" for name, text in notes.items()],
        "",
    ]


def _loop(manifest: dict[str, Any]) -> list[str]:
    has_carry = bool(manifest["carry"])
    lines = [
        "import json",
        "from pathlib import Path",
        "",
        "import numpy as np",
        *_LOADERS[manifest["format"]],
    ]
    lines += [
        "",
        "",
        f'data = dict(np.load("{REFERENCE_FILE}"))  # nnx-ppo-export RUN --record-obs N',
        'done = data["done"]  # [T, B]: the episode ended at step t',
        "T, B = done.shape",
    ]
    if has_carry:
        lines += [
            'back = {c["output"]: c["input"] for c in spec["carry"]}',
            "feed_back = lambda out: {back[k]: v for k, v in out.items() if k in back}",
            'zeros = {t["name"]: np.zeros((B, *t["shape"][1:]), t["dtype"]) '
            'for t in spec["reset"]["inputs"]}',
            'carry = feed_back(call("reset", {**zeros, "done": np.ones(B, bool)}))',
        ]
    else:
        lines.append("carry = {}  # this policy has no carry")
    lines += [
        "worst = 0.0",
        "for t in range(T):",
        '    out = call("step", {**{n: data[n][t] for n in spec["observation"]}, **carry})',
    ]
    if has_carry:
        lines += [
            "    carry = feed_back(out)",
            "    if done[t].any():  # reset the rows whose episode ended",
            '        carry = feed_back(call("reset", {**carry, "done": done[t]}))',
        ]
    lines += [
        '    for a in spec["action"]:',
        '        worst = max(worst, float(np.abs(out[a] - data["expected/" + a][t]).max()))',
        'print(f"{T} steps: max |action - recorded JAX action| = {worst:.2e}")',
    ]
    return lines


def _provenance(manifest: dict[str, Any]) -> list[str]:
    source = manifest.get("source") or {}
    labels = (
        ("env", "environment"),
        ("run", "run folder"),
        ("checkpoints", "checkpoints"),
        ("step", "checkpoint step"),
        ("git_commit", "git commit"),
    )
    lines = [f"- {label}: `{source[key]}`" for key, label in labels if source.get(key) is not None]
    producer = manifest.get("producer") or {}
    if producer:
        versions = ", ".join(f"{k} {v}" for k, v in producer.items() if v is not None)
        lines.append(f"- exported with: {versions}")
    return lines or ["- not recorded (pass `source=` to `export_policy`)"]


def render_readme(manifest: dict[str, Any], *, has_reference: bool) -> str:
    """The artefact's README (Markdown) for its ``policy.json`` ``manifest``.

    Args:
        manifest: The manifest `export_policy` writes.
        has_reference: Whether the folder holds `REFERENCE_FILE`.
    """
    fmt = manifest["format"]
    files = manifest["files"]
    carry = manifest["carry"]
    lines = [
        f"# Exported policy: {manifest['network']} ({fmt})",
        "",
        "A deterministic policy step with its carry as named tensors, written by "
        "`nnx_ppo.networks.export.export_policy`. It runs without the library; "
        "`policy.json` is the machine-readable form of everything below.",
        "",
        "## Where it came from",
        "",
        *_provenance(manifest),
        "",
        "## Tensors",
        "",
        "`B` is the batch (number of environments), symbolic: any `B >= 1` works. "
        + (
            "The ONNX graphs' inputs and outputs carry these names."
            if fmt == "onnx"
            else "The `jax.export` functions take and return them positionally, in this order."
        ),
        "",
        f"`{files['step']}`: one control step.",
        "",
        *_signature(manifest["step"]),
        *_notes(manifest),
    ]
    if carry:
        lines += [
            f"`{files['reset']}`: reset the carry of the environments where `done` is true.",
            "",
            *_signature(manifest["reset"]),
            "## The carry",
            "",
            "Each step returns the next carry; feed it back as the next step's carry input:",
            "",
            *[f"- `{c['output']}` -> `{c['input']}`" for c in carry],
            "",
            "At the start, the carry is `reset(zeros, done=true)`: every carry input zero "
            "(shapes above), `done` all true. When environment `b`'s episode ends, call "
            "reset with `done[b] = true` (false elsewhere) on the carry the step returned; "
            "rows with `done` false pass through unchanged.",
            "",
        ]
    else:
        lines += [
            "## The carry",
            "",
            "This policy has no carry: each step depends on its observation only, and "
            "nothing needs resetting between episodes.",
            "",
        ]
    runner = "numpy and onnxruntime" if fmt == "onnx" else "numpy and jax (`jax.export`)"
    if has_reference:
        about = (
            f"`{REFERENCE_FILE}` in this folder holds a real rollout recorded when the "
            "policy was exported: every observation tensor `[T, B, ...]`, `done` `[T, B]` "
            "and `expected/<action>`, the JAX policy's actions."
        )
    else:
        about = (
            f"This folder holds no `{REFERENCE_FILE}`; `nnx-ppo-export RUN --record-obs N` "
            "records one (observations `[T, B, ...]`, `done` `[T, B]` and "
            "`expected/<action>`, the JAX policy's actions), or save your own with those keys."
        )
    lines += [
        "## Run it",
        "",
        f"{about} This loop ({runner}) steps the policy through it, feeding the carry "
        "back and resetting it where an episode ended, and prints the largest difference "
        "from the recorded actions (expect about 1e-7, at most 1e-5). Run it in this folder:",
        "",
        "```python",
        *_loop(manifest),
        "```",
        "",
        "## C++",
        "",
    ]
    if fmt == "onnx":
        lines += [
            "Use onnxruntime's C++ API (`onnxruntime_cxx_api.h`): one `Ort::Session` per "
            f"file (`{files['step']}`"
            + (f", `{files['reset']}`" if carry else "")
            + "), `Ort::Value::CreateTensor` over your buffers for the inputs named above, "
            "and `session.Run` with the output names above; keep the carry outputs and pass "
            "them back as the next call's carry inputs. See "
            "https://onnxruntime.ai/docs/get-started/with-cpp.html.",
        ]
    else:
        lines += [
            "StableHLO runs where XLA runs: load `step.mlir` (the StableHLO text) with a "
            "PJRT plugin (`pjrt_c_api.h`) or compile it with IREE. For a plain C++ runtime, "
            "export the same run with `--format onnx` and use onnxruntime's C++ API "
            "(https://onnxruntime.ai/docs/get-started/with-cpp.html); the tensor names "
            "and carry pairs are the same.",
        ]
    return "\n".join(lines) + "\n"
