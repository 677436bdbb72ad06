"""``results/README.md`` lists every results folder, and only those, with the pages
that cite it; each page it names does cite the folder. ``results/`` holds results, not
code: the commands that write them are the app's (``nnx_ppo_benchmarks``)."""

from __future__ import annotations

import re
from pathlib import Path

APP = Path(__file__).resolve().parents[1]
RESULTS = APP / "results"
ROOT = APP.parents[1]
_ROW = re.compile(r"^\| `(?P<folder>[^`]+)` \| (?P<rest>.*)\|$")
_PAGE = re.compile(r"\]\(\.\./\.\./\.\./(?P<page>docs/[^)]+\.md)\)")


def _manifest() -> dict[str, list[str]]:
    """``{folder: [page, ...]}`` of the manifest's table."""
    rows = {}
    for line in (RESULTS / "README.md").read_text().splitlines():
        if match := _ROW.match(line):
            cited_by = match["rest"].rsplit("|", 1)[-1]
            rows[match["folder"]] = [m["page"] for m in _PAGE.finditer(cited_by)]
    return rows


def _run_folders() -> set[str]:
    """Folders under ``results/`` that hold files themselves (a tool's folder holds
    only run folders; a run's ``cells/`` belongs to the run)."""
    return {
        path.parent.relative_to(RESULTS).as_posix()
        for path in RESULTS.rglob("*")
        if path.is_file() and path.parent != RESULTS and path.parent.name != "cells"
    }


def test_the_manifest_lists_exactly_the_folders_on_disk():
    listed = set(_manifest())
    on_disk = _run_folders()
    assert listed - on_disk == set(), "listed in results/README.md but not on disk"
    assert on_disk - listed == set(), "on disk but not listed in results/README.md"


def test_every_page_the_manifest_names_cites_the_folder():
    for folder, pages in _manifest().items():
        assert pages, f"{folder}: the manifest names no page that cites it"
        # The full path, or the folder as a code span (a table's "folder" column).
        cited = re.compile(rf"(apps/benchmarks/results/|`){re.escape(folder)}(?![\w-])")
        for page in pages:
            text = (ROOT / page).read_text()
            assert cited.search(text), f"{page} does not cite apps/benchmarks/results/{folder}"


def test_results_hold_no_code():
    scripts = sorted(path.relative_to(RESULTS).as_posix() for path in RESULTS.rglob("*.py"))
    assert scripts == [], "a study is a module of nnx_ppo_benchmarks (studies/), not a script here"
