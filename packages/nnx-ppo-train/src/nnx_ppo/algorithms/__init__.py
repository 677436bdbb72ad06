"""The PPO training loop for stateful NNX networks."""

from importlib.metadata import version as _version

__version__: str = _version("nnx-ppo-train")

__all__ = ["__version__"]
