"""Tests of the cognitive-task app: the networks on every task, the CLI's outputs and
argument errors, the summary over seeds (run by `nox -s apps`)."""

from __future__ import annotations

import dataclasses
import doctest
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from nnx_ppo_cognitive import plotting, summary, tasks
from nnx_ppo_cognitive.cli import main
from nnx_ppo_cognitive.networks import make_ei_actor_critic, make_gru_actor_critic
from nnx_ppo_cognitive.summary import results_table, summarize
from nnx_ppo_cognitive.tasks import TASKS

from nnx_ppo.algorithms.core.checks import check_env_network

DT = 100.0  # short trials: every task builds and steps fast


def _network(kind: str, env, seed: int = 0):
    if kind == "gru":
        return make_gru_actor_critic(
            env.observation_size, env.action_size, rngs=nnx.Rngs(seed), hidden=8
        )
    return make_ei_actor_critic(
        env.observation_size, env.action_size, rngs=nnx.Rngs(seed), n_units=10, dt_ms=DT
    )


@pytest.mark.parametrize("kind", ["gru", "ei"])
@pytest.mark.parametrize("task", list(TASKS))
def test_both_networks_drive_every_task_with_one_logit_per_action(task, kind):
    env = TASKS[task].make(dt=DT)
    net = _network(kind, env)
    check_env_network(env, net)  # one batched reset, network call and env step traced
    # Untrained logits are near zero, so 512 draws of N roughly equiprobable actions
    # show every action 0..N-1 and nothing else: the sampler has exactly N logits.
    batch = 512
    state = net.initialize_state(batch)
    shapes = jax.tree.map(jnp.shape, state)
    obs = jax.random.uniform(jax.random.key(0), (batch, env.observation_size))
    for _ in range(2):  # the recurrent state keeps its shapes from step to step
        out = net(state, obs)
        state = out.next_state
        assert jax.tree.map(jnp.shape, state) == shapes
    actions = np.asarray(out.output.actions)
    assert actions.shape == (batch,) and actions.dtype == np.int32
    assert set(np.unique(actions).tolist()) == set(range(env.action_size))
    assert np.all(np.asarray(out.output.loglikelihoods) <= 0)


def test_tasks_build_their_classes_and_gonogo_needs_no_decision_rate():
    expected = {
        "pdm": "PerceptualDecisionMaking", "pdm-rt": "PerceptualDecisionMaking",
        "context": "ContextDependentIntegration", "romo": "ParametricWorkingMemory",
        "multisensory": "MultisensoryIntegration", "economic": "EconomicChoice",
        "gonogo": "GoNoGo", "dms": "DelayedMatchToSample",
    }  # fmt: skip
    envs = {name: spec.make(dt=DT) for name, spec in TASKS.items()}
    assert {name: type(env).__name__ for name, env in envs.items()} == expected
    assert envs["pdm-rt"].reaction_time and not envs["pdm"].reaction_time
    # The app judges each task by its own published criterion.
    assert envs["context"].criterion == (0.99, 0.85) and envs["romo"].criterion == (0.99, 0.97)


@pytest.mark.parametrize("module", [tasks, summary, plotting])
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


def test_summary_of_hand_made_seeds():
    fit = {"bias": 1.0, "slope": 0.5, "lapse": 0.0}
    records = [
        {"seed": 0, "decision_rate": 1.0, "abort_rate": 0.0, "accuracy": 0.9,
         "criteria_met": True, "psychometric": fit},
        {"seed": 1, "decision_rate": 0.2, "abort_rate": 0.8, "accuracy": None,
         "criteria_met": False, "psychometric": None},
        {"seed": 2, "decision_rate": 0.6, "abort_rate": 0.1, "accuracy": 0.5,
         "criteria_met": False, "psychometric": {**fit, "bias": 3.0}},
    ]  # fmt: skip
    s = summarize(records)
    # Median of (1.0, 0.2, 0.6) is 0.6; resamples of three values span min..max.
    assert s["decision_rate"] == {"median": 0.6, "low": 0.2, "high": 1.0, "n": 3}
    # accuracy and the fit skip the seed without a number: median of (0.9, 0.5) = 0.7.
    assert s["accuracy"]["median"] == pytest.approx(0.7) and s["accuracy"]["n"] == 2
    assert s["psychometric_bias"]["median"] == 2.0 and s["psychometric_slope"]["low"] == 0.5
    assert s["criteria_met"] == {"seeds": 1, "of": 3}
    rows = results_table({"seeds": records, "summary": s}).splitlines()
    assert rows[4] == "| accuracy | 0.7 [0.5, 0.9] | 0.9, n/a, 0.5 |"
    assert rows[-1] == "| criteria met | 1 of 3 seeds | yes, no, no |"


TINY = [
    "--task", "pdm", "--dt", "100", "--seeds", "0,1", "--steps", "1024", "--n-envs", "16",
    "--rollout-length", "32", "--n-minibatches", "2", "--n-epochs", "1", "--hidden", "16",
    "--trials-per-condition", "2", "--no-progress",
]  # fmt: skip


