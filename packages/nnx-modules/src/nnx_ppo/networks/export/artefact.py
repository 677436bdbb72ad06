"""Write a `DeterministicPolicy` as a deployable artefact folder, atomically.

An artefact is a folder::

    policy.json        the tensor-name mapping (see below) and what produced the files
    README.md          the same for people: tensors, carry, a runner loop, C++ pointer
    step.<ext>         (obs..., carry...) -> (action..., next_carry..., [value...])
    reset.<ext>        (carry..., done) -> (next_carry...)     only if there is a carry
    obs.npz            a recorded rollout with the JAX actions   only with ``reference``

with ``<ext>`` ``stablehlo`` (a serialized `jax.export.Exported`, plus its StableHLO
text as ``step.mlir``) or ``onnx``. Both functions take and return positional tensors
whose batch dimension is symbolic (``"B"``); ``policy.json`` lists them in order as
``{"name", "shape", "dtype"}`` and pairs each carry input with the output to feed back::

    {"format": "onnx", "format_version": 1, "batch_dim": "B",
     "files": {"step": "step.onnx", "reset": "reset.onnx"},
     "step":  {"inputs": [{"name": "obs", "shape": ["B", 4], "dtype": "float32"},
                          {"name": "carry/1/action/0/c", ...}, ...],
               "outputs": [{"name": "action", ...}, {"name": "next_carry/1/action/0/c", ...}]},
     "reset": {"inputs": [..., {"name": "done", "shape": ["B"], "dtype": "bool"}],
               "outputs": [...]},
     "carry": [{"input": "carry/1/action/0/c", "output": "next_carry/1/action/0/c"}, ...],
     "initial_carry": "reset(zeros, done=true)", ...}

The folder appears atomically: it is written under a temporary name next to ``out_dir``
and renamed into place once complete, so a crash or a converter error leaves no
half-written artefact (an existing one is replaced only with ``overwrite=True``, and only
once the new one is complete).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from jax import export as jax_export  # a submodule jax < 0.8 does not import

from nnx_ppo.networks._helpers import installed_version
from nnx_ppo.networks.export import _onnx, _stablehlo
from nnx_ppo.networks.export._errors import ExportError
from nnx_ppo.networks.export._readme import REFERENCE_FILE, render_readme
from nnx_ppo.networks.export.policy import DeterministicPolicy
from nnx_ppo.networks.types import StatefulModule

__all__ = [
    "FORMATS",
    "ExportError",
    "StableHLOPolicy",
    "export_policy",
    "load_stablehlo",
    "read_manifest",
]

FORMATS = ("stablehlo", "onnx")
"""The artefact formats `export_policy` writes."""

FORMAT_VERSION = 1
MANIFEST = "policy.json"
MIN_OPSET = 17


def _check_args(format: Any, opset: Any, out_dir: Any) -> Path:
    if format not in FORMATS:
        raise ValueError(
            f"export_policy: format={format!r} is not a known format; choose one of "
            f"{list(FORMATS)}."
        )
    if isinstance(opset, bool) or not isinstance(opset, int) or opset < MIN_OPSET:
        raise ValueError(
            f"export_policy: opset={opset!r} must be an int >= {MIN_OPSET} (the first opset "
            "the exported graphs are tested with); e.g. opset=17."
        )
    if not isinstance(out_dir, str | os.PathLike):
        raise TypeError(f"export_policy: out_dir={out_dir!r} must be a path (str or PathLike).")
    return Path(out_dir).expanduser().absolute()


def _source_record(source: Any) -> dict[str, Any] | None:
    """``source`` as a JSON-able dict (checked before the slow conversion)."""
    if source is None:
        return None
    if not isinstance(source, Mapping):
        raise TypeError(
            f"export_policy: source={source!r} must be a mapping (e.g. {{'run': ..., "
            "'step': ...}}) or None."
        )
    try:
        return json.loads(json.dumps(dict(source)))
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"export_policy: source={source!r} must hold JSON values only ({error})."
        ) from None


def _observation_notes(notes: Any, policy: DeterministicPolicy) -> dict[str, str] | None:
    """``observation_notes`` checked against the policy's observation tensor names."""
    if notes is None:
        return None
    if not isinstance(notes, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in notes.items()
    ):
        raise TypeError(
            f"export_policy: observation_notes={notes!r} must map observation tensor names "
            "to strings (e.g. {'obs': 'the last 3 observations, oldest first'}) or be None."
        )
    unknown = [name for name in notes if name not in policy.observation_names]
    if unknown:
        raise ValueError(
            f"export_policy: observation_notes names {unknown}, which are not observation "
            f"tensors of this policy; its observation tensors are "
            f"{list(policy.observation_names)}."
        )
    return dict(notes)


