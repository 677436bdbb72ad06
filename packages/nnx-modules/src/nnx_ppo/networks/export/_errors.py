"""The error a format converter raises (private; public as
`nnx_ppo.networks.export.ExportError`).

It lives below both `nnx_ppo.networks.export.artefact`, which calls the converters, and
the converters themselves (``_stablehlo``, ``_onnx``), so neither imports the other
back.
"""

from __future__ import annotations

__all__ = ["ExportError"]


class ExportError(RuntimeError):
    """A policy could not be converted to the requested format (the message names
    the operation or module and what to do)."""
