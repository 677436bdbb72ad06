"""Population graphs: named populations joined by delayed connections."""

from importlib.metadata import version as _version

__version__: str = _version("nnx-graph")

__all__ = ["__version__"]