def test_tiny_run_writes_every_output_with_the_documented_schema(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*TINY, "--output-dir", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert set(results) == {"task", "summary", "seeds", "wall_time_s", "trained_steps_per_seed",
                            "settings", "train_config", "provenance"}  # fmt: skip
    assert results["task"] == {
        "name": "pdm", "class": "PerceptualDecisionMaking", "dt_ms": 100.0,
        "n_conditions": 10, "max_trial_steps": 28, "psychometric_variable": "signed_coherence",
        "criteria": {"decision": 0.99, "correct": 0.8},
    }  # fmt: skip
    # 1024 steps = 2 iterations of 16 envs x 32 steps.
    assert results["trained_steps_per_seed"] == 1024
    assert results["train_config"]["ppo"]["reset_mode"] == "fresh"
    assert results["settings"]["seeds"] == [0, 1] and results["settings"]["steps"] == 1024
    assert results["wall_time_s"]["train"] > 0 and results["wall_time_s"]["evaluate"] > 0
    assert [r["seed"] for r in results["seeds"]] == [0, 1]
    for record in results["seeds"]:
        assert record["n_trials"] == 20  # 2 trials of each of the 10 conditions
        assert record["by_condition"]["n"] == [2] * 10  # every seed plays the same trials
        outcomes = record["outcomes"]
        assert sum(outcomes.values()) == 20 and outcomes["ongoing"] == 0
        # In this task every correct or wrong trial is a choice: the rates follow.
        assert record["decision_rate"] == (outcomes["correct"] + outcomes["wrong"]) / 20
        assert record["abort_rate"] == outcomes["aborted"] / 20
        met = record["decision_rate"] >= 0.99 and (record["accuracy"] or 0) >= 0.8
        assert record["criteria_met"] is met
        if record["psychometric"] is None:  # an untrained network may never choose
            assert "none of the 20 trials was decided" in record["psychometric_error"]
        else:
            assert {"bias", "slope", "lapse", "x", "n", "p"} <= set(record["psychometric"])
            assert sum(record["psychometric"]["n"]) == outcomes["correct"] + outcomes["wrong"]
    s = results["summary"]
    assert s["criteria_met"] == {"seeds": sum(r["criteria_met"] for r in results["seeds"]),
                                 "of": 2}  # fmt: skip
    for name in ("decision_rate", "abort_rate", "accuracy", "psychometric_bias"):
        interval = s[name]
        if interval["n"]:
            assert interval["low"] <= interval["median"] <= interval["high"]
    assert s["decision_rate"]["median"] == np.median([r["decision_rate"] for r in results["seeds"]])
    assert (out / "results.md").read_text() == results_table(results) + "\n"
    assert (out / "psychometric.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The training log: one line per seed per iteration (2 iterations of 512 steps).
    log = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert sorted((r["step"], r["run"]) for r in log) == [(512, 0), (512, 1), (1024, 0),
                                                         (1024, 1)]  # fmt: skip
    assert all("rollout/episode_reward" in r and r["throughput/sps"] > 0 for r in log)
    printed = capsys.readouterr().out
    assert "| decision_rate |" in printed and "psychometric.png" in printed


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--task", "mante"], "argument --task: invalid choice: 'mante'"),
        (["--network", "lstm"], "argument --network: invalid choice: 'lstm'"),
        (["--seeds", "0,0"], "argument --seeds: '0,0' repeats a seed"),
        (["--seeds", "0,x"], "argument --seeds: 'x' is not an integer"),
        (["--seeds", "-1"], "argument --seeds: -1 must be >= 0"),
        (["--dt", "0"], "argument --dt: 0.0 must be positive"),
        (["--steps", "0"], "argument --steps: 0 must be positive"),
        (["--discount", "1.5"], "argument --discount: 1.5 must be in (0, 1]"),
        (["--n-envs", "100", "--n-minibatches", "8"], "--n-envs 100 is not a multiple of"),
        (["--network", "ei", "--dt", "200"], "--dt 200 is above --tau 100"),
    ],
)
def test_bad_arguments_are_usage_errors_naming_the_argument(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_help_lists_every_task_and_network(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps the lines
    assert all(name in text for name in TASKS)
    assert "80 % excitatory" in text and "(default: 0.99)" in text


def test_a_task_refusing_its_dt_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    def refuse(*, dt):
        raise ValueError(f"dt={dt} is too coarse for the stimulus")

    monkeypatch.setitem(TASKS, "pdm", dataclasses.replace(TASKS["pdm"], build=refuse))
    assert main(["--dt", "5000", "--output-dir", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "nnx-ppo-cognitive: error: --task pdm --dt 5000: dt=5000.0 is too coarse for the stimulus"
    )
    assert not (tmp_path / "x").exists()  # nothing written before the settings hold
