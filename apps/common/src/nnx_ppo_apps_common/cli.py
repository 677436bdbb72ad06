"""Command-line pieces every app's CLI uses: integer argument types, the error exit and
the JSON-able record of the parsed arguments.

Examples:
    >>> import argparse
    >>> parser = argparse.ArgumentParser(prog="demo")
    >>> _ = parser.add_argument("--steps", type=positive_int)
    >>> parser.parse_args(["--steps", "1_000_000"]).steps
    1000000
    >>> parser.parse_args(["--steps", "1e7"]).steps, parser.parse_args(["--steps", "30k"]).steps
    (10000000, 30000)
"""

from __future__ import annotations

import argparse
import decimal
import sys
from pathlib import Path
from typing import Any

__all__ = [
    "HelpFormatter",
    "arguments_record",
    "fail",
    "non_negative_int",
    "parse_count",
    "positive_int",
    "seed_list",
]


_SUFFIXES = {"k": 10**3, "m": 10**6, "g": 10**9, "b": 10**9}


def parse_count(text: str) -> int:
    """A count as people write it: ``150000``, ``150_000``, ``1e7``, ``1.5e5``, ``30k``,
    ``2.5M`` or ``1G`` (suffixes ``k`` = 10^3, ``M`` = 10^6, ``G`` or ``B`` = 10^9, in
    either case); the value must be a whole number.

    Raises:
        argparse.ArgumentTypeError: If ``text`` is none of these, or not a whole number
            (``1.5k`` is 1500, ``1.2345k`` is refused); as an argparse ``type`` argparse
            turns it into a usage error naming the option.

    Examples:
        >>> [parse_count(t) for t in ("150000", "150_000", "1e7", "30k", "2.5M", "1G")]
        [150000, 150000, 10000000, 30000, 2500000, 1000000000]
        >>> parse_count("1.2345k")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: '1.2345k' is not an integer (1234.5)
    """
    cleaned = text.strip().replace("_", "")
    scale = _SUFFIXES.get(cleaned[-1:].lower(), 1) if cleaned else 1
    number = cleaned[:-1] if scale != 1 else cleaned
    try:
        value = decimal.Decimal(number) * scale
    except decimal.InvalidOperation:
        value = None
    if value is None or not value.is_finite():
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an integer: give a count such as 150000, 150_000, 1e7, "
            "1.5e5, 30k or 2.5M"
        )
    if value != value.to_integral_value():
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer ({value.normalize()})")
    return int(value)


def _integer(text: str) -> int:
    return parse_count(text)


def positive_int(text: str) -> int:
    """An argparse ``type``: an integer ``> 0``, written as `parse_count` reads it
    (``150000``, ``150_000``, ``1e7``, ``30k``).

    Raises:
        argparse.ArgumentTypeError: If ``text`` is not an integer or not positive
            (argparse turns it into a usage error naming the option).
    """
    value = _integer(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value} must be positive")
    return value


def non_negative_int(text: str) -> int:
    """An argparse ``type``: an integer ``>= 0`` (a seed), written as `parse_count` reads
    it.

    Raises:
        argparse.ArgumentTypeError: If ``text`` is not an integer or is negative.
    """
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must be >= 0")
    return value


def seed_list(text: str) -> list[int]:
    """An argparse ``type``: comma-separated distinct seeds ``>= 0`` (``"0,1,2"``).

    Raises:
        argparse.ArgumentTypeError: For no seed, a seed that is not an integer ``>= 0``
            (named), or a repeated seed.

    Examples:
        >>> seed_list("0,1, 2")
        [0, 1, 2]
        >>> seed_list("3,3")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: '3,3' repeats a seed; give distinct seeds, e.g. 0,1,2
    """
    seeds = [non_negative_int(part.strip()) for part in text.split(",") if part.strip()]
    if not seeds:
        raise argparse.ArgumentTypeError(f"{text!r} names no seed; give e.g. 0,1,2")
    if len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(
            f"{text!r} repeats a seed; give distinct seeds, e.g. 0,1,2"
        )
    return seeds


