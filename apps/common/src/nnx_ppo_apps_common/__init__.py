"""Helpers the nnx-ppo example apps share (``nnx-ppo-apps-common``)."""

from importlib.metadata import version as _version

__version__ = _version("nnx-ppo-apps-common")

__all__ = ["__version__"]
