"""Options from a file, and the options a command line gives explicitly.

An app's options can come from a TOML or JSON file as well as from its command line
(``--config FILE``): `read_options_file` reads the file's table, and `options_argv` turns
it into command-line words for the app's own parser, so a value in a file is checked and
converted exactly as on the command line, and options given after it override it:

    >>> import argparse
    >>> parser = argparse.ArgumentParser(prog="demo")
    >>> _ = parser.add_argument("--steps", type=int, default=100)
    >>> _ = parser.add_argument("--learning-rate", type=float, default=1e-3)
    >>> _ = parser.add_argument("--no-progress", action="store_true")
    >>> words = options_argv({"learning-rate": 3e-4, "no_progress": True}, parser, source="a.toml")
    >>> words
    ['--learning-rate=0.0003', '--no-progress']
    >>> parser.parse_args([*words, "--steps", "50"])
    Namespace(steps=50, learning_rate=0.0003, no_progress=True)

`given_options` tells an option given explicitly from one left at its default (argparse
fills defaults in, so the parsed namespace alone cannot say):

    >>> given_options(parser, ["--steps", "100"])
    {'steps': 100}
"""

from __future__ import annotations

import argparse
import copy
import difflib
import json
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["given_options", "option_defaults", "options_argv", "read_options_file"]

_NOT_GIVEN = object()


def option_defaults(parser: argparse.ArgumentParser) -> dict[str, Any]:
    """Every option of ``parser`` (by its ``dest``) with its default, as an empty
    command line parses (an option whose default is ``argparse.SUPPRESS`` is left out).
    """
    return vars(parser.parse_args([]))


def given_options(parser: argparse.ArgumentParser, argv: Sequence[str]) -> dict[str, Any]:
    """The options ``argv`` gives explicitly, by ``dest``, with their parsed values.

    ``argv`` is parsed by ``parser`` itself (a usage error exits as usual) into a
    namespace in which every option already holds a marker: argparse leaves the marker
    of an option it does not see, and replaces the others. ``parser`` is not changed.

    Examples:
        >>> parser = argparse.ArgumentParser(prog="demo")
        >>> _ = parser.add_argument("--env", default="pendulum")
        >>> _ = parser.add_argument("--fast", action="store_true")
        >>> given_options(parser, ["--fast"]), given_options(parser, ["--env", "pendulum"])
        ({'fast': True}, {'env': 'pendulum'})
    """
    marked = argparse.Namespace(**dict.fromkeys(option_defaults(parser), _NOT_GIVEN))
    parsed = parser.parse_args(list(argv), namespace=marked)
    return {name: value for name, value in vars(parsed).items() if value is not _NOT_GIVEN}


def read_options_file(path: Path) -> dict[str, Any]:
    """The table of options in a TOML (``.toml``) or JSON file.

    Raises:
        ValueError: If the file cannot be read, is not valid TOML or JSON, or does not
            hold a table at its top level; the message names the file and the fix.
    """
    try:
        text = path.read_text()
    except OSError as error:
        raise ValueError(f"--config {path}: cannot read it ({error.strerror or error})") from None
    try:
        if path.suffix == ".toml":
            data: Any = tomllib.loads(text)
        else:
            data = json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as error:
        kind = "TOML" if path.suffix == ".toml" else "JSON (name a TOML file *.toml)"
        raise ValueError(f"--config {path} is not valid {kind}: {error}") from None
    if not isinstance(data, dict):
        raise ValueError(
            f"--config {path} holds a {type(data).__name__}, not a table of options "
            '(e.g. {"env": "CartpoleBalance", "steps": 300000})'
        )
    return data


def options_argv(
    options: Mapping[str, Any], parser: argparse.ArgumentParser, *, source: str
) -> list[str]:
    """The command-line words that give ``options`` to ``parser``.

    Args:
        options: Option names (``learning_rate``, as `option_defaults` spells them, or
            ``learning-rate``, as the command line does) and their values:
            a string or number for an option with a value (``None``: left out, the
            option keeps its default), a list for an option taking several, ``true`` or
            ``false`` for a flag (``store_true``; ``false`` leaves it off).
        parser: The app's parser; the words are checked and converted by it when
            parsed, as if typed. Its options are those `option_defaults` lists (an
            option whose default is ``argparse.SUPPRESS`` cannot come from a file).
        source: Where ``options`` come from (a file name), for the error messages.

    Raises:
        ValueError: For a name ``parser`` has no option for (with the closest names), a
            name given in both spellings, a flag whose value is not ``true`` or
            ``false``, a table as a value, or a value the option does not take (as
            argparse words it, after ``source``).
    """
    defaults = option_defaults(parser)
    seen: dict[str, str] = {}
    words: list[str] = []
    for key, value in options.items():
        name = str(key).replace("-", "_")
        if name not in defaults:
            close = difflib.get_close_matches(name, list(defaults), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(
                f"{source}: unknown option {key!r}{hint}; valid options: "
                f"{', '.join(sorted(defaults))}"
            )
        if name in seen:
            raise ValueError(
                f"{source} sets {name!r} twice, as {seen[name]!r} and as {key!r}; keep one"
            )
        seen[name] = str(key)
        option = "--" + name.replace("_", "-")
        if value is None:
            continue
        if isinstance(defaults.get(name), bool):  # a flag
            flag = _flag_value(value)
            if flag is None:
                raise ValueError(
                    f"{source}: {key!r} is a flag ({option}); its value must be true or "
                    f"false, not {value!r}"
                )
            words += [option] if flag else []
        elif isinstance(value, dict):
            raise ValueError(
                f"{source}: {key!r} is a table; give {option}'s value (a string, number or "
                "list) at the top level"
            )
        elif isinstance(value, list):
            words += [option, *(_word(item) for item in value)]
        else:
            words += [f"{option}={_word(value)}"]
    strict = copy.copy(parser)  # the same options, raising instead of exiting
    strict.exit_on_error = False
    try:
        strict.parse_args(words)
    except argparse.ArgumentError as error:  # a value the option does not take
        raise ValueError(f"{source}: {error}") from None
    return words


def _flag_value(value: Any) -> bool | None:
    """``value`` as a flag's setting: a bool, or ``"true"``/``"false"`` in any case
    (as records written before typed values stored them); ``None`` if neither."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None


def _word(value: Any) -> str:
    """``value`` as typed on a command line (``repr`` keeps a float exact)."""
    return repr(value) if isinstance(value, float) else str(value)
