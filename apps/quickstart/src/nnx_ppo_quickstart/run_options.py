"""Where a quickstart run's options come from besides the command line: a ``--config``
file, and on ``--resume`` the run's own ``config.json``.

Each source becomes command-line words for the quickstart's parser
(`nnx_ppo_apps_common.options.options_argv`), placed before the command line's own,
so the parser checks every value the same way and the later source wins:

    run's config.json (--resume)  <  --config FILE  <  the command line

On ``--resume`` the run's record is the run: an option given again (on the command
line or in a ``--config`` file) must agree with it, except `MAY_CHANGE_ON_RESUME`;
`PER_INVOCATION` options are never taken from a record.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nnx_ppo_apps_common.options import options_argv, read_options_file

__all__ = ["MAY_CHANGE_ON_RESUME", "PER_INVOCATION", "config_argv", "resume_argv"]

PER_INVOCATION = (
    "output_dir",
    "resume",
    "config",
    "no_progress",
    "no_compile_cache",
    "shard",
    "shards",
    "merge",
)
"""Options about one command, not about the run it trains: a run's ``config.json``
does not pass them on (neither to a ``--resume`` nor to a ``--config`` of it), and a
resume may give them freely. (``--config`` of a shard's ``config.json`` is the whole
``--seeds`` run in one program.)"""

MAY_CHANGE_ON_RESUME = ("steps", "checkpoint_every")
"""Options a resume may change: ``--steps`` may be raised (the run trains on to the new
budget; the state trains on exactly as if that had been the budget from the start,
except that a ``--lr-schedule linear`` rate is stretched to the new budget), and
``--checkpoint-every`` only decides when checkpoints are written."""

_NOT_IN_A_FILE = ("resume", "config")


def config_argv(path: Path, parser: argparse.ArgumentParser) -> list[str]:
    """The words of the options in ``path`` (``--config``): a TOML or JSON table of
    options, or a quickstart run's ``config.json`` (its ``cli`` record, less the
    `PER_INVOCATION` options: a new run with the same settings).

    Raises:
        ValueError: For a file that cannot be read, an unknown option (with the closest
            name), or ``resume`` / ``config`` in a table (command-line-only options).
    """
    data = read_options_file(path)
    source = f"--config {path}"
    if isinstance(data.get("cli"), dict):  # a run's config.json
        options = {k: v for k, v in data["cli"].items() if k not in PER_INVOCATION}
        return options_argv(options, parser, source=source)
    for key in data:
        if str(key).replace("-", "_") in _NOT_IN_A_FILE:
            raise ValueError(
                f"{source}: {key!r} is a command-line option only; remove it from the file "
                f"and pass --{str(key).replace('_', '-')} on the command line"
            )
    return options_argv(data, parser, source=source)


def resume_argv(
    out: Path,
    explicit: Mapping[str, Any],
    origins: Mapping[str, str],
    parser: argparse.ArgumentParser,
) -> list[str]:
    """The words of the options recorded by the run in ``out`` (``--resume``), after
    checking that the options given again agree with them.

    Args:
        out: The run folder (``--output-dir``).
        explicit: The options this command gives (command line and ``--config``), by
            ``dest``, parsed.
        origins: Where each of ``explicit`` comes from ("the command line", "--config
            FILE"), for the message.
        parser: The quickstart's parser.

    Raises:
        ValueError: If ``out`` holds no quickstart run, or options differ from the run's;
            the message names each differing option with both values, and the fix.
    """
    path = out / "config.json"
    try:
        stored = json.loads(path.read_text())["cli"]
        if not isinstance(stored, dict):
            raise TypeError(stored)
    except FileNotFoundError:
        raise ValueError(
            f"--resume: {out} holds no quickstart run (no config.json); train one there "
            "without --resume first"
        ) from None
    except (ValueError, KeyError, TypeError):  # not JSON, or not a quickstart record
        raise ValueError(
            f"--resume: {path} is not a quickstart run's config.json (no 'cli' record)"
        ) from None
    options = {k: v for k, v in stored.items() if k not in PER_INVOCATION}
    words = options_argv(options, parser, source=f"--resume: {path}")
    recorded = {
        name: value
        for name, value in vars(parser.parse_args(words)).items()
        if name in options  # a run from before an option existed does not record it
    }
    differences = []
    for name, value in explicit.items():
        if name in PER_INVOCATION or name not in recorded or value == recorded[name]:
            continue
        option, where = "--" + name.replace("_", "-"), origins[name]
        if name == "steps" and value > recorded[name]:
            continue  # raising the budget trains on
        if name == "steps":
            differences.append(
                f"--steps {value} ({where}) is below the run's budget {recorded[name]}: a "
                "resume may raise --steps, not lower it"
            )
        elif name not in MAY_CHANGE_ON_RESUME:
            differences.append(
                f"{option} {_shown(recorded[name])} in the run, {_shown(value)} ({where})"
            )
    if differences:
        raise ValueError(
            f"--resume: this command's options differ from the run in {out}: "
            + "; ".join(differences)
            + ". A resume takes the run's options from its config.json: leave these "
            "options out to continue the run, or train a new run with them in another "
            "--output-dir"
        )
    return words


def _shown(value: Any) -> str:
    """An option's value as the message shows it (a flag: on or off)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)
