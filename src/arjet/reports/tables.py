"""Markdown tables."""

from __future__ import annotations

from collections.abc import Sequence


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[bool] = ()) -> str:
    """A GitHub markdown table; columns flagged in `numeric` are right-aligned."""
    if any(len(row) != len(header) for row in rows):
        raise ValueError(f"every row needs {len(header)} cells, one per header column")
    align = ["---:" if i < len(numeric) and numeric[i] else "---" for i in range(len(header))]
    lines = [header, align, *rows]
    return "\n".join("| " + " | ".join(str(cell) for cell in line) + " |" for line in lines)


def ratio(value: float | None) -> str:
    """`2.13x`, or `n/a` when there is nothing to compare with."""
    return "n/a" if value is None else f"{value:.2f}x"


def number(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"
