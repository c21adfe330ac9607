"""Initial guesses for new draft slots (SJD's initialisation schemes), with point-mass proposals.

`board [B, N]` holds what is known of each image: committed codes and the drafts already in the window
(`-1` elsewhere); `top1 [B, N]` the argmax of the latest distribution computed for each cell. A scheme
whose neighbour is unknown falls back to the next simpler one and finally to a uniform random code, so
no scheme ever degrades silently for lack of a grid width: the width comes from the session.

The left neighbour of a row's first cell is the previous row's last cell (the official SJD code draws a
random code there instead); on the built-in model the wrap needs fewer forwards (see README).

`initial_draft` guesses independent cells; `fill_drafts` guesses a lane's fresh slots all at once, where a
slot's neighbour may itself be a fresh slot of the same lane (its guess is then the neighbour's guess:
`repeat_horizontal` repeats the last known code along the run). It resolves those chains by pointer
jumping, a fixed number of vectorised rounds, with no loop over slots.

A guess that is a uniform random code is declared with a uniform proposal (as SJD-PAC does), every other
guess with a point mass: both are the true distribution the draft was drawn from, so verification stays
exact, and a random draft of code `x` passes with probability `min(1, V * p(x))` instead of `p(x)`.
"""

from __future__ import annotations

import math

import torch

from .speculative import guess_proposal

INIT_SCHEMES = ("random", "repeat_horizontal", "repeat_vertical", "sample_horizontal", "sample_vertical")


def check_scheme(scheme: str) -> str:
    if scheme not in INIT_SCHEMES:
        raise ValueError(f"unknown draft init scheme {scheme!r}; choose one of {', '.join(INIT_SCHEMES)}")
    return scheme


def uses_top1(scheme: str) -> bool:
    return scheme.startswith("sample_")


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
    random = _random_code(u, vocab_size)
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


def fill_drafts(
    scheme: str,
    drafts: torch.Tensor,
    fresh: torch.Tensor,
    cells: torch.Tensor,
    board: torch.Tensor,
    top1: torch.Tensor | None,
    width: int,
    vocab_size: int,
    u: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`drafts [B, R, S]` with every `fresh` slot replaced by its initial guess, and `[B, R, S]` bool: the
    slots whose guess is a uniform random code (their proposal is uniform; every other guess is a function
    of what is known, a point mass).

    Slot `j` of lane `r` guesses cell `cells[b, r, j]` (a lane's slots are consecutive cells, and its fresh
    slots are the last ones). `board [B, N]` holds the committed codes and the lanes' kept drafts; `top1`
    (for the `sample_*` schemes) the latest argmax per cell. A neighbour that is a fresh slot of the same
    lane gives that slot's guess; one in another lane's fresh slots counts as unknown."""
    random = _random_code(u, vocab_size)
    if scheme == "random":
        return torch.where(fresh, random, drafts), fresh
    slot = torch.arange(drafts.shape[-1], device=drafts.device).expand_as(drafts)
    value = torch.where(fresh, random, drafts)  # the last fallback: a random code
    pointing = torch.zeros_like(fresh)  # the guess is that of slot `pointer` (an earlier fresh slot)
    pointer = slot
    drawn = fresh  # the guess is the slot's own random code
    # fallbacks first, so that the scheme's own neighbour overrides them: left, above, latest argmax
    steps = [1] if scheme.endswith("horizontal") else [1, width]
    for step in steps:
        in_run = fresh & (slot >= step) & fresh.gather(-1, (slot - step).clamp(min=0))
        found = _lookup(board, cells - step)
        has_value = fresh & ~in_run & (cells >= step) & (found >= 0)
        value = torch.where(has_value, found, value)
        pointing = torch.where(in_run, True, pointing & ~has_value)
        pointer = torch.where(in_run, slot - step, pointer)
        drawn = drawn & ~in_run & ~has_value
    if uses_top1(scheme):
        found = _lookup(top1, cells - steps[-1])
        has_top1 = fresh & (cells >= steps[-1]) & (found >= 0)
        value = torch.where(has_top1, found, value)
        pointing &= ~has_top1
        drawn &= ~has_top1
    for _ in range(math.ceil(math.log2(drafts.shape[-1])) + 1):  # pointer jumping: chains halve each round
        target_pointing = pointing.gather(-1, pointer)
        value = torch.where(pointing & ~target_pointing, value.gather(-1, pointer), value)
        pointer = torch.where(pointing & target_pointing, pointer.gather(-1, pointer), pointer)
        pointing &= target_pointing
    return value, drawn


def _random_code(u: torch.Tensor, vocab_size: int) -> torch.Tensor:
    return (u * vocab_size).long().clamp_(max=vocab_size - 1)


def _lookup(values: torch.Tensor, cells: torch.Tensor) -> torch.Tensor:
    """`values[b, cells[b, ...]]` (any value where `cells < 0`)."""
    flat = cells.clamp(min=0).flatten(1)
    return values.gather(1, flat.clamp(max=values.shape[1] - 1)).view_as(cells)


def _neighbour(values: torch.Tensor, source: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    found = values.gather(1, source.clamp(min=0)[:, None]).squeeze(1)
    return torch.where((source >= 0) & (found >= 0), found, fallback)


def refill_drafts(
    scheme: str,
    drafts: torch.Tensor,
    proposals: torch.Tensor,
    cells: torch.Tensor,
    inside: torch.Tensor,
    fresh: torch.Tensor,
    codes: torch.Tensor,
    top1: torch.Tensor | None,
    width: int,
    u: torch.Tensor,
    uniform: bool = True,
) -> None:
    """Give the `fresh` slots of `drafts [B, R, S]` their initial guesses and `proposals [B, R, S, V]` the
    proposals they were drawn from, in place (views are fine). `cells [B, R, S]`: the cell each slot guesses;
    `inside`: slots inside the image (kept drafts there are what fresh slots see beside the committed `codes
    [B, N]`); `uniform`: whether a random guess keeps its uniform proposal (else a point mass, see
    `Lantern.uniform_guesses`). Other arguments as `fill_drafts`."""
    vocab_size = proposals.shape[-1]
    board = torch.cat([codes, torch.full_like(codes[:, :1], -1)], 1)
    scatter_where(board, cells, drafts, inside & ~fresh)
    guesses, drawn = fill_drafts(scheme, drafts, fresh, cells, board[:, :-1], top1, width, vocab_size, u)
    drafts.copy_(guesses)
    proposal = guess_proposal(guesses, drawn & uniform, vocab_size)
    proposals.copy_(torch.where(fresh[..., None], proposal, proposals))


def scatter_where(
    target: torch.Tensor, cells: torch.Tensor, values: torch.Tensor, where: torch.Tensor
) -> None:
    """`target[b, cells] = values` where `where`; other entries go to the last column, kept as scratch."""
    scratch = target.shape[1] - 1
    target.scatter_(1, torch.where(where, cells, scratch).flatten(1), values.flatten(1).to(target.dtype))
    target[:, scratch] = -1 if target.dtype == torch.long else 0
