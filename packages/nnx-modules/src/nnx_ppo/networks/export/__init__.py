"""Deploy a trained policy: export it to StableHLO or ONNX, carry as named tensors.

`DeterministicPolicy` turns a trained PPO network into a pure deterministic step
``(carry, obs) -> (next_carry, action)`` with the normalizer folded in, plus
``initial_carry`` and ``reset``. `export_policy` writes it as an artefact folder that
runs without JAX::

    from nnx_ppo.networks.export import export_policy

    export_policy(network, env.observation_size, "deploy/pendulum", format="onnx")

The folder holds the step (``step.onnx`` or ``step.stablehlo``), the reset function
(``reset.*``, when the policy has a carry) and ``policy.json``, the mapping of every
tensor name to its position, shape and dtype. StableHLO needs only JAX (it is a
serialized `jax.export.Exported`); ONNX needs the ``onnx`` extra
(``pip install "nnx-modules[onnx]"``) to export and only ``onnxruntime`` to run.
"""

from nnx_ppo.networks.export.artefact import (
    FORMATS,
    ExportError,
    export_policy,
    load_stablehlo,
    read_manifest,
)
from nnx_ppo.networks.export.policy import (
    DeterministicPolicy,
    TensorSpec,
    observation_spec_from_sizes,
)

__all__ = [
    "FORMATS",
    "DeterministicPolicy",
    "ExportError",
    "TensorSpec",
    "export_policy",
    "load_stablehlo",
    "observation_spec_from_sizes",
    "read_manifest",
]
