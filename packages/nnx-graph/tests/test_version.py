import tomllib
from pathlib import Path

from nnx_ppo.networks.graph import __version__


def test_version_matches_pyproject():
    pyproject = Path(__file__).parents[1] / "pyproject.toml"
    declared = tomllib.loads(pyproject.read_text())["project"]["version"]
    assert __version__ == declared


def test_graph_shares_the_networks_namespace_with_nnx_modules():
    # Both distributions contribute to ``nnx_ppo.networks``; if either shipped an
    # ``__init__.py`` there, one of these imports would fail.
    import nnx_ppo.networks.graph
    import nnx_ppo.networks.version

    assert nnx_ppo.networks.version.__version__
    assert nnx_ppo.networks.graph.__name__ == "nnx_ppo.networks.graph"
