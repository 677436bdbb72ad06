"""The rooms of ``nnx_ppo.algorithms`` and the way they may import each other.

The folder holds the face (``__init__.py``) and the records (``config``, ``types``, their
base ``_config_base``, and ``symmetry``, the record of `PPOConfig.symmetry`); everything
else lives in a topic subpackage with a face of its own (``__all__``). A room may import
only the rooms below it in `ALLOWED`, so the layering cannot rot silently: an import that
breaks it fails here with the file and line. Imports are read from the sources with
`ast` (function bodies and ``TYPE_CHECKING`` blocks included), so nothing is imported and
the check costs milliseconds. nnx-ppo 0.3.0's module paths that moved (``rollout``, ``logging``) are
checked to still import, as the same objects.
"""

from __future__ import annotations

import ast
import importlib
import shutil
from pathlib import Path

import pytest

SOURCE = Path(__file__).parents[1] / "src"
PACKAGE = "nnx_ppo.algorithms"
RECORDS = {"config", "types", "_config_base", "symmetry"}

# room -> the rooms it may import (besides itself). "records" is config/types; "face" is
# nnx_ppo.algorithms itself, which only the faces of the rooms import (lazy_exports).
ALLOWED: dict[str, set[str]] = {
    "records": set(),
    "core": {"records"},
    "analysis": {"records"},
    "observe": {"records", "core", "analysis"},
    "trainer": {"records", "core", "observe"},
    "ppo": {"records", "core", "trainer"},
    "distillation": {"records", "core", "trainer"},
    "supervised": {"records", "core"},
    "checkpointing": {"records", "core"},
    "sweeps": {
        "records", "core", "analysis", "observe", "trainer", "ppo", "distillation",
        "checkpointing",
    },
}  # fmt: skip


def _room(module: str) -> str | None:
    """The room of a dotted module name under ``nnx_ppo.algorithms`` (None outside it)."""
    if module == PACKAGE:
        return "face"
    if not module.startswith(PACKAGE + "."):
        return None
    top = module[len(PACKAGE) + 1 :].split(".")[0]
    return "records" if top in RECORDS else top


