import tomllib
from pathlib import Path

from nnx_ppo.networks.version import __version__


def test_version_matches_pyproject():
    pyproject = Path(__file__).parents[1] / "pyproject.toml"
    declared = tomllib.loads(pyproject.read_text())["project"]["version"]
    assert __version__ == declared


def test_networks_is_a_namespace_package():
    import nnx_ppo
    import nnx_ppo.networks

    # PEP 420 namespace packages have no __file__; a regular package would shadow
    # the other distributions' subpackages.
    assert getattr(nnx_ppo, "__file__", None) is None
    assert getattr(nnx_ppo.networks, "__file__", None) is None
