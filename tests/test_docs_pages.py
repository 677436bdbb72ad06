"""What a reader of particular pages relies on, beyond their code running
(``test_docs_examples.py``): a section's index lists every page of the section, and the
getting-started page's later blocks do not depend on the smoke run it tells the reader
to leave out."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"
GETTING_STARTED = DOCS / "getting-started" / "index.md"
_FENCE = re.compile(r"(<!-- docs-test: skip -->\s*\n)?```python[^\n]*\n(.*?)```", re.S)


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads ``!!python/name:...`` tags as plain strings."""


_Loader.add_multi_constructor(
    "tag:yaml.org,2002:python/", lambda loader, suffix, node: f"python/{suffix}"
)


def _nav_section(title: str) -> list[str]:
    """The pages of a top-level section of the site's navigation, its index first."""
    with open(ROOT / "mkdocs.yml") as f:
        nav: list[dict[str, Any]] = yaml.load(f, Loader=_Loader)["nav"]
    (items,) = [entry[title] for entry in nav if title in entry]
    return [item if isinstance(item, str) else next(iter(item.values())) for item in items]


@pytest.mark.parametrize("section", ["Tutorials", "How-to", "Concepts"])
def test_a_section_index_links_every_page_of_the_section(section: str) -> None:
    index, *pages = _nav_section(section)
    assert index.endswith("/index.md"), index
    folder = index.removesuffix("index.md")
    links = set(re.findall(r"\]\(([^)#\s]+)", (DOCS / index).read_text()))
    missing = [page for page in pages if page.removeprefix(folder) not in links]
    assert not missing, f"{index} does not link {missing}"


# Another small run in place of the page's smoke run: 3 iterations of 8 environments x
# 20 steps (480 steps, not the smoke run's 320), so a later block that assumed the
# smoke run's numbers would fail.
OTHER_RUN = """
config = dataclasses.replace(
    config,
    ppo=dataclasses.replace(config.ppo, n_envs=8, n_minibatches=2, total_steps=400),
    eval=dataclasses.replace(config.eval, n_envs=2, max_episode_length=30),
)
"""


@pytest.mark.xdist_group("getting-started")  # after the page itself: its programs are cached
def test_getting_started_runs_without_its_smoke_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks = [
        textwrap.dedent(code)
        for skip, code in _FENCE.findall(GETTING_STARTED.read_text())
        if not skip
    ]
    smoke = [i for i, code in enumerate(blocks) if "total_steps=320" in code]
    assert len(smoke) == 1, "the page's smoke-run block is the one with total_steps=320"
    blocks[smoke[0]] = OTHER_RUN
    # Up to the last block that reads the run (`result`, `history`): the page's own
    # episode loop after them compiles the environment again and reads nothing of it.
    blocks = blocks[
        : max(i for i, code in enumerate(blocks) if "result" in code or "history" in code) + 1
    ]
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "docs_getting_started_other_run"}
    for i, code in enumerate(blocks):
        exec(compile(code, f"getting-started[block {i}]", "exec"), namespace)
    assert namespace["result"].total_steps == 480
    assert [step for step, _ in namespace["result"].eval_history] == [0, 480]
