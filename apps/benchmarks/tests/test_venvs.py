"""The environment of the benchmark's children."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from nnx_ppo_benchmarks.venvs import COMPILE_CACHE_VAR, child_env_vars


def test_children_compile_alone_unless_a_shared_cache_is_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(COMPILE_CACHE_VAR, raising=False)
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "developer-cache"))
    env = child_env_vars(tmp_path / "src")
    # Every run pays, and reports, its whole compile time: the caller's cache is off.
    assert env["JAX_ENABLE_COMPILATION_CACHE"] == "false"
    assert "JAX_COMPILATION_CACHE_DIR" not in env
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path / "src")

    monkeypatch.setenv(COMPILE_CACHE_VAR, str(tmp_path / "shared"))  # --compile-cache
    env = child_env_vars(tmp_path / "src")
    assert env["JAX_ENABLE_COMPILATION_CACHE"] == "true"
    assert env["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path / "shared")
