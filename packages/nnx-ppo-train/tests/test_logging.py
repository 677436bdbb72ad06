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


def test_progress_bar_shows_sps_and_latest_eval(capsys):
    import io

    from nnx_ppo.algorithms.core.logging import ProgressBar

    out = io.StringIO()
    bar = ProgressBar(100, disable=False, file=out)
    bar({"eval/episode_reward/mean": 12.5}, 10)
    bar({"throughput/sps": 1234.0}, 50)
    bar.close()
    text = out.getvalue()
    assert "50.0/100" in text and "sps=1.23e+03" in text and "eval=12.5" in text


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
