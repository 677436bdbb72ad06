"""The documentation site is self-contained: it renders offline, with its interactive
parts, and can be browsed from disk (``file://``): its links name files, not folders.

mkdocs-material draws ```` ```mermaid ```` fences with a global ``mermaid`` object and,
when none exists, fetches mermaid from a CDN at page load. ``docs/javascripts/`` vendors
a mermaid build so diagrams render without a network; these tests check the wiring
(config, file, version agreement with the installed theme) without a browser. The
rendering itself was checked with headless Chromium (see ``docs/javascripts/README.txt``).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import material
import yaml

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"
MERMAID_URL = "javascripts/mermaid.min.js"  # as listed in mkdocs.yml, relative to docs/
MERMAID = DOCS / MERMAID_URL
# "/*! mermaid 11.17.2 -- ... (sha256 <hex>). ... */" then the upstream file, unmodified.
_HEADER = re.compile(
    r"/\*! mermaid (?P<version>\d+\.\d+\.\d+) .*?\(sha256 (?P<sha256>[0-9a-f]{64})\).*?\*/\n",
    re.S,
)


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads ``!!python/name:...`` tags as plain strings."""


_Loader.add_multi_constructor(
    "tag:yaml.org,2002:python/", lambda loader, suffix, node: f"python/{suffix}"
)


def _config() -> dict[str, Any]:
    with open(ROOT / "mkdocs.yml") as f:
        config: dict[str, Any] = yaml.load(f, Loader=_Loader)
    return config


def _mermaid_header() -> re.Match[str]:
    text = MERMAID.read_text()
    match = _HEADER.match(text)
    assert match, f"{MERMAID} must start with the provenance comment (see README.txt)"
    return match


def _plugins(config: dict[str, Any]) -> set[str]:
    return {p if isinstance(p, str) else next(iter(p)) for p in config["plugins"]}


def test_mermaid_is_vendored_and_loaded() -> None:
    config = _config()
    assert MERMAID_URL in config.get("extra_javascript", []), "mkdocs.yml must load mermaid"
    assert (MERMAID.parent / "mermaid.LICENSE.txt").read_text().startswith("The MIT License")
    text = MERMAID.read_text()
    # The UMD-style build defines the global material looks for.
    assert text.rstrip().endswith(
        'globalThis["mermaid"] = globalThis.__esbuild_esm_mermaid_nm["mermaid"].default;'
    )


def test_vendored_mermaid_is_the_upstream_file() -> None:
    # The header records the sha256 of the upstream dist/mermaid.min.js; what follows the
    # header must be exactly that file (nothing edited, nothing truncated).
    header = _mermaid_header()
    body = MERMAID.read_bytes()[len(header.group(0).encode()) :]
    assert hashlib.sha256(body).hexdigest() == header["sha256"]
    assert f"mermaid {header['version']}" in (MERMAID.parent / "README.txt").read_text()


def test_theme_uses_the_vendored_mermaid() -> None:
    # material only skips its CDN download when a global `mermaid` already exists, and it
    # asks for one major version: a theme upgrade that changes either must update the file.
    assets = Path(material.__file__).parent / "templates" / "assets" / "javascripts"
    (bundle,) = assets.glob("bundle.*.min.js")
    source = bundle.read_text()
    assert 'typeof mermaid=="undefined"' in source, "material no longer reuses a global mermaid"
    wanted = re.findall(r"mermaid@(\d+)/dist/mermaid\.min\.js", source)
    assert wanted, "material's mermaid loader changed; re-check docs/javascripts"
    assert set(wanted) == {_mermaid_header()["version"].split(".")[0]}


def test_mermaid_fences_are_rendered_as_diagrams() -> None:
    config = _config()
    fences = next(
        e["pymdownx.superfences"]["custom_fences"]
        for e in config["markdown_extensions"]
        if isinstance(e, dict) and "pymdownx.superfences" in e
    )
    assert {"name": "mermaid", "class": "mermaid"}.items() <= next(
        f for f in fences if f["name"] == "mermaid"
    ).items()
    assert any("```mermaid" in p.read_text() for p in DOCS.rglob("*.md"))


def test_site_loads_nothing_from_the_internet() -> None:
    config = _config()
    assert config["theme"].get("font") is False, "material would load web fonts from Google"
    for key in ("extra_javascript", "extra_css"):
        for url in config.get(key, []):
            assert "://" not in str(url), f"{key} entry {url!r} is fetched at page load"


def test_search_and_code_copy_are_enabled() -> None:
    config = _config()
    assert "search" in _plugins(config)
    features = set(config["theme"]["features"])
    assert {"search.suggest", "search.highlight", "content.code.copy"} <= features


def test_long_code_lines_wrap_inside_their_block() -> None:
    # At 1280 px the text column is ~740 px and code is formatted to 100 columns (~860
    # px): without wrapping, half the blocks scrolled sideways (docs/stylesheets/extra.css).
    config = _config()
    assert "stylesheets/extra.css" in config.get("extra_css", [])
    css = re.sub(r"/\*.*?\*/", "", (DOCS / "stylesheets" / "extra.css").read_text(), flags=re.S)
    rules = dict(re.findall(r"([^{}]+)\{([^}]*)\}", css))
    code = {k.strip(): v for k, v in rules.items()}[".md-typeset pre > code"]
    assert re.search(r"white-space:\s*pre-wrap", code), code


_LINK = re.compile(r'(?:href|src)="([^"#?]*)[^"]*"')


def test_built_site_links_name_files(tmp_path: Path) -> None:
    # With directory URLs a link reads `how-to/deploy/`, which a browser shows from disk
    # as a folder listing; `use_directory_urls: false` makes it `how-to/deploy.html`.
    # The one essential check of that: build the site (~10 s) and follow every link.
    # `nox -s docs` builds the site first and names it in NNX_PPO_BUILT_SITE.
    assert _config()["use_directory_urls"] is False
    if os.environ.get("NNX_PPO_BUILT_SITE"):
        site = Path(os.environ["NNX_PPO_BUILT_SITE"])
    else:
        site = tmp_path / "site"
        env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
        cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)]
        built = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert built.returncode == 0, built.stderr[-3000:]
    index = (site / "index.html").read_text()
    assert 'href="how-to/deploy.html"' in index  # the home page's nav, to a how-to page
    assert (site / "how-to" / "deploy.html").is_file()
    broken = []
    for page in site.rglob("*.html"):
        if page.name == "404.html":  # served only by a web server, with root-relative links
            continue
        for url in set(_LINK.findall(page.read_text())):
            if "://" in url or url.startswith(("mailto:", "data:")) or not url:
                continue
            if not (page.parent / url).is_file():  # a folder would show as a listing
                broken.append(f"{page.relative_to(site)} -> {url}")
    assert not broken, broken[:20]
