"""``nnx-ppo-export``: deploy a trained policy as a StableHLO or ONNX artefact."""

from importlib.metadata import version as _version

__all__ = ["__version__"]

__version__: str = _version("nnx-ppo-export")
