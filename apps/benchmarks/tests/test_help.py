"""``--help`` of ``nnx-ppo-bench`` and ``nnx-ppo-learning``: every option has a help
text and states its default once, as the user would type it."""

from __future__ import annotations

import re
from typing import Any

import pytest
from nnx_ppo_benchmarks import cli
from nnx_ppo_benchmarks.learning import cli as learning_cli


def _help_entries(parser: Any, capsys: Any) -> dict[str, str]:
    """``{option: its help entry on one line}`` from ``--help``'s output."""
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    section = text.split("\noptions:\n", 1)[1]
    # One entry per option: its line and the indented lines that continue it.
    entries = [" ".join(e.split()) for e in re.split(r"\n  (?=-)", "\n" + section) if e.strip()]
    usage = re.findall(r"\[(--[a-z-]+)", text.split("\n\n", 1)[0])
    by_name = {entry.split()[0].rstrip(","): entry for entry in entries}
    assert set(usage) <= set(by_name), "an option in the usage line has no help entry"
    return by_name


@pytest.mark.parametrize(
    ("build_parser", "expected"),
    [
        (
            cli.build_parser,
            {
                "--seed": "seed of repeat 0 (every implementation) (default: 0)",
                "--n-minibatches": "(default: 8)",
                "--networks": "(default: mlp_small, mlp_default, lstm, graph)",
                "--iterations-per-call": "(default: the trainer's)",
                "--report-only": "(default: off)",
            },
        ),
        (
            learning_cli.build_parser,
            {
                "--seeds": "(default: 100, 101, 102, 103, 104)",
                "--steps": "(default: each task's own)",
                "--stagger": "(default: on)",
                "--rerun": "(default: off)",
            },
        ),
    ],
    ids=["nnx-ppo-bench", "nnx-ppo-learning"],
)
def test_help_states_every_option_and_its_default_once(
    build_parser: Any, expected: dict[str, str], capsys: Any
) -> None:
    entries = _help_entries(build_parser(), capsys)
    for name, entry in entries.items():
        assert "(default: None)" not in entry and "%%" not in entry, entry
        if name == "-h":
            continue
        words = entry.split()[1:]
        while words and (words[0].isupper() or words[0].startswith(("{", "--"))):
            words = words[1:]  # the metavar, the choices, a --no- twin
        assert words and not words[0].startswith("("), f"{name}: no help text"
        assert entry.count("(default") == 1, f"{name} must state its default once: {entry}"
    for name, part in expected.items():
        assert part in entries[name], (name, entries[name])
