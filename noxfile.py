"""Project automation: tests across JAX versions, lint, types, docs, packaging, apps.

Run ``uv run nox -l`` to list the sessions. Every session installs what it needs into
its own virtual environment with uv; none of them reads or rewrites ``uv.lock``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import tomllib
from pathlib import Path

import nox

nox.options.default_venv_backend = "uv"
nox.options.error_on_missing_interpreters = True

ROOT = Path(__file__).parent
PACKAGES = {
    # distribution -> (extras installed for its tests, workspace siblings it needs)
    # flatbuffers, to serialize exported policies; matplotlib, for the analysis plots
    "nnx-modules": ("[stablehlo,plot]", ()),
    # nnx-modules[stablehlo]: the graph's export test serializes a StableHLO artefact
    "nnx-graph": ("", ("nnx-modules[stablehlo]",)),
    # nnx-modules[stablehlo]: the feature matrix exports trained policies; search: optuna,
    # for the search driver's tests (pure Python, with SQLAlchemy)
    "nnx-ppo-train": ("[brax,playground,logging,gymnax,search]", ("nnx-modules[stablehlo]",)),
}
# The default run (the README's test command): every distribution at the latest versions,
# lint, types, docs, wheels and apps. The floor matrix (`nox -t floor`), the costly
# integration runs (`nox -s extended`) and the learning tests (`nox -s slow`) are not in
# it; `.ci/run` runs all three after it.
nox.options.sessions = [
    *(f"tests(package='{p}', jax='latest')" for p in PACKAGES),
    *("lint", "types", "docs", "build", "apps", "export"),
]
# Extras installed for a distribution's own tests only, per JAX ("floor"/"latest"): the
# export tests of nnx-modules then run for StableHLO at the floor and also for ONNX at the
# latest JAX (jax2onnx needs jax >= 0.8.1; it is skipped only where it is not installed).
TEST_EXTRAS = {"nnx-modules": {"floor": "[stablehlo,plot]", "latest": "[onnx,plot]"}}
# The distribution whose suite runs against its built wheel (at the latest JAX) rather
# than the workspace source: packaging mistakes (a module left out of the wheel, a
# file read from the source tree) fail its tests. nnx-modules: the cheapest suite.
WHEEL_TESTED = "nnx-modules"
APPS_DIR = ROOT / "apps"
# Test files the floor sessions leave out: the feature matrix and the trainer contract
# combine features (and trainers) that the other files test one at a time, and those run
# at the floors; the combinations are what our code does with them, checked at the
# latest versions.
# The cognitive tasks and their trial scoring (`test_cognitive_tasks.py`,
# `test_cognitive_wager_timing.py`, `test_trials.py`) are our arithmetic in plain
# `jax.numpy` on top of the environment protocol that `test_cognitive.py` runs at the
# floors; a symmetric student (`test_distillation_symmetry.py`) runs the mirroring that
# `test_symmetry.py` runs at the floors. The analyses' linear algebra and plots
# (`test_similarity.py`, `test_flow.py`, `test_analysis_plots.py`) are numpy and
# `jax.numpy` arithmetic on arrays; the networks' maps they take are `test_analysis.py`'s
# and `test_lyapunov.py`'s, which run at the floors.
LATEST_ONLY: dict[str, list[str]] = {
    "nnx-modules": ["test_similarity.py", "test_flow.py", "test_analysis_plots.py"],
    "nnx-graph": [],
    "nnx-ppo-train": [
        "test_matrix.py",
        "test_trainer_contract.py",
        "test_cognitive_tasks.py",
        "test_cognitive_wager_timing.py",
        "test_distillation_symmetry.py",
        "test_trials.py",
    ],
}
OWN_SESSION_APPS = {"export"}  # tested by `nox -s export`, with the onnx extra
JAX_CACHE = ROOT / ".cache" / "jax"


def _install(session: nox.Session, *args: str) -> None:
    """``uv pip install`` into the session without the workspace's uv settings: the root
    pyproject's ``override-dependencies`` (jax2onnx's orbax cap lifted for the developer
    environment) must not change what the sessions resolve, which is what pip users get
    (and, at the floors, what the packages declare)."""
    session.install("--no-config", *args)


def _parallel(dist: str = "loadfile") -> list[str]:
    """pytest-xdist options: one worker per CPU this process may use (at most 8; the
    suites are dominated by single-threaded XLA compiles). ``dist="loadfile"`` keeps each
    test file on one worker, so its module-scoped fixtures are built once; ``"load"``
    spreads a file's cases (the docs pages are the cases of one test); ``"loadgroup"``
    spreads them too, but keeps the tests of one ``xdist_group`` mark on one worker.
    ``-- -n 0`` turns it off."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    workers = min(cpus or 1, 8)
    return ["-n", str(workers), "--dist", dist] if workers > 1 else []


