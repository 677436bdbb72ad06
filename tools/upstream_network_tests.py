"""Run nnx-ppo 0.3.0's own network tests against the installed nnx-modules / nnx-graph.

The drop-in measurement of the migration page ("Coming from nnx-ppo"): how much of the
upstream library's network test suite passes against this project's modules. It

1. downloads the nnx-ppo 0.3.0 source distribution with pip (or takes one given with
   ``--sdist``: the ``.tar.gz`` or its unpacked folder),
2. copies its network tests (``nnx_ppo/networks/*_test.py`` and
   ``nnx_ppo/networks/graph/*_test.py``) and the ``nnx_ppo/test_dummies`` package they
   import into a temporary folder, renaming ``nnx_ppo.test_dummies`` to
   ``nnx_ppo_dummies`` (ours has no ``nnx_ppo.test_dummies``; nothing else is changed),
3. runs them with pytest against whatever ``nnx_ppo`` the running Python imports, and
4. prints passed / failed per file and the share that passes. A file that fails to
   import counts each of its tests as failed (counted from its source).

Nothing of upstream's is kept: the temporary folder is removed unless ``--keep``.

Usage (from the repository root; the tests need ``absl-py``, the download ``pip``)::

    uv run --with absl-py --with pip python tools/upstream_network_tests.py
    uv run --with absl-py python tools/upstream_network_tests.py --sdist nnx_ppo-0.3.0.tar.gz

``nox -s upstream`` runs the first (not part of the default sessions). Exit status 0
unless pytest could not run or the share is below ``--min-share``.
"""

from __future__ import annotations

import argparse
import ast
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

VERSION = "0.3.0"
DUMMIES = "nnx_ppo_dummies"


def download(into: Path) -> Path:
    """``pip download`` the sdist of nnx-ppo ``VERSION`` into ``into``; return its path."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        f"nnx-ppo=={VERSION}",
        "--no-deps",
        "--no-binary",
        ":all:",
        "--quiet",
        "-d",
        str(into),
    ]
    try:
        subprocess.run(command, check=True)
    except subprocess.CalledProcessError as error:
        sys.exit(
            f"pip download failed ({error}); is pip installed (uv run --with pip ...) and "
            "the package index reachable? Or pass --sdist with a downloaded sdist."
        )
    found = sorted(into.glob(f"nnx_ppo-{VERSION}.tar.gz"))
    if not found:
        sys.exit(f"pip download wrote no nnx_ppo-{VERSION}.tar.gz into {into}.")
    return found[0]


def unpack(sdist: Path, into: Path) -> Path:
    """The package folder ``nnx_ppo`` of ``sdist`` (a ``.tar.gz`` or an unpacked folder)."""
    if sdist.is_dir():
        root = sdist
    else:
        with tarfile.open(sdist) as archive:
            archive.extractall(into, filter="data")
        root = into / f"nnx_ppo-{VERSION}"
    package = root / "nnx_ppo"
    if not (package / "networks").is_dir():
        sys.exit(f"{sdist} holds no nnx_ppo/networks folder: not an nnx-ppo sdist.")
    return package


def copy_tests(package: Path, into: Path) -> list[Path]:
    """Copy the network tests and the dummies they import into ``into``, renamed."""
    tests = sorted((package / "networks").glob("*_test.py"))
    tests += sorted((package / "networks" / "graph").glob("*_test.py"))
    into.mkdir(parents=True)
    copied = [into / t.name for t in tests]
    for source, target in zip(tests, copied, strict=True):
        shutil.copy(source, target)
    if (package / "test_dummies").is_dir():
        shutil.copytree(package / "test_dummies", into / DUMMIES)
    for path in into.rglob("*.py"):
        text = path.read_text()
        renamed = re.sub(r"\bnnx_ppo\.test_dummies\b", DUMMIES, text)
        if renamed != text:
            path.write_text(renamed)
    return copied


def count_tests(path: Path) -> int:
    """The ``test*`` methods of the classes (and ``test*`` functions) in ``path``."""
    tree = ast.parse(path.read_text())
    count = 0
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
            count += 1
        elif isinstance(node, ast.ClassDef):
            count += sum(
                isinstance(item, ast.FunctionDef) and item.name.startswith("test")
                for item in node.body
            )
    return count


def run(tests: list[Path], folder: Path, verbose: bool) -> tuple[Counter[str], Counter[str]]:
    """Run pytest in ``folder``; return ``(passed, failed)`` counts by file name."""
    report = folder / "report.xml"
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-o",
        "addopts=",
        "-W",
        "ignore",
        "--continue-on-collection-errors",
        "--rootdir",
        str(folder),
        f"--junitxml={report}",
        *([] if verbose else ["--tb=no"]),
        *(t.name for t in tests),
    ]
    result = subprocess.run(command, cwd=folder, capture_output=not verbose, text=True)
    if not report.exists():
        sys.exit(f"pytest did not run (exit {result.returncode}):\n{result.stdout}{result.stderr}")
    passed: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    for case in ET.parse(report).getroot().iter("testcase"):
        classname = case.get("classname", "")
        module = classname.split(".")[0] if classname else case.get("name", "")
        name = f"{module}.py"
        if case.find("error") is not None and case.get("name") == module:
            failed[name] += count_tests(folder / name)  # the file did not import
        elif case.find("failure") is not None or case.find("error") is not None:
            failed[name] += 1
        elif case.find("skipped") is None:
            passed[name] += 1
    return passed, failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sdist", type=Path, help="an nnx-ppo 0.3.0 sdist (.tar.gz or unpacked folder)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument("--verbose", action="store_true", help="show pytest's output")
    parser.add_argument(
        "--min-share", type=float, default=0.0, help="exit 1 below this share (0 to 1)"
    )
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="nnx-ppo-upstream-"))
    try:
        sdist = args.sdist.resolve() if args.sdist else download(work / "download")
        folder = work / "tests"
        tests = copy_tests(unpack(sdist, work / "sdist"), folder)
        passed, failed = run(tests, folder, args.verbose)
        width = max(len(t.name) for t in tests)
        print(f"{'file':<{width}}  passed  failed")
        for t in tests:
            print(f"{t.name:<{width}}  {passed[t.name]:>6}  {failed[t.name]:>6}")
        n_passed, n_total = sum(passed.values()), sum(passed.values()) + sum(failed.values())
        share = n_passed / n_total if n_total else 0.0
        print(f"{'total':<{width}}  {n_passed:>6}  {n_total - n_passed:>6}")
        print(f"nnx-ppo {VERSION} network tests passing: {n_passed}/{n_total} = {share:.0%}")
        if args.keep:
            print(f"kept in {work}")
        return 0 if share >= args.min_share else 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