def _reference_arrays(
    reference: Mapping[str, Any] | None, policy: DeterministicPolicy
) -> dict[str, np.ndarray] | None:
    """``reference`` checked against the policy's tensor names, as numpy arrays."""
    if reference is None:
        return None
    if not isinstance(reference, Mapping):
        raise TypeError(
            f"export_policy: reference must be a mapping of arrays or None, got "
            f"{type(reference).__name__}."
        )
    arrays = {str(k): np.asarray(v) for k, v in reference.items()}
    needed = [
        *policy.observation_names,
        "done",
        *("expected/" + name for name in policy.action_names),
    ]
    missing = [name for name in needed if name not in arrays]
    if missing:
        raise ValueError(
            f"export_policy: reference lacks {missing}; it needs every observation tensor "
            "[T, B, ...], 'done' [T, B] and 'expected/<action>' [T, B, ...] for every "
            f"action tensor, i.e. the keys {needed}."
        )
    done = arrays["done"]
    if done.ndim != 2:
        raise ValueError(
            f"export_policy: reference['done'] has shape {done.shape}; it must be [T, B]."
        )
    for name in needed:
        if arrays[name].shape[:2] != done.shape:
            raise ValueError(
                f"export_policy: reference[{name!r}] has shape {arrays[name].shape}; its "
                f"leading axes must be [T, B] = {list(done.shape)} like 'done'."
            )
    return arrays


def _as_policy(network: Any, observation_spec: Any, include_value: bool) -> DeterministicPolicy:
    if isinstance(network, DeterministicPolicy):
        if observation_spec is not None:
            raise ValueError(
                "export_policy: observation_spec must be None when a DeterministicPolicy "
                "is passed (the policy already has one)."
            )
        if include_value != network.include_value:
            raise ValueError(
                f"export_policy: include_value={include_value} differs from the policy's "
                f"include_value={network.include_value}; build the DeterministicPolicy "
                "with the include_value you want."
            )
        return network
    if not isinstance(network, StatefulModule):
        raise TypeError(
            f"export_policy: network must be a StatefulModule or a DeterministicPolicy, got "
            f"{type(network).__name__}."
        )
    if observation_spec is None:
        raise ValueError(
            "export_policy: observation_spec is required with a network; pass one "
            "environment's observation shape (the env's observation_size)."
        )
    return DeterministicPolicy(network, observation_spec, include_value=include_value)


def _manifest(policy: DeterministicPolicy, format: str, files: Mapping[str, str]) -> dict:
    signature = policy.signature()
    data: dict[str, Any] = {
        "format": format,
        "format_version": FORMAT_VERSION,
        "batch_dim": "B",
        "files": dict(files),
        "network": policy.network_name,
        "observation": list(policy.observation_names),
        "action": list(policy.action_names),
        "value": list(policy.value_names),
        "carry": [{"input": n, "output": "next_" + n} for n in policy.carry_names],
        "initial_carry": "reset(zeros, done=true)" if policy.carry_names else None,
    }
    for fn in ("step", "reset"):
        entry = signature[fn]
        data[fn] = (
            None
            if entry is None
            else {side: [spec.to_json() for spec in entry[side]] for side in ("inputs", "outputs")}
        )
    data["producer"] = {
        package: installed_version(package) for package in ("nnx-modules", "jax", "jaxlib", "flax")
    }
    return data


