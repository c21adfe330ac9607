"""Sampler options, declared once: a dataclass field made with `option(...)` is an option.

```python
@dataclass
class SJD(Sampler):
    window: int = option(16, "draft slots verified per forward", minimum=1, maximum=MAX_SIZE)
```

Its type comes from the annotation (`int | None` also takes `none`), its default and range from the
declaration. Everything else reads that one declaration: the object's own checks (`check_options`, run when
the object is made), the spec parser (`"sjd:window=32,init=random"`), the registry's schema
(`arjet.samplers.options(name)`), `arjet samplers` and the demo. Sizes are bounded here by `MAX_SIZE` (no
supported model has that many image positions) and, once the grid is known, by the grid itself: no
sampler's step feeds more inputs than the grid has cells (`step_bound`, `check_fits_grid`, from the
samplers' `check_grid`), and no tree draws more children than the vocabulary has codes (`check_width`).
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
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
    note: str = ""  # said after the range when a value is refused (e.g. where to go instead)

    def parse(self, text: str) -> Any:
        """The value of `key=text` in a spec; ValueError naming the option otherwise."""
        label = self.name
        if self.none and text.lower() == "none":
            return None
        if self.kind is bool:
            if text.lower() not in ("true", "false"):
                raise ValueError(f"{label} must be true or false, got {checks.shown(text)}")
            return text.lower() == "true"
        if self.kind is int:
            value: Any = checks.integer_from_text(text)
            if value is None:
                raise ValueError(f"{label} must be an integer{self._bounds()}, got {checks.shown(text)}")
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
                raise ValueError(
                    f"{label} must be one of {', '.join(self.choices)}; got {checks.shown(shown)}"
                )
            return value
        if self.kind is bool:
            return checks.boolean(label, value)
        if self.kind is int:
            if not checks.is_integer(value) or not self._inside(value):
                raise ValueError(
                    f"{label} must be an integer{self._bounds()}, got {checks.shown(shown)}{self._note()}"
                )
            return value
        if not checks.is_number(value) or not checks.finite_within(value, self.minimum, self.maximum):
            raise ValueError(
                f"{label} must be a finite number{self._bounds()}, got {checks.shown(shown)}{self._note()}"
            )
        return float(value)

    def _note(self) -> str:
        return f" ({self.note})" if self.note else ""

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
            raise ValueError(f"options look like 'key=value,key=value', got {checks.shown(text)}")
        if key in kwargs:  # with a schema, a key seen before is a declared name (short)
            name = key if known is not None else checks.shown(key)
            raise ValueError(f"option {name} is given twice in {checks.shown(text)}; give it once")
        if known is None:
            kwargs[key] = _untyped(value)
            continue
        if key not in known:
            valid = ", ".join(known) if known else "none (it takes no options)"
            raise ValueError(f"no option {checks.shown(key)}; valid options: {valid}")
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


# -- options declared on dataclass fields ------------------------------------------------------------------
_DECLARED = "arjet_option"


@dataclass(frozen=True)
class _Declared:
    help: str
    minimum: float | None
    maximum: float | None
    choices: tuple[str, ...]
    note: str


def option(
    default: Any,
    help: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    choices: Sequence[str] = (),
    note: str = "",
) -> Any:
    """A dataclass field that is a sampler option (see the module docstring)."""
    declared = _Declared(help, minimum, maximum, tuple(choices), note)
    return dataclasses.field(default=default, metadata={_DECLARED: declared})


@functools.cache
def options_of(cls: type, without: frozenset[str] = frozenset()) -> tuple[Option, ...]:
    """The options a dataclass declares with `option(...)`, in field order, leaving out the names `without`."""
    found = []
    for item in dataclasses.fields(cls):
        declared = item.metadata.get(_DECLARED)
        if declared is None or item.name in without:
            continue
        kind, none = _kind(item.type)
        found.append(
            Option(
                item.name,
                kind,
                item.default,
                declared.help,
                declared.minimum,
                declared.maximum,
                declared.choices,
                none,
                declared.note,
            )
        )
    return tuple(found)


_KINDS = {"int": int, "float": float, "bool": bool, "str": str}


def _kind(annotation: Any) -> tuple[type, bool]:
    """`(int, False)` for an option annotated `int`, `(int, True)` for `int | None` (annotations may be the
    strings `from __future__ import annotations` leaves)."""
    if isinstance(annotation, str):
        names = {name.strip() for name in annotation.split("|")}
        none = "None" in names
        kinds = [_KINDS[name] for name in names - {"None"} if name in _KINDS]
    else:
        args = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)
        none = type(None) in args
        kinds = [arg for arg in args if arg in _KINDS.values()]
    if len(kinds) != 1:
        raise TypeError(
            f"an option is annotated int, float, bool or str (or one of them | None), not {annotation!r}"
        )
    return kinds[0], none


def check_options(obj: Any) -> None:
    """Check every declared option of dataclass instance `obj` against its declaration (ValueError naming the
    option and what it allows), storing the checked value (an int given for a float option becomes a float)."""
    for declared in options_of(type(obj)):
        object.__setattr__(obj, declared.name, declared.check(getattr(obj, declared.name)))


def check_fits_grid(
    name: str, value: int, default: int, grid: tuple[int, int], limit: int | None = None
) -> None:
    """Refuse a size option (`window`, `w`) larger than the grid has cells (or than `default`, when the
    grid is smaller) or than an operator's `limit`: its memory and work grow with it, not with the image."""
    allowed, bound = step_bound(default, grid, limit)
    if value > allowed:
        raise ValueError(f"{name}={value} is larger than {bound}; use {name} <= {allowed}")


def check_width(width: int, vocab_size: int | None) -> None:
    """Refuse a `tree_width` larger than the vocabulary (a node's children are drawn without replacement)."""
    if vocab_size is not None and width > vocab_size:
        raise ValueError(
            f"tree_width={width} is more than the {vocab_size} codes of this model's vocabulary; use "
            f"tree_width <= {vocab_size}"
        )


def step_bound(default: int, grid: tuple[int, int], limit: int | None = None) -> tuple[int, str]:
    """The most inputs one forward may feed per image (a window, a tree's nodes): the grid's cells, or
    `default` (the sampler's default size) on a smaller grid, and at most an operator's `limit`; with what
    sets it, as an error message names it."""
    cells = grid[0] * grid[1]
    allowed = max(cells, default) if limit is None else min(max(cells, default), limit)
    if limit is not None and allowed == limit:
        return allowed, f"the limit of {limit}"
    return allowed, f"the {cells} cells of this {grid[0]}x{grid[1]} grid"
