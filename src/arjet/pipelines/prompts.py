"""Turning token-id rows of different lengths into a left-padded `Prefix`."""

from __future__ import annotations

import torch

from ..session import Prefix


def left_pad_rows(
    rows: list[list[int]],
    pad_id: int,
    device: torch.device | str,
    hidden: list[list[bool]] | None = None,
) -> Prefix:
    """Left-pad `rows` to one length. `hidden[i][j]` (same shape as rows) hides token j of row i from
    every later token, e.g. the prompt of an unconditional row."""
    length = max(len(row) for row in rows)
    ids = torch.full((len(rows), length), pad_id, dtype=torch.long)
    visible = torch.zeros(len(rows), length, dtype=torch.bool)
    pad = torch.zeros(len(rows), dtype=torch.long)
    for i, row in enumerate(rows):
        start = length - len(row)
        ids[i, start:] = torch.tensor(row, dtype=torch.long)
        visible[i, start:] = True if hidden is None else ~torch.tensor(hidden[i], dtype=torch.bool)
        pad[i] = start
    return Prefix(ids.to(device), visible.to(device), pad.to(device))
