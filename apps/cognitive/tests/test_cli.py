"""Tests of the cognitive-task app: the networks on every task, the CLI's outputs and
argument errors, the summary over seeds, a task of the user's own (the how-to's) through
the CLI and the analysis of its saved networks (run by `nox -s apps`)."""

from __future__ import annotations

import dataclasses
import doctest
import json
import re
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from nnx_ppo_cognitive import curves, outputs, plotting, summary, tasks
from nnx_ppo_cognitive.cli import EVAL_KEY, build_parser, main, parse_args
from nnx_ppo_cognitive.networks import make_ei_actor_critic, make_gru_actor_critic
from nnx_ppo_cognitive.outputs import load_trained, prepare_output_dir
from nnx_ppo_cognitive.summary import results_table, summarize
from nnx_ppo_cognitive.tasks import TASKS

from nnx_ppo.algorithms import evaluate_trials
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
        "gonogo": "GoNoGo", "dms": "DelayedMatchToSample", "wager": "PostDecisionWager",
        "rsg": "ReadySetGo",
    }  # fmt: skip
    envs = {name: spec.make(dt=DT) for name, spec in TASKS.items()}
    assert {name: type(env).__name__ for name, env in envs.items()} == expected
    assert envs["pdm-rt"].reaction_time and not envs["pdm"].reaction_time
    # The app judges each task by its own published criterion.
    assert envs["context"].criterion == (0.99, 0.85) and envs["romo"].criterion == (0.99, 0.97)


def test_wager_and_timing_records_hold_their_own_criteria():
    # Hand-built trials: the sure option on 2 of 3 wager trials at 0 %, never at 51.2 %;
    # waived trials all right, trials without the option at 51.2 % one in three.
    from nnx_ppo.algorithms.analysis import TrialResults

    wager = TrialResults(
        outcome=[2, 2, 1, 1, 1, 1, 1, 2, 1, 2, 1, 2], choice=[3, 3, 1, 1, 1, 1, 1, 2, 1, 2, 1, 2],
        answer=[1] * 12, decision_time=[1] * 12, reaction_time=[1] * 12,
        condition_index=[0] * 12, opt_out_action=3,
        condition={"wager": [1] * 6 + [0] * 6, "coherence": [0, 0, 0, 51.2, 51.2, 51.2] * 2},
    )  # fmt: skip
    record = {"seed": 4, **summary.task_scores(TASKS["wager"].make(dt=DT), wager)}
    assert record["wager"]["met"] and not record["wager"]["training_met"]
    assert record["criteria_met"] is False  # the seed's criterion needs both
    assert record["wager"]["by_coherence"]["p_sure"] == [2 / 3, 0.0]
    timing = TrialResults(
        outcome=[1, 1], choice=[1, 1], answer=[1, 1], decision_time=[1, 1],
        reaction_time=[800, 1400], condition_index=[0, 1],
        condition={"interval": [800, 1200], "target": [800, 1200]},
    )  # fmt: skip
    record["timing"] = summary.task_scores(TASKS["rsg"].make(dt=DT), timing)["timing"]
    assert record["timing"]["slope"] == 1.5 and record["timing"]["intercept_ms"] == -400
    lines = summary.task_score_lines([record])
    assert "seed 4: sure option on 0.333 of wager trials" in lines[0]
    assert "published criterion met" in lines[0]
    assert "slope 1.5 (gain 1)" in lines[1]
    assert summary.task_scores(TASKS["pdm"].make(dt=DT), wager) == {}


@pytest.mark.parametrize("module", [tasks, summary, plotting, curves, outputs])
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
    # A degenerate fit (bias outside the stimulus range) is marked and left out of the
    # median: the bias median is then seed 0's alone.
    records[2]["psychometric"] = {
        **fit,
        "bias": 57.0,
        "degenerate": True,
        "problems": ["bias 57 outside the range of x [-51.2, 51.2]"],
    }
    s = summarize(records)
    assert s["psychometric_bias"] == {"median": 1.0, "low": 1.0, "high": 1.0, "n": 1}
    rows = results_table({"seeds": records, "summary": s}).splitlines()
    assert rows[5] == "| psychometric bias | 1 [1, 1] | 1, n/a, 57* |"
    assert rows[-1] == ("\\* degenerate fit, left out of the median: seed 2: bias 57 "
                        "outside the range of x [-51.2, 51.2].")  # fmt: skip


TINY = [
    "--dt", "100", "--seeds", "0,1", "--steps", "1024", "--n-envs", "16",
    "--rollout-length", "32", "--n-minibatches", "2", "--n-epochs", "1", "--hidden", "16",
    "--trials-per-condition", "2",
]  # fmt: skip


