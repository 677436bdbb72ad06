"""Executes the Python code blocks of the documentation, so the docs cannot rot.

Every ```` ```python ```` block of the README and of each page under ``docs/``
runs, in order, in one namespace per page (tutorials build on earlier blocks).
A block directly preceded by the line ``<!-- docs-test: skip -->`` is shown but not
run (for shell-dependent or deliberately failing snippets); use it sparingly.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"
GETTING_STARTED = DOCS / "getting-started" / "index.md"
_FENCE = re.compile(
    r"(?P<skip><!-- docs-test: skip -->\s*\n)?```python[^\n]*\n(?P<code>.*?)```", re.S
)


def _pages() -> list[Path]:
    pages = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
    return [p for p in pages if _FENCE.search(p.read_text())]


def _blocks(page: Path) -> list[str]:
    # A block inside a list item is indented with it.
    text = page.read_text()
    return [textwrap.dedent(m["code"]) for m in _FENCE.finditer(text) if not m["skip"]]


def _cases() -> list[Any]:
    """One case per page; the getting-started page in the ``xdist_group`` of
    `test_docs_pages.py`'s variant of it (one worker runs both, the second from the
    first's compiled programs in the cache)."""
    return [
        pytest.param(
            page,
            id=str(page.relative_to(ROOT)),
            marks=[pytest.mark.xdist_group("getting-started")] if page == GETTING_STARTED else [],
        )
        for page in _pages()
    ]


@pytest.mark.parametrize("page", _cases())
def test_page_code_runs(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # pages may write outputs; keep them out of the repo
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    for i, code in enumerate(_blocks(page)):
        compiled = compile(code, f"{page.relative_to(ROOT)}[block {i}]", "exec")
        exec(compiled, namespace)
