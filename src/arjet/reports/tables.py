"""Markdown tables: the one writer behind `arjet bench`, `arjet eval`'s report and the demo's stats, and the
cell formats they share (`n/a` where there is nothing to show)."""

from __future__ import annotations

from collections.abc import Sequence


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[bool] = ()) -> str:
    """A GitHub markdown table; columns flagged in `numeric` are right-aligned."""
    if any(len(row) != len(header) for row in rows):
        raise ValueError(f"every row needs {len(header)} cells, one per header column")
    align = ["---:" if i < len(numeric) and numeric[i] else "---" for i in range(len(header))]
    lines = [header, align, *rows]
    return "\n".join("| " + " | ".join(str(cell) for cell in line) + " |" for line in lines)


def ratio(value: float | None, digits: int = 2) -> str:
    """`2.13x`, or `n/a` when there is nothing to compare with."""
    return "n/a" if value is None else f"{value:.{digits}f}x"


def number(value: float | None, digits: int = 2) -> str:
    """`value` with `digits` decimals, or `n/a`."""
    return "n/a" if value is None else f"{value:.{digits}f}"


def significant(value: float | None, digits: int = 3) -> str:
    """`value` to `digits` significant digits (`0.0123`, `45.6`), or `n/a`."""
    return "n/a" if value is None else f"{value:.{digits}g}"
