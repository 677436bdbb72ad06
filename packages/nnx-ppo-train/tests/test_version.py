import tomllib
from pathlib import Path

from nnx_ppo.algorithms import __version__


def test_version_matches_pyproject():
    pyproject = Path(__file__).parents[1] / "pyproject.toml"
    declared = tomllib.loads(pyproject.read_text())["project"]["version"]
    assert __version__ == declared


FACE = """
import sys
import nnx_ppo.algorithms as algorithms
heavy = [m for m in ("orbax.checkpoint", "nnx_ppo.algorithms.ppo", "optax") if m in sys.modules]
print("LOADED", heavy)
"""


def test_importing_the_face_is_cheap_and_every_name_resolves():
    import importlib
    import subprocess
    import sys

    import pytest

    import nnx_ppo.algorithms as algorithms

    done = subprocess.run([sys.executable, "-c", FACE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "LOADED []" in done.stdout  # neither orbax nor the trainer until a name is used
    assert sorted(algorithms.__all__) == sorted(["__version__", *algorithms._NAMES])
    for name in algorithms._NAMES:
        module = importlib.import_module(f"nnx_ppo.algorithms.{algorithms._NAMES[name]}")
        assert getattr(algorithms, name) is getattr(module, name), name
        assert name in dir(algorithms)
        assert f"`{name}`" in (algorithms.__doc__ or ""), f"{name} missing from the face's list"
    from nnx_ppo.algorithms import Checkpointer, StopOnSignal, train_ppo  # noqa: F401

    with pytest.raises(AttributeError, match="has no attribute 'train_pop'"):
        algorithms.train_pop  # noqa: B018
