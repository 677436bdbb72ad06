"""ONNX conversion of a `DeterministicPolicy` through jax2onnx (private).

Needs the ``onnx`` extra of nnx-modules (``pip install "nnx-modules[onnx]"``), imported
only when an ONNX export is asked for.
"""

from __future__ import annotations

import functools
import logging
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
from jax import export as jax_export  # a submodule jax < 0.8 does not import

from nnx_ppo.networks._helpers import installed_version
from nnx_ppo.networks.export import _jaxpr
from nnx_ppo.networks.export._errors import ExportError
from nnx_ppo.networks.export.policy import BATCH, DeterministicPolicy, TensorSpec

__all__: list[str] = []


def _converter() -> Any:
    try:
        import jax2onnx
    except ImportError as error:
        raise ImportError(
            "export_policy(format='onnx') needs jax2onnx, which the 'onnx' extra of "
            'nnx-modules installs: pip install "nnx-modules[onnx]" (the nnx-ppo '
            "workspace's environment has it); or export format='stablehlo', which needs "
            "only JAX."
        ) from error
    return jax2onnx


def _convert_one(
    jax2onnx: Any,
    policy: DeterministicPolicy,
    what: str,
    fn: Callable[..., Any],
    avals: Sequence[Any],
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    opset: int,
) -> bytes:
    policy.check_no_host_callbacks(what, ExportError)
    # Trace (and prune) here, outside the converter: jax2onnx patches functions such as
    # jax.random.normal while it traces, and dead code (a variational layer's key
    # update) would then fail to trace. The converter only replays the live equations.
    closed = jax.make_jaxpr(fn)(*avals)
    used = [True] * len(closed.jaxpr.outvars)

    def replay(*args: Any) -> tuple[Any, ...]:
        return tuple(_jaxpr.eval_pruned(closed, used, args))

    quiet = logging.getLogger("onnx_ir")  # it logs a warning per untyped shape constant
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            # jax2onnx 0.17 reads flax Variables through the deprecated `.value`.
            warnings.filterwarnings(
                "ignore", message="'.value' access is now deprecated", category=DeprecationWarning
            )
            model = jax2onnx.to_onnx(
                replay,
                list(avals),
                model_name=f"nnx_ppo_{what}",
                opset=opset,
                input_names=[t.name for t in inputs],
                output_names=[t.name for t in outputs],
            )
    except Exception as error:  # the converter raises many types; keep the cause
        raise ExportError(
            f"jax2onnx {installed_version('jax2onnx')} cannot convert the {what} function of this "
            f"{policy.network_name} "
            f"({_jaxpr.describe_failure(policy.primitive_sites(what), error)}): "
            f"{type(error).__name__}: {str(error)[:500]}. Replace the module that emits "
            "it with one built from supported operations, or export format='stablehlo', "
            "which any runtime with XLA's PJRT or IREE loads."
        ) from error
    finally:
        quiet.setLevel(level)
    return bytes(model.SerializeToString())


def convert(policy: DeterministicPolicy, opset: int) -> tuple[dict[str, bytes], dict[str, Any]]:
    """``{"step.onnx", "reset.onnx"}`` and the manifest entries (``opset``, producer)."""
    jax2onnx = _converter()
    signature = policy.signature()
    batch = jax_export.symbolic_shape(BATCH)[0]
    fns = {"step": (policy.flat_step, policy.step_avals(batch))}
    if policy.carry_names:
        fns["reset"] = (policy.flat_reset, policy.reset_avals(batch))
    blobs = {}
    for name, (fn, avals) in fns.items():
        blobs[f"{name}.onnx"] = _convert_one(
            jax2onnx,
            policy,
            name,
            functools.partial(fn, rewrite_rem=True),
            avals,
            signature[name]["inputs"],
            signature[name]["outputs"],
            opset,
        )
    producer = {p: installed_version(p) for p in ("jax2onnx", "onnx")}
    return blobs, {"opset": opset, "producer": producer}
