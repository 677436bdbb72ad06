"""Run an exported ONNX policy with onnxruntime and numpy only (no JAX).

::

    python run_onnx_policy.py ARTEFACT_DIR OBSERVATIONS.npz --out ACTIONS.npz

``ARTEFACT_DIR`` is what ``nnx-ppo-export --format onnx`` wrote. ``OBSERVATIONS.npz``
holds a recorded observation sequence: one array per observation tensor, named as in
``policy.json`` (``obs`` or ``obs/<key>``), each ``[T, B, ...]``, and optionally
``done`` ``[T, B]`` (an episode ended at step t: reset that environment's carry after
it). The script steps the policy through the sequence, feeding its carry back between
calls, and writes the actions (``[T, B, ...]`` per action tensor) to ``ACTIONS.npz``.
If the file also holds ``expected/<action>`` (``nnx-ppo-export --record-obs N`` writes
such an ``obs.npz`` into the artefact, with the JAX policy's actions), it prints the
largest difference and exits with status 1 if it exceeds ``--atol`` (1e-5).

The class `OnnxPolicy` is the part to copy into a robot's controller process.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import onnxruntime


class OnnxPolicy:
    """An exported policy: ``step`` and ``reset`` sessions plus the tensor mapping."""

    def __init__(self, artefact_dir: str | Path) -> None:
        root = Path(artefact_dir)
        self.manifest = json.loads((root / "policy.json").read_text())
        if self.manifest["format"] != "onnx":
            raise ValueError(f"{root} holds a {self.manifest['format']} artefact, not onnx")
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1  # one policy step is tiny; threads cost more
        providers = ["CPUExecutionProvider"]
        self._sessions = {
            fn: onnxruntime.InferenceSession(str(root / name), options, providers=providers)
            for fn, name in self.manifest["files"].items()
        }
        # Carry input name -> the output that feeds it back (for step and reset alike).
        self._feedback = {c["input"]: c["output"] for c in self.manifest["carry"]}

    def _run(self, fn: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        spec = self.manifest[fn]
        feed = {t["name"]: np.asarray(inputs[t["name"]], t["dtype"]) for t in spec["inputs"]}
        outputs = self._sessions[fn].run(None, feed)
        return dict(zip([t["name"] for t in spec["outputs"]], outputs, strict=True))

    def _carry_of(self, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {name: outputs[out] for name, out in self._feedback.items()}

    def reset(self, carry: dict[str, np.ndarray], done: np.ndarray) -> dict[str, np.ndarray]:
        """The carry with the environments where ``done`` (``[B]`` bool) reset."""
        if "reset" not in self._sessions:
            return carry
        return self._carry_of(self._run("reset", {**carry, "done": np.asarray(done, bool)}))

    def initial_carry(self, batch_size: int) -> dict[str, np.ndarray]:
        """The carry at an episode start: ``reset`` of a zero carry with ``done`` set."""
        if "reset" not in self._sessions:
            return {}
        zeros = {
            t["name"]: np.zeros((batch_size, *t["shape"][1:]), t["dtype"])
            for t in self.manifest["reset"]["inputs"]
            if t["name"] != "done"
        }
        return self.reset(zeros, np.ones((batch_size,), bool))

    def step(
        self, obs: dict[str, np.ndarray], carry: dict[str, np.ndarray]
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """One step: ``({action name: [B, ...]}, next carry)``."""
        outputs = self._run("step", {**obs, **carry})
        actions = {name: outputs[name] for name in self.manifest["action"]}
        return actions, self._carry_of(outputs)


def run_sequence(
    policy: OnnxPolicy, observations: dict[str, np.ndarray], done: np.ndarray | None
) -> dict[str, np.ndarray]:
    """Step ``policy`` through ``[T, B, ...]`` observations; returns ``[T, B, ...]`` actions."""
    names = policy.manifest["observation"]
    n_steps, batch = observations[names[0]].shape[:2]
    carry = policy.initial_carry(batch)
    actions: dict[str, list[np.ndarray]] = {name: [] for name in policy.manifest["action"]}
    for t in range(n_steps):
        action, carry = policy.step({n: observations[n][t] for n in names}, carry)
        if done is not None and done[t].any():
            carry = policy.reset(carry, done[t])
        for name, value in action.items():
            actions[name].append(value)
    return {name: np.stack(values) for name, values in actions.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artefact_dir", type=Path)
    parser.add_argument("observations", type=Path, help=".npz of [T, B, ...] observations")
    parser.add_argument("--out", type=Path, required=True, help=".npz to write the actions to")
    parser.add_argument("--atol", type=float, default=1e-5, help="parity tolerance")
    args = parser.parse_args(argv)
    policy = OnnxPolicy(args.artefact_dir)
    with np.load(args.observations) as data:
        observations = {n: data[n] for n in policy.manifest["observation"]}
        done = data["done"] if "done" in data.files else None
        expected = {n: data[k] for n in policy.manifest["action"] if (k := "expected/" + n) in data}
    actions = run_sequence(policy, observations, done)
    np.savez(args.out, **actions)
    steps = next(iter(actions.values())).shape[0] if actions else 0
    print(f"{steps} steps of {list(actions)} written to {args.out}")
    if expected:
        worst = max(float(np.abs(actions[n] - want).max()) for n, want in expected.items())
        print(f"max |action - recorded JAX action| = {worst:.2e} (atol {args.atol:g})")
        return 0 if worst <= args.atol else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
