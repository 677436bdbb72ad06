"""Logging sinks: JSONL (and its rewind on resume), progress bar, TensorBoard."""

from __future__ import annotations

import json

import pytest


def test_jsonl_writer_writes_strict_json(tmp_path):
    from nnx_ppo.algorithms.core.logging import JSONLWriter

    path = tmp_path / "sub" / "metrics.jsonl"
    with JSONLWriter(path) as log:
        log({"a": 1.5, "b": float("nan")}, 10)
        log({"a": 2.0}, 2**40)  # steps beyond int32 and float32 stay exact
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == [{"step": 10, "a": 1.5, "b": None}, {"step": 2**40, "a": 2.0}]


def test_progress_bar_shows_one_rate_and_latest_eval(capsys):
    import io

    from nnx_ppo.algorithms.core.logging import ProgressBar

    out = io.StringIO()
    bar = ProgressBar(100, disable=False, file=out)
    bar({"eval/episode_reward/mean": 12.5}, 10)
    bar({"throughput/sps": 1234.0}, 50)
    bar.close()
    text = out.getvalue()
    assert "50.0/100" in text and "1.23k steps/s, eval 12.5" in text
    assert "step/s" not in text and "sps=" not in text  # tqdm's own rate is not shown


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_progress_lines_where_the_output_is_no_terminal():
    import io
    import re

    from nnx_ppo.algorithms.core.logging import ProgressBar

    out = io.StringIO()  # not a terminal: plain lines, no bar
    bar = ProgressBar(1_000_000, file=out, description="quickstart", line_every_s=30.0)
    bar._clock = clock = _Clock()
    bar({"eval/episode_reward/mean": 1.5}, 0)  # an evaluation before training: no line
    clock.now = 2.0
    bar.compiling()
    clock.now = 14.5
    bar.compiled()
    # One device call per 10 s of 100k steps; a line after the compilation, then one
    # when 30 s have passed since the last, then at the end.
    for call in range(1, 11):
        clock.now = 14.5 + 10.0 * call
        bar(
            {
                "throughput/sps": 10_000.0,
                **({"eval/episode_reward/mean": 7.25} if call == 5 else {}),
            },
            100_000 * call,
        )
    bar.close()
    lines = out.getvalue().splitlines()
    assert lines[:2] == [
        "quickstart: compiling the training program ...",
        "quickstart: compiled in 12.5 s",
    ]
    progress = lines[2:]
    assert progress[0] == (
        "quickstart: step 100k/1.00M (10%), 10.0k steps/s, eval return 1.5, "
        "elapsed 00:10, ETA 01:30"
    )
    steps = [int(re.search(r"step (\d+)k", line).group(1)) for line in progress[:-1]]
    assert steps == [100, 400, 700]  # every 30 s of training (each call lasts 10 s)
    assert progress[-1] == (
        "quickstart: step 1.00M/1.00M (100%), 10.0k steps/s, eval return 7.25, elapsed 01:40"
    )
    assert "\r" not in out.getvalue() and "|" not in out.getvalue()  # no bar drawn


def test_no_progress_lines_when_switched_off_or_on_a_bar():
    import io

    from nnx_ppo.algorithms.core.logging import ProgressBar

    for disable in (True, False):
        out = io.StringIO()
        bar = ProgressBar(100, file=out, disable=disable)
        bar.compiling()
        bar.compiled()
        bar({"throughput/sps": 5.0}, 100)
        bar.close()
        assert "compiled in" not in out.getvalue() and "step 100" not in out.getvalue()


def test_tensorboard_writer_and_combine(tmp_path):
    from nnx_ppo.algorithms.core.logging import TensorBoardWriter, combine

    pytest.importorskip("tensorboardX")
    seen = []
    tb = TensorBoardWriter(tmp_path / "tb")
    log = combine(tb, None, lambda m, s: seen.append((dict(m), s)))
    log({"loss/total": 0.5}, 7)
    written = []
    real_add = tb._writer.add_scalar
    tb._writer.add_scalar = lambda *args: written.append(args) or real_add(*args)
    # No episode ended: the NaN is left out, the finite value is written.
    log({"rollout/episode_reward": float("nan"), "loss/total": 0.25}, 8)
    assert written == [("loss/total", 0.25, 8)]
    tb.close()
    assert seen[0] == ({"loss/total": 0.5}, 7)
    assert any(p.name.startswith("events.out.tfevents") for p in (tmp_path / "tb").iterdir())
    with pytest.raises(TypeError, match="not callable"):
        combine("loss.txt")


def test_jsonl_writer_rewinds_to_the_resume_step(tmp_path):
    from nnx_ppo.algorithms.core.logging import JSONLWriter

    path = tmp_path / "metrics.jsonl"
    with JSONLWriter(path) as log:
        for step in (16, 32, 48, 64):
            log({"loss/total": float(step)}, step)
    with open(path, "a") as file:
        file.write('{"step": 80, "loss/to')  # a line cut short by a crash
    with JSONLWriter(path, resume_from=32) as log:
        log({"loss/total": -48.0}, 48)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert records == [
        {"step": 16, "loss/total": 16.0},
        {"step": 32, "loss/total": 32.0},
        {"step": 48, "loss/total": -48.0},
    ]
    # Without resume_from (a fresh run) the file is appended to as it is.
    with JSONLWriter(path) as log:
        log({"loss/total": 1.0}, 16)
    assert len(path.read_text().splitlines()) == 4


def test_jsonl_writer_refuses_to_rewind_a_foreign_file(tmp_path):
    from nnx_ppo.algorithms.core.logging import JSONLWriter

    path = tmp_path / "notes.jsonl"
    path.write_text('{"step": 1}\n["not", "a", "record"]\n')
    with pytest.raises(ValueError, match=r"line 2 is not a record of a JSONLWriter"):
        JSONLWriter(path, resume_from=1)
    assert path.read_text() == '{"step": 1}\n["not", "a", "record"]\n'  # untouched
    with pytest.raises(TypeError, match="resume_from=-1 must be a non-negative int"):
        JSONLWriter(path, resume_from=-1)
