"""The Optuna search driver (`run_search`): rounds of trials as one `train_many` program each,
told back to the study, resumed after a stop or a kill; bad input fails before a trial
is asked."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

optuna = pytest.importorskip(
    "optuna", reason="the search driver needs Optuna: pip install 'nnx-ppo-train[search]'"
)

from optuna.distributions import (  # noqa: E402
    CategoricalDistribution,
    FloatDistribution,
)

from nnx_ppo.algorithms.config import EvalConfig, PPOConfig, TrainConfig  # noqa: E402
from nnx_ppo.algorithms.sweeps.search import (  # noqa: E402
    SearchResult,
    _fingerprint,
    final_return,
    run_search,
)
from nnx_ppo.envs import PointMass  # noqa: E402
from nnx_ppo.networks.factories import make_mlp_actor_critic  # noqa: E402
from nnx_ppo.wrappers import EpisodeWrapper  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.WARNING)

ENV = EpisodeWrapper(PointMass(), episode_length=6)
# 4 envs x 5 steps = 20 env steps per iteration, 2 iterations (one per device call).
CONFIG = TrainConfig(
    ppo=PPOConfig(n_envs=4, rollout_length=5, n_minibatches=2, n_epochs=1, total_steps=40),
    eval=EvalConfig(n_envs=2, max_episode_length=6),
)
SPACE = {
    "learning_rate": FloatDistribution(1e-4, 1e-2, log=True),
    "clip_range": FloatDistribution(0.1, 0.3),
}


def mlp(rngs):
    return make_mlp_actor_critic(2, 2, (8,), (8,), rngs=rngs)


def study_at(path: Path, direction: str = "maximize") -> optuna.Study:
    return optuna.create_study(
        study_name="test",
        storage=f"sqlite:///{path / 'study.db'}",
        direction=direction,
        load_if_exists=True,
        sampler=optuna.samplers.RandomSampler(seed=0),
    )


def by_round(study: optuna.Study) -> dict[int, list[optuna.trial.FrozenTrial]]:
    rounds: dict[int, list[optuna.trial.FrozenTrial]] = {}
    for trial in study.get_trials():
        rounds.setdefault(trial.user_attrs["nnx_ppo.round"], []).append(trial)
    return rounds


def final_evaluations(folder: Path, n_runs: int) -> list[float]:
    """The last ``eval/episode_reward/mean`` of each run in a round's log."""
    last = [float("nan")] * n_runs
    for line in (folder / "log.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "eval/episode_reward/mean" in record:
            last[record["run"]] = record["eval/episode_reward/mean"]
    return last


def evaluation_steps(folder: Path, run: int = 0) -> list[int]:
    """The steps at which run ``run`` of a round logged an evaluation."""
    return [
        json.loads(line)["step"]
        for line in (folder / "log.jsonl").read_text().splitlines()
        if "eval/episode_reward/mean" in line and json.loads(line)["run"] == run
    ]


def check_finished(study: optuna.Study, directory: Path, k: int, n_seeds: int) -> None:
    """2 rounds of ``k`` trials, each told the mean over its ``n_seeds`` runs (trial
    ``i``'s are runs ``i * n_seeds ...``) of the final evaluations its round's log holds."""
    rounds = by_round(study)
    assert sorted(rounds) == [0, 1]
    for r, trials in rounds.items():
        assert len(trials) == k
        assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
        trials.sort(key=lambda t: t.user_attrs["nnx_ppo.slot"])
        logged = final_evaluations(directory / f"round_{r:04d}", k * n_seeds)
        means = np.reshape(logged, (k, n_seeds)).mean(axis=1)
        np.testing.assert_allclose([t.value for t in trials], means, rtol=1e-6)
        results = json.loads((directory / f"round_{r:04d}" / "results.json").read_text())
        assert [row["trial"] for row in results["trials"]] == [t.number for t in trials]
        assert [row["params"] for row in results["trials"]] == [t.params for t in trials]


# --------------------------------------------------------------------------- refused early


def test_a_field_that_cannot_be_searched_is_refused_before_a_trial_is_asked(tmp_path):
    study = study_at(tmp_path)
    wrong = {"n_envs": CategoricalDistribution([4, 8])}
    with pytest.raises(ValueError, match=r"space\['n_envs'\] cannot differ.*learning_rate"):
        run_search(study, ENV, mlp, CONFIG, wrong, rounds=1, runs_per_round=2, directory=tmp_path)
    typo = {"learning_rte": FloatDistribution(1e-4, 1e-2)}
    with pytest.raises(ValueError, match=r"space\['learning_rte'\] is not a PPOConfig field"):
        run_search(study, ENV, mlp, CONFIG, typo, rounds=1, runs_per_round=2, directory=tmp_path)
    negative = {"clip_range": FloatDistribution(-0.1, 0.3)}
    with pytest.raises(ValueError, match=r"space\['clip_range'\].*refuses"):
        run_search(
            study, ENV, mlp, CONFIG, negative, rounds=1, runs_per_round=2, directory=tmp_path
        )
    with pytest.raises(TypeError, match="sets checkpoint itself"):
        run_search(
            study, ENV, mlp, CONFIG, SPACE, rounds=1, runs_per_round=2, directory=tmp_path,
            checkpoint=None,
        )  # fmt: skip
    (tmp_path / "min").mkdir()
    minimizing = study_at(tmp_path / "min", direction="minimize")
    with pytest.raises(ValueError, match="direction='maximize'"):
        run_search(
            minimizing, ENV, mlp, CONFIG, SPACE, rounds=1, runs_per_round=2, directory=tmp_path
        )
    with pytest.raises(ValueError, match=r"runs_per_round=0 must be >= 1"):
        run_search(study, ENV, mlp, CONFIG, SPACE, rounds=1, runs_per_round=0, directory=tmp_path)
    with pytest.raises(TypeError, match=r"rounds='2' must be an int"):
        run_search(study, ENV, mlp, CONFIG, SPACE, rounds="2", runs_per_round=2, directory=tmp_path)
    silent = TrainConfig(ppo=CONFIG.ppo, eval=EvalConfig(enabled=False))
    with pytest.raises(ValueError, match=r"config.eval.enabled=False"):
        run_search(study, ENV, mlp, silent, SPACE, rounds=1, runs_per_round=2, directory=tmp_path)
    assert study.get_trials() == []
    assert not any(tmp_path.glob("round_*"))


def test_a_study_of_another_search_is_refused(tmp_path):
    study = study_at(tmp_path)
    # What a search of 4 trials a round with the default objective records before asking.
    study.set_user_attr("nnx_ppo.search", _fingerprint(CONFIG, SPACE, [0], 4, final_return))
    arguments = (study, ENV, mlp, CONFIG, SPACE)
    with pytest.raises(ValueError, match=r"another runs_per_round; continue it with the same"):
        run_search(*arguments, rounds=1, runs_per_round=2, directory=tmp_path)
    with pytest.raises(ValueError, match=r"another objective; continue it with the same"):
        run_search(
            *arguments, rounds=1, runs_per_round=4, directory=tmp_path,
            objective=lambda result, run: 0.0,
        )  # fmt: skip
    assert study.get_trials() == []


# --------------------------------------------------------------------------- rounds and resume


def test_two_rounds_stopped_inside_the_second_resume_from_its_checkpoint(tmp_path):
    """Round 0 trains and is told; the stop request ends round 1 after its first call
    (a checkpoint at step 20, its 2 trials asked but not told). The same call again
    resumes round 1 from that checkpoint with the same trials and tells them. Two seeds
    per trial: 4 runs a round, each trial told the mean of its two."""
    calls = []

    def stop():  # asked before each new round and after every device call but a
        calls.append(None)  # program's last: before round 0, its first call, before
        return len(calls) == 4  # round 1, then round 1's first call

    study = study_at(tmp_path)
    arguments = (study, ENV, mlp, CONFIG, SPACE)
    options = dict(rounds=2, runs_per_round=2, seeds=(0, 1), directory=tmp_path, progress=False)
    first = run_search(*arguments, stop=stop, **options)
    assert first == SearchResult(study, rounds_done=1, stopped=True)
    rounds = by_round(study)
    assert [t.state for t in rounds[1]] == [optuna.trial.TrialState.RUNNING] * 2
    asked = {t.number: t.params for t in rounds[1]}
    assert len({json.dumps(p, sort_keys=True) for p in asked.values()}) == 2  # 2 proposals
    assert (tmp_path / "round_0001" / "checkpoints" / "20").is_dir()

    again = run_search(*arguments, **options)
    assert again == SearchResult(study, rounds_done=2, stopped=False)
    assert len(study.get_trials()) == 4  # nothing asked again
    assert {t.number: t.params for t in by_round(study)[1]} == asked
    check_finished(study, tmp_path, k=2, n_seeds=2)
    # The resumed round's log: the attempt's evaluation at step 0 and the final one.
    assert evaluation_steps(tmp_path / "round_0001") == [0, 40]
    # A finished search has nothing left to do: no trial asked, nothing trained.
    done = run_search(*arguments, **options)
    assert done.rounds_done == 2 and len(study.get_trials()) == 4
    assert done.best_params == study.best_params


@pytest.mark.extended
def test_a_diverging_trial_fails_its_round_and_the_search_goes_on(tmp_path, capsys):
    """Trial 0's learning rate (1e30, enqueued) drives its parameters to inf: the round's
    program stops with a NonFiniteError, both of its trials fail (the culprit named as
    diverged), and round 1 trains and is told. Each told round is a line on stderr."""
    study = study_at(tmp_path)
    for rate in (1e30, 1e-3, 1e-3, 2e-3):  # the values the next four asks return
        study.enqueue_trial({"learning_rate": rate})
    space = {"learning_rate": FloatDistribution(1e-4, 1e30, log=True)}
    adam = TrainConfig(ppo=dataclasses.replace(CONFIG.ppo, max_grad_norm=None), eval=CONFIG.eval)
    result = run_search(
        study, ENV, mlp, adam, space, rounds=2, runs_per_round=2, directory=tmp_path,
    )  # fmt: skip
    assert result.rounds_done == 2
    told = [line for line in capsys.readouterr().err.splitlines() if "told" in line]
    best = study.best_trial
    assert told == [
        "run_search: round 1/2 told: 2 trials, 2 failed",
        f"run_search: round 2/2 told: 2 trials, 0 failed; best so far {best.value:.4g} "
        f"(trial {best.number}, {best.params})",
    ]
    rounds = by_round(study)
    assert [t.state for t in rounds[0]] == [optuna.trial.TrialState.FAIL] * 2
    assert [t.state for t in rounds[1]] == [optuna.trial.TrialState.COMPLETE] * 2
    failures = json.loads((tmp_path / "round_0000" / "results.json").read_text())["trials"]
    assert failures[0]["failure"].startswith("diverged: ")
    assert failures[1]["failure"].startswith("aborted: ")


# --------------------------------------------------------------------------- killed


DRIVER = """
import sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
import test_search as t
directory = Path({directory!r})


def hold(metrics, step, run):
    # With "hold": inside round 1, past its checkpoints at steps 20 and 40, say so and
    # wait to be killed (the driver is then certainly inside the round).
    if sys.argv[1:] == ["hold"] and (directory / "round_0001").exists() and step >= 60:
        (directory / "killable").touch()
        time.sleep(600)


t.run_search(
    t.study_at(directory), t.ENV, t.mlp, t.SLOW, t.SPACE, rounds=2, runs_per_round=4,
    directory=directory, save_every_steps=20, progress=False, log_fn=hold,
)
"""
# 10 iterations per round, a checkpoint after each.
SLOW = TrainConfig(
    ppo=PPOConfig(n_envs=4, rollout_length=5, n_minibatches=2, n_epochs=1, total_steps=200),
    eval=EvalConfig(n_envs=2, max_episode_length=6),
)


@pytest.mark.extended
def test_a_driver_killed_inside_a_round_resumes_it_when_started_again(tmp_path):
    script = DRIVER.format(tests=str(Path(__file__).parent), directory=str(tmp_path))
    command = [sys.executable, "-c", textwrap.dedent(script)]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    log = tmp_path / "driver.log"
    with open(log, "w") as stderr:
        driver = subprocess.Popen([*command, "hold"], env=env, stderr=stderr)
        deadline = time.monotonic() + 300
        while not (tmp_path / "killable").exists():
            assert driver.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the driver did not reach round 1 in 5 minutes"
            time.sleep(0.05)
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    study = study_at(tmp_path)
    rounds = by_round(study)
    assert [t.state for t in rounds[0]] == [optuna.trial.TrialState.COMPLETE] * 4
    assert [t.state for t in rounds[1]] == [optuna.trial.TrialState.RUNNING] * 4
    asked = {t.number: t.params for t in rounds[1]}
    checkpoints = tmp_path / "round_0001" / "checkpoints"
    assert {"20", "40"} <= {p.name for p in checkpoints.iterdir()}

    rerun = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    study = study_at(tmp_path)
    assert len(study.get_trials()) == 8
    assert {t.number: t.params for t in by_round(study)[1]} == asked
    check_finished(study, tmp_path, k=4, n_seeds=1)
    # Resumed from a checkpoint, not retrained: the log holds one evaluation at step 0
    # (a fresh start would have appended a second) and the final one.
    assert evaluation_steps(tmp_path / "round_0001") == [0, 200]