def _write_atomically(out_dir: Path, overwrite: bool, fill: Callable[[Path], None]) -> None:
    if out_dir.exists() and not overwrite:
        raise FileExistsError(
            f"export_policy: {out_dir} already exists; pass overwrite=True (--overwrite) "
            "to replace it, or choose another output folder."
        )
    if out_dir.exists() and not out_dir.is_dir():
        raise FileExistsError(
            f"export_policy: {out_dir} exists and is not a folder; remove it or choose "
            "another output folder."
        )
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    stamp = f"{os.getpid()}-{time.time_ns()}"
    tmp = out_dir.parent / f".{out_dir.name}.partial-{stamp}"
    tmp.mkdir()
    try:
        fill(tmp)
        if out_dir.exists():
            old = out_dir.parent / f".{out_dir.name}.replaced-{stamp}"
            out_dir.rename(old)
            tmp.rename(out_dir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def export_policy(
    network: StatefulModule | DeterministicPolicy,
    observation_spec: Any,
    out_dir: str | os.PathLike[str],
    *,
    format: str = "stablehlo",
    include_value: bool = False,
    overwrite: bool = False,
    opset: int = MIN_OPSET,
    platforms: tuple[str, ...] | None = None,
    source: Mapping[str, Any] | None = None,
    reference: Mapping[str, Any] | None = None,
    observation_notes: Mapping[str, str] | None = None,
) -> Path:
    """Export a trained network's deterministic policy to an artefact folder.

    Args:
        network: The trained network (its output must be a `PPONetworkOutput`), or a
            `DeterministicPolicy` (then ``observation_spec`` must be ``None``).
        observation_spec: One environment's observation without the batch axis (an int,
            a tuple, an array / `jax.ShapeDtypeStruct`, or a dict of those: the env's
            ``observation_size``).
        out_dir: The folder to create; its parent is created if needed.
        format: ``"stablehlo"`` (needs only JAX) or ``"onnx"`` (needs the ``onnx``
            extra: ``pip install "nnx-modules[onnx]"``).
        include_value: Also output the value estimates.
        overwrite: Replace an existing ``out_dir`` (atomically, once the new artefact is
            complete).
        opset: The ONNX opset, ``>= 17``.
        platforms: StableHLO only: the platforms to lower for (e.g. ``("cpu", "cuda")``);
            default: the current JAX backend.
        source: Where the policy came from (e.g. ``{"run": "runs/a", "step": 150000}``),
            stored as the manifest's ``"source"`` so a deployed artefact names its run
            and checkpoint; JSON values only.
        reference: A recorded rollout to ship with the artefact as ``obs.npz``, so the
            README's loop checks the artefact on the target machine: every observation
            tensor by name (``obs`` or ``obs/<key>``, ``[T, B, ...]``), ``"done"``
            (``[T, B]``, the episode ended at step t: reset the carry after it) and
            ``"expected/<action>"`` (``[T, B, ...]``, the JAX policy's actions).
        observation_notes: What each observation tensor holds, by tensor name (e.g.
            ``{"obs": "the last 3 observations, oldest first, zeros before the
            episode's first"}``), for inputs whose layout the shapes do not tell; stored
            as the manifest's ``"observation_notes"`` and shown in the README.

    Every artefact also holds ``README.md``, generated from ``policy.json``: the tensors
    with their shapes and dtypes, how to reset the carry, a numpy loop that runs the
    policy over ``obs.npz`` (onnxruntime or ``jax.export``) and a pointer for C++.

    Returns:
        The artefact folder (absolute).

    Raises:
        ValueError: For an unknown ``format``, an ``opset`` below 17, an observation spec
            that does not fit the network, ``observation_notes`` naming a tensor the
            policy does not take, or conflicting arguments.
        TypeError: If ``network`` is not a `StatefulModule` with a `PPONetworkOutput`,
            or ``observation_notes`` is not a mapping of names to strings.
        FileExistsError: If ``out_dir`` exists and ``overwrite`` is false.
        ImportError: For ``format="onnx"`` without the ``onnx`` extra installed.
        ExportError: If the converter cannot express an operation of the policy.
    """
    out = _check_args(format, opset, out_dir)
    source_record = _source_record(source)
    policy = _as_policy(network, observation_spec, include_value)
    reference_arrays = _reference_arrays(reference, policy)
    notes = _observation_notes(observation_notes, policy)
    if out.exists() and not overwrite:  # fail before the (slow) conversion
        _write_atomically(out, overwrite, lambda _: None)
    # Each converter returns {file name: bytes} and what it adds to the manifest.
    if format == "stablehlo":
        blobs, info = _stablehlo.convert(policy, platforms)
    else:
        if platforms is not None:
            raise ValueError(
                f"export_policy: platforms={platforms!r} applies to format='stablehlo' "
                "only; ONNX runtimes choose their execution provider at load time."
            )
        blobs, info = _onnx.convert(policy, opset)
    files = {fn: f"{fn}.{format}" for fn in ("step", "reset") if f"{fn}.{format}" in blobs}
    manifest = _manifest(policy, format, files)
    producer = info.pop("producer", {})
    manifest.update(info)
    manifest["producer"].update(producer)
    if source_record is not None:
        manifest["source"] = source_record
    if notes:
        manifest["observation_notes"] = notes

    if reference_arrays is not None:
        buffer = io.BytesIO()
        np.savez(buffer, **reference_arrays)  # type: ignore[arg-type]
        blobs[REFERENCE_FILE] = buffer.getvalue()
    readme = render_readme(manifest, has_reference=reference_arrays is not None)

    def fill(tmp: Path) -> None:
        for name, blob in blobs.items():
            (tmp / name).write_bytes(blob)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        (tmp / "README.md").write_text(readme)

    _write_atomically(out, overwrite, fill)
    return out


def read_manifest(artefact_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``policy.json`` of an artefact folder, checked for its format version.

    Raises:
        FileNotFoundError: If the folder has no ``policy.json``.
        ValueError: If it was written by a newer format version.
    """
    path = Path(artefact_dir) / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} does not exist; pass the folder export_policy (nnx-ppo-export) wrote."
        )
    data = json.loads(path.read_text())
    if data.get("format_version", 0) > FORMAT_VERSION:
        raise ValueError(
            f"{path} has format_version {data['format_version']}; this nnx-modules reads up "
            f"to {FORMAT_VERSION}. Upgrade nnx-modules."
        )
    return data


class StableHLOPolicy:
    """A StableHLO artefact loaded back into JAX (`jax.export.deserialize`).

    Args:
        artefact_dir: A folder written by `export_policy` with ``format="stablehlo"``.

    Attributes:
        manifest: The folder's ``policy.json``.

    Calls take and return ``{name: array}`` dicts named as in the manifest.
    """

    def __init__(self, artefact_dir: str | os.PathLike[str]) -> None:
        self.manifest = read_manifest(artefact_dir)
        if self.manifest["format"] != "stablehlo":
            raise ValueError(
                f"{artefact_dir} holds a {self.manifest['format']!r} artefact, not "
                "'stablehlo'; load ONNX artefacts with onnxruntime."
            )
        root = Path(artefact_dir)
        self._fns = {
            fn: jax_export.deserialize(bytearray((root / name).read_bytes()))
            for fn, name in self.manifest["files"].items()
        }

    def _call(self, fn: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        spec = self.manifest[fn]
        names = [t["name"] for t in spec["inputs"]]
        missing = sorted(set(names) - set(inputs))
        if missing:
            raise KeyError(f"{fn}: missing inputs {missing}; the inputs are {names}.")
        args = []
        for name, tensor in zip(names, spec["inputs"], strict=True):
            value = np.asarray(inputs[name], dtype=tensor["dtype"])
            if value.ndim != len(tensor["shape"]) or list(value.shape[1:]) != tensor["shape"][1:]:
                raise ValueError(
                    f"{fn}: input {name!r} has shape {value.shape}, expected "
                    f"{['B', *tensor['shape'][1:]]}; pass batched tensors as policy.json lists."
                )
            args.append(value)
        outs = self._fns[fn].call(*args)
        return {t["name"]: o for t, o in zip(spec["outputs"], outs, strict=True)}

    def step(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Run ``step`` on ``{obs/..., carry/...}``; returns ``{action..., next_carry/...}``."""
        return self._call("step", inputs)

    def reset(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Run ``reset`` on ``{carry/..., done}``; returns ``{next_carry/...}``."""
        if "reset" not in self._fns:
            return {}
        return self._call("reset", inputs)

    def initial_carry(self, batch_size: int) -> dict[str, Any]:
        """``reset(zeros, done=True)``: the carry at an episode start, ``{carry/...: [B, ...]}``."""
        if "reset" not in self._fns:
            return {}
        zeros = {
            t["name"]: np.zeros((batch_size, *t["shape"][1:]), t["dtype"])
            for t in self.manifest["reset"]["inputs"]
            if t["name"] != "done"
        }
        out = self.reset({**zeros, "done": np.ones((batch_size,), bool)})
        return {c["input"]: out[c["output"]] for c in self.manifest["carry"]}


def load_stablehlo(artefact_dir: str | os.PathLike[str]) -> StableHLOPolicy:
    """Load a StableHLO artefact folder back into JAX (see `StableHLOPolicy`)."""
    return StableHLOPolicy(artefact_dir)
