"""Runs the shell commands that README.md and the getting-started pages advertise.

Every ``uv``/``pip`` command in their ``bash`` blocks and inline code spans is listed in
`PLAN`, either with how it runs here (the literal command, with small step counts
appended, in a scratch folder) or with the reason it does not (it is CI itself, or it
is a server). A command added to those pages without an entry fails
`test_every_advertised_command_has_a_plan`, so the pages cannot advertise an untested
command. Run by ``uv run nox -s readme`` (CI runs it after the default sessions); the
``uv run`` commands use the workspace's own environment, as a user's would, and each
``pip install`` runs in a new virtual environment that has nothing but pip, as on a
machine with only Python.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.readme

ROOT = Path(__file__).parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs" / "getting-started").glob("*.md"))]
_BASH = re.compile(r"```bash\n(.*?)```", re.S)
_INLINE = re.compile(r"`((?:uv|pip) [^`]+)`")

# Small settings for every training command: 4 iterations of 32 envs x 16 steps, an
# evaluation and a checkpoint every 2 iterations, 100-step episodes.
SMALL = (
    "--steps 2048 --n-envs 32 --rollout-length 16 --n-minibatches 4 --n-epochs 2 "
    "--eval-every 1024 --eval-envs 4 --episode-length 100 --checkpoint-every 1024 "
    "--no-progress"
)


@dataclass(frozen=True)
class Run:
    """How an advertised command runs here: ``append`` is added to it (``{tmp}`` in it
    is the scratch folder); it runs in the scratch folder, or in the repository with
    ``in_repo``; ``expect`` lists files (relative to the scratch folder) it must write,
    and ``prints`` a text its output must hold. With ``fresh_env`` it runs with a new
    virtual environment (made here, holding only pip) first on ``PATH``, which then
    runs the Python code ``check``."""

    append: str = ""
    expect: tuple[str, ...] = ()
    prints: str = ""
    in_repo: bool = False
    fresh_env: bool = False
    check: str = ""


def _installed(*modules: str, absent: tuple[str, ...] = ()) -> str:
    """A ``check``: ``modules`` import from the environment's own site-packages (not
    the workspace's), and ``absent`` are not installed."""
    return (
        "import importlib, importlib.util, pathlib, sys\n"
        "prefix = pathlib.Path(sys.prefix).resolve()\n"
        f"for name in {list(modules)!r}:\n"
        "    path = pathlib.Path(importlib.import_module(name).__file__).resolve()\n"
        "    assert path.is_relative_to(prefix), (name, path, prefix)\n"
        f"for name in {list(absent)!r}:\n"
        "    assert importlib.util.find_spec(name) is None, f'{name} was installed'\n"
    )


