"""Assets an environment needs before it can be built: MuJoCo Menagerie's robot models.

MuJoCo Playground's locomotion and manipulation environments (``Go1JoystickFlatTerrain``,
``G1JoystickFlatTerrain``, ``PandaPickCube``, ...) load their robots from MuJoCo
Menagerie, which Playground clones with ``git`` into its own install folder the first
time one of them is loaded. Offline, that clone fails with a bare
``CalledProcessError`` (or waits on the network). `ensure_menagerie` runs first and
fails in seconds with the environment, the missing asset and the fix:

- online once: the same command downloads it (Playground's clone, at the commit its
  release pins);
- a local copy (cloned elsewhere and copied here): ``NNX_PPO_MENAGERIE=DIR`` links it
  where Playground looks for it.

The DeepMind Control Suite tasks (``CartpoleBalance``, ``CheetahRun``, ...) and brax's
environments ship their models and need nothing.
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

__all__ = ["MENAGERIE_ENV_VAR", "MENAGERIE_URL", "ensure_menagerie", "needs_menagerie"]

MENAGERIE_ENV_VAR = "NNX_PPO_MENAGERIE"
"""The environment variable naming a local copy of MuJoCo Menagerie."""

MENAGERIE_URL = "https://github.com/deepmind/mujoco_menagerie.git"
"""Where Playground clones Menagerie from."""

_TIMEOUT_S = 5.0


def needs_menagerie(name: str) -> bool:
    """Whether Playground's environment ``name`` loads its robot from MuJoCo Menagerie
    (its locomotion and manipulation environments; ``False`` without Playground)."""
    try:
        from mujoco_playground._src import locomotion, manipulation
    except ImportError:
        return False
    return name in locomotion.ALL_ENVS or name in manipulation.ALL_ENVS


def _reachable(host: str, port: int, timeout: float) -> bool:
    """Whether a TCP connection to ``host:port`` opens within ``timeout`` seconds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _fix(env: str, path: Path, commit: str) -> str:
    """What to do, for the messages."""
    return (
        f"either run the same command once where this machine is online (Playground then "
        f"downloads it), or clone it on a machine that is (git clone "
        f"{MENAGERIE_URL} DIR && git -C DIR checkout {commit}), copy DIR here and set "
        f"{MENAGERIE_ENV_VAR}=DIR; or train an env without robot assets (a DeepMind Control "
        "Suite task such as CartpoleBalance, or a brax env)"
    )


def ensure_menagerie(env: str) -> None:
    """Make sure MuJoCo Menagerie is where Playground loads ``env``'s robot from, before
    anything is built (see the module docstring). Nothing to do for an environment that
    does not need it, or when it is there.

    Raises:
        ValueError: If it is missing and cannot be had: ``NNX_PPO_MENAGERIE`` names no
            folder (or it cannot be linked), GitHub cannot be reached within seconds, or
            Playground's clone fails; the message names ``env``, the asset, where it is
            looked for and the fix.
    """
    if not needs_menagerie(env):
        return
    from mujoco_playground._src import mjx_env

    path = Path(str(mjx_env.MENAGERIE_PATH))
    if path.exists():
        return
    commit = mjx_env.MENAGERIE_COMMIT_SHA
    what = (
        f"--env {env} needs MuJoCo Menagerie (its robot model), which MuJoCo Playground "
        f"loads from {path}"
    )
    local = os.environ.get(MENAGERIE_ENV_VAR)
    if local:
        source = Path(local).expanduser()
        if not source.is_dir():
            raise ValueError(
                f"{what}; {MENAGERIE_ENV_VAR}={local} names no folder: set it to a clone of "
                f"{MENAGERIE_URL} (at commit {commit})"
            )
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.symlink_to(source.resolve(), target_is_directory=True)
        except OSError as error:
            raise ValueError(
                f"{what}; cannot link {MENAGERIE_ENV_VAR}={local} there ({error}): copy the "
                "folder there instead"
            ) from None
        return
    if not _reachable("github.com", 443, _TIMEOUT_S):
        raise ValueError(
            f"{what}; it is not there, and github.com, where Playground downloads it from, "
            f"cannot be reached from this machine (offline?): {_fix(env, path, commit)}"
        )
    try:
        mjx_env.ensure_menagerie_exists()
    except (subprocess.CalledProcessError, OSError) as error:
        raise ValueError(
            f"{what}; it is not there, and downloading it failed ({error}): "
            f"{_fix(env, path, commit)}"
        ) from None
