"""One virtual environment per implementation, all on the same JAX version.

nnx-ppo 0.3.0 ships a regular ``nnx_ppo`` package that would shadow this workspace's
namespace packages, and brax 0.14.2's PPO calls ``jax.device_put_replicated`` (removed
in JAX 0.10), so each implementation runs in its own ``uv`` virtual environment under
the cache folder (``$NNX_PPO_BENCH_CACHE``, default ``~/.cache/nnx-ppo-bench``):

- ``brax``: ``brax==0.14.2`` and ``playground`` (also runs ``env-only``); built first,
  and its resolved versions become the constraints of the other two, so JAX, jaxlib,
  flax, optax, MuJoCo, MJX and Playground are identical in all three;
- ``ours``: this workspace's three packages (editable), ``playground`` and
  ``gymnax`` (for the learning-quality suite);
- ``nnx-ppo-0.3.0``: ``nnx-ppo==0.3.0``, ``playground`` and ``gymnax``. nnx-ppo 0.3.0
  declares ``flax>=0.12.7``, and flax 0.12.7 declares ``jax>=0.10``; its code runs on
  older flax, so its flax requirement is overridden with the shared flax version.

An environment is built once (network access to PyPI the first time) and reused while
its requirements are unchanged.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = [
    "COMPILE_CACHE_VAR",
    "DEFAULT_JAX",
    "Environment",
    "cache_root",
    "child_env_vars",
    "current_environment",
    "ensure_environments",
    "workspace_root",
]

COMPILE_CACHE_VAR = "NNX_PPO_BENCH_COMPILE_CACHE"
"""When set (``--compile-cache``), the children share JAX's persistent compilation cache
in that folder instead of compiling every program themselves."""

DEFAULT_JAX = "0.9.2"
"""Newest JAX on which brax 0.14.2 PPO, nnx-ppo 0.3.0 and this workspace all run."""
BRAX_VERSION = "0.14.2"
PLAYGROUND_VERSION = "0.2.0"
NNX_PPO_RELEASE = "0.3.0"
GYMNAX = "gymnax==1.0.1"
SIX = "six"  # gymnax 1.0.1 imports it (bsuite MNIST loader) without declaring it
"""The learning-quality suite's external task suite (bsuite MemoryChain)."""

ENV_OF_IMPLEMENTATION = {
    "ours": "ours",
    "ours-minibatch-gae": "ours",
    "brax": "brax",
    "env-only": "brax",
    "nnx-ppo-0.3.0": "nnx-ppo-0.3.0",
}
"""Implementation -> the environment it runs in."""


@dataclasses.dataclass(frozen=True)
class Environment:
    """A Python environment a child runs in.

    Attributes:
        name: ``brax``, ``ours``, ``nnx-ppo-0.3.0`` or ``current``.
        python: Its interpreter.
    """

    name: str
    python: Path


def workspace_root() -> Path:
    """The monorepo root (``packages/`` and ``apps/`` below it).

    Raises:
        FileNotFoundError: If this package does not run from a workspace checkout.
    """
    root = Path(__file__).resolve().parents[4]
    if not (root / "packages" / "nnx-ppo-train" / "pyproject.toml").is_file():
        raise FileNotFoundError(
            f"no workspace checkout above {Path(__file__).resolve()}: the 'ours' "
            "environment installs packages/* from the monorepo; run nnx-ppo-bench from "
            "a checkout, or pass --environments current."
        )
    return root


def cache_root() -> Path:
    """``$NNX_PPO_BENCH_CACHE`` or ``~/.cache/nnx-ppo-bench``."""
    default = Path.home() / ".cache" / "nnx-ppo-bench"
    return Path(os.environ.get("NNX_PPO_BENCH_CACHE", default)).expanduser()