def _imports(path: Path, module: str) -> list[tuple[str, str | None, int]]:
    """``(module named, name imported or None, line)`` of every import in the file."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, None, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            named = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                named = ".".join([*base, named] if named else base)
            found += [(named, alias.name, node.lineno) for alias in node.names]
    return found


def layering_violations(source: Path) -> list[str]:
    """Every import under ``source/nnx_ppo/algorithms`` that breaks `ALLOWED`, imports a
    private name from another module, or imports a private module of another room; and
    every module directly in the folder that is not the face or a record."""
    folder = source / "nnx_ppo" / "algorithms"
    problems = []
    for path in sorted(folder.rglob("*.py")):
        parts = path.relative_to(source).with_suffix("").parts
        is_face = parts[-1] == "__init__"
        module = ".".join(parts[:-1] if is_face else parts)
        room = _room(module)
        assert room is not None
        where = f"{path.relative_to(source)}"
        if len(parts) == 3 and not is_face and parts[-1] not in RECORDS:
            problems.append(f"{where}: a module directly in algorithms/; move it into a room")
            continue
        for named, name, line in _imports(path, module):
            target = _room(named)
            if target is None:
                continue
            named_file = source.joinpath(*named.split("."))
            is_module = name is not None and (
                (named_file / f"{name}.py").exists() or (named_file / name).is_dir()
            )
            if name and name.startswith("_") and not name.startswith("__") and not is_module:
                problems.append(f"{where}:{line} imports the private name {name} of {named}")
            if target == room:
                continue
            if target == "face":
                if not (is_face and name == "lazy_exports"):
                    problems.append(f"{where}:{line} imports the face {PACKAGE} ({name})")
                continue
            if room != "face" and target not in ALLOWED[room]:
                problems.append(f"{where}:{line}: {room} may not import {target} ({named})")
            inner = [*named.split(".")[2:], *([name] if is_module else [])]
            if target != "records" and any(part.startswith("_") for part in inner):
                problems.append(f"{where}:{line} imports a private module of {target} ({named})")
        if is_face and room != "face":
            faces = [n for n in ast.parse(path.read_text()).body if isinstance(n, ast.Assign)]
            if not any(getattr(t, "id", "") == "__all__" for n in faces for t in n.targets):
                problems.append(f"{where}: the room's face has no __all__")
    return problems


def test_the_rooms_keep_their_layering() -> None:
    assert layering_violations(SOURCE) == []


def test_every_room_is_declared() -> None:
    folder = SOURCE / "nnx_ppo" / "algorithms"
    rooms = {p.name for p in folder.iterdir() if (p / "__init__.py").exists()}
    assert rooms == set(ALLOWED) - {"records"}


@pytest.mark.parametrize(
    ("room", "line", "expected"),
    [
        ("core/rollout.py", "from nnx_ppo.algorithms.ppo.train import train_ppo", "core may not"),
        ("analysis/curves.py", "from nnx_ppo.algorithms.core import faults", "analysis may not"),
        ("ppo/train.py", "from nnx_ppo.algorithms.distillation import train", "ppo may not"),
        ("sweeps/merge.py", "from nnx_ppo.algorithms.core.rollout import _reset_carry", "private"),
        ("sweeps/merge.py", "from nnx_ppo.algorithms.sweeps.shards import _write_json", "private"),
        ("sweeps/many.py", "from nnx_ppo.algorithms.checkpointing import _io", "private module"),
        ("core/faults.py", "import nnx_ppo.algorithms", "imports the face"),
    ],
)
def test_a_bad_import_in_a_scratch_copy_is_caught(
    tmp_path: Path, room: str, line: str, expected: str
) -> None:
    shutil.copytree(SOURCE / "nnx_ppo", tmp_path / "nnx_ppo")
    path = tmp_path / "nnx_ppo" / "algorithms" / room
    path.write_text(path.read_text() + f"\n{line}\n")
    problems = layering_violations(tmp_path)
    assert len(problems) == 1 and expected in problems[0] and room in problems[0]


def test_a_module_left_in_the_folder_is_caught(tmp_path: Path) -> None:
    shutil.copytree(SOURCE / "nnx_ppo", tmp_path / "nnx_ppo")
    (tmp_path / "nnx_ppo" / "algorithms" / "helpers.py").write_text("X = 1\n")
    assert layering_violations(tmp_path) == [
        "nnx_ppo/algorithms/helpers.py: a module directly in algorithms/; move it into a room"
    ]


def test_nnx_ppo_030_module_paths_still_import() -> None:
    rollout = importlib.import_module("nnx_ppo.algorithms.rollout")
    moved = importlib.import_module("nnx_ppo.algorithms.core.rollout")
    assert rollout.reset_envs is moved.reset_envs
    from nnx_ppo.algorithms.logging import JSONLWriter
    from nnx_ppo.algorithms.observe.activations import record_activations_rollout
    from nnx_ppo.algorithms.rollout import record_activations_rollout as old

    assert old is record_activations_rollout
    assert JSONLWriter is importlib.import_module("nnx_ppo.algorithms.core.logging").JSONLWriter
    from nnx_ppo.algorithms.checkpointing import Checkpointer, load_network
    from nnx_ppo.algorithms.ppo import CheckpointHook, TrainResult, train_ppo

    assert train_ppo.__module__ == "nnx_ppo.algorithms.ppo.train"
    assert {Checkpointer, load_network, CheckpointHook, TrainResult} and "rollout" in dir(
        importlib.import_module(PACKAGE)
    )
    with pytest.raises(AttributeError, match=r"'nnx_ppo.algorithms.ppo' has no attribute 'nope'"):
        importlib.import_module("nnx_ppo.algorithms.ppo").nope  # noqa: B018
