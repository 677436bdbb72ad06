"""StableHLO serialization of a `DeterministicPolicy` through `jax.export` (private)."""

from __future__ import annotations

from typing import Any

import jax
from jax import export as jax_export  # a submodule jax < 0.8 does not import

from nnx_ppo.networks.export import _jaxpr
from nnx_ppo.networks.export._errors import ExportError
from nnx_ppo.networks.export.policy import BATCH, DeterministicPolicy

__all__: list[str] = []


def convert(
    policy: DeterministicPolicy, platforms: tuple[str, ...] | None
) -> tuple[dict[str, bytes], dict[str, Any]]:
    """``{"step.stablehlo", "step.mlir", "reset.stablehlo", "reset.mlir"}`` and the
    manifest entries (``platforms``); the batch dimension is symbolic (``"B"``)."""
    if platforms is not None and (
        isinstance(platforms, str) or not all(isinstance(p, str) for p in platforms)
    ):
        raise TypeError(
            f"export_policy: platforms={platforms!r} must be a tuple of platform names, "
            "e.g. ('cpu', 'cuda')."
        )
    batch = jax_export.symbolic_shape(BATCH)[0]
    fns = {"step": (policy.flat_step, policy.step_avals(batch))}
    if policy.carry_names:
        fns["reset"] = (policy.flat_reset, policy.reset_avals(batch))
    blobs: dict[str, bytes] = {}
    lowered_for: tuple[str, ...] = ()
    for name, (fn, avals) in fns.items():
        policy.check_no_host_callbacks(name, ExportError)
        try:
            exported = jax_export.export(
                jax.jit(fn), platforms=None if platforms is None else tuple(platforms)
            )(*avals)
        except Exception as error:  # XLA raises several types; keep the cause
            raise ExportError(
                f"jax.export cannot lower the {name} function of this "
                f"{policy.network_name} "
                f"({_jaxpr.describe_failure(policy.primitive_sites(name), error)}): "
                f"{type(error).__name__}: {str(error)[:500]}. Replace the module that emits "
                "it, or report the operation to JAX if it should be exportable."
            ) from error
        try:
            serialized = exported.serialize()
        except ImportError as error:
            raise ImportError(
                "export_policy(format='stablehlo') needs flatbuffers (jax.export's "
                "serialization), which the 'stablehlo' extra installs: pip install "
                '"nnx-modules[stablehlo]".'
            ) from error
        blobs[f"{name}.stablehlo"] = bytes(serialized)
        blobs[f"{name}.mlir"] = exported.mlir_module().encode()
        lowered_for = tuple(exported.platforms)
    return blobs, {"platforms": list(lowered_for)}