CI_RUNS_IT = "CI's own command: .ci/run runs it"
PLAN: dict[str, Run | str] = {
    # README: the two set-up commands (pip install uv is done by CI's set-up).
    "uv run nnx-ppo-quickstart": Run(SMALL, ("outputs/quickstart",)),
    "uv run nox": CI_RUNS_IT + " first (the README's test command)",
    "uv run nnx-ppo-quickstart --help": Run(prints="--env", in_repo=True),
    "uv run nnx-ppo-quickstart --env CartpoleBalance --preset quickstart "
    "--output-dir runs/cartpole": Run(
        SMALL, ("runs/cartpole/summary.json", "runs/cartpole/learning_curve.png")
    ),
    "uv run nnx-ppo-quickstart --resume --output-dir runs/cartpole --steps 300000": Run(
        SMALL + " --steps 4096", ("runs/cartpole/summary.json",)
    ),
    "uv run nnx-ppo-export runs/cartpole --format stablehlo --out runs/cartpole-policy": Run(
        expect=("runs/cartpole-policy/policy.json", "runs/cartpole-policy/step.stablehlo")
    ),
    "uv run nnx-ppo-export runs/cartpole --format onnx --out runs/cartpole-onnx "
    "--record-obs 200": Run(expect=("runs/cartpole-onnx/step.onnx", "runs/cartpole-onnx/obs.npz")),
    "uv run nnx-ppo-bench": Run(
        "--implementations ours --environments current --networks mlp_small --repeats 1 "
        "--steps 4096 --chunks 2 --n-envs 32 --eval-envs 2 --output-dir {tmp}/bench",
        ("bench",),
    ),
    "uv run nnx-ppo-cognitive": Run(
        "--task pdm --dt 100 --seeds 0 --steps 1024 --n-envs 16 --rollout-length 16 "
        "--n-minibatches 4 --trials-per-condition 1 --no-progress --output-dir {tmp}/cog",
        ("cog/results.json", "cog/results.md"),
    ),
    "uv run nnx-ppo-learning": Run(
        "--tasks memory_d2 --families mlp --implementations ours --seeds 0 --steps 2048 "
        "--environments current --output-dir {tmp}/learning",
        ("learning",),
    ),
    "uv sync": Run(in_repo=True),
    "uv run nox -l": Run(prints="readme", in_repo=True),
    "uv run nox -s readme": CI_RUNS_IT + " (this file is that session)",
    "uv run nox -s \"tests(package='nnx-modules', jax='latest')\"": CI_RUNS_IT
    + " (a default session)",
    "uv run nox -s lint types": CI_RUNS_IT + " (default sessions)",
    "uv run nox -t floor": CI_RUNS_IT + " after the default sessions",
    "uv run nox -s extended slow": CI_RUNS_IT + " after the default sessions",
    "uv run mkdocs serve": "a server; `nox -s docs` builds the same site (mkdocs build --strict)",
    "uv run mkdocs build": "`nox -s docs` runs it with --strict",
    # Installs from a clone, each in a new virtual environment (the README's and
    # getting-started's trainer command is the same one, run once).
    "pip install ./packages/nnx-modules": Run(
        in_repo=True,
        fresh_env=True,
        check=_installed(
            "nnx_ppo.networks.containers", absent=("nnx_ppo.networks.graph", "nnx_ppo.algorithms")
        ),
    ),
    "pip install ./packages/nnx-modules ./packages/nnx-graph": Run(
        in_repo=True,
        fresh_env=True,
        check=_installed("nnx_ppo.networks.graph", absent=("nnx_ppo.algorithms",)),
    ),
    'pip install ./packages/nnx-modules "./packages/nnx-ppo-train[brax,logging]"': Run(
        in_repo=True,
        fresh_env=True,
        check=_installed("nnx_ppo.algorithms", "brax.envs", "tensorboardX", "matplotlib"),
    ),
    # Wheels: built into the repository's dist/ (git-ignored), then installed from it.
    "uv build --all-packages --wheel --out-dir dist": Run(
        prints="Successfully built dist/nnx_ppo_train-", in_repo=True
    ),
    'pip install --find-links dist "nnx-ppo-train[brax]"': Run(
        in_repo=True,
        fresh_env=True,
        check=_installed("nnx_ppo.algorithms", "nnx_ppo.networks.containers", "brax.envs"),
    ),
    # Installs from the package index, which a release will allow: `nox -s build`
    # installs the built wheels into clean virtual environments and imports them.
    "pip install nnx-modules": "an install from the package index, after a release",
    "pip install nnx-graph": "an install from the package index, after a release",
    'pip install "nnx-ppo-train[brax]"': "an install from the package index, after a release",
    'pip install "nnx-ppo-train[brax,logging]"': "an install from the package index, after "
    "a release",
    # getting started
    "uv run nnx-ppo-quickstart --network lstm": Run(SMALL, ("outputs/quickstart",)),
    "uv run nnx-ppo-quickstart --output-dir runs/pendulum": Run(
        SMALL, ("runs/pendulum/checkpoints",)
    ),
    "uv run nnx-ppo-play runs/pendulum --episodes 5": Run(prints="Mean return over 5 episodes"),
    "uv run nnx-ppo-play runs/pendulum --episodes 1 --video pendulum.mp4": (
        "needs an OpenGL backend and ffmpeg; apps/export/tests/test_play.py tests the "
        "failure without one"
    ),
    "uv run nnx-ppo-play runs/pendulum --activations activations.npz": Run(
        expect=("activations.npz",)
    ),
}


def _commands(text: str) -> list[str]:
    """The ``uv``/``pip`` commands of a page, in order, without comments, continuation
    lines joined and ``pip install uv && `` dropped."""
    found = []
    for block in _BASH.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip()
            if line.startswith("#") or not line:
                continue
            found.append(line.removeprefix("pip install uv && "))
    for span in _INLINE.findall(text):
        found.append(" ".join(span.split()))
    commands = []
    for command in found:
        command = " ".join(command.split())
        if command.startswith(("uv ", "pip ")) and command not in commands:
            commands.append(command)
    return commands


ADVERTISED = [c for page in PAGES for c in _commands(page.read_text())]


