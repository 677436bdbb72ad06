"""The published-number benchmarks: the T-Maze, the hyperparameter translation, the
networks and one tiny end-to-end run of the command."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest
from flax import nnx
from nnx_ppo_benchmarks.published.cli import main
from nnx_ppo_benchmarks.published.run import build_network, make_config, make_envs
from nnx_ppo_benchmarks.published.tasks import BENCHMARKS, FAMILIES
from nnx_ppo_benchmarks.published.tmaze import TMaze

NORTH, SOUTH, EAST, WEST = 0, 1, 2, 3


def test_tmaze_optimum_and_memoryless_value(play_tmaze):
    env = TMaze()
    walk = [EAST] * 6
    # Optimal: walk to the junction (cell 6) and turn to the cued side.
    assert play_tmaze(env, 0, [*walk, NORTH])[1:] == (4.0, True)
    assert play_tmaze(env, 1, [*walk, SOUTH])[1:] == (4.0, True)
    # A memoryless policy acts the same at the junction whatever the cue: 1.95 on average.
    always_north = [play_tmaze(env, g, [*walk, NORTH])[1] for g in (0, 1)]
    assert always_north == pytest.approx([4.0, -0.1])
    assert np.mean(always_north) == pytest.approx(1.95)


def test_tmaze_observations_walls_and_turns_in_the_corridor(play_tmaze):
    env = TMaze()
    seen, total, done = play_tmaze(env, 1, [WEST, NORTH, SOUTH, EAST, EAST, EAST, EAST, EAST, EAST])
    assert not done and total == 0.0
    # Start with the goal south: the cue; a west step at the wall and turns in the
    # corridor do not move (the start is still shown), then 6 steps east to the junction.
    np.testing.assert_array_equal(seen[0], [1, 1, 0, 0])
    np.testing.assert_array_equal(seen[3], [1, 1, 0, 0])
    np.testing.assert_array_equal(seen[4], [0, 1, 0, 0])
    np.testing.assert_array_equal(seen[-1], [0, 0, 1, 0])
    # POBAX's quirk: a start with the goal north looks like the corridor.
    np.testing.assert_array_equal(play_tmaze(env, 0, [])[0][0], [0, 1, 0, 0])
    with pytest.raises(ValueError, match="hallway_length"):
        TMaze(hallway_length=0)


# The published settings (zoo hyperparams/ppo_lstm.yml; POBAX's PPOHyperparams): envs,
# steps per env per rollout, minibatch size in steps, epochs.
_PUBLISHED_SIZES = {
    "cartpole_novel": (8, 32, 256, 20),
    "pendulum_novel": (4, 1024, 128, 10),
    "mountaincar_novel": (8, 1024, 256, 10),
    "tmaze": (4, 128, 128, 4),
    "pixel_tmaze": (4, 128, 128, 4),  # POBAX's, re-split as 16 envs x 32 steps
}


@pytest.mark.parametrize("name", list(BENCHMARKS))
def test_translation_keeps_the_published_batch_sizes(name):
    n_envs, n_steps, batch, epochs = _PUBLISHED_SIZES[name]
    ppo = make_config(BENCHMARKS[name], BENCHMARKS[name].total_steps, 4).ppo
    per_iteration = ppo.n_envs * ppo.rollout_length
    assert per_iteration == n_envs * n_steps
    assert per_iteration // ppo.n_minibatches == batch
    assert ppo.n_epochs == epochs
    # The published budget rounded up to whole rollouts (as SB3 rounds it), in whole
    # device calls, so the trainer does not round it further.
    assert ppo.total_steps >= BENCHMARKS[name].total_steps > ppo.total_steps - per_iteration
    assert ppo.total_steps % (per_iteration * ppo.iterations_per_call) == 0


def test_linear_decay_reaches_zero_at_the_last_update():
    ppo = make_config(BENCHMARKS["cartpole_novel"], 2560, 4).ppo
    updates = ppo.total_steps // (ppo.n_envs * ppo.rollout_length) * ppo.n_epochs
    assert float(ppo.learning_rate(0)) == pytest.approx(1e-3)
    assert float(ppo.learning_rate(updates)) == 0.0
    assert make_config(BENCHMARKS["pendulum_novel"], 4096, 4).ppo.learning_rate == 1e-3


@pytest.mark.parametrize("name", ["cartpole_novel", "mountaincar_novel"])
def test_every_family_steps_on_the_masked_environment(name):
    # One discrete and one continuous benchmark (the others differ in sizes only).
    env, eval_env = make_envs(BENCHMARKS[name])
    state = jax.vmap(env.reset)(jax.random.split(jax.random.key(0), 3))
    expected = BENCHMARKS[name].keep
    # Training episodes start staggered; evaluations play whole episodes.
    assert env.stagger == BENCHMARKS[name].episode_length // 2
    assert eval_env.stagger == 0
    assert env.observation_size == (4 if expected is None else len(expected))
    for family in FAMILIES:
        net = build_network(
            BENCHMARKS[name], family, env.observation_size, env.action_size, nnx.Rngs(0)
        )
        out = net(net.initialize_state(3), state.obs).output
        assert out.value_estimates.shape == (3,)
        discrete = BENCHMARKS[name].discrete
        assert out.actions.shape == ((3,) if discrete else (3, env.action_size))
    with pytest.raises(ValueError, match="family='rnn'"):
        build_network(BENCHMARKS[name], "rnn", 2, 1, nnx.Rngs(0))


def test_command_trains_reports_and_keeps_finished_cells(tmp_path, capsys):
    args = ["--benchmarks", "cartpole_novel", "--families", "mlp", "--seeds", "0,1"]
    args += ["--steps", "256", "--output-dir", str(tmp_path)]
    assert main(args) == 0
    cell = json.loads((tmp_path / "cells" / "cartpole_novel__mlp.json").read_text())
    assert [r["seed"] for r in cell["runs"]] == [0, 1]
    assert all(0 < r["final"] <= 500 for r in cell["runs"])
    report = (tmp_path / "report.md").read_text()
    assert "CartPoleNoVel-v1" in report and "| mlp | 2 | 256 |" in report
    assert "500 ± 0 (RecurrentPPO" in report
    assert (tmp_path / "curves.png").stat().st_size > 0
    capsys.readouterr()
    assert main(args) == 0
    assert "finished earlier, kept" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="--steps=0"):
        main([*args[:-4], "--steps", "0", "--output-dir", str(tmp_path)])


def test_report_gives_rliable_iqm_and_probability_of_improvement(tmp_path):
    from nnx_ppo_benchmarks.published.report import write_report

    (tmp_path / "cells").mkdir()
    for family, finals in (("lstm", [500.0, 480.0, 490.0, 100.0, 495.0]), ("mlp", [90.0, 490.0])):
        runs = [{"final": f, "total_steps": 100, "curve": [[0, 0.0], [100, f]]} for f in finals]
        cell = {"benchmark": "cartpole_novel", "family": family, "runs": runs, "wall_s": 1.0}
        (tmp_path / "cells" / f"cartpole_novel__{family}.json").write_text(json.dumps(cell))
    report = write_report(tmp_path).read_text()
    # lstm: 5 seeds, floor(5 / 4) = 1 trimmed at each end (100 and 500): mean(480, 490,
    # 495) = 488.33. mlp: 2 seeds, none trimmed: 290.
    assert "| 1 s | 488.33 [" in report and "| reference |" in report
    assert "| 1 s | 290.00 [" in report
    # P(mlp > lstm) over the 10 seed pairs: 90 beats none; 490 beats 480 and 100 and ties
    # 490 (2.5): 2.5 / 10.
    assert "| 0.25 |" in report
