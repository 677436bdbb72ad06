"""Tests of the memory-task app: what each network can remember, the CLI, the committed
results (run by `nox -s apps`)."""

from __future__ import annotations

import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from nnx_ppo_apps_common.results import readme_results
from nnx_ppo_memory_task.cli import main
from nnx_ppo_memory_task.networks import NETWORKS, make_graph, make_network
from nnx_ppo_memory_task.plotting import results_table

APP = Path(__file__).resolve().parents[1]


def _mean_actions(kind: str, cues: list[float]) -> list[float]:
    """The deterministic (eval-mode) action at each step for one env fed ``cues``."""
    net = make_network(kind, delay=2, hidden=8, seed=1)
    net.eval()
    state = net.initialize_state(1)
    actions = []
    for cue in cues:
        out = net(state, jnp.full((1, 1), cue))
        state = out.next_state
        actions.append(float(out.output.actions[0, 0]))
    return actions


@pytest.mark.parametrize("kind", NETWORKS)
def test_only_the_stateful_networks_remember_the_cue_of_two_steps_ago(kind):
    # Two cue sequences that differ only at t = 0. The action at t = 2 must reproduce
    # o_0, so a network that can solve the task acts differently there; the MLP sees
    # the same cue (+1) at t = 2 in both and must act the same.
    a = _mean_actions(kind, [1.0, 1.0, 1.0])
    b = _mean_actions(kind, [-1.0, 1.0, 1.0])
    if kind == "mlp":
        assert a[1:] == b[1:]
    else:
        assert abs(a[2] - b[2]) > 1e-6
    if kind == "delay":
        # Delay(2) outputs zeros at t = 0 and 1 whatever the cue, o_0 only at t = 2.
        assert a[:2] == b[:2] and a[0] == a[1]


def test_the_graph_has_a_delayed_self_loop_and_nothing_else_recurrent():
    import flax.nnx as nnx

    g = make_graph(cue_size=3, hidden=5, rngs=nnx.Rngs(0))
    delayed = [(c.src, c.dst, c.delay) for c in g.connections if c.delay > 0]
    assert delayed == [("hidden", "hidden", 1)]
    assert g.initialize_state(4)["buffers"]["hidden"].shape == (4, 1, 5)


def test_unknown_network_lists_the_choices():
    with pytest.raises(ValueError, match="valid choices: mlp, lstm, delay, graph"):
        make_network("gru")


def test_results_table_from_hand_made_results():
    results = {
        "optimum": 18.0,
        "runs": {
            "mlp": {
                "seeds": [0, 1],
                "steps": [0, 10],
                "returns": [[0.5, -1.0], [0.0, 2.0]],
                "wall_time_s": [3.0, 5.0],
            },
        },
    }
    # final = mean(-1, 2) = 0.5; best of the per-step means (0.25, 0.5) = 0.5; time 4 s.
    assert results_table(results).splitlines()[-1] == (
        "| MLP (no memory) | 0.5 | -1.0, 2.0 | 0.5 | 4 s |"
    )


def test_tiny_run_writes_results_and_figure(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["--networks", "mlp", "graph", "--steps", "160", "--n-envs", "8",
            "--rollout-length", "10", "--n-minibatches", "2", "--n-epochs", "1",
            "--eval-every", "80", "--eval-envs", "4", "--hidden", "4", "--no-progress",
            "--output-dir", str(out)]  # fmt: skip
    assert main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    assert list(results["runs"]) == ["mlp", "graph"]
    assert results["optimum"] == 18.0  # 20-step episodes, delay 2
    for run in results["runs"].values():
        # Evaluations before training, after 80 steps and at the end (2 iterations).
        assert run["steps"] == [0, 80, 160]
        # |reward| <= 1 per step and the first 2 steps score nothing: |return| <= 18.
        assert all(abs(r) <= 18.0 for r in run["returns"][0])
    assert (out / "learning_curves.png").stat().st_size > 0
    assert (out / "results.md").read_text().strip() == results_table(results)
    assert "PopulationGraph (delayed self-loop)" in capsys.readouterr().out


def test_bad_settings_are_one_line_errors(tmp_path, capsys):
    assert main(["--delay", "20", "--output-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--episode-length 20" in err
    with pytest.raises(SystemExit):
        main(["--networks", "transformer"])
    assert "invalid choice: 'transformer'" in capsys.readouterr().err


def test_readme_shows_the_committed_results():
    results = json.loads((APP / "docs" / "results.json").read_text())
    assert readme_results((APP / "README.md").read_text()) == results_table(results)
    # The committed run shows the point of the app: the MLP fails, the others succeed.
    finals = {k: np.mean([r[-1] for r in v["returns"]]) for k, v in results["runs"].items()}
    assert abs(finals["mlp"]) < 2
    assert all(finals[k] > 0.9 * results["optimum"] for k in ("lstm", "delay", "graph"))
    assert (APP / "docs" / "learning_curves.png").stat().st_size > 0


@pytest.mark.extended
def test_fixed_points_script_writes_figures_and_summary(tmp_path):
    from nnx_ppo_memory_task.fixed_points import main as fixed_points

    args = ["--steps", "1000", "--episode-length", "10", "--hidden", "4", "--starts", "8"]
    assert fixed_points([*args, "--cue-size", "1", "--output-dir", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["values_to_hold"] == 2 and -1.0 <= summary["score"] <= 1.0
    assert summary["fixed_points"] >= summary["attractors"] == len(summary["attractor_outputs"])
    assert len(summary["unstable_dimensions"]) == summary["fixed_points"]
    for name in ("pca_fixed_points.png", "activity.png"):
        assert (tmp_path / name).stat().st_size > 5000
