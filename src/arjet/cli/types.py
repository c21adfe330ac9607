"""argparse `type=` converters over `arjet.checks`: a bad value ends as `arjet CMD: error: argument --NAME:
...` (exit status 2) before anything is loaded, with the same wording as the library's own checks."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from .. import checks


def _typed(convert: Callable[[str], Any], label: str) -> Callable[[str], Any]:
    """An argparse `type=` that turns the check's ValueError into argparse's clean error."""

    def parse(text: str) -> Any:
        try:
            return convert(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    parse.__name__ = label
    return parse


def int_type(minimum: int | None = None, maximum: int | None = None) -> Callable[[str], int]:
    """An integer in ASCII digits within the bounds (`--n 0` -> `argument --n: must be an integer >= 1, got
    '0'`)."""

    def convert(text: str) -> int:
        value = checks.integer_from_text(text)
        if (
            value is None
            or (minimum is not None and value < minimum)
            or (maximum is not None and value > maximum)
        ):
            bounds = checks.range_text(minimum, maximum)
            raise ValueError(f"must be an integer{' ' + bounds if bounds else ''}, got {text!r}")
        return value

    return _typed(convert, "integer")


def integers_type(minimum: int = 1) -> Callable[[str], str]:
    """Integers separated by commas, each >= `minimum`, kept as the text (`--channel-multiplier 1,2,3`)."""

    def convert(text: str) -> str:
        values = checks.integers_from_text(text)
        if not values or min(values) < minimum:
            raise ValueError(f"must be integers >= {minimum} separated by commas, like '1,2,3'; got {text!r}")
        return text

    return _typed(convert, "integers")


def float_type(
    minimum: float | None = None, maximum: float | None = None, *, exclusive_minimum: bool = False
) -> Callable[[str], float]:
    """A finite number within the bounds."""

    def convert(text: str) -> float:
        value = checks.number_from_text(text)
        if not checks.finite_within(value, minimum, maximum, exclusive_minimum):
            bounds = checks.range_text(minimum, maximum, exclusive_minimum)
            raise ValueError(f"must be a finite number{' ' + bounds if bounds else ''}, got {text!r}")
        return value

    return _typed(convert, "number")


def bool_type() -> Callable[[str], bool]:
    """true / false (also yes / no, 1 / 0), nothing else."""

    def convert(text: str) -> bool:
        lowered = text.strip().lower()
        if lowered not in ("1", "0", "true", "false", "yes", "no"):
            raise ValueError(f"must be true or false, got {text!r}")
        return lowered in ("1", "true", "yes")

    return _typed(convert, "boolean")


def device_type() -> Callable[[str], str]:
    """A torch device that exists here (`cpu`, `cuda`, `cuda:1`, `mps`)."""
    return _typed(checks.check_device, "device")


def int_list_type(minimum: int | None = None, maximum: int | None = None) -> Callable[[str], list[int]]:
    """Comma-separated integers within the bounds (`--concurrency 1,4,16`), each read as `int_type` reads one."""
    one = int_type(minimum, maximum)

    def convert(text: str) -> list[int]:
        values = [one(piece.strip()) for piece in text.split(",")]
        if len(set(values)) != len(values):
            raise ValueError(f"names a value twice: {text!r}")
        return values

    return _typed(convert, "integer list")
