"""No import cycles among the modules of ``nnx_ppo.networks`` (and its neighbours).

A cycle hidden in a function body (``def f(): from a import b``) or under
``if TYPE_CHECKING:`` still ties two modules together, so the graph is read from the
sources with `ast`, not from what importing them happens to load: every ``import`` and
``from ... import`` anywhere in a module counts, relative imports resolved. Nothing is
imported (no JAX), so the check costs milliseconds.

An edge goes from a module to each module it names:

- ``import a.b.c`` -> ``a.b.c``;
- ``from a.b import c`` -> ``a.b.c`` when that is a module, else ``a.b`` (a name read
  from ``a.b``, which must have run far enough to define it).

Importing a submodule also runs its parent packages' ``__init__``, but those implicit
edges are left out: a package's ``__init__`` re-exporting its own submodules is not a
cycle. Only modules of the scanned sources are nodes; the rest (JAX, other packages) is
ignored.

Scanned: this distribution's ``nnx_ppo.networks`` modules (where they are imported
from: the workspace source or the installed wheel), and, read from the workspace
checkout, nnx-graph's ``nnx_ppo.networks.graph`` (the same namespace) and
nnx-ppo-train's ``nnx_ppo.algorithms``.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

PACKAGES = Path(__file__).parents[2]

# An edge: (target module, source file, line number).
Edge = tuple[str, Path, int]


def _networks_source() -> tuple[Path, Path]:
    """(import root, folder) of this distribution's ``nnx_ppo.networks`` modules, found
    without importing them (``nnx_ppo`` and ``nnx_ppo.networks`` are namespace packages,
    whose import runs nothing)."""
    spec = importlib.util.find_spec("nnx_ppo.networks.types")
    assert spec is not None and spec.origin is not None, "nnx_ppo.networks.types not found"
    folder = Path(spec.origin).parent
    return folder.parents[1], folder


def _scopes() -> dict[str, tuple[Path, Path]]:
    """``{scope: (import root, folder to scan)}``."""
    return {
        "nnx-modules": _networks_source(),
        "nnx-graph": (
            PACKAGES / "nnx-graph" / "src",
            PACKAGES / "nnx-graph" / "src" / "nnx_ppo" / "networks" / "graph",
        ),
        "nnx-ppo-train": (
            PACKAGES / "nnx-ppo-train" / "src",
            PACKAGES / "nnx-ppo-train" / "src" / "nnx_ppo" / "algorithms",
        ),
    }


def module_files(root: Path, folder: Path) -> dict[str, Path]:
    """``{dotted module name: file}`` for every ``.py`` file under ``folder``, named
    relative to the import root ``root`` (a package is named by its ``__init__.py``)."""
    modules = {}
    for path in sorted(folder.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _imported_names(module: str, path: Path) -> Iterator[tuple[str, str | None, int]]:
    """``(module named, name imported from it or None, line)`` for every import statement
    of the file, at any depth (function bodies and ``TYPE_CHECKING`` blocks included)."""
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # from . import x / from ..a import x
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                named = ".".join([*base, node.module] if node.module else base)
            else:
                named = node.module or ""
            for alias in node.names:
                yield named, alias.name, node.lineno


def import_graph(modules: dict[str, Path]) -> dict[str, list[Edge]]:
    """``{module: [(imported module, file, line), ...]}`` among ``modules`` (see the
    module docstring for what an edge is)."""
    graph: dict[str, list[Edge]] = {}
    for module, path in modules.items():
        edges: list[Edge] = []
        for named, name, line in _imported_names(module, path):
            target = named
            if name is not None and f"{named}.{name}" in modules:
                target = f"{named}.{name}"
            if target in modules and target != module:
                edges.append((target, path, line))
        graph[module] = edges
    return graph


def cycles(graph: dict[str, list[Edge]]) -> list[tuple[list[str], list[Edge]]]:
    """Each strongly connected component of more than one module (Tarjan's algorithm),
    as ``(its modules, sorted; one cycle through them)``, the cycle being the list of
    its edges ``[(next module, file, line), ...]`` from the component's first module
    back to it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w, _, _ in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return [(sorted(c), _cycle_in(graph, c)) for c in components]


def _cycle_in(graph: dict[str, list[Edge]], component: set[str]) -> list[Edge]:
    """A shortest cycle through the component's first module (breadth-first)."""
    start = min(component)
    previous: dict[str, tuple[str, Edge]] = {}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for edge in graph[v]:
                w = edge[0]
                if w not in component or w in previous:
                    continue
                previous[w] = (v, edge)
                if w == start:
                    path = []
                    while True:
                        v_prev, e = previous[w]
                        path.append(e)
                        w = v_prev
                        if w == start:
                            return path[::-1]
                following.append(w)
        frontier = following
    raise AssertionError(f"no cycle through {start} in {sorted(component)}")


def describe(component: list[str], cycle: Iterable[Edge]) -> str:
    """``a -> b (a.py:3) -> a (b.py:7)``, plus the component's other modules if any."""
    text = component[0]
    on_cycle = {component[0]}
    for target, path, line in cycle:
        text += f" -> {target} ({path.name}:{line})"
        on_cycle.add(target)
    others = [m for m in component if m not in on_cycle]
    return text + (
        f"; more modules in this import cycle group: {', '.join(others)}" if others else ""
    )


def _all_modules() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for root, folder in _scopes().values():
        if folder.is_dir():
            modules.update(module_files(root, folder))
    return modules


@pytest.mark.parametrize("scope", ["nnx-modules", "nnx-graph", "nnx-ppo-train"])
def test_no_import_cycle(scope: str) -> None:
    root, folder = _scopes()[scope]
    if not folder.is_dir():
        pytest.skip(f"{scope}'s sources are not in this checkout ({folder})")
    mine = set(module_files(root, folder))
    assert len(mine) > 3, f"found only {sorted(mine)} under {folder}"
    graph = import_graph(_all_modules())
    found = [(component, c) for component, c in cycles(graph) if mine & set(component)]
    report = "\n".join(describe(component, c) for component, c in found)
    assert not found, (
        f"import cycles through {scope}'s modules (each arrow: the importing file and "
        f"line):\n{report}\nBreak each by moving what both sides need into a lower "
        "module, not by moving an import into a function."
    )


# ----------------------------------------------------------------- the checker itself


def _write(root: Path, files: dict[str, str]) -> dict[str, Path]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return module_files(root, root / "pkg")


def test_checker_finds_lazy_type_checking_and_relative_cycles(tmp_path: Path) -> None:
    # a -> b at top level; b -> a inside a function: one cycle a -> b -> a.
    # c -> d under TYPE_CHECKING through a relative import; d -> c via "from pkg import c".
    # g -> sub -> sub.f -> g: g reads a name (not a module) from the package pkg.sub,
    # whose __init__ imports sub.f, which imports g (a two-level relative import).
    modules = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "import pkg.b\n",
            "pkg/b.py": "def f():\n    from pkg.a import x\n",
            "pkg/c.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .d import y\n"
            ),
            "pkg/d.py": "from pkg import c\n",
            "pkg/sub/__init__.py": "from pkg.sub.f import z\n",
            "pkg/sub/f.py": "from ..g import w\n",
            "pkg/g.py": "from pkg.sub import Name\n",
            "pkg/h.py": "import pkg.a\nimport json\n",
        },
    )
    found = cycles(import_graph(modules))
    as_text = sorted(describe(component, c) for component, c in found)
    assert as_text == [
        "pkg.a -> pkg.b (a.py:1) -> pkg.a (b.py:2)",
        "pkg.c -> pkg.d (c.py:3) -> pkg.c (d.py:1)",
        "pkg.g -> pkg.sub (g.py:1) -> pkg.sub.f (__init__.py:1) -> pkg.g (f.py:1)",
    ]


def test_checker_ignores_parent_packages_and_outside_modules(tmp_path: Path) -> None:
    # pkg/__init__ re-exports its submodules, which import siblings through the package
    # ("from pkg import b": the submodule) -- no cycle; nor is "import json".
    modules = _write(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.a import A\nfrom pkg.b import B\n",
            "pkg/a.py": "from pkg import b\nimport json\nA = b.B\n",
            "pkg/b.py": "B = 1\n",
        },
    )
    graph = import_graph(modules)
    assert graph == {
        "pkg": [
            ("pkg.a", tmp_path / "pkg/__init__.py", 1),
            ("pkg.b", tmp_path / "pkg/__init__.py", 2),
        ],
        "pkg.a": [("pkg.b", tmp_path / "pkg/a.py", 1)],
        "pkg.b": [],
    }
    assert cycles(graph) == []
