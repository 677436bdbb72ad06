"""What a training app does around the trainer: the persistent compilation cache, the
provenance record of a run, and the clean stop on ``SIGTERM`` / ``SIGINT``.

**Compilation cache.** `use_compilation_cache` turns on JAX's persistent compilation
cache, so a second run of the same program loads its compiled training step instead of
compiling it again (tens of seconds to minutes on a CPU). It is on by default in the
apps, in ``$NNX_PPO_CACHE_DIR`` or else ``$XDG_CACHE_HOME/nnx-ppo/jax`` (``~/.cache``
without it); a ``JAX_COMPILATION_CACHE_DIR`` already set wins. ``--no-compile-cache``
turns it off. At the end of a run the apps print how many programs it compiled and how
many of them were loaded from the cache (`nnx_ppo_apps_common.compiles.CompileLog`).

**Provenance.** `provenance` records where a run came from: the versions of Python and
of the libraries that decide its numbers, the git commit of the working directory's
repository (and whether it had uncommitted changes) and the command line.

**Stopping.** The apps train inside `nnx_ppo.algorithms.core.preemption.StopOnSignal`: a
``SIGTERM`` (a cluster's preemption) or Ctrl-C stops the run after the current device
call with a checkpoint, and the app exits with the shell's status for the signal
(``StopOnSignal.exit_code``: 143 for ``SIGTERM``, 130 for ``SIGINT``); `stopped_message`
says how to continue. ``--resume`` continues it exactly.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = [
    "DISTRIBUTIONS",
    "add_run_arguments",
    "cache_directory",
    "provenance",
    "stopped_message",
    "use_compilation_cache",
]

DISTRIBUTIONS = (
    "nnx-ppo-train",
    "nnx-modules",
    "nnx-graph",
    "jax",
    "jaxlib",
    "flax",
    "optax",
    "orbax-checkpoint",
    "brax",
    "playground",
    "mujoco",
    "mujoco-mjx",
)
"""The distributions whose versions `provenance` records (those installed)."""


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--no-compile-cache`` (see the module docstring) to ``parser``."""
    parser.add_argument(
        "--no-compile-cache",
        action="store_true",
        help="do not use JAX's persistent compilation cache (by default compiled programs "
        "are kept in $NNX_PPO_CACHE_DIR, else ~/.cache/nnx-ppo/jax, and a second identical "
        "run loads them instead of compiling; the line 'Compiled N programs in S s (M "
        "loaded from the compilation cache in DIR)' at the end of a run says how many it "
        "loaded)",
    )


def cache_directory() -> Path:
    """Where the apps keep compiled programs: ``$NNX_PPO_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/nnx-ppo/jax`` (``~/.cache/nnx-ppo/jax``)."""
    explicit = os.environ.get("NNX_PPO_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "nnx-ppo" / "jax"


def use_compilation_cache(enabled: bool = True) -> Path | None:
    """Turn on JAX's persistent compilation cache (call before the first compilation).

    Args:
        enabled: ``False`` turns it off for this process (``--no-compile-cache``), even
            where ``JAX_COMPILATION_CACHE_DIR`` is set.

    Returns:
        The cache folder, or ``None`` when off.
    """
    import jax

    if not enabled:
        jax.config.update("jax_compilation_cache_dir", None)
        jax.config.update("jax_enable_compilation_cache", False)
        return None
    directory = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    path = Path(directory) if directory else cache_directory()
    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    # Every program, the hundreds of small ones too (model building, environment set-up,
    # eager operations): together they cost as much as the training step on a CPU.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    return path


def _git(*command: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *command], capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def provenance() -> dict[str, Any]:
    """Where a run comes from: the command, Python, the platform, the installed
    versions of `DISTRIBUTIONS`, and the git commit of the current directory's
    repository (``None`` outside one) with ``git_dirty`` (uncommitted changes).

    Examples:
        >>> record = provenance()
        >>> sorted(record)
        ['argv', 'git_commit', 'git_dirty', 'platform', 'python', 'versions']
        >>> "jax" in record["versions"]
        True
    """
    versions = {}
    for name in DISTRIBUTIONS:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {
        "argv": list(sys.argv),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
        "git_commit": commit,
        "git_dirty": None if status is None else bool(status),
    }


def stopped_message(prog: str, reason: str | None, step: int, out: Path) -> str:
    """The line an app prints when a signal stopped its run.

    Examples:
        >>> print(stopped_message("app", "SIGTERM", 4000, Path("runs/a")))
        ... # doctest: +NORMALIZE_WHITESPACE
        app: stopped by SIGTERM at step 4,000, with a checkpoint; to continue, run the
        same command with --resume --output-dir runs/a
    """
    return (
        f"{prog}: stopped by {reason or 'a stop request'} at step {step:,}, with a "
        f"checkpoint; to continue, run the same command with --resume --output-dir {out}"
    )
