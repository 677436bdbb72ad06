"""tools/upstream_network_tests.py counts what it should, on a made-up sdist.

The real measurement needs nnx-ppo's sdist from the package index (``nox -s
upstream``); here an sdist of the same layout, written by the test, checks the parts
that decide the reported share: which files are copied, the ``test_dummies`` rename,
the per-file counts from pytest's report, and a file that fails to import counted as
all of its tests failed.
"""

from __future__ import annotations

import importlib.util
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_PASSES_AND_FAILS = """\
import unittest

from nnx_ppo.test_dummies.values import ONE


class ValuesTest(unittest.TestCase):
    def test_one(self):
        self.assertEqual(ONE, 1)

    def test_two(self):
        self.assertEqual(ONE, 2)

    def helper(self):  # not a test
        pass
"""

_DOES_NOT_IMPORT = """\
import unittest

from nnx_ppo.networks.no_such_module import Missing


class GraphTest(unittest.TestCase):
    def test_a(self):
        pass

    def test_b(self):
        pass


class MoreTest(unittest.TestCase):
    def test_c(self):
        pass
"""


def _tool():
    spec = importlib.util.spec_from_file_location(
        "upstream_network_tests", ROOT / "tools" / "upstream_network_tests.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sdist(tmp_path: Path) -> Path:
    package = tmp_path / "src" / "nnx_ppo-0.3.0" / "nnx_ppo"
    files = {
        "networks/values_test.py": _PASSES_AND_FAILS,
        "networks/graph/graph_test.py": _DOES_NOT_IMPORT,
        "networks/values.py": "raise RuntimeError('upstream code must not be imported')\n",
        "algorithms/ppo_test.py": "raise RuntimeError('not a network test')\n",
        "test_dummies/__init__.py": "",
        "test_dummies/values.py": "ONE = 1\n",
    }
    for name, text in files.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    sdist = tmp_path / "nnx_ppo-0.3.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        archive.add(package.parent, arcname="nnx_ppo-0.3.0")
    return sdist


def test_counts_per_file_and_share(tmp_path, capsys):
    status = _tool().main(["--sdist", str(_sdist(tmp_path)), "--min-share", "0.25"])
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:-1]}
    # values_test: one pass, one failure; graph_test: 3 tests that never ran; no other file
    assert rows == {"values_test.py": ["1", "1"], "graph_test.py": ["0", "3"], "total": ["1", "4"]}
    assert lines[-1] == "nnx-ppo 0.3.0 network tests passing: 1/5 = 20%"
    assert status == 1  # 20% < --min-share 25%


def test_rejects_a_folder_that_is_not_an_nnx_ppo_sdist(tmp_path):
    with pytest.raises(SystemExit, match="no nnx_ppo/networks folder"):
        _tool().main(["--sdist", str(tmp_path)])
