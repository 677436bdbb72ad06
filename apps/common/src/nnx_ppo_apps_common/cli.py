"""Command-line pieces every app's CLI uses: integer argument types, the error exit and
the JSON-able record of the parsed arguments.

Examples:
    >>> import argparse
    >>> parser = argparse.ArgumentParser(prog="demo")
    >>> _ = parser.add_argument("--steps", type=positive_int)
    >>> parser.parse_args(["--steps", "1_000_000"]).steps
    1000000
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["arguments_record", "fail", "non_negative_int", "positive_int"]


def _integer(text: str) -> int:
    try:
        return int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def positive_int(text: str) -> int:
    """An argparse ``type``: an integer ``> 0``; underscores group digits (``150_000``).

    Raises:
        argparse.ArgumentTypeError: If ``text`` is not an integer or not positive
            (argparse turns it into a usage error naming the option).
    """
    value = _integer(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value} must be positive")
    return value


def non_negative_int(text: str) -> int:
    """An argparse ``type``: an integer ``>= 0`` (a seed); underscores group digits.

    Raises:
        argparse.ArgumentTypeError: If ``text`` is not an integer or is negative.
    """
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must be >= 0")
    return value


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