def _pyproject(path: Path) -> dict:
    return tomllib.loads(path.read_text())


def _group(name: str) -> list[str]:
    """A dependency group of the workspace root (test, lint, types, docs)."""
    return list(_pyproject(ROOT / "pyproject.toml")["dependency-groups"][name])


def _jax_floor(package: str) -> str:
    """The lowest JAX a distribution declares (``jax>=X`` in its pyproject)."""
    deps = _pyproject(ROOT / "packages" / package / "pyproject.toml")["project"]["dependencies"]
    for dep in deps:
        match = re.fullmatch(r"jax\s*>=\s*([\w.]+).*", dep)
        if match:
            return match.group(1)
    raise ValueError(f"{package}/pyproject.toml declares no 'jax>=' floor")


# The test sessions are bound by XLA compiles, not by what the programs compute: at
# optimization level 0 XLA's CPU backend hands LLVM less to do and compiles ~25% faster
# (test_iteration.py alone: 65.6 -> 48.9 s, one process). The programs are the same;
# results can differ from level 3 in float rounding, which every test allows for.
# The slow learning tests keep the default level: they are bound by running.
FAST_COMPILE_XLA_FLAGS = "--xla_backend_optimization_level=0"


def _test_env(*, fast_compile: bool = True) -> dict[str, str]:
    JAX_CACHE.mkdir(parents=True, exist_ok=True)
    env = {
        "JAX_PLATFORMS": "cpu",
        "JAX_COMPILATION_CACHE_DIR": str(JAX_CACHE),
        "PYTHONHASHSEED": "0",
    }
    if fast_compile:
        env["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), FAST_COMPILE_XLA_FLAGS])
    return env


def _install_package(session: nox.Session, package: str, jax: str) -> None:
    """Install ``package`` (with its test extras), its workspace siblings and the test tools.

    ``jax="floor"``: uv's ``lowest-direct`` resolution, so JAX and every dependency the
    package (and its siblings) declares, flax, optax, orbax-checkpoint, numpy and the
    extras' simulators included, come at its declared floor; the test tools are then
    added at their newest versions that keep those floors. ``jax="latest"``: the newest
    of everything; `WHEEL_TESTED` is installed from its built wheel, not the source.
    """
    extras, siblings = PACKAGES[package]
    extras = TEST_EXTRAS.get(package, {}).get(jax, extras)
    args = []
    for sibling in siblings:
        args += ["-e", f"packages/{sibling}"]
    if jax == "floor":
        floor = _jax_floor(package)
        args += ["-e", f"packages/{package}{extras}"]
        _install(
            session, "--resolution", "lowest-direct", *args, f"jax=={floor}", f"jaxlib=={floor}"
        )
        frozen = _output(
            session, "uv", "pip", "freeze", "--exclude-editable", "--python", _venv_python(session)
        )
        constraints = Path(session.create_tmp()) / "floors.txt"
        constraints.write_text(frozen)
        _install(session, "--constraint", str(constraints), *_group("test"))
    elif package == WHEEL_TESTED:
        wheel = _build_wheel(session, package, Path(session.create_tmp()).resolve() / "dist")
        _install(session, *args, f"{package}{extras} @ {wheel.as_uri()}", "jax", *_group("test"))
    else:
        _install(session, *args, "-e", f"packages/{package}{extras}", "jax", *_group("test"))
    session.run(
        "python",
        "-c",
        "import jax, flax, importlib.metadata as md\n"
        "print(f'jax {jax.__version__}, flax {flax.__version__}', *(f'{d} {md.version(d)}' "
        "for d in ('optax', 'orbax-checkpoint', 'numpy')))",
    )


def _build_wheel(session: nox.Session, package: str, out_dir: Path) -> Path:
    """Build ``package``'s wheel without workspace sources into ``out_dir``; its path."""
    shutil.rmtree(out_dir, ignore_errors=True)
    session.run(
        "uv", "build", "--no-sources", "--wheel", "--out-dir", str(out_dir),
        f"packages/{package}", external=True,
    )  # fmt: skip
    return next(out_dir.glob(package.replace("-", "_") + "-*.whl"))


def _venv_python(session: nox.Session) -> str:
    return str(Path(session.virtualenv.location) / "bin" / "python")


def _output(session: nox.Session, *command: str) -> str:
    """The stdout of ``command`` (logged; stderr, e.g. warnings, left out of it)."""
    session.log(" ".join(command))
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


def _installed_source(session: nox.Session, package: str) -> str:
    """The folder the session's interpreter imports ``package``'s modules from; fails if
    that is the workspace source (the wheel is what must be tested)."""
    module = {"nnx-modules": "nnx_ppo.networks.containers"}[package]
    find = f"import importlib.util as u, os; print(os.path.dirname(u.find_spec({module!r}).origin))"
    folder = _output(session, _venv_python(session), "-c", find).strip()
    if Path(folder).resolve().is_relative_to(ROOT / "packages"):
        session.error(f"{package} imports from the workspace source {folder}, not its wheel")
    session.log(f"{package} imports from {folder}")
    return folder


@nox.session
@nox.parametrize("jax", [nox.param("floor", tags=["floor"]), "latest"])
@nox.parametrize("package", list(PACKAGES))
def tests(session: nox.Session, package: str, jax: str) -> None:
    """Fast tests of one distribution, with only its own dependencies: at its declared
    floors (JAX, flax, optax, orbax, numpy, extras; `nox -t floor`, run by CI after the
    default sessions) or at the latest (nnx-modules from its built wheel; default).
    Tests marked ``slow``, ``extended`` or ``heavy`` run in their own sessions."""
    _install_package(session, package, jax)
    sources = f"packages/{package}/src"
    if jax == "latest" and package == WHEEL_TESTED:
        sources = _installed_source(session, package)  # the wheel's modules, doctested
    ignored = [f"--ignore=packages/{package}/tests/{name}" for name in LATEST_ONLY[package]]
    session.run(
        "pytest",
        *_parallel(),
        f"packages/{package}/tests",
        sources,  # docstring examples are doctested
        "--doctest-modules",
        *(ignored if jax == "floor" else []),
        "-m",
        "not slow and not extended and not heavy",
        *session.posargs,
        env=_test_env(),
    )


def _app_dirs() -> list[Path]:
    """The apps smoke-tested by the ``apps`` session (``export`` has its own)."""
    return sorted(
        p
        for p in APPS_DIR.glob("*")
        if (p / "pyproject.toml").exists() and p.name not in OWN_SESSION_APPS
    )


def _install_workspace(session: nox.Session, *groups: str, apps: bool = False) -> None:
    """Every distribution (editable, with its test extras), the apps if ``apps``, and
    the root's dependency ``groups``, at the latest versions."""
    _install(
        session,
        *[a for p in PACKAGES for a in ("-e", f"packages/{p}{PACKAGES[p][0]}")],
        *[a for d in (_app_dirs() if apps else []) for a in ("-e", str(d))],
        *[r for g in groups for r in _group(g)],
    )


@nox.session
def extended(session: nox.Session) -> None:
    """The costly integration runs (marked ``extended``: several processes or forced
    devices, subprocess kill-and-resume, physics-env and app variants) and the costly
    variants (marked ``heavy``: more network families, devices, recoveries) of every
    distribution and app, at the latest versions. Not a default session; CI runs it
    after them."""
    _install_workspace(session, "test", apps=True)
    session.run(
        "pytest",
        *_parallel(),
        *[f"packages/{p}/tests" for p in PACKAGES],
        *[str(d / "tests") for d in _app_dirs()],
        "-m",
        "(extended or heavy) and not slow",
        *session.posargs,
        env=_test_env(),
        success_codes=[0, 5],  # 5: no extended test collected (e.g. a -k filter)
    )


@nox.session
def slow(session: nox.Session) -> None:
    """Learning tests (marked ``slow``) of every distribution at the latest JAX. Spread
    test by test over the workers (``"load"``): the slow tests of a file share no
    fixture, and by file one worker took test_ppo.py's three while the other idled."""
    _install_workspace(session, "test")
    session.run(
        "pytest",
        *_parallel("load"),
        *[f"packages/{p}/tests" for p in PACKAGES],
        "-m",
        "slow",
        *session.posargs,
        env=_test_env(fast_compile=False),
        success_codes=[0, 5],  # 5: no slow test collected yet
    )


@nox.session
def lint(session: nox.Session) -> None:
    """ruff lint and format check over the whole repository."""
    _install(session, *_group("lint"))
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def types(session: nox.Session) -> None:
    """mypy over the sources of the three distributions."""
    _install_workspace(session, "types")
    session.run(
        "mypy",
        "packages/nnx-modules/src/nnx_ppo",
        "packages/nnx-graph/src/nnx_ppo",
        "packages/nnx-ppo-train/src/nnx_ppo",
    )


@nox.session
def docs(session: nox.Session) -> None:
    """``mkdocs build --strict``, then run every code block of the README and docs and
    check the built site."""
    _install_workspace(session, "docs", "test")
    site = ROOT / "site"
    session.run(
        "mkdocs",
        "build",
        "--strict",
        "--site-dir",
        str(site),
        env={"NO_MKDOCS_2_WARNING": "1"},  # material's banner about a future MkDocs 2
    )
    # "loadgroup": the pages spread over the workers, except the tests marked with one
    # `xdist_group` (the getting-started page and its variant), which run on one worker
    # one after the other, so the second loads the first's programs from the cache.
    session.run(
        "pytest", *_parallel("loadgroup"), "tests", "-m", "not readme", *session.posargs,
        env={**_test_env(), "NNX_PPO_BUILT_SITE": str(site)},  # checked, not built again
    )  # fmt: skip


@nox.session(venv_backend="none")
def readme(session: nox.Session) -> None:
    """Run every command README.md and the getting-started pages advertise, as a user
    would (``uv run ...`` in the workspace's environment, small step counts; see
    tests/test_readme_commands.py). Not a default session; CI runs it after them."""
    session.run(
        "uv", "run", "pytest", *_parallel("load"), "tests/test_readme_commands.py",
        "-m", "readme", *session.posargs, external=True, env=_test_env(),
    )  # fmt: skip


_MODULES_ALONE_CHECK = """
import ast, importlib, importlib.metadata as md, importlib.util as u, pkgutil, re
import nnx_ppo.networks as networks
declared = sorted(re.split(r"[<>=!~ ;\\[]", r)[0] for r in md.requires("nnx-modules") or []
                  if "extra ==" not in r)
assert declared == ["flax", "jax", "numpy"], f"nnx-modules declares {declared}"
present = [m for m in ("brax", "mujoco_playground", "tqdm", "nnx_ppo.algorithms",
                       "nnx_ppo.networks.graph") if u.find_spec(m) is not None]
assert not present, f"installing nnx-modules alone brought {present}"
for info in pkgutil.iter_modules(networks.__path__):
    module = importlib.import_module("nnx_ppo.networks." + info.name)
    tree = ast.parse(open(module.__file__).read())
    for node in ast.walk(tree):
        names = [a.name for a in getattr(node, "names", [])] if isinstance(node, ast.Import) else (
            [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        bad = [n for n in names if n.split(".")[0] in ("optax", "orbax", "brax", "tqdm")
               or n.startswith("nnx_ppo.algorithms")]
        assert not bad, f"{module.__name__} imports {bad}"
print("nnx-modules", md.version("nnx-modules"), "installs and imports alone")
"""


@nox.session(venv_backend="none")
def build(session: nox.Session) -> None:
    """Build wheels without workspace sources; install them into clean venvs outside it."""
    dist = ROOT / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    for package in PACKAGES:
        session.run(
            "uv",
            "build",
            "--no-sources",
            "--wheel",
            "--out-dir",
            str(dist),
            f"packages/{package}",
        )
    wheels = {p: next(dist.glob(p.replace("-", "_") + "-*.whl")) for p in PACKAGES}
    with tempfile.TemporaryDirectory() as tmp:
        # nnx-modules alone: installs and imports, and brings none of the trainer's layer.
        # (flax itself requires optax and orbax-checkpoint, so those arrive with any
        # flax install; what we check is that nnx-modules declares and imports only
        # jax, flax and numpy, and that no trainer/simulator package comes along.)
        alone = Path(tmp) / "alone"
        session.run("uv", "venv", "--quiet", str(alone))
        py = str(alone / "bin" / "python")
        session.run(
            "uv", "pip", "install", "--no-config", "--quiet", "-p", py, str(wheels["nnx-modules"])
        )
        session.run(py, "-c", _MODULES_ALONE_CHECK)
        # All three together.
        full = Path(tmp) / "full"
        session.run("uv", "venv", "--quiet", str(full))
        py = str(full / "bin" / "python")
        session.run(
            "uv", "pip", "install", "--no-config", "--quiet", "-p", py, *map(str, wheels.values())
        )
        session.run(
            py,
            "-c",
            "import nnx_ppo.networks.containers, nnx_ppo.networks.graph\n"
            "import nnx_ppo.algorithms.ppo\n"
            "print('all three distributions install and import together')",
        )


@nox.session
def apps(session: nox.Session) -> None:
    """Smoke-run every app under apps/ with tiny settings (each app's tests)."""
    app_dirs = _app_dirs()
    if not app_dirs:
        session.skip("no apps yet")
    _install_workspace(session, "test", apps=True)
    session.run(
        "pytest",
        *_parallel(),
        *[str(d / "tests") for d in app_dirs],
        "-m",
        "not extended",  # `nox -s extended`
        *session.posargs,
        env=_test_env(),
    )


@nox.session
def export(session: nox.Session) -> None:
    """Policy export with ONNX as pip resolves it outside the workspace (jax2onnx caps
    orbax-checkpoint below 0.11.37, which the workspace overrides): apps/export's tests,
    and the ONNX runtime example in a venv with only onnxruntime and numpy (the test
    fails if JAX imports there); and the feature matrix's pixel policy (conv + LSTM on a
    gymnax MinAtar game) through ONNX and onnxruntime on a recorded rollout."""
    _install(
        session,
        "-e",
        "packages/nnx-modules[onnx]",
        "-e",
        "packages/nnx-graph",
        "-e",
        "packages/nnx-ppo-train[brax,playground,gymnax]",
        "-e",
        "apps/common",
        "-e",
        "apps/quickstart",
        "-e",
        "apps/export",
        *_group("test"),
    )
    session.run(
        "python", "-c", "import orbax.checkpoint as o; print('orbax-checkpoint', o.__version__)"
    )
    with tempfile.TemporaryDirectory() as tmp:
        runtime = Path(tmp) / "runtime"
        session.run("uv", "venv", "--quiet", str(runtime), external=True)
        python = str(runtime / "bin" / "python")
        session.run(
            "uv",
            "pip",
            "install",
            "--no-config",
            "--quiet",
            "-p",
            python,
            "onnxruntime",
            "numpy",
            external=True,
        )
        session.run(
            "pytest",
            *_parallel(),
            "apps/export/tests",
            env={**_test_env(), "NNX_PPO_NO_JAX_PYTHON": python},
        )
    session.run(
        "pytest",
        "packages/nnx-ppo-train/tests/test_matrix.py",
        "-k",
        "onnx_parity",
        env=_test_env(),
    )


@nox.session
def upstream(session: nox.Session) -> None:
    """nnx-ppo 0.3.0's own network tests against this project's modules: downloads its
    sdist with pip and prints passed / failed per file and the share that passes (the
    figure on docs/getting-started/coming-from-nnx-ppo.md). Not a default session: it
    needs the package index. Extra arguments go to tools/upstream_network_tests.py."""
    _install(
        session,
        *[
            a
            for p in ("nnx-modules", "nnx-graph", "nnx-ppo-train")
            for a in ("-e", f"packages/{p}")
        ],
        "absl-py",
        "pip",
        "pytest",
    )
    session.run("python", "tools/upstream_network_tests.py", *session.posargs, env=_test_env())
