"""The option schema of registered samplers: each option's type, range, choices and help, in one place.

The spec parser (`"sjd:window=32,init=random"`), the command line's help and the demo all read it from
the registry (`arjet.samplers.options(name)`), so an option is typed, bounded and described once.
Sizes are bounded here by `MAX_SIZE` (no supported model has that many image positions) and, once the
grid is known, by the grid itself (the samplers' `check_grid`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .. import checks

MAX_SIZE = 16_384  # largest window / lag / neighbour count any option takes; grids bound them further


@dataclass(frozen=True)
class Option:
    """One keyword of a sampler spec. `kind` is `int`, `float`, `bool` or `str` (then `choices` lists the
    allowed values); `none=True` also allows `none` (the option's automatic setting)."""

    name: str
    kind: type
    default: Any
    help: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    none: bool = False

    def parse(self, text: str) -> Any:
        """The value of `key=text` in a spec; ValueError naming the option otherwise."""
        label = self.name
        if self.none and text.lower() == "none":
            return None
        if self.kind is bool:
            if text.lower() not in ("true", "false"):
                raise ValueError(f"{label} must be true or false, got {text!r}")
            return text.lower() == "true"
        if self.kind is int:
            value: Any = checks.integer_from_text(text)
            if value is None:
                raise ValueError(f"{label} must be an integer{self._bounds()}, got {text!r}")
        elif self.kind is float:
            value = checks.number_from_text(text)
        else:
            value = text
        return self.check(value, text)

    def check(self, value: Any, shown: Any = None) -> Any:
        """`value` if it has this option's type and range (or is None where allowed)."""
        label = self.name
        shown = value if shown is None else shown
        if value is None and self.none:
            return None
        if self.kind is str:
            if value not in self.choices:
                raise ValueError(f"{label} must be one of {', '.join(self.choices)}; got {shown!r}")
            return value
        if self.kind is bool:
            return checks.boolean(label, value)
        if self.kind is int:
            if not checks.is_integer(value) or not self._inside(value):
                raise ValueError(f"{label} must be an integer{self._bounds()}, got {shown!r}")
            return value
        if not checks.is_number(value) or not math.isfinite(value) or not self._inside(value):
            raise ValueError(f"{label} must be a finite number{self._bounds()}, got {shown!r}")
        return float(value)

    def _inside(self, value: float) -> bool:
        return (self.minimum is None or value >= self.minimum) and (
            self.maximum is None or value <= self.maximum
        )

    def _bounds(self) -> str:
        if self.minimum is not None and self.maximum is not None:
            return f" from {self.minimum:g} to {self.maximum:g}"
        if self.minimum is not None:
            return f" >= {self.minimum:g}"
        return ""

    def describe(self) -> str:
        """One line: `window (int, 1..16384, default 16): slots verified per forward`."""
        return f"{self.name} ({self.values()}, default {self.default_text()}): {self.help}"

    def short(self) -> str:
        """A few words: `window=16 (int 1..16384)`, the default and what else it takes."""
        return f"{self.name}={self.default_text()} ({self.values().replace(', ', ' ')})"

    def example(self) -> str:
        """`window=16`: the option at its default, as a spec writes it."""
        return f"{self.name}={self.default_text()}"

    def default_text(self) -> str:
        return "none" if self.default is None else str(self.default).lower()

    def values(self) -> str:
        """What the option takes: `int, 1..16384`, `random | repeat_horizontal`, `true | false`."""
        if self.kind is str:
            return " | ".join(self.choices)
        if self.kind is bool:
            return "true | false"
        bounds = f", {self.minimum:g}..{self.maximum:g}" if self.maximum is not None else ""
        if self.maximum is None and self.minimum is not None:
            bounds = f", >= {self.minimum:g}"
        return f"{self.kind.__name__}{bounds}" + (" | none" if self.none else "")


def parse_options(text: str, schema: Sequence[Option] | None) -> dict[str, Any]:
    """Keyword arguments from `key=value,key=value`: every key once, known to the schema, and every value
    of its type and range. Without a schema (a sampler registered without one) values are read as
    true / false / none / int / float / text."""
    known = {option.name: option for option in schema} if schema is not None else None
    kwargs: dict[str, Any] = {}
    for item in text.split(","):
        key, equals, value = (part.strip() for part in item.partition("="))
        if not equals or not key:
            raise ValueError(f"options look like 'key=value,key=value', got {text!r}")
        if key in kwargs:
            raise ValueError(f"option {key} is given twice in {text!r}; give it once")
        if known is None:
            kwargs[key] = _untyped(value)
            continue
        if key not in known:
            valid = ", ".join(known) if known else "none (it takes no options)"
            raise ValueError(f"no option {key!r}; valid options: {valid}")
        kwargs[key] = known[key].parse(value)
    return kwargs


def _untyped(value: str) -> Any:
    lowered = value.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "none":
        return None
    for convert in (int, float):
        try:
            return convert(value)
        except ValueError:
            pass
    return value
