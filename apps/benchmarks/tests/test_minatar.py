"""The MinAtar benchmark: its report from the stored TPU cells (and the page's table
agrees with it), its argument checks, and (extended) the ``--smoke`` run's files."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from nnx_ppo_benchmarks.published import minatar

APP = Path(__file__).resolve().parents[1]
STORED = APP / "results" / "published" / "minatar"
PAGE = APP.parents[1] / "docs" / "project" / "published-benchmarks.md"


def _table(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("| ") and "MinAtar" in line]


def test_report_from_the_stored_cells_matches_the_page(tmp_path):
    shutil.copytree(STORED / "cells", tmp_path / "cells")
    report = minatar.write_report(tmp_path).read_text()
    rows = _table(report)
    assert [row.split(" | ")[:3] for row in rows] == [
        ["| Breakout-MinAtar", "conv", "1e-05"],
        ["| Breakout-MinAtar", "conv", "1e-08"],
        ["| Breakout-MinAtar", "mlp", "1e-05"],
        ["| Breakout-MinAtar", "mlp", "1e-08"],
        ["| Asterix-MinAtar", "conv", "1e-08"],
        ["| Freeway-MinAtar", "conv", "1e-05"],
        ["| SpaceInvaders-MinAtar", "conv", "1e-05"],
    ]
    for row in rows:  # ratio = median / published
        cells = row.split(" | ")
        median, published, ratio = float(cells[4].split()[0]), float(cells[5]), float(cells[6])
        assert ratio == pytest.approx(median / published, abs=0.006)
    assert (tmp_path / "curves.png").stat().st_size > 0
    block = re.search(
        r"<!-- minatar: generated -->\n(.*?)<!-- /minatar -->", PAGE.read_text(), re.S
    )
    assert block is not None, f"{PAGE} lost its generated MinAtar table"
    assert _table(block[1]) == rows, "the page's MinAtar table differs from --report-only's"


def test_report_without_cells_says_so(tmp_path):
    (tmp_path / "cells").mkdir()
    assert "No cell has finished yet." in minatar.write_report(tmp_path).read_text()
    assert not (tmp_path / "curves.png").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--steps", "0"], "--steps=0"),
        (["--final-episodes", "0"], "--final-episodes=0"),
        (["--adam-eps", "0"], "--adam-eps=0"),
    ],
)
def test_bad_arguments_name_themselves(tmp_path, argv, message):
    with pytest.raises(SystemExit, match=re.escape(message)):
        minatar.main([*argv, "--output-dir", str(tmp_path)])


def test_an_ablations_eps_gets_its_own_cell_name():
    assert minatar.cell_name("Breakout-MinAtar", "conv", minatar.ADAM_EPS) == (
        "Breakout-MinAtar__conv.json"
    )
    assert minatar.cell_name("Breakout-MinAtar", "conv", 1e-8) == (
        "Breakout-MinAtar__conv__eps1e-08.json"
    )
    assert minatar.make_config(8192, 100, smoke=True, adam_eps=1e-3).ppo.adam_eps == 1e-3


def test_unknown_network_is_refused():
    with pytest.raises(ValueError, match="network='cnn'"):
        minatar.make_network("cnn", (10, 10, 4), 3)


@pytest.mark.extended
def test_smoke_run_writes_a_cell_and_the_report(tmp_path, capsys):
    assert minatar.main(["--smoke", "--seeds", "0", "--output-dir", str(tmp_path)]) == 0
    cell = json.loads((tmp_path / "cells" / "Breakout-MinAtar__conv.json").read_text())
    summary, runs = cell["summary"], cell["runs"]
    assert (summary["game"], summary["network"], summary["smoke"]) == (
        "Breakout-MinAtar",
        "conv",
        True,
    )
    assert summary["total_steps"] == 4096 and summary["published"] == 28.0
    assert [r["seed"] for r in runs] == [0] and runs[0]["finite_params"]
    assert runs[0]["curve"][-1][0] == 4096 and runs[0]["curve"][0][0] == 0
    assert summary["median"] == runs[0]["final_stochastic"] >= 0
    assert len(_table((tmp_path / "report.md").read_text())) == 1
    assert (tmp_path / "curves.png").exists()
    assert "median" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--n-envs", "3", "--rollout-length", "5"], "multiple of 8"),
        (["--iterations", "0"], "--iterations=0"),
    ],
)
def test_speed_arguments_are_checked_before_any_work(argv, message):
    from nnx_ppo_benchmarks.published import minatar_speed

    with pytest.raises(SystemExit, match=re.escape(message)):
        minatar_speed.main(argv)


@pytest.mark.extended
def test_speed_baseline_updates_its_parameters_with_finite_losses():
    import jax
    import numpy as np
    from nnx_ppo_benchmarks.published.minatar_speed import make_baseline

    init, iteration = make_baseline("Breakout-MinAtar", 8, 16, n_minibatches=8, n_epochs=2)
    state = init(jax.random.PRNGKey(0))
    before = jax.tree.leaves(state["net"])
    for _ in range(2):
        state, metrics = iteration(state)
    after = jax.tree.leaves(state["net"])
    assert np.isfinite(float(metrics["loss"])) and float(metrics["reward"]) >= 0
    assert all(a.shape == b.shape for a, b in zip(after, before, strict=True))
    assert any(not np.allclose(a, b) for a, b in zip(after, before, strict=True))
