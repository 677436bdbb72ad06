"""Tests of the helpers the apps share (run by `nox -s apps`)."""

from __future__ import annotations

import argparse
import doctest
import json
import math
import re
from pathlib import Path

import pytest
from nnx_ppo_apps_common import cli, compiles, options, plotting, results, training
from nnx_ppo_apps_common.cli import arguments_record, fail, non_negative_int, positive_int
from nnx_ppo_apps_common.options import given_options, options_argv, read_options_file
from nnx_ppo_apps_common.plotting import plot_learning_curve
from nnx_ppo_apps_common.results import done_message, throughput, write_json
from nnx_ppo_apps_common.training import TrainingDefaults, add_training_arguments, train_config


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", 1), ("150_000", 150_000), ("007", 7), ("1e7", 10_000_000),
        ("1.5e5", 150_000), ("30k", 30_000), ("30K", 30_000), ("2.5M", 2_500_000),
        ("1G", 10**9), ("2b", 2 * 10**9), ("1_000k", 10**6),
    ],
)  # fmt: skip
def test_positive_int_accepts_counts_as_people_write_them(text, value):
    assert positive_int(text) == value


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (positive_int, "0", "0 must be positive"),
        (positive_int, "-5", "-5 must be positive"),
        (positive_int, "1.5", r"'1.5' is not an integer \(1.5\)"),
        (positive_int, "1.2345k", r"'1.2345k' is not an integer \(1234.5\)"),
        (positive_int, "1e-3", r"'1e-3' is not an integer \(0.001\)"),
        (
            positive_int,
            "10x",
            "'10x' is not an integer: give a count such as 150000, "
            r"150_000, 1e7, 1.5e5, 30k or 2.5M",
        ),
        (positive_int, "inf", "'inf' is not an integer: .*"),
        (non_negative_int, "-1", "-1 must be >= 0"),
        (non_negative_int, "seven", "'seven' is not an integer: .*"),
    ],
)
def test_bad_integers_are_usage_errors(parse, text, message):
    with pytest.raises(argparse.ArgumentTypeError, match=f"^{message}$"):
        parse(text)


def test_non_negative_int_accepts_zero():
    assert non_negative_int("0") == 0


def test_parser_reports_the_option_and_exits_2(capsys):
    parser = argparse.ArgumentParser(prog="demo")
    parser.add_argument("--steps", type=positive_int)
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["--steps", "-5"])
    assert exc.value.code == 2
    assert "argument --steps: -5 must be positive" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parser.parse_args(["--steps", "1e7.5"])
    assert "argument --steps: '1e7.5' is not an integer" in capsys.readouterr().err
    assert parser.parse_args(["--steps", "1e7"]).steps == 10_000_000


def test_fail_prints_one_line_and_returns_2(capsys):
    assert fail("nnx-ppo-demo", "--delay 30 must be smaller than --episode-length 20") == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "nnx-ppo-demo: error: --delay 30 must be smaller than --episode-length 20\n"
    )


def test_arguments_record_round_trips_through_json():
    args = argparse.Namespace(steps=100, rate=1e-3, out=Path("a/b"), seeds=[0, 1], draw=None)
    record = arguments_record(args)
    assert json.loads(json.dumps(record)) == {
        "steps": 100, "rate": 1e-3, "out": "a/b", "seeds": [0, 1], "draw": None,
    }  # fmt: skip


def test_write_json_replaces_the_file_whole(tmp_path):
    path = tmp_path / "summary.json"
    write_json(path, {"steps": 1})
    write_json(path, {"steps": 2, "returns": [1.5]})
    assert path.read_text() == '{\n  "steps": 2,\n  "returns": [\n    1.5\n  ]\n}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]  # no temporary left


def test_write_json_failure_keeps_the_previous_file(tmp_path):
    path = tmp_path / "results.json"
    write_json(path, {"runs": {}})
    with pytest.raises(TypeError):
        write_json(path, {"runs": object()})
    assert json.loads(path.read_text()) == {"runs": {}}
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_throughput_rounds_and_survives_a_zero_wall_time():
    # 150,000 steps / 61.234 s = 2449.6 steps/s.
    assert throughput(150_000, 61.234) == {
        "steps": 150_000, "wall_time_s": 61.2, "steps_per_second": 2449.6,
    }  # fmt: skip
    assert throughput(10, 0.0)["steps_per_second"] == 0.0