def test_every_advertised_command_has_a_plan():
    missing = [c for c in ADVERTISED if c not in PLAN]
    stale = [c for c in PLAN if c not in ADVERTISED]
    assert not missing, f"commands without an entry in PLAN: {missing}"
    assert not stale, f"PLAN entries no page advertises any more: {stale}"


def _fresh_env(scratch: Path) -> Path:
    """A new virtual environment in ``scratch`` with nothing installed but pip (from
    the base interpreter, not the workspace's environment)."""
    venv = Path(tempfile.mkdtemp(prefix="venv-", dir=scratch))
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    return venv


RUNNABLE = [c for c in dict.fromkeys(ADVERTISED) if isinstance(PLAN.get(c), Run)]
# Commands that read what an earlier one wrote (a run's folder, the built wheels) run as
# one test per chain, in page order in one scratch folder; the others are a test each,
# so that `nox -s readme` spreads them over its pytest-xdist workers.
CHAINS = ("runs/cartpole", "runs/pendulum", "dist")


def _chain(command: str) -> str | None:
    return next((t for t in shlex.split(command) if t in CHAINS), None)


CHAINED = {chain: [c for c in RUNNABLE if _chain(c) == chain] for chain in CHAINS}
ALONE = [c for c in RUNNABLE if _chain(c) is None]


def test_the_chains_are_the_commands_that_share_files():
    assert [len(CHAINED[c]) for c in CHAINS] == [4, 3, 2], CHAINED
    # The first command of a chain writes its folder (the others read it).
    assert [shlex.split(CHAINED[c][0])[-1] for c in CHAINS] == list(CHAINS)
    # A command outside the chains names none of their folders (as argument or output).
    for command in ALONE:
        plan = PLAN[command]
        assert isinstance(plan, Run)
        named = [c for c in CHAINS for e in (*plan.expect, *shlex.split(command)) if
                 e == c or e.startswith(c + "/")]  # fmt: skip
        assert not named, (command, named)


@pytest.mark.parametrize("chain", CHAINS)
def test_advertised_commands_that_share_files_run_in_order(chain: str, tmp_path: Path) -> None:
    for command in CHAINED[chain]:
        _run(command, tmp_path)


@pytest.mark.parametrize("command", ALONE)
def test_advertised_command_runs(command: str, tmp_path: Path) -> None:
    _run(command, tmp_path)


def _run(command: str, scratch: Path) -> None:
    """Runs ``command`` as `PLAN` says, in ``scratch`` (or the repository), and checks
    its exit status, output, files and ``check``."""
    plan = PLAN[command]
    assert isinstance(plan, Run)
    argv = shlex.split(command) + shlex.split(plan.append.format(tmp=scratch))
    if argv[:2] == ["uv", "run"] and not plan.in_repo:
        argv[2:2] = ["--project", str(ROOT)]  # the workspace's environment, from scratch/
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "UV_PYTHON_DOWNLOADS": "never"}
    env["JAX_COMPILATION_CACHE_DIR"] = str(ROOT / ".cache" / "jax")
    if plan.fresh_env:
        venv = _fresh_env(scratch)
        for name in ("PYTHONPATH", "PYTHONHOME", "UV_PROJECT_ENVIRONMENT"):
            env.pop(name, None)
        env["VIRTUAL_ENV"] = str(venv)
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
        if argv[:2] == ["pip", "install"]:
            # pip byte-compiles every module it installs (thousands with brax, ~15 s of
            # CPU here); `check` imports what it needs, which compiles those alone.
            argv.append("--no-compile")
    done = subprocess.run(
        argv, cwd=ROOT if plan.in_repo else scratch, env=env,
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{command!r} exited {done.returncode}:\n{output[-4000:]}"
    assert plan.prints in output
    for name in plan.expect:
        path = scratch / name
        assert path.exists() and (path.is_dir() or path.stat().st_size > 0), name
    if plan.check:
        checked = subprocess.run(
            [str(venv / "bin" / "python"), "-c", plan.check], cwd=scratch, env=env,
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert checked.returncode == 0, f"after {command!r}:\n{checked.stderr[-4000:]}"
    if "--resume" in argv:
        summary = json.loads((scratch / "runs/cartpole/summary.json").read_text())
        assert summary["steps"] == 4096, summary  # continued from 2048 to 4096
        assert summary["eval_steps"] == [0, 1024, 2048, 3072, 4096], summary
