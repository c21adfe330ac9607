"""Initial guesses for new draft slots (SJD's initialisation schemes), with point-mass proposals.

`board [B, N]` holds what is known of each image: committed codes and the drafts already in the window
(`-1` elsewhere); `top1 [B, N]` the argmax of the latest distribution computed for each cell. A scheme
whose neighbour is unknown falls back to the next simpler one and finally to a uniform random code, so
no scheme ever degrades silently for lack of a grid width: the width comes from the session.
"""

from __future__ import annotations

import torch

INIT_SCHEMES = ("random", "repeat_horizontal", "repeat_vertical", "sample_horizontal", "sample_vertical")


def check_scheme(scheme: str) -> str:
    if scheme not in INIT_SCHEMES:
        raise ValueError(f"unknown draft init scheme {scheme!r}; choose one of {', '.join(INIT_SCHEMES)}")
    return scheme


def initial_draft(
    scheme: str,
    cells: torch.Tensor,
    board: torch.Tensor,
    top1: torch.Tensor,
    width: int,
    vocab_size: int,
    u: torch.Tensor,
) -> torch.Tensor:
    """A draft code `[B]` for each cell `[B]` (any value where `cells < 0`)."""
    random = (u * vocab_size).long().clamp_(max=vocab_size - 1)
    if scheme == "random":
        return random
    horizontal = _neighbour(board, cells - 1, random)
    if scheme == "repeat_horizontal":
        return horizontal
    if scheme == "sample_horizontal":
        return _neighbour(top1, cells - 1, horizontal)
    vertical = _neighbour(board, cells - width, horizontal)
    if scheme == "repeat_vertical":
        return vertical
    return _neighbour(top1, cells - width, vertical)  # sample_vertical


def _neighbour(values: torch.Tensor, source: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    found = values.gather(1, source.clamp(min=0)[:, None]).squeeze(1)
    return torch.where((source >= 0) & (found >= 0), found, fallback)
