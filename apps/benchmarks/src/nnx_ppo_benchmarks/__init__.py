"""Side-by-side PPO benchmarks (``nnx-ppo-bench``).

The package is also put on ``PYTHONPATH`` in the benchmark's child environments (which
do not install it), so importing it must stay cheap and dependency-free.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("nnx-ppo-benchmarks")
except PackageNotFoundError:  # running from the source tree in a child environment
    __version__ = "0+unknown"

__all__ = ["__version__"]