def test_done_message_without_an_evaluation():
    message = done_message(throughput(2400, 12.0), math.nan, Path("run"))
    assert message.startswith("Done: 2,400 steps in 12 s (200 steps/s,")
    assert message.endswith("final eval return nan. Results in run/")


def test_learning_curve_png(tmp_path):
    import matplotlib.image

    history = [
        (0, {"eval/episode_reward/mean": 1.0, "eval/episode_reward/std": 0.5}),
        (100, {"eval/episode_reward/mean": 3.0}),  # no std: a zero-width band
    ]
    path = tmp_path / "curve.png"
    plot_learning_curve(history, path, "demo")
    image = matplotlib.image.imread(path)
    assert image.shape[:2] == (420, 720)  # 6 x 3.5 inches at 120 dpi
    assert image[..., :3].std() > 0  # something was drawn


def test_learning_curve_needs_the_mean(tmp_path):
    with pytest.raises(KeyError, match="eval/episode_reward/mean"):
        plot_learning_curve([(0, {"eval/episode_length/mean": 3.0})], tmp_path / "c.png", "x")


def test_docstring_examples_run():
    for module in (cli, compiles, options, plotting, results, training):
        outcome = doctest.testmod(module)
        assert outcome.failed == 0, module.__name__


def _training_parser(**defaults):
    parser = argparse.ArgumentParser(prog="demo")
    add_training_arguments(parser, TrainingDefaults(**defaults))
    return parser


def test_training_options_carry_the_app_defaults_into_the_config():
    args = _training_parser(
        steps=50_000, n_envs=64, n_minibatches=4, learning_rate=3e-3, discount=0.5,
        episode_length=20, eval_every=5_000, eval_envs=32,
    ).parse_args([])  # fmt: skip
    config = train_config(args, seed=7)
    ppo, evaluation = config.ppo, config.eval
    assert (ppo.total_steps, ppo.n_envs, ppo.rollout_length) == (50_000, 64, 20)
    assert (ppo.n_minibatches, ppo.n_epochs) == (4, 4)
    assert (ppo.learning_rate, ppo.discounting_factor) == (3e-3, 0.5)
    assert (evaluation.every_steps, evaluation.n_envs) == (5_000, 32)
    assert evaluation.max_episode_length == 20
    assert config.seed == 7


def test_training_options_from_the_command_line_and_extra_ppo_fields():
    from nnx_ppo.algorithms import LogLevel

    args = _training_parser(steps=1_000, n_envs=8).parse_args(
        ["--steps", "2_400", "--n-envs", "16", "--n-minibatches", "2", "--discount", "0.9"]
    )
    level = LogLevel.DEFAULT | LogLevel.ENV_METRICS
    config = train_config(args, seed=0, log_level=level)
    assert (config.ppo.total_steps, config.ppo.n_envs, config.ppo.n_minibatches) == (2400, 16, 2)
    assert config.ppo.discounting_factor == 0.9
    assert config.ppo.log_level == level


def test_training_options_reject_bad_numbers_and_sizes(capsys):
    parser = _training_parser(steps=1_000, n_envs=8)
    with pytest.raises(SystemExit):
        parser.parse_args(["--eval-envs", "0"])
    assert "argument --eval-envs: 0 must be positive" in capsys.readouterr().err
    # 100 environments cannot be split into 8 minibatches: the config names both.
    args = parser.parse_args(["--n-envs", "100"])
    with pytest.raises(ValueError, match="100") as info:
        train_config(args, seed=0)
    assert "8" in str(info.value)


def _options_parser():
    parser = argparse.ArgumentParser(prog="demo")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--rate", type=float, default=1e-3)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--fast", action="store_true")
    parser.add_argument("--n-envs", type=int, default=4)
    return parser


def test_given_options_tells_a_default_given_again_from_one_left_out():
    parser = _options_parser()
    assert given_options(parser, []) == {}
    assert given_options(parser, ["--rate", "1e-3", "--seeds", "0"]) == {
        "rate": 1e-3, "seeds": [0],
    }  # fmt: skip
    assert parser.parse_args([]).rate == 1e-3  # the parser is unchanged


