"""Argument checkers shared by the trainer's configs and entry points (package-internal).

Each raises ``TypeError`` for a wrong type and ``ValueError`` for a value out of range,
with a message that names the argument and its value.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

__all__ = ["check_bool", "check_choice", "check_float", "check_int", "check_optional_int"]


def check_int(name: str, value: Any, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{name}={value!r} must be an int (got {type(value).__name__}); "
            f"pass a whole number >= {minimum}."
        )
    if int(value) < minimum:
        raise ValueError(f"{name}={value} must be >= {minimum}.")


def check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name}={value!r} must be a bool (True or False).")


def check_float(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    optional: bool = False,
) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        hint = " or None" if optional else ""
        raise TypeError(f"{name}={value!r} must be a real number{hint}.")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{name}={value} must be finite.")
    if low is not None and (number <= low if low_open else number < low):
        bound = ">" if low_open else ">="
        raise ValueError(f"{name}={value} must be {bound} {low}.")
    if high is not None and number > high:
        raise ValueError(f"{name}={value} must be <= {high}.")


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not one of {', '.join(map(repr, choices))}.")


def check_optional_int(name: str, value: Any, minimum: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}={value!r} must be an int >= {minimum} or None.")
    if value < minimum:
        raise ValueError(f"{name}={value} must be >= {minimum} (or None).")
