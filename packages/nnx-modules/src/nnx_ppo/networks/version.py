"""Version of the ``nnx-modules`` distribution.

``nnx_ppo`` and ``nnx_ppo.networks`` are namespace packages shared by several
distributions, so this distribution's version lives in its own module.
"""

from importlib.metadata import version as _version

__all__ = ["__version__"]

__version__: str = _version("nnx-modules")