def child_env_vars(src_dir: Path) -> dict[str, str]:
    """The environment variables of a child process.

    The benchmark's ``src`` folder goes first on ``PYTHONPATH`` (children import
    :mod:`nnx_ppo_benchmarks.children`); JAX's persistent compilation cache is switched
    off so that every run pays, and reports, its full compile time, unless
    ``$NNX_PPO_BENCH_COMPILE_CACHE`` names a folder for the children to share (a
    learning comparison on an accelerator, where compiling dominates: a run's compile
    time is then a cache load when an earlier run compiled the same program).
    """
    env = dict(os.environ)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    env.pop("VIRTUAL_ENV", None)
    shared = env.get(COMPILE_CACHE_VAR)
    if shared:
        env["JAX_COMPILATION_CACHE_DIR"] = shared
        env["JAX_ENABLE_COMPILATION_CACHE"] = "true"
    else:
        env["JAX_ENABLE_COMPILATION_CACHE"] = "false"
    env["PYTHONPATH"] = os.pathsep.join(
        [str(src_dir), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    env["PYTHONUNBUFFERED"] = "1"
    return env


def current_environment() -> Environment:
    """The interpreter running the harness (no isolation, for smoke tests)."""
    return Environment("current", Path(sys.executable))


def _uv() -> str:
    uv = shutil.which("uv")
    if uv is None:
        raise FileNotFoundError(
            "isolated environments need uv (https://docs.astral.sh/uv/) on PATH; install "
            "it or pass --environments current."
        )
    return uv


def _requirements(name: str, jax_version: str, root: Path) -> list[str]:
    common = [f"jax=={jax_version}", f"jaxlib=={jax_version}", f"playground=={PLAYGROUND_VERSION}"]
    if name == "brax":
        return [*common, f"brax=={BRAX_VERSION}"]
    if name == "ours":
        editable = [("-e", str(root / "packages" / p)) for p in ("nnx-modules", "nnx-graph")]
        train = ("-e", f"{root / 'packages' / 'nnx-ppo-train'}")
        return [*common, GYMNAX, SIX, *[a for pair in [*editable, train] for a in pair]]
    if name == "nnx-ppo-0.3.0":
        return [*common, GYMNAX, SIX, f"nnx-ppo=={NNX_PPO_RELEASE}", "jaxtyping"]
    raise ValueError(f"unknown environment {name!r}")


def _log(message: str) -> None:
    print(f"[nnx-ppo-bench] {message}", file=sys.stderr, flush=True)


def _build(name: str, jax_version: str, root: Path, constraints: Path | None) -> Environment:
    uv = _uv()
    folder = (
        cache_root()
        / "venvs"
        / f"{name}-jax{jax_version}-py{sys.version_info[0]}{sys.version_info[1]}"
    )
    python = folder / "bin" / "python"
    requirements = _requirements(name, jax_version, root)
    overrides: list[str] = []
    if name == "nnx-ppo-0.3.0" and constraints is not None:
        flax = [line for line in constraints.read_text().splitlines() if line.startswith("flax==")]
        overrides = flax
    fingerprint = {
        "requirements": requirements,
        "overrides": overrides,
        "constraints": constraints.read_text() if constraints else "",
    }
    marker = folder / "nnx-ppo-bench.json"
    if python.exists() and marker.exists() and json.loads(marker.read_text()) == fingerprint:
        return Environment(name, python)

    _log(f"building environment {name!r} in {folder} (first time only)")
    if folder.exists():
        shutil.rmtree(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([uv, "venv", "--quiet", "--python", sys.executable, str(folder)], check=True)
    command = [uv, "pip", "install", "--quiet", "--python", str(python), *requirements]
    if constraints is not None:
        command += ["--constraint", str(constraints)]
    if overrides:
        override_file = folder / "overrides.txt"
        override_file.write_text("\n".join(overrides) + "\n")
        command += ["--override", str(override_file)]
    subprocess.run(command, check=True)
    marker.write_text(json.dumps(fingerprint))
    return Environment(name, python)


def _freeze(python: Path) -> str:
    frozen = subprocess.run(
        [_uv(), "pip", "freeze", "--python", str(python)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return "".join(line + "\n" for line in frozen.splitlines() if "==" in line)


def ensure_environments(names: set[str], jax_version: str = DEFAULT_JAX) -> dict[str, Environment]:
    """Build (or reuse) the environments ``names`` for ``jax_version``.

    Args:
        names: Environment names (values of :data:`ENV_OF_IMPLEMENTATION`).
        jax_version: The JAX version installed in all of them.

    Returns:
        Environment name -> :class:`Environment`.

    Raises:
        FileNotFoundError: Without ``uv`` or outside a workspace checkout.
        subprocess.CalledProcessError: If an installation fails (e.g. no network, or a
            JAX version that brax or Playground cannot use).
    """
    root = workspace_root()
    # brax is the most constrained stack: resolve it first and pin the others to it.
    brax = _build("brax", jax_version, root, None)
    constraints = cache_root() / "venvs" / f"constraints-jax{jax_version}.txt"
    frozen = _freeze(brax.python)
    if not constraints.exists() or constraints.read_text() != frozen:
        constraints.write_text(frozen)
    built = {"brax": brax}
    for name in sorted(names - {"brax"}):
        built[name] = _build(name, jax_version, root, constraints)
    return {name: built[name] for name in names}