def test_tiny_run_writes_every_output_with_the_documented_schema(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*TINY, "--task", "pdm-rt", "--output-dir", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert set(results) == {"task", "summary", "seeds", "wall_time_s", "trained_steps_per_seed",
                            "settings", "train_config", "provenance"}  # fmt: skip
    assert results["task"] == {
        "name": "pdm-rt", "class": "PerceptualDecisionMaking", "dt_ms": 100.0,
        "n_conditions": 12, "max_trial_steps": 28, "psychometric_variable": "signed_coherence",
        "choices": [1, 2], "reaction_time": True, "criteria": {"decision": 0.99, "correct": 0.8},
    }  # fmt: skip
    # 1024 steps = 2 iterations of 16 envs x 32 steps.
    assert results["trained_steps_per_seed"] == 1024
    assert results["train_config"]["ppo"]["reset_mode"] == "fresh"
    assert results["settings"]["seeds"] == [0, 1] and results["settings"]["steps"] == 1024
    assert results["settings"]["output_dir"] == str(out)
    assert results["wall_time_s"]["train"] > 0 and results["wall_time_s"]["evaluate"] > 0
    assert [r["seed"] for r in results["seeds"]] == [0, 1]
    for record in results["seeds"]:
        assert record["n_trials"] == 24  # 2 trials of each of the 12 conditions
        assert record["by_condition"]["n"] == [2] * 12  # every seed plays the same trials
        outcomes = record["outcomes"]
        assert sum(outcomes.values()) == 24 and outcomes["ongoing"] == 0
        # In this task every correct or wrong trial is a choice: the rates follow.
        assert record["decision_rate"] == (outcomes["correct"] + outcomes["wrong"]) / 24
        assert record["abort_rate"] == outcomes["aborted"] / 24
        met = record["decision_rate"] >= 0.99 and (record["accuracy"] or 0) >= 0.8
        assert record["criteria_met"] is met
        if record["psychometric"] is None:  # an untrained network may never choose
            assert "none of the 24 trials was decided" in record["psychometric_error"]
        else:
            assert {"bias", "slope", "lapse", "x", "n", "p", "degenerate"} <= set(
                record["psychometric"]
            )
            assert sum(record["psychometric"]["n"]) == outcomes["correct"] + outcomes["wrong"]
        # The reaction times: of the correct trials, per |coherence| too.
        rt = record["reaction_time"]
        assert rt["n"] == outcomes["correct"] == sum(rt["by_value"]["n"])
        assert rt["by_value"]["value"] == pytest.approx([0.0, 3.2, 6.4, 12.8, 25.6, 51.2])
        assert (rt["median_ms"] is None) is (rt["n"] == 0)
    s = results["summary"]
    assert s["criteria_met"] == {"seeds": sum(r["criteria_met"] for r in results["seeds"]),
                                 "of": 2}  # fmt: skip
    for name in ("decision_rate", "abort_rate", "accuracy", "psychometric_bias",
                 "reaction_time_ms"):  # fmt: skip
        interval = s[name]
        if interval["n"]:
            assert interval["low"] <= interval["median"] <= interval["high"]
    assert s["decision_rate"]["median"] == np.median([r["decision_rate"] for r in results["seeds"]])
    assert (out / "results.md").read_text() == results_table(results) + "\n"
    assert (out / "psychometric.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The chronometric figure needs a correct decision to draw.
    correct = sum(r["outcomes"]["correct"] for r in results["seeds"])
    assert (out / "chronometric.png").exists() is (correct > 0)
    # The training log: one line per seed per iteration (2 iterations of 512 steps).
    log = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert sorted((r["step"], r["run"]) for r in log) == [(512, 0), (512, 1), (1024, 0),
                                                         (1024, 1)]  # fmt: skip
    assert all("rollout/episode_reward" in r and r["throughput/sps"] > 0 for r in log)
    # The learning curves: the same records per seed and step, trial rates of env/*.
    rows = (out / "learning_curves.csv").read_text().splitlines()
    assert rows[0] == "step,seed,trial_reward,correct,abort" and len(rows) == 5
    by_key = {(r["step"], r["run"]): r for r in log}
    step, seed, reward, _, abort = rows[4].split(",")
    record = by_key[(int(step), [0, 1].index(int(seed)))]
    assert float(reward) == pytest.approx(record["rollout/episode_reward"], rel=1e-5)
    assert float(abort) == pytest.approx(record["env/abort"] / record["env/trial_end"], rel=1e-5)
    assert (out / "learning_curves.png").read_bytes()[:4] == b"\x89PNG"
    captured = capsys.readouterr()
    printed = captured.out
    assert "| decision_rate |" in printed and "psychometric.png" in printed
    assert "Reaction times of correct trials (ms from the stimulus onset):" in printed
    # Not a terminal: one plain line per --log-every (10) iterations, and the last one.
    progress = [line for line in printed.splitlines() if line.startswith("step ")]
    assert len(progress) == 1 and progress[0].startswith("step 1,024 of 1,024 (100%), iteration 2")
    # Besides, the trainer's own plain lines on stderr: the compilation with its
    # duration, then the step (1024 x 2 seeds), rate and elapsed time; no bar redrawn.
    err = captured.err
    assert "train_many (2 runs): compiling the training program ...\n" in err
    assert re.search(r"^train_many \(2 runs\): compiled in \d+\.\d s( \(.+\))?$", err, re.M), err
    last = re.findall(r"^train_many \(2 runs\): step .*$", err, re.M)[-1]
    assert re.fullmatch(
        r"train_many \(2 runs\): step 2\.05k/2\.05k \(100%\), [\d.]+k? steps/s, "
        r"(eval return \S+, )?elapsed \d\d:\d\d", last
    ), last  # fmt: skip
    assert "\r" not in err
    # The saved networks: seed 1 is run 1 of the checkpoint; loading it rebuilds the
    # task and the network, whose trials are those scored above.
    task, network = load_trained(out, seed=1)
    assert type(task).__name__ == "PerceptualDecisionMaking" and task.reaction_time
    again = evaluate_trials(task, network, trials_per_condition=2, key=jax.random.key(EVAL_KEY))
    assert again.outcome_counts == results["seeds"][1]["outcomes"]
    assert again.by_condition()["decision_rate"].tolist() == pytest.approx(
        results["seeds"][1]["by_condition"]["decision_rate"], nan_ok=True
    )
    _, network0 = load_trained(out)  # the first seed by default
    assert not all(np.array_equal(a, b) for a, b in zip(
        jax.tree.leaves(nnx.state(network0, nnx.Param)),
        jax.tree.leaves(nnx.state(network, nnx.Param)), strict=True))  # fmt: skip
    with pytest.raises(ValueError, match=r"seed=7 is not a seed of the run .* \[0, 1\]"):
        load_trained(out, seed=7)
    # The folder now holds a run: a second run into it is refused, one line, nothing
    # written; the message names the folder and the fixes.
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    assert main([*TINY, "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"nnx-ppo-cognitive: error: --output-dir {out} already holds files (a previous "
        "run's?); give a new folder, leave --output-dir out for a new timestamped one, or "
        "add --overwrite to replace the run's outputs in it"
    )
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before


def test_overwrite_replaces_only_the_apps_outputs_and_the_default_folder_is_new(tmp_path):
    out = tmp_path / "run"
    (out / "checkpoints" / "512").mkdir(parents=True)
    (out / "results.json").write_text("{}")
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="already holds files"):
        prepare_output_dir(out, overwrite=False)
    prepare_output_dir(out, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    with pytest.raises(ValueError, match=r"--output-dir .*notes.txt is a file"):
        prepare_output_dir(out / "notes.txt", overwrite=True)
    # Without --output-dir: a new folder named after the task, network and time; an
    # existing one of the same second gets a suffix.
    args = parse_args(["--task", "gonogo", "--network", "ei"])
    assert re.fullmatch(r"outputs/cognitive/gonogo-ei-\d{8}-\d{6}(-\d+)?", str(args.output_dir))
    when = outputs.datetime.datetime(2026, 1, 2, 3, 4, 5)
    (tmp_path / "pdm-gru-20260102-030405").mkdir()
    assert outputs.default_output_dir("pdm", "gru", when=when, root=tmp_path).name == (
        "pdm-gru-20260102-030405-2"
    )


HOW_TO = Path(__file__).parents[3] / "docs" / "how-to" / "own-cognitive-task.md"
_FENCE = re.compile(r"(<!-- docs-test: skip -->\s*\n)?```python[^\n]*\n(.*?)```", re.S)


def _how_to_blocks() -> list[str]:
    return [textwrap.dedent(code) for _, code in _FENCE.findall(HOW_TO.read_text())]


@pytest.fixture(scope="module")
def how_to_run(tmp_path_factory):
    """The how-to's task, saved as the user's ``my_tasks.py``, trained through the CLI
    from that folder (``--task my_tasks:AntiSaccade``): ``(folder, run folder)``."""
    folder = tmp_path_factory.mktemp("user")
    task_code = _how_to_blocks()[0]
    assert "class AntiSaccade(CognitiveTask)" in task_code
    assert len(task_code.strip().splitlines()) < 30  # the how-to's promise
    (folder / "my_tasks.py").write_text(task_code)
    out = folder / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)  # the user's folder: the CLI imports my_tasks from it
        patch.setattr(sys, "path", list(sys.path))
        patch.delitem(sys.modules, "my_tasks", raising=False)
        argv = [*TINY, "--task", "my_tasks:AntiSaccade", "--no-progress", "--output-dir", str(out)]
        assert main(argv) == 0
        sys.modules.pop("my_tasks", None)
    return folder, out


# Both marked extended: training the how-to's task compiles a PPO program of its own
# (15-25 s on 2 shared cores with an empty compilation cache, the analysis 9 s more);
# the default session trains pdm-rt (the tiny run above) and checks --task module:Class
# through its argument errors and `resolve_task`'s docstring example.
@pytest.mark.extended
def test_the_how_tos_task_trains_through_the_cli(how_to_run):
    _, out = how_to_run
    results = json.loads((out / "results.json").read_text())
    assert results["task"]["name"] == "my_tasks:AntiSaccade"
    assert results["task"]["class"] == "AntiSaccade" and results["task"]["n_conditions"] == 4
    assert results["trained_steps_per_seed"] == 1024
    assert [r["n_trials"] for r in results["seeds"]] == [8, 8]  # 2 trials x 4 conditions
    assert all(r["by_condition"]["n"] == [2] * 4 for r in results["seeds"])
    assert (out / "checkpoints").is_dir() and (out / "psychometric.png").exists()


@pytest.mark.extended
def test_the_how_tos_trained_networks_feed_its_analysis(how_to_run, monkeypatch):
    folder, out = how_to_run
    monkeypatch.chdir(folder)  # load_trained imports my_tasks again, from the user's folder
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "my_tasks", raising=False)
    # The how-to's analysis block, verbatim but for the run's folder.
    code, n = re.subn(r'run = "[^"]+"', f"run = {str(out)!r}", _how_to_blocks()[-1])
    assert n == 1
    namespace: dict = {"__name__": "how_to_analysis"}
    exec(compile(code, f"{HOW_TO.name}[analysis]", "exec"), namespace)
    trials, found = namespace["trials"], namespace["found"]
    assert type(namespace["task"]).__name__ == "AntiSaccade"
    assert trials.n_trials == 200 and trials.activations is not None  # 50 x 4 conditions
    T = namespace["task"].max_trial_steps
    assert namespace["trajectories"].shape == (4, T, 3)
    assert namespace["F"].size == 16  # the actor GRU's units
    assert len(found.stable) == len(found)
    sys.modules.pop("my_tasks", None)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--task", "mante"], "argument --task: invalid choice: 'mante'"),
        (["--task", "no_such_module:Task"], "no module named 'no_such_module' in the current"),
        (["--task", "json:loads"], "json.loads is a function, not a subclass of"),
        (["--task", "nnx_ppo.envs.cognitive:Nope"], "has no 'Nope'; its task classes: "),
        (["--network", "lstm"], "argument --network: invalid choice: 'lstm'"),
        (["--seeds", "0,0"], "argument --seeds: '0,0' repeats a seed"),
        (["--seeds", "0,x"], "argument --seeds: 'x' is not an integer"),
        (["--seeds", "-1"], "argument --seeds: -1 must be >= 0"),
        (["--dt", "0"], "argument --dt: 0.0 must be positive"),
        (["--steps", "0"], "argument --steps: 0 must be positive"),
        (["--discount", "1.5"], "argument --discount: 1.5 must be in (0, 1]"),
        (["--choices", "2"], "argument --choices: '2' is not two actions; give e.g. 1,2"),
        (["--choices", "2,2"], "argument --choices: '2,2' names one action twice"),
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
    assert "module:Class" in text and "(default: 0.05)" in text


def test_every_option_has_help_and_the_readme_states_the_defaults_of_help():
    actions = [a for a in build_parser()._actions if a.option_strings != ["-h", "--help"]]
    assert all(a.help and len(a.help) > 10 for a in actions), [
        a.option_strings for a in actions if not a.help
    ]
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    rows = dict(re.findall(r"^\| `(--[a-z-]+)` \| ([^|]+) \|", readme, re.M))
    for action in actions:
        (option,) = [o for o in action.option_strings if o.startswith("--")]
        assert option in rows, f"{option} is missing from the README's options table"
        default = action.default
        if default is None:  # made at run time: the README says what it means
            continue
        if isinstance(default, bool):
            shown = "on" if default else "off"
        elif isinstance(default, list):
            shown = "`" + ",".join(map(str, default)) + "`"
        elif isinstance(default, float):
            shown = f"`{default:g}`"
        else:
            shown = f"`{default}`"
        assert rows[option].strip() == shown, (option, rows[option], shown)
    assert len(rows) == len(actions)


def test_choices_outside_the_tasks_actions_are_refused_before_anything_is_written(tmp_path, capsys):
    assert main(["--task", "gonogo", "--choices", "1,2", "--output-dir", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err.strip() == (
        "nnx-ppo-cognitive: error: --choices 1,2: --task gonogo has the actions 0 fixate, "
        "1 go; give two of them (0 meaning withheld to the end)"
    )
    assert not (tmp_path / "x").exists()


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