def fail(prog: str, message: str) -> int:
    """Print ``prog: error: message`` to stderr, as argparse does; return exit code 2.

    Apps return it from ``main`` for mistakes found after parsing (an impossible
    combination of sizes, an unknown environment), so the user sees one line, not a
    traceback.

    Examples:
        >>> import contextlib, io
        >>> err = io.StringIO()
        >>> with contextlib.redirect_stderr(err):
        ...     code = fail("demo", "--n-envs 100 is not a multiple of 8")
        >>> code, err.getvalue()
        (2, 'demo: error: --n-envs 100 is not a multiple of 8\\n')
    """
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


def arguments_record(args: argparse.Namespace) -> dict[str, Any]:
    """The parsed command line as a JSON-able dict, to store next to a run's results:
    paths become strings and every other value is kept as it is (numbers, flags, lists
    of numbers or names, ``None``), so ``config.json`` holds typed values.

    Examples:
        >>> args = argparse.Namespace(steps=100, output_dir=Path("out"), seeds=[0, 1])
        >>> arguments_record(args)
        {'steps': 100, 'output_dir': 'out', 'seeds': [0, 1]}
    """
    return {
        name: str(value) if isinstance(value, Path) else value for name, value in vars(args).items()
    }


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` that states every option's default once, as the user would type it.

    argparse's `ArgumentDefaultsHelpFormatter` appends ``(default: %(default)s)`` to
    every option, which prints ``(default: None)`` after an option whose absence means
    something ("the latest checkpoint") and a second default after a help text that
    states its own. This one appends the default unless the help text already states one
    (it contains ``(default``, so an option whose default is made at run time or is
    ``None`` says what it means), shows a flag's default as ``on`` or ``off``, a
    required option as ``(required)``, and a tuple or list as the comma-separated names
    the option reads. Write ``%%`` for a literal percent sign in a help text, as argparse
    expects; ``--help`` then prints one.

    Examples:
        >>> parser = argparse.ArgumentParser(prog="demo", formatter_class=HelpFormatter)
        >>> _ = parser.add_argument("--steps", type=int, default=100, help="env steps")
        >>> _ = parser.add_argument("--step", type=int, help="checkpoint (default: latest)")
        >>> _ = parser.add_argument("--quiet", action="store_true", help="print less")
        >>> _ = parser.add_argument("--stagger", action=argparse.BooleanOptionalAction,
        ...                         default=True, help="staggered starts")
        >>> _ = parser.add_argument("--seeds", default=(0, 1), help="run seeds")
        >>> _ = parser.add_argument("--out", required=True, help="folder to write")
        >>> _ = parser.add_argument("--ci", default=0.95, help="a 95%% interval")
        >>> for line in parser.format_help().split("options:")[1].splitlines()[2:]:
        ...     print(" ".join(line.split()))
        --steps STEPS env steps (default: 100)
        --step STEP checkpoint (default: latest)
        --quiet print less (default: off)
        --stagger, --no-stagger
        staggered starts (default: on)
        --seeds SEEDS run seeds (default: 0, 1)
        --out OUT folder to write (required)
        --ci CI a 95% interval (default: 0.95)
    """

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if isinstance(action, argparse.BooleanOptionalAction):
            # Python < 3.13 appends its own "(default: %(default)s)"; "on"/"off" reads better.
            text = text.replace(" (default: %(default)s)", "")
            if "(default" not in text and isinstance(action.default, bool):
                return f"{text} (default: {'on' if action.default else 'off'})"
        if "(default" in text or action.default is argparse.SUPPRESS:
            return text
        if action.required:
            return f"{text} (required)"
        if not action.option_strings:  # a positional argument: the user always gives it
            return text
        if action.nargs == 0 and action.default is False:  # a store_true flag
            return f"{text} (default: off)"
        if isinstance(action.default, tuple | list):
            shown = ", ".join(str(item) for item in action.default)
            return f"{text} (default: {shown.replace('%', '%%')})"
        return f"{text} (default: %(default)s)"
