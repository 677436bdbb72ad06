"""``--help`` of ``nnx-ppo-export``, ``nnx-ppo-play`` and ``nnx-ppo-export-latency``:
every argument has a help text and every option states its default once."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from nnx_ppo_export import cli, latency, play


def _help_entries(parse_args: Callable[[list[str]], Any], capsys: Any) -> dict[str, str]:
    """``{argument: its help entry on one line}`` from ``--help``'s output."""
    with pytest.raises(SystemExit) as exc:
        parse_args(["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    entries = {}
    # Each section lists one entry per argument: its line and the indented lines after it.
    for section in re.split(r"\n(?:positional arguments|options):\n", text)[1:]:
        for entry in re.split(r"\n  (?=\S)", "\n" + section.strip("\n")):
            words = entry.split()
            if words:
                entries[words[0].rstrip(",")] = " ".join(words)
    usage = re.findall(r"\[(--[a-z-]+)", text.split("\n\n", 1)[0])
    assert set(usage) <= set(entries), "an option in the usage line has no help entry"
    return entries


@pytest.mark.parametrize(
    ("parse_args", "expected"),
    [
        (
            cli.parse_args,
            {
                "CHECKPOINT_DIR": "the --output-dir of an nnx-ppo-quickstart run",
                "--format": "(required)",
                "--out": "(required)",
                "--step": "checkpoint step (default: latest)",
                "--overwrite": "(default: off)",
                "--opset": "(default: 17)",
                "--record-envs": "(default: 1)",
            },
        ),
        (
            play.parse_args,
            {
                "RUN_DIR": "the --output-dir of an nnx-ppo-quickstart run",
                "--episodes": "(default: 5)",
                "--seed": "seed of the episodes' resets (default: 0)",
                "--randomized": "(default: off)",
                "--video": "(default: no video)",
            },
        ),
        (latency.parse_args, {"--steps": "(default: 2000)", "--warmup": "(default: 200)"}),
    ],
    ids=["nnx-ppo-export", "nnx-ppo-play", "nnx-ppo-export-latency"],
)
def test_help_states_every_option_and_its_default_once(
    parse_args: Callable[[list[str]], Any], expected: dict[str, str], capsys: Any
) -> None:
    entries = _help_entries(parse_args, capsys)
    for name, entry in entries.items():
        assert "(default: None)" not in entry and "%%" not in entry, entry
        if name == "-h":
            continue
        words = entry.split()[1:]
        if words and words[0].isupper():  # the metavar
            words = words[1:]
        if words and words[0].startswith("{"):  # choices as the metavar
            words = words[1:]
        description = " ".join(words)
        assert description and not description.startswith("("), f"{name}: no help text"
        if name.startswith("--"):
            states = entry.count("(default") + entry.count("(required)")
            assert states == 1, f"{name} must state its default once: {entry}"
    for name, part in expected.items():
        assert part in entries[name], (name, entries[name])