def test_options_argv_round_trips_a_record_through_the_parser():
    parser = _options_parser()
    record = arguments_record(parser.parse_args(["--seeds", "-1", "2", "--rate", "-0.1", "--fast"]))
    record["out"] = "a/b"
    words = options_argv(json.loads(json.dumps(record)), parser, source="x")
    assert vars(parser.parse_args(words)) == {
        "seeds": [-1, 2], "rate": -0.1, "out": Path("a/b"), "fast": True, "n_envs": 4,
    }  # fmt: skip
    # None leaves the default; false leaves a flag off; "True" (an untyped record) is on.
    assert options_argv({"out": None, "fast": False}, parser, source="x") == []
    assert options_argv({"fast": "True"}, parser, source="x") == ["--fast"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"rat": 1}, "f.toml: unknown option 'rat' (did you mean 'rate'?); valid options: "
         "fast, n_envs, out, rate, seeds"),
        ({"zzz": 1}, "f.toml: unknown option 'zzz'; valid options: "),
        ({"fast": "yes"},
         "f.toml: 'fast' is a flag (--fast); its value must be true or false, not 'yes'"),
        ({"rate": {"value": 1}}, "f.toml: 'rate' is a table; give --rate's value"),
        ({"rate": "fast"}, "f.toml: argument --rate: invalid float value: 'fast'"),
    ],
)  # fmt: skip
def test_options_argv_refuses_what_the_parser_would_not_take(options, message):
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        options_argv(options, _options_parser(), source="f.toml")


def test_options_argv_takes_either_spelling_but_not_both():
    parser = _options_parser()
    assert options_argv({"n-envs": 8}, parser, source="f") == ["--n-envs=8"]
    assert options_argv({"n_envs": 8}, parser, source="f") == ["--n-envs=8"]
    message = "f sets 'n_envs' twice, as 'n_envs' and as 'n-envs'; keep one"
    with pytest.raises(ValueError, match=re.escape(message)):
        options_argv({"n_envs": 8, "n-envs": 16}, parser, source="f")


def test_read_options_file_reads_toml_and_json(tmp_path):
    (tmp_path / "a.toml").write_text('rate = 3e-4\nseeds = [1, 2]\nout = "x"\n')
    (tmp_path / "a.json").write_text('{"rate": 0.0003}')
    assert read_options_file(tmp_path / "a.toml") == {"rate": 3e-4, "seeds": [1, 2], "out": "x"}
    assert read_options_file(tmp_path / "a.json") == {"rate": 3e-4}
    with pytest.raises(ValueError, match=r"a\.yaml is not valid JSON"):
        (tmp_path / "a.yaml").write_text("rate: 1")
        read_options_file(tmp_path / "a.yaml")
    with pytest.raises(ValueError, match="cannot read it"):
        read_options_file(tmp_path / "none.toml")


_TWICE = """
import jax, jax.numpy as jnp
from nnx_ppo_apps_common.compiles import CompileLog
from nnx_ppo_apps_common.runs import use_compilation_cache
cache = use_compilation_cache()
with CompileLog() as log:
    def doubled(x):
        return 2.0 * x
    jax.jit(doubled)(jnp.arange(3.0)).block_until_ready()
print(log.summary()["names"].get("jit(doubled)"), log.cache_hits > 0)
print(log.note(cache))
"""


def test_a_second_process_loads_its_programs_from_the_cache_and_says_so(tmp_path):
    # The same program in two processes sharing a cache folder: the first compiles
    # `doubled` (one program of that name), the second loads it from the folder, and
    # the note names the folder and the count.
    import os
    import subprocess
    import sys

    env = {**os.environ, "NNX_PPO_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    lines = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", _TWICE], env=env, capture_output=True,
                              text=True, check=True, timeout=120)  # fmt: skip
        lines.append(done.stdout.splitlines())
    assert lines[0][0] == "1 False" and lines[1][0] == "1 True"
    loaded = re.fullmatch(r"Compiled (\d+) programs in [\d.]+ s \((\d+) loaded from the "
                          r"compilation cache in (.+)\)", lines[1][1])  # fmt: skip
    assert loaded is not None and loaded[3] == str(tmp_path / "cache")
    assert 1 <= int(loaded[2]) <= int(loaded[1])
    assert re.search(r"\(0 loaded from the compilation cache", lines[0][1])
