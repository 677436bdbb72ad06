"""Smoke tests of the quickstart CLI with tiny settings (run by `nox -s apps`)."""

from __future__ import annotations

import doctest
import importlib.util
import inspect
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from mujoco_playground.config import dm_control_suite_params
from nnx_ppo_apps_common.cli import arguments_record
from nnx_ppo_apps_common.training import train_config
from nnx_ppo_quickstart import envs as envs_module
from nnx_ppo_quickstart import randomizers as randomizers_module
from nnx_ppo_quickstart.cli import main, options_text, parse_args, with_learning_rate_schedule
from nnx_ppo_quickstart.envs import EnvPair, make_envs
from nnx_ppo_quickstart.networks import make_network
from nnx_ppo_quickstart.presets import (
    NETWORK_SIZES,
    RECURRENT_N_EPOCHS,
    preset_names,
    preset_options,
)

TINY = [
    "--steps", "2400", "--n-envs", "8", "--rollout-length", "10", "--n-minibatches", "2",
    "--n-epochs", "1", "--eval-every", "1200", "--eval-envs", "2", "--episode-length", "40",
    "--no-progress",
]  # fmt: skip


def test_tiny_run_writes_every_output(tmp_path, capsys, monkeypatch):
    os.umask(0o022)
    out = tmp_path / "run"
    shown = [word for word in TINY if word != "--no-progress"]  # progress as in a batch job
    assert main([*shown, "--lr-schedule", "linear", "--output-dir", str(out)]) == 0
    # The output is no terminal (captured, as a pipe or a batch job's log): plain lines,
    # the compilation with its duration, then progress with the rate and the return.
    captured = capsys.readouterr()
    err = captured.err
    assert "train_ppo: compiling the training program ...\n" in err
    compiled = r"^train_ppo: compiled in \d+\.\d s \(with the evaluation before training\)$"
    assert re.search(compiled, err, re.M), err
    last = re.findall(r"^train_ppo: step .*$", err, re.M)[-1]
    assert re.fullmatch(
        r"train_ppo: step 2\.40k/2\.40k \(100%\), [\d.]+k? steps/s, eval return [\d.]+, "
        r"elapsed \d\d:\d\d", last
    ), last  # fmt: skip
    assert "\r" not in err  # no bar redrawn in the log
    for name in ("metrics.jsonl", "learning_curve.png", "config.json", "summary.json"):
        assert (out / name).stat().st_size > 0, name
    assert any((out / "checkpoints").iterdir())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] >= 2400
    # Pendulum returns are in [0, episode_length]: a real evaluation ran.
    assert 0.0 < summary["final_eval_reward"] <= 40.0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any("eval/episode_reward/mean" in r for r in records)
    # --lr-schedule linear reaches the trainer: 2400 steps / (8 envs x 10) = 30
    # iterations of 1 epoch x 2 minibatches = 60 updates, the rate 1e-3 * (1 - n / 60)
    # at update n; each iteration logs its last update's (n = 1, ..., 59).
    rates = [r["train/learning_rate"] for r in records if "train/learning_rate" in r]
    expected = [1e-3 * 59 / 60, 1e-3 / 60]  # float32 in the trainer
    assert [rates[0], rates[-1]] == pytest.approx(expected, rel=1e-5)
    printed = captured.out
    assert "final eval return" in printed
    # What the run compiled: the note's count is summary.json's, and the training
    # program (the trainer's jitted train_call) is among the names.
    note = re.search(r"^Compiled (\d+) programs in [\d.]+ s \((\d+) loaded from the "
                     r"compilation cache in .+\)$", printed, re.M)  # fmt: skip
    assert note is not None, printed
    compiles = summary["compile"]
    assert compiles["programs"] == int(note[1]) == sum(compiles["names"].values()) > 1
    assert 0 <= compiles["from_cache"] == int(note[2]) <= compiles["programs"]
    assert compiles["names"].get("jit(train_call)", 0) >= 1, compiles["names"]
    # Staggered starts by default, with a fresh reset per episode.
    stored = json.loads((out / "config.json").read_text())
    assert stored["train_config"]["ppo"]["reset_mode"] == "fresh"
    # Typed values and the run's provenance; files made with the user's umask (0o022).
    assert stored["cli"]["steps"] == 2400 and stored["cli"]["no_stagger"] is False
    assert {"jax", "flax", "brax", "nnx-ppo-train"} <= set(stored["provenance"]["versions"])
    assert "git_commit" in stored["provenance"] and summary["finished"] is True
    for name in ("config.json", "summary.json", "metrics.jsonl"):
        assert (out / name).stat().st_mode & 0o777 == 0o644, name

    # The options used are printed at the start (those not at their defaults).
    assert "Options: --steps=2400 --n-envs=8 " in printed and "--lr-schedule=linear" in printed

    # A resume that changes the run's network fails in one line, before any environment
    # is built, and leaves every file of the run as it was.
    files = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    monkeypatch.setattr(envs_module, "make_envs", _no_envs)
    assert main([*TINY, "--network", "lstm", "--output-dir", str(out), "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "--network mlp in the run, lstm (the command line)" in err
    assert {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == files
    monkeypatch.undo()

    # Resuming a finished run, with nothing but its folder, trains nothing more, says
    # so, and keeps its summary (its own throughput, not 0 steps/s) and curve. The
    # schedule comes from the run (its optimizer state counts the updates).
    assert main(["--resume", "--output-dir", str(out)]) == 0
    assert "Nothing to train: the run in" in capsys.readouterr().out
    assert {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == files
    assert json.loads((out / "summary.json").read_text())["steps_per_second"] > 0
    # Without a summary to keep (lost), one is written that claims no throughput.
    (out / "summary.json").unlink()
    assert main(["--resume", "--output-dir", str(out), "--no-progress"]) == 0
    rewritten = json.loads((out / "summary.json").read_text())
    assert rewritten["steps_per_second"] is None and rewritten["steps"] == summary["steps"]
    assert rewritten["eval_steps"] == summary["eval_steps"]
    assert rewritten["final_eval_reward"] == summary["final_eval_reward"]


@pytest.mark.extended
def test_an_extended_run_trains_on_as_if_its_budget_had_been_the_larger_one(tmp_path):
    # 80 env steps per call, an evaluation every 1200: at 0, 1200 (the end of the first
    # run) and 2400. `--resume --output-dir DIR --steps 2400` alone trains the run on
    # (every other option from its config.json) to the parameters and log of a run given
    # 2400 steps from the start; its learning curve and summary cover both attempts.
    import jax

    from nnx_ppo.algorithms import load_network

    out, full = tmp_path / "run", tmp_path / "full"
    short = [*TINY[:1], "1200", *TINY[2:]]
    assert main([*short, "--output-dir", str(out)]) == 0
    assert json.loads((out / "summary.json").read_text())["eval_steps"] == [0, 1200]
    assert main(["--resume", "--output-dir", str(out), "--steps", "2400"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["eval_steps"] == [0, 1200, 2400] and summary["resumed_from_step"] == 1200
    assert json.loads((out / "config.json").read_text())["cli"]["steps"] == 2400

    assert main([*TINY, "--output-dir", str(full)]) == 0
    template = make_network("mlp", obs_size=4, action_size=1, seed=5)
    ours = nnx_state(load_network(out / "checkpoints", template))
    theirs = nnx_state(load_network(full / "checkpoints", template))
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        assert (a == b).all()
    assert _training_log(out) == _training_log(full)


def _no_envs(*args, **kwargs):
    raise AssertionError("an environment was built before the command line was checked")


@pytest.mark.parametrize(
    ("config", "match"),
    [
        (None, "holds no quickstart run"),
        ("[1, 2]", "is not a quickstart run's config.json"),
        # A record written before config.json held typed values (strings).
        ('{"cli": {"network": "mlp", "no_stagger": "False"}}', "--no-stagger off in the run, on"),
        ('{"cli": {"network": "mlp", "learning_rate": "3e-4"}}', "--learning-rate 0.0003 in"),
        ('{"cli": {"network": "mlp", "n_envs": "many"}}', "argument --n-envs: 'many' is not"),
        ('{"cli": {"netwrok": "mlp"}}', "unknown option 'netwrok' (did you mean 'network'?)"),
    ],
)
def test_a_resume_that_cannot_continue_is_refused_before_anything(
    config, match, tmp_path, capsys, monkeypatch
):
    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)
    if config is not None:
        (out / "config.json").write_text(config)
    monkeypatch.setattr(envs_module, "make_envs", _no_envs)
    flags = ["--no-stagger"] if "no_stagger" in (config or "") else ["--learning-rate", "1e-3"]
    assert main([*TINY, *flags, "--output-dir", str(out), "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert match in err and len(err.splitlines()) == 1, err
    if config is not None:
        assert (out / "config.json").read_text() == config


def test_existing_run_needs_resume(tmp_path, capsys):
    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)
    assert main([*TINY, "--output-dir", str(out)]) == 2
    assert "--resume" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("env", "suggested"),
    [("inverted_pendulm", "'inverted_pendulum'"), ("cartpolebalance", "'CartpoleBalance'")],
)
def test_unknown_env_suggests_the_closest_and_lists_valid_choices(env, suggested, tmp_path, capsys):
    assert main(["--env", env, "--output-dir", str(tmp_path / "run")]) == 2
    assert not (tmp_path / "run").exists()  # nothing written
    err = capsys.readouterr().err
    assert f"unknown --env {env!r}; did you mean {suggested}" in err
    assert "valid choices:" in err and "inverted_pendulum," in err and "CartpoleBalance" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_help_states_every_option_and_its_default_once(capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args(["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    # One entry per option: its line and the indented lines that continue it.
    entries = re.split(r"\n  (?=-)", text.split("\noptions:\n", 1)[1])
    entries = [" ".join(entry.split()) for entry in entries if entry.strip()]
    options = [entry.split()[0].rstrip(",") for entry in entries]
    usage = set(re.findall(r"\[(--[a-z-]+)", text.split("\n\n", 1)[0]))
    assert usage <= set(options) and "--seed" in options and "--learning-rate" in options
    for option, entry in zip(options, entries, strict=True):
        if option == "-h":
            continue
        words = entry.split()[1:]
        description = " ".join(words[1:] if words and words[0].isupper() else words)
        assert description and not description.startswith("(default"), f"{option}: no help"
        assert entry.count("(default") == 1, entry
        assert "(default: None)" not in entry and "%%" not in entry, entry
    assert "--seed SEED seed of the network's initial parameters" in " ".join(text.split())
    assert "(default: )" not in text  # an empty default says what it means
    assert "(default: a new folder outputs/quickstart/<env>-<network>-<time>)" in " ".join(
        text.split()
    )


def test_docstring_examples_run():
    from nnx_ppo_quickstart import arguments, networks, presets, seeds, shards

    for module in (arguments, envs_module, networks, presets, seeds, shards):
        outcome = doctest.testmod(module)
        assert outcome.attempted > 0 and outcome.failed == 0, module.__name__


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--n-envs", "100", "--n-minibatches", "8"], ("100", "8")),
        (["--learning-rate", "-1"], ("learning_rate", "-1")),
        (["--discount", "1.5"], ("discounting_factor", "1.5")),
        (["--action-lag", "3:1"], ("--action-lag '3:1'", "LOW <= HIGH")),
        (["--obs-lag", "-1"], ("--obs-lag '-1'", "K >= 0")),
        (["--obs-lag", "2ms"], ("--obs-lag '2ms'", "e.g. --obs-lag 0:3")),
        (["--lag-hold-prob", "1.5"], ("--lag-hold-prob 1.5", "[0, 1]")),
    ],
)
def test_bad_options_are_one_line_errors_before_any_env(
    tmp_path, capsys, monkeypatch, options, named
):
    monkeypatch.setattr(envs_module, "make_envs", _no_envs)
    assert main([*options, "--output-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert all(word in err for word in named), err
    assert not (tmp_path / "run").exists()  # nothing written


def test_resume_needs_an_output_dir(capsys):
    assert main(["--resume"]) == 2
    assert "--output-dir" in capsys.readouterr().err


def test_bad_numbers_are_rejected_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--steps", "-5"])
    assert exc.value.code == 2
    assert "must be positive" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--steps", "1e7x"])
    assert "argument --steps: '1e7x' is not an integer" in capsys.readouterr().err


def test_counts_as_people_write_them():
    args = parse_args(["--steps", "1e7", "--eval-every", "30k", "--checkpoint-every", "2.5M"])
    assert (args.steps, args.eval_every, args.checkpoint_every) == (10**7, 30_000, 2_500_000)


@pytest.mark.parametrize("preset", ["lstm", "gru", "lru", "graph"])
def test_presets_build_and_step(preset):
    import jax.numpy as jnp

    network = make_network(preset, obs_size=4, action_size=1, seed=0)
    if preset == "gru":  # the LSTM preset's layout, a GRU cell: one h [B, 128] per port
        cells = [type(m).__name__ for m in network.layers[1].action.layers]
        state = network.initialize_state(3)[1]
        assert cells[0] == "GRU" and state["action"][0]["h"].shape == (3, 128)
    if preset == "lru":  # the same layout with the linear recurrent unit
        cells = [type(m).__name__ for m in network.layers[1].action.layers]
        assert cells[0] == "LRU", cells
    out = network(network.initialize_state(3), jnp.ones((3, 4))).output
    assert out.actions.shape == (3, 1)
    assert out.loglikelihoods.shape == (3,)
    assert out.value_estimates.shape == (3,)


@pytest.mark.parametrize(
    ("flags", "schedule"),
    [
        ([], "constant"),
        (["--network", "lstm"], "linear"),
        (["--network", "gru"], "linear"),
        (["--network", "lru"], "linear"),
        (["--network", "graph"], "linear"),
        (["--network", "graph", "--lr-schedule", "constant"], "constant"),
        (["--network", "lstm", "--lr-schedule", "constant"], "constant"),
        (["--lr-schedule", "linear"], "linear"),
    ],
)
def test_the_learning_rate_schedule_is_the_presets_unless_given(flags, schedule):
    args = parse_args([*TINY, *flags])
    assert args.lr_schedule == schedule
    config = with_learning_rate_schedule(train_config(args, seed=0), args.lr_schedule)
    rate = config.ppo.learning_rate
    if schedule == "constant":
        assert rate == 1e-3
    else:  # 60 updates (see test_tiny_run_writes_every_output): 1e-3 down to 0
        assert [float(rate(n)) for n in (0, 30, 60, 61)] == pytest.approx([1e-3, 5e-4, 0, 0])


def test_an_unknown_learning_rate_schedule_is_rejected(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--lr-schedule", "cosine"])
    assert "invalid choice: 'cosine'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="valid choices: linear, constant"):
        with_learning_rate_schedule(None, "cosine")


def test_unknown_preset_and_dict_sizes_are_rejected():
    with pytest.raises(ValueError, match="valid choices: mlp, lstm, gru, lru, graph"):
        make_network("transformer", 4, 1, 0)
    with pytest.raises(ValueError, match="vector observation"):
        make_network("mlp", {"pos": (3,)}, 1, 0)


@pytest.mark.parametrize(
    ("flags", "stagger", "reset_mode"), [([], 20, "fresh"), (["--no-stagger"], 0, "cached")]
)
def test_training_episodes_are_staggered_unless_asked_not_to(flags, stagger, reset_mode):
    from nnx_ppo_quickstart.cli import parse_args
    from nnx_ppo_quickstart.envs import make_envs

    args = parse_args([*TINY, *flags])
    envs = make_envs(
        args.env, episode_length=40, reward_scaling=1.0, brax_backend="generalized",
        stagger=not args.no_stagger,
    )  # fmt: skip
    assert (envs.train.stagger, envs.eval.stagger) == (stagger, 0)
    assert args.reset == reset_mode


@pytest.mark.extended
def test_sigterm_stops_cleanly_and_the_resumed_run_is_the_uninterrupted_one(tmp_path):
    # 300 calls of 80 steps, a checkpoint every 4000 steps. SIGTERM once the first is
    # on disk: the quickstart checkpoints where it is, says how to continue and exits
    # with 143; --resume then ends with the uninterrupted run's parameters and log.
    import jax

    from nnx_ppo.algorithms import load_network

    run = [*TINY[:1], "24000", *TINY[2:], "--checkpoint-every", "4000"]
    full, split = tmp_path / "full", tmp_path / "split"
    assert main([*run, "--output-dir", str(full)]) == 0  # fills the compilation cache

    command = [sys.executable, "-m", "nnx_ppo_quickstart.cli", *run, "--output-dir", str(split)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    checkpoints = split / "checkpoints"
    while not (checkpoints.exists() and any(p.name.isdigit() for p in checkpoints.iterdir())):
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        assert time.monotonic() < deadline, "no checkpoint within 300 s"
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode == 143, output[-3000:]
    assert "stopped by SIGTERM" in output and "--resume --output-dir" in output
    summary = json.loads((split / "summary.json").read_text())
    assert summary["finished"] is False and summary["stopped_by"] == "SIGTERM"
    assert 4000 <= summary["steps"] < 24000

    assert main([*run, "--output-dir", str(split), "--resume"]) == 0
    resumed = json.loads((split / "summary.json").read_text())
    assert resumed["finished"] is True and resumed["resumed_from_step"] == summary["steps"]
    template = make_network("mlp", obs_size=4, action_size=1, seed=5)
    ours = nnx_state(load_network(split / "checkpoints", template))
    theirs = nnx_state(load_network(full / "checkpoints", template))
    assert jax.tree.structure(ours) == jax.tree.structure(theirs)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        assert (a == b).all()
    assert _training_log(split) == _training_log(full)


def nnx_state(network):
    from flax import nnx

    return nnx.to_pure_dict(nnx.state(network))


def _training_log(out):
    """The run's log without its wall-clock metrics."""
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("throughput/")} for r in records]


def _recorded_run(out, *options):
    """A run folder as a quickstart run with ``options`` leaves it, without training:
    its ``config.json`` (the ``cli`` record) and a ``checkpoints/`` folder."""
    args = parse_args([*options, "--output-dir", str(out)])
    (out / "checkpoints").mkdir(parents=True)
    record = {"cli": arguments_record(args), "train_config": {}, "provenance": {}}
    (out / "config.json").write_text(json.dumps(record))
    return record["cli"]


RECORDED = [
    "--env", "CartpoleBalance", "--network", "lstm", "--n-envs", "16", "--learning-rate",
    "3e-4", "--lr-schedule", "constant", "--no-stagger", "--obs-lag", "1:3", "--seed", "7",
    "--no-progress", "--steps", "4800", "--checkpoint-every", "1200",
]  # fmt: skip


def test_resume_takes_every_option_from_the_runs_config_json(tmp_path):
    out = tmp_path / "runs" / "a"
    recorded = _recorded_run(out, *RECORDED)
    args = parse_args(["--resume", "--output-dir", str(out)])
    resumed = arguments_record(args)
    # Every option of the run, but those about this command only: the progress bar is
    # this command's, and so are the folder and --resume.
    per_command = {"no_progress": False, "resume": True}
    assert resumed == {**recorded, **per_command}
    # Options given again that agree, a raised --steps, another --checkpoint-every and
    # this command's own flags are accepted; the rest is the run's.
    args = parse_args(
        ["--resume", "--output-dir", str(out), "--env", "CartpoleBalance", "--seed", "7",
         "--learning-rate", "0.0003", "--steps", "9600", "--checkpoint-every", "500",
         "--no-compile-cache"]
    )  # fmt: skip
    assert (args.steps, args.checkpoint_every, args.no_compile_cache) == (9600, 500, True)
    assert (args.network, args.n_envs, args.obs_lag, args.lr_schedule) == (
        "lstm",
        16,
        "1:3",
        "constant",
    )


def test_a_resume_refuses_changed_options_naming_each_with_both_values(
    tmp_path, capsys, monkeypatch
):
    out = tmp_path / "run"
    _recorded_run(out, *RECORDED)
    files = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    monkeypatch.setattr(envs_module, "make_envs", _no_envs)
    changed = ["--learning-rate", "1e-3", "--env", "inverted_pendulum", "--steps", "2400"]
    assert main(["--resume", "--output-dir", str(out), *changed]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "--learning-rate 0.0003 in the run, 0.001 (the command line)" in err
    assert "--env CartpoleBalance in the run, inverted_pendulum (the command line)" in err
    assert "--steps 2400 (the command line) is below the run's budget 4800" in err
    assert "leave these options out to continue the run" in err
    assert "another --output-dir" in err and "--seed" not in err
    assert {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == files


def test_config_file_options_with_the_command_line_overriding(tmp_path):
    toml = tmp_path / "run.toml"
    toml.write_text(
        'env = "CartpoleBalance"\nlearning-rate = 3e-4\nn_envs = 16\nno_stagger = true\n'
        'obs_lag = "0:2"\nsteps = 4_800\n'
    )
    args = parse_args(["--config", str(toml), "--n-envs", "32"])
    assert (args.env, args.learning_rate, args.n_envs) == ("CartpoleBalance", 3e-4, 32)
    assert (args.no_stagger, args.obs_lag, args.steps) == (True, "0:2", 4800)
    assert args.lr_schedule == "constant" and args.config == toml

    # A JSON file, and a run's own config.json: a new run with the run's options, but
    # not its folder, --resume or progress bar.
    (tmp_path / "run.json").write_text('{"network": "graph", "seed": 3}')
    args = parse_args(["--config", str(tmp_path / "run.json")])
    assert (args.network, args.seed, args.lr_schedule) == ("graph", 3, "linear")
    recorded = _recorded_run(tmp_path / "a", *RECORDED)
    args = parse_args(["--config", str(tmp_path / "a" / "config.json"), "--seed", "8"])
    again = arguments_record(args)
    assert again["output_dir"] is None and again["no_progress"] is False and again["seed"] == 8
    same = {"output_dir", "no_progress", "seed", "config"}
    assert {k: v for k, v in again.items() if k not in same} == {
        k: v for k, v in recorded.items() if k not in same
    }


@pytest.mark.parametrize(
    ("text", "name", "message"),
    [
        ("learnig_rate = 1e-3\n", "run.toml",
         "unknown option 'learnig_rate' (did you mean 'learning_rate'?); valid options: "),
        ("learning_rate = 1e-3\nlearning-rate = 2e-3\n", "run.toml",
         "sets 'learning_rate' twice, as 'learning_rate' and as 'learning-rate'; keep one"),
        ("no_stagger = 3\n", "run.toml", "'no_stagger' is a flag (--no-stagger); its value"),
        ("steps = -5\n", "run.toml", "argument --steps: -5 must be positive"),
        ('network = "rnn"\n', "run.toml", "argument --network: invalid choice: 'rnn'"),
        ("resume = true\n", "run.toml", "'resume' is a command-line option only"),
        ("[steps]\nn = 5\n", "run.toml", "'steps' is a table; give --steps's value"),
        ("steps = [\n", "run.toml", "is not valid TOML"),
        ("[1, 2]", "run.json", "holds a list, not a table of options"),
    ],
)  # fmt: skip
def test_a_bad_config_file_is_a_one_line_error_naming_it(
    text, name, message, tmp_path, capsys, monkeypatch
):
    path = tmp_path / name
    path.write_text(text)
    monkeypatch.setattr(envs_module, "make_envs", _no_envs)
    assert main(["--config", str(path), "--output-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"--config {path}" in err and message in err, err
    assert not (tmp_path / "run").exists()


def test_a_resume_names_the_config_file_an_option_came_from(tmp_path, capsys):
    out = tmp_path / "run"
    _recorded_run(out, *RECORDED)
    (tmp_path / "run.toml").write_text("seed = 8\n")
    assert main(["--config", str(tmp_path / "run.toml"), "--resume", "--output-dir", str(out)]) == 2
    assert f"--seed 7 in the run, 8 (--config {tmp_path / 'run.toml'})" in capsys.readouterr().err


# --preset and the run flags (--logger, --video, --randomization, --obs-history)


def _brax_ppo_default(name):
    from brax.training.agents.ppo import train as brax_ppo

    return inspect.signature(brax_ppo.train).parameters[name].default


@pytest.mark.parametrize("env", ["CheetahRun", "PendulumSwingup", "BallInCup"])
def test_a_tasks_preset_is_playgrounds_brax_ppo_config_field_by_field(env):
    tuned = dm_control_suite_params.brax_ppo_config(env)
    args = parse_args(["--env", env])
    assert args.preset == env
    assert args.n_envs == tuned.num_envs
    assert args.rollout_length == tuned.unroll_length
    assert args.n_epochs == tuned.num_updates_per_batch
    assert args.learning_rate == tuned.learning_rate
    assert args.entropy_cost == tuned.entropy_cost
    assert args.discount == tuned.discounting
    assert args.reward_scaling == tuned.reward_scaling
    assert args.episode_length == tuned.episode_length
    assert args.action_repeat == tuned.action_repeat
    assert args.clip_range == tuned.get("clipping_epsilon", _brax_ppo_default("clipping_epsilon"))
    assert tuned.normalize_observations  # the presets' networks always normalise
    # Minibatches of batch_size whole sequences, and brax's gradient steps per env step.
    assert args.n_envs // args.n_minibatches == tuned.batch_size
    ours = args.n_epochs * args.n_minibatches / (args.n_envs * args.rollout_length)
    batch = tuned.batch_size * tuned.num_minibatches * tuned.unroll_length
    assert ours == pytest.approx(tuned.num_updates_per_batch * tuned.num_minibatches / batch)
    # The values reach the training config.
    config = train_config(args, seed=0, clip_range=args.clip_range)
    assert (config.ppo.n_envs, config.ppo.n_epochs) == (tuned.num_envs, tuned.num_updates_per_batch)
    assert config.ppo.discounting_factor == tuned.discounting
    assert config.ppo.clip_range == args.clip_range


def test_the_mlp_preset_has_brax_ppo_networks_default_sizes():
    from brax.training.agents.ppo import networks as brax_networks

    defaults = inspect.signature(brax_networks.make_ppo_networks).parameters
    assert NETWORK_SIZES["policy"] == defaults["policy_hidden_layer_sizes"].default
    assert NETWORK_SIZES["value"] == defaults["value_hidden_layer_sizes"].default


def test_explicit_options_override_the_preset_and_are_recorded(tmp_path):
    tuned = dm_control_suite_params.brax_ppo_config("CheetahRun")
    args = parse_args(["--env", "CheetahRun", "--n-envs", "64", "--learning-rate", "3e-4"])
    assert (args.n_envs, args.learning_rate) == (64, 3e-4)
    assert args.n_epochs == tuned.num_updates_per_batch  # the rest is the preset's
    # A --config file's option wins over the preset too, the command line over both.
    (tmp_path / "run.toml").write_text('env = "CheetahRun"\nn_epochs = 3\ndiscount = 0.9\n')
    args = parse_args(["--config", str(tmp_path / "run.toml"), "--discount", "0.8"])
    assert (args.n_epochs, args.discount, args.n_envs) == (3, 0.8, tuned.num_envs)
    # The Options line names the preset's values; the record holds the preset's name.
    text = options_text(args)
    assert f"--n-envs={tuned.num_envs}" in text and "--n-epochs=3" in text
    assert arguments_record(args)["preset"] == "CheetahRun"
    # A Playground preset restarts episodes from cached states (CheetahRun's reset steps
    # its physics 200 times), shown as the preset's value; --reset wins over it.
    assert args.reset == "cached" and "--reset=cached" in text
    assert parse_args(["--env", "CheetahRun", "--reset", "fresh"]).reset == "fresh"
    # --preset quickstart: the quickstart's own defaults on a task that has a preset.
    args = parse_args(["--env", "CheetahRun", "--preset", "quickstart"])
    assert (args.n_envs, args.n_epochs, args.clip_range, args.reset) == (256, 4, 0.2, "fresh")
    assert "--reset" not in options_text(args)
    # Another task's preset by name; a brax env's auto preset is the quickstart's.
    args = parse_args(["--preset", "CheetahRun"])
    assert (args.env, args.n_envs) == ("inverted_pendulum", tuned.num_envs)
    assert parse_args([]).preset == "quickstart" and preset_options("quickstart") == {}
    assert {"quickstart", "CheetahRun", "CartpoleBalance"} <= set(preset_names())


def test_a_resumed_run_keeps_its_preset_and_one_from_before_presets_the_defaults(tmp_path):
    recorded = _recorded_run(tmp_path / "a", "--env", "CheetahRun", "--n-epochs", "2")
    assert recorded["preset"] == "CheetahRun" and recorded["clip_range"] == 0.3
    args = parse_args(["--resume", "--output-dir", str(tmp_path / "a")])
    assert (args.preset, args.n_epochs, args.clip_range) == ("CheetahRun", 2, 0.3)
    assert (recorded["reset"], args.reset) == ("cached", "cached")
    # A preset run recorded before --reset existed trained with a fresh reset.
    record = json.loads((tmp_path / "a" / "config.json").read_text())
    del record["cli"]["reset"]
    (tmp_path / "a" / "config.json").write_text(json.dumps(record))
    args = parse_args(["--resume", "--output-dir", str(tmp_path / "a")])
    assert (args.preset, args.reset) == ("CheetahRun", "fresh")
    # A run recorded before the presets (and their options) existed trained on the
    # quickstart's defaults: its resume must not pick up the task's preset.
    old = tmp_path / "b"
    _recorded_run(old, "--env", "CheetahRun", "--preset", "quickstart")
    record = json.loads((old / "config.json").read_text())
    for name in ("preset", "clip_range", "entropy_cost", "action_repeat", "reset"):
        del record["cli"][name]
    (old / "config.json").write_text(json.dumps(record))
    args = parse_args(["--resume", "--output-dir", str(old)])
    assert (args.preset, args.n_envs, args.clip_range) == ("quickstart", 256, 0.2)
    assert args.reset == "fresh"  # as the quickstart restarted episodes before --reset


def _one_line_error(capsys):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--preset", "cheetah"], ("unknown --preset 'cheetah'", "auto, quickstart, ")),
        (["--randomization", "playground"], ("--randomization playground", "--env inverted_pen")),
        (
            ["--env", "CartpoleBalance", "--randomization", "playground"],
            ("no domain randomizer for --env CartpoleBalance (a Playground env", "leave"),
        ),
    ],
)
def test_unusable_presets_and_flags_are_refused_before_any_env(
    options, named, tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(envs_module, "make_envs", _no_envs)
    assert main([*options, "--output-dir", str(tmp_path / "run")]) == 2
    err = _one_line_error(capsys)
    assert all(word in err for word in named), err
    assert not (tmp_path / "run").exists()


def test_a_logger_whose_package_is_missing_is_refused_with_the_install_command(
    tmp_path, capsys, monkeypatch
):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a)
    )
    monkeypatch.setattr(envs_module, "make_envs", _no_envs)
    assert main(["--logger", "jsonl", "wandb", "--output-dir", str(tmp_path / "run")]) == 2
    err = _one_line_error(capsys)
    assert "--logger wandb needs the wandb package" in err
    assert "uv pip install 'nnx-ppo-train[wandb]'" in err
    with pytest.raises(SystemExit):
        parse_args(["--logger", "mlflow"])
    assert "invalid choice: 'mlflow'" in capsys.readouterr().err


def test_randomization_uses_the_registrys_randomizer_for_the_task(monkeypatch):
    from mujoco_playground import registry

    def randomizer(model, rng):
        return model, None

    monkeypatch.setattr(
        registry, "get_domain_randomizer", lambda env: randomizer if env == "CheetahRun" else None
    )
    assert randomizers_module.randomizer("playground", "CheetahRun") is randomizer
    assert randomizers_module.randomizer("none", "CheetahRun") is None


RANDOMIZERS = """
import jax
import jax.numpy as jnp


def heavier_pole(sys, rng):  # brax's style: one mass scale per environment
    scale = jax.vmap(lambda key: jax.random.uniform(key, (), minval=1.0, maxval=1.5))(rng)
    mass = sys.link.inertia.mass[None] * scale[:, None]
    in_axes = jax.tree.map(lambda _: None, sys).tree_replace({"link.inertia.mass": 0})
    return sys.tree_replace({"link.inertia.mass": mass}), in_axes


def wrong_batch(sys, rng):  # forgets the per-environment axis
    in_axes = jax.tree.map(lambda _: None, sys).tree_replace({"link.inertia.mass": 0})
    return sys.tree_replace({"link.inertia.mass": sys.link.inertia.mass * 2}), in_axes


def no_such_field(sys, rng):
    return sys.no_such_field, None

not_a_function = 3
"""


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ("heavy", ("--randomization 'heavy' is neither a choice", "MODULE:FUNCTION")),
        ("no_such_module:f", ("--randomization no_such_module:f: cannot import", "no_such")),
        ("my_randomizers:nope", ("my_randomizers has no function 'nope'",)),
        ("my_randomizers:not_a_function", ("has no function 'not_a_function'",)),
        (":f", ("--randomization ':f' must be MODULE:FUNCTION",)),
    ],
)
def test_own_randomizers_that_cannot_be_found_are_refused_before_any_env(
    spec, named, tmp_path, capsys, monkeypatch
):
    (tmp_path / "my_randomizers.py").write_text(RANDOMIZERS)
    monkeypatch.chdir(tmp_path)  # imported from the current folder
    monkeypatch.setattr(envs_module, "make_envs", _no_envs)
    assert main([*TINY, "--randomization", spec, "--output-dir", str(tmp_path / "run")]) == 2
    err = _one_line_error(capsys)
    assert all(word in err for word in named), err
    assert not (tmp_path / "run").exists()


class _Trained(Exception):
    pass


def test_own_randomizer_is_checked_against_the_model_before_compiling(
    tmp_path, capsys, monkeypatch
):
    import nnx_ppo.algorithms

    (tmp_path / "my_randomizers.py").write_text(RANDOMIZERS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    given = {}

    def trainer(env, network, config, **options):  # what main passes; nothing is compiled
        given.update(options)
        raise _Trained

    monkeypatch.setattr(nnx_ppo.algorithms, "train_ppo", trainer)
    with pytest.raises(_Trained):
        main([*TINY, "--randomization", "my_randomizers:heavier_pole", "--output-dir", "ok"])
    assert given["randomization_fn"].__name__ == "heavier_pole"
    # Functions that do not fit the model: one line naming the option, before training.
    for name, why in (
        ("wrong_batch", "link/inertia/mass"),
        ("no_such_field", "AttributeError"),
    ):
        spec = f"my_randomizers:{name}"
        assert main([*TINY, "--randomization", spec, "--output-dir", name]) == 2
        err = _one_line_error(capsys)
        assert f"--randomization {spec} does not fit --env's model: " in err and why in err, err
        assert not (tmp_path / name).exists()


def test_video_is_refused_naming_the_env_that_cannot_render(tmp_path, capsys, monkeypatch):
    def no_render_envs(name, **kwargs):
        return EnvPair(None, object(), "test", 4, 1)

    monkeypatch.setattr(envs_module, "make_envs", no_render_envs)
    assert main([*TINY, "--video", "--output-dir", str(tmp_path / "run")]) == 2
    err = _one_line_error(capsys)
    assert (
        err.startswith("nnx-ppo-quickstart: error: --video: ") and "--env inverted_pendulum" in err
    )
    assert not (tmp_path / "run" / "config.json").exists()


def test_obs_history_stacks_the_last_k_observations_for_policy_and_critic():
    envs = make_envs(
        "inverted_pendulum", episode_length=40, reward_scaling=1.0,
        brax_backend="generalized", obs_history=3,
    )  # fmt: skip
    # inverted_pendulum observes 4 numbers: the network reads 3 x 4, in training and
    # evaluation alike (the wrapper's own behaviour is tested with the wrapper).
    assert envs.observation_size == 12 and "the last 3 observations" in envs.source
    assert envs.train.observation_size == envs.eval.observation_size == 12


@pytest.mark.extended
def test_a_tiny_run_with_history_and_tensorboard_records_its_preset(tmp_path, capsys):
    if importlib.util.find_spec("tensorboardX") is None:
        pytest.skip("tensorboardX (extra nnx-ppo-train[logging]) is not installed")
    out = tmp_path / "run"
    flags = ["--obs-history", "2", "--logger", "jsonl", "tensorboard", "--entropy-cost", "0.0"]
    assert main([*TINY, *flags, "--output-dir", str(out)]) == 0
    assert any((out / "tensorboard").iterdir())
    stored = json.loads((out / "config.json").read_text())
    assert stored["cli"]["preset"] == "quickstart" and stored["cli"]["obs_history"] == 2
    assert stored["cli"]["logger"] == ["jsonl", "tensorboard"]
    assert stored["train_config"]["ppo"]["clip_range"] == 0.2
    printed = capsys.readouterr().out
    assert "--obs-history=2 --logger jsonl tensorboard" in printed
    assert "(preset quickstart; all of them in config.json)" in printed
    assert "Note:" not in printed  # the quickstart's own preset, an MLP


@pytest.mark.parametrize(
    ("options", "n_epochs"),
    [
        (["--env", "CartpoleBalance", "--network", "lstm"], RECURRENT_N_EPOCHS),
        (["--env", "CheetahRun", "--network", "graph"], RECURRENT_N_EPOCHS),
        (["--env", "CheetahRun", "--network", "mlp"], 16),  # Playground's
        (["--env", "CheetahRun", "--network", "lstm", "--n-epochs", "8"], 8),  # explicit wins
        (["--network", "lstm"], 4),  # inverted_pendulum: the quickstart preset's value
        (["--network", "graph", "--preset", "quickstart", "--n-epochs", "2"], 2),
    ],
)
def test_a_playground_preset_trains_a_recurrent_network_with_fewer_epochs(options, n_epochs):
    assert RECURRENT_N_EPOCHS == 4
    assert dm_control_suite_params.brax_ppo_config("CheetahRun").num_updates_per_batch == 16
    args = parse_args(options)
    assert args.n_epochs == n_epochs
    # The run's record (config.json) holds the value it trains with, shown in Options.
    assert arguments_record(args)["n_epochs"] == n_epochs


def test_a_recurrent_preset_run_recorded_with_16_epochs_resumes_with_16(tmp_path):
    # An LSTM run on a preset recorded before the recurrent variant trained 16 epochs:
    # its record says so, and the resume must not change it to RECURRENT_N_EPOCHS.
    _recorded_run(tmp_path, "--env", "CheetahRun", "--network", "lstm", "--n-epochs", "16")
    args = parse_args(["--resume", "--output-dir", str(tmp_path)])
    assert (args.preset, args.network, args.n_epochs) == ("CheetahRun", "lstm", 16)


def test_critic_obs_makes_a_privileged_critic_of_a_dict_observation():
    import jax.numpy as jnp

    sizes = {"state": 3, "privileged_state": 2}
    obs = {"state": jnp.ones((2, 3)), "privileged_state": jnp.zeros((2, 2))}
    other = {**obs, "privileged_state": jnp.full((2, 2), 5.0)}
    outputs = []
    for observation in (obs, other):  # the same network (seed) and sampler draws
        network = make_network("mlp", sizes, 1, seed=0, critic_obs=["privileged_state"])
        outputs.append(network(network.initialize_state(2), observation).output)
    # Only the critic reads the privileged entry: the actions stay, the values move.
    assert (outputs[0].actions == outputs[1].actions).all()
    assert not (outputs[0].value_estimates == outputs[1].value_estimates).all()


@pytest.mark.parametrize(
    ("obs_size", "critic_obs", "network", "match"),
    [
        (4, ["privileged_state"], "mlp", "the env's observation is an array"),
        ({"state": 3, "extra": 2}, ["privileged"], "mlp", "no key 'privileged'; its keys: extra"),
        ({"state": 3}, ["state"], "lstm", "names every key of the observation"),
        ({"state": 3, "extra": 2}, ["extra"], "graph", "needs --network mlp, lstm, gru or lru"),
    ],
)
def test_critic_obs_is_refused_naming_the_keys_there_are(obs_size, critic_obs, network, match):
    with pytest.raises(ValueError, match=match):
        make_network(network, obs_size, 1, seed=0, critic_obs=critic_obs)


def test_critic_obs_on_an_array_env_is_a_one_line_error(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*TINY, "--critic-obs", "privileged_state", "--output-dir", str(out)]) == 2
    err = _one_line_error(capsys)
    assert "--critic-obs privileged_state: the env's observation is an array" in err
    assert not (out / "config.json").exists()
    assert main([*TINY, "--critic-obs", "a,,b", "--output-dir", str(out)]) == 2
    assert "not a comma-separated list of observation keys" in _one_line_error(capsys)


def _assert_close(mine, theirs):
    """Equal keys; numbers equal to float32 reordering (rel 1e-4), the rest exactly."""
    assert mine.keys() == theirs.keys(), (mine, theirs)
    for key, value in theirs.items():
        number = isinstance(value, float | int) and not isinstance(value, bool)
        assert mine[key] == (pytest.approx(value, rel=1e-4, abs=1e-6) if number else value), key


def _flat(record, prefix=""):
    """``{"a": {"b": [1]}}`` as ``{"a/b/0": 1}`` (pytest.approx compares flat dicts)."""
    flat = {}
    for key, value in record.items():
        if isinstance(value, list):
            value = dict(enumerate(value))
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}/"))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


@pytest.mark.extended  # compiles a 3-, a 2- and a 1-run train_many program (~3 min)
def test_seeds_train_in_one_program_with_a_summary_or_as_shards(tmp_path, capsys, monkeypatch):
    import nnx_ppo.algorithms

    def no_single_runs(*args, **kwargs):
        raise AssertionError("--seeds trained a seed with train_ppo, not in train_many")

    monkeypatch.setattr(nnx_ppo.algorithms, "train_ppo", no_single_runs)
    out = tmp_path / "seeds"
    tiny = [*TINY, "--steps", "800", "--eval-every", "400", "--checkpoint-every", "800"]
    assert main([*tiny, "--seeds", "0,1,2", "--output-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "seeds 0,1,2 in one program" in printed and "Done: 3 seeds x 800 steps" in printed
    summary = json.loads((out / "summary.json").read_text())
    finals = summary["final_eval_reward"]
    assert summary["seeds"] == [0, 1, 2] and sorted(finals) == ["0", "1", "2"]
    assert len(set(finals.values())) == 3  # three runs from three initial parameters
    median, iqm = summary["median"], summary["iqm"]
    assert median["value"] == pytest.approx(sorted(finals.values())[1])
    # The IQM drops floor(n / 4) scores at each end: none of 3, so it is their mean.
    assert iqm["value"] == pytest.approx(sum(finals.values()) / 3)
    assert median["low"] <= median["value"] <= median["high"] and summary["confidence"] == 0.95
    assert min(finals.values()) <= iqm["low"] <= iqm["high"] <= max(finals.values())
    assert f"median {median['value']:.1f} [" in printed
    # One log of the program (a "run" index per line) and each seed's own folder.
    runs = {json.loads(line)["run"] for line in (out / "metrics.jsonl").read_text().splitlines()}
    assert runs == {0, 1, 2}
    for seed in (0, 1, 2):
        folder = out / f"seed_{seed}"
        own = json.loads((folder / "summary.json").read_text())
        assert own["seed"] == seed and own["final_eval_reward"] == finals[str(seed)]
        assert (folder / "learning_curve.png").stat().st_size > 0
        lines = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
        assert lines and all("run" not in line for line in lines)
        assert [e["eval/episode_reward/mean"] for e in lines if "eval/episode_reward/mean" in e][
            -1
        ] == finals[str(seed)]
    assert json.loads((out / "config.json").read_text())["cli"]["seeds"] == "0,1,2"

    # The same seeds as two shards, as a job array's tasks would train them: shard 0/2
    # (seeds 0 and 2) quiet, shard 1/2 (seed 1) with progress as in a batch log.
    # Tolerance: a shard is a 2-run (1-run) program, the reference the 3-run one; vmapping
    # changes how XLA orders some float32 reductions (see the library's test_shards.py).
    sharded = tmp_path / "sharded"
    assert main([*tiny, "--seeds", "0,1,2", "--shard", "0/2", "--output-dir", str(sharded)]) == 0
    printed = capsys.readouterr().out
    assert "shard 0/2 of seeds 0,1,2 (seeds 0,2) in shard-0-of-2/" in printed
    assert f"Shard 0/2 done: seeds 0,2 in {sharded}/shard-0-of-2/; 1 of 2 shards" in printed
    assert not (sharded / "summary.json").exists()
    shown = [word for word in tiny if word != "--no-progress"]
    assert main([*shown, "--seeds", "0,1,2", "--shard", "1/2", "--output-dir", str(sharded)]) == 0
    captured = capsys.readouterr()
    assert "All 2 shards merged. Done: 3 seeds x 800 steps" in captured.out
    # Not a terminal: the shard's program prints plain progress lines.
    assert "train_many (1 runs): compiling the training program ...\n" in captured.err
    last = re.findall(r"^train_many \(1 runs\): step .*$", captured.err, re.M)[-1]
    assert last.startswith("train_many (1 runs): step 800/800 (100%), "), last
    # The last shard to finish merged them: the seed folders and summary of --seeds.
    merged = json.loads((sharded / "summary.json").read_text())
    wall = ("steps", "wall_time_s", "steps_per_second")  # the array's throughput
    assert merged["shards"] == 2 and merged["steps"] == summary["steps"] == 2400
    mine = _flat({k: v for k, v in merged.items() if k not in (*wall, "shards")})
    theirs = _flat({k: v for k, v in summary.items() if k not in wall})
    _assert_close(mine, theirs)
    for seed in (0, 1, 2):
        ours, want = (
            [
                json.loads(line)
                for line in (root / f"seed_{seed}" / "metrics.jsonl").read_text().splitlines()
            ]
            for root in (sharded, out)
        )
        assert [r["step"] for r in ours] == [r["step"] for r in want]
        for a, b in zip(ours, want, strict=True):
            keep = {k: v for k, v in b.items() if not k.startswith("throughput/")}
            _assert_close({k: v for k, v in a.items() if k in keep}, keep)
        assert (sharded / f"seed_{seed}" / "learning_curve.png").stat().st_size > 0
    # --merge by hand writes the same again; a shard of other options is refused.
    (sharded / "summary.json").unlink()
    assert main(["--merge", str(sharded)]) == 0
    assert json.loads((sharded / "summary.json").read_text()) == merged
    assert "All 2 shards merged." in capsys.readouterr().out
    other = [*tiny, "--seeds", "0,1,2", "--shard", "0/2", "--learning-rate", "3e-4"]
    assert main([*other, "--output-dir", str(sharded)]) == 2
    err = _one_line_error(capsys)
    assert f"--shard 0/2: directory='{sharded}/shard-0-of-2' holds a shard of another" in err
    assert "its config differs" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seeds", "0,0"], "argument --seeds: '0,0' repeats a seed"),
        (["--seeds", "0,x"], "argument --seeds: 'x' is not an integer"),
        (["--seeds", "-1"], "argument --seeds: -1 must be >= 0"),
    ],
)
def test_bad_seeds_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit):
        parse_args(argv)
    assert message in capsys.readouterr().err


_RUN = ["--output-dir", "run"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seeds", "0,1", "--shard", "0/2", "--shards", "4", *_RUN],
         "--shards 4 goes with --shard slurm (a SLURM array of some shards); --shard 0/2 "
         "names its count already: drop --shards"),
        (["--seeds", "0,1", "--shards", "4", *_RUN],
         "--shards 4 goes with --shard slurm (a SLURM array of some shards); add --shard slurm"),
        (["--shard", "0/2", *_RUN], "--shard 0/2 splits the seeds of --seeds, which is not "
         "given; add e.g. --seeds 0,1,2,3"),
        (["--seeds", "0,1", "--shard", "1/3", *_RUN], "--shard 1/3 splits --seeds 0,1 into 3 "
         "shards, more than its 2 seeds: a shard would train nothing; give at most 2 shards"),
        (["--seeds", "0,1", "--shard", "slurm", *_RUN], "--shard slurm: $SLURM_ARRAY_TASK_ID "
         "is not set: this is not a SLURM array task"),
        (["--seeds", "0,1", "--shard", "0/2", "--resume", *_RUN], "--resume with --shard 0/2: "
         "a shard resumes by itself; run the same command again without --resume"),
        (["--merge", "DIR", "--steps", "1000", *_RUN], "--merge DIR takes no other option (it "
         "reads the shards' own): drop --output-dir, --steps"),
        (["--merge", "DIR"], "--merge DIR: no shard folder (shard-I-of-N/) there; pass the "
         "--output-dir the --shard commands trained in"),
    ],
)  # fmt: skip
def test_bad_shard_options_are_one_line_errors_before_any_env(
    argv, message, tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(envs_module, "make_envs", _no_envs)
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "DIR").mkdir()
    assert main(argv) == 2
    assert message in _one_line_error(capsys)
    assert not (tmp_path / "run").exists()  # nothing written


@pytest.mark.parametrize("shard", ["2/2", "x", "1/0", "0"])
def test_a_shard_that_is_not_i_of_n_is_a_usage_error(shard, capsys):
    with pytest.raises(SystemExit):
        parse_args(["--seeds", "0,1", "--shard", shard])
    err = capsys.readouterr().err
    assert f"argument --shard: '{shard}' is not a shard: give I/N with 0 <= I < N" in err


def test_seed_and_seeds_together_are_refused(capsys):
    assert main(["--seed", "3", "--seeds", "0,1"]) == 2
    assert "--seed 3 and --seeds 0,1: give one" in capsys.readouterr().err


@pytest.fixture
def no_menagerie(tmp_path, monkeypatch):
    """Playground's Menagerie folder absent (a path in tmp_path), and its git clone a
    test failure: nothing may reach the network."""
    from mujoco_playground._src import mjx_env

    path = tmp_path / "external_deps" / "mujoco_menagerie"
    monkeypatch.setattr(mjx_env, "MENAGERIE_PATH", path)
    monkeypatch.delenv("NNX_PPO_MENAGERIE", raising=False)

    def no_clone(*args, **kwargs):
        raise AssertionError("Playground's git clone ran")

    monkeypatch.setattr(mjx_env, "_clone_with_progress", no_clone)
    return path


def test_a_menagerie_env_offline_fails_in_one_line_before_anything_is_built(
    no_menagerie, tmp_path, capsys, monkeypatch
):
    from nnx_ppo_quickstart import assets

    monkeypatch.setattr(assets, "_reachable", lambda *args: False)  # the network blocked
    began = time.perf_counter()
    out = tmp_path / "run"
    assert main(["--env", "Go1JoystickFlatTerrain", "--output-dir", str(out)]) == 2
    assert time.perf_counter() - began < 30  # no clone attempted, nothing compiled
    err = _one_line_error(capsys)
    assert "--env Go1JoystickFlatTerrain needs MuJoCo Menagerie" in err
    assert f"loads from {no_menagerie}" in err and "cannot be reached" in err
    assert "git clone https://github.com/deepmind/mujoco_menagerie.git DIR" in err
    assert "set NNX_PPO_MENAGERIE=DIR" in err
    assert not out.exists()


def test_a_failed_menagerie_download_is_one_line(no_menagerie, tmp_path, capsys, monkeypatch):
    from mujoco_playground._src import mjx_env
    from nnx_ppo_quickstart import assets

    def clone_fails(*args, **kwargs):  # as git clone fails: Playground's own error
        raise subprocess.CalledProcessError(128, ["git", "clone"])

    monkeypatch.setattr(assets, "_reachable", lambda *args: True)
    monkeypatch.setattr(mjx_env, "_clone_with_progress", clone_fails)
    out = tmp_path / "run"
    assert main(["--env", "G1JoystickFlatTerrain", "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after Playground's own line
    assert err.startswith("nnx-ppo-quickstart: error: --env G1JoystickFlatTerrain needs")
    assert "downloading it failed (Command '['git', 'clone']' returned" in err
    assert "Traceback" not in err and not out.exists()


def test_a_local_menagerie_copy_is_linked_where_playground_looks(
    no_menagerie, tmp_path, monkeypatch
):
    from nnx_ppo_quickstart.assets import ensure_menagerie

    monkeypatch.setenv("NNX_PPO_MENAGERIE", str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match=r"NNX_PPO_MENAGERIE=\S+nowhere names no folder"):
        ensure_menagerie("Go1JoystickFlatTerrain")
    copy = tmp_path / "menagerie_copy"
    (copy / "unitree_go1").mkdir(parents=True)
    monkeypatch.setenv("NNX_PPO_MENAGERIE", str(copy))
    ensure_menagerie("Go1JoystickFlatTerrain")
    assert no_menagerie.resolve() == copy.resolve()
    assert (no_menagerie / "unitree_go1").is_dir()
    ensure_menagerie("CartpoleBalance")  # a task without robot assets: nothing to do


@pytest.mark.extended  # a tiny run in a subprocess (~40 s)
def test_progress_reaches_a_pipe_while_training(tmp_path):
    # As under nohup or a batch scheduler: stdout and stderr into a pipe, read as the
    # lines come. They must arrive while the run goes (flushed, not at its exit), the
    # compilation with its duration, then progress at least every 30 s of training.
    shown = [word for word in TINY if word != "--no-progress"]
    argv = [sys.executable, "-m", "nnx_ppo_quickstart.cli", *shown, "--output-dir", "run"]
    arrived = []
    with subprocess.Popen(
        argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as process:
        for line in process.stdout:
            arrived.append((time.monotonic(), line.rstrip("\n")))
    assert process.returncode == 0, "\n".join(text for _, text in arrived)
    texts = [text for _, text in arrived]
    compiling = texts.index("train_ppo: compiling the training program ...")
    compiled = next(i for i, text in enumerate(texts) if text.startswith("train_ppo: compiled"))
    took = float(re.search(r"compiled in (\d+\.\d) s", texts[compiled]).group(1))
    # Streamed: the compile line came when compiling began, not with the rest at exit.
    assert arrived[compiled][0] - arrived[compiling][0] >= 0.5 * took
    progress = [(t, text) for t, text in arrived if text.startswith("train_ppo: step ")]
    assert progress and progress[-1][1].startswith("train_ppo: step 2.40k/2.40k (100%)")
    times = [arrived[compiled][0]] + [t for t, _ in progress]
    assert max(b - a for a, b in itertools.pairwise(times)) <= 30.0, texts
    assert texts[-1].startswith("Done: 2,400 steps")
