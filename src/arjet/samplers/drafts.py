"""The drafts a window carries (`Drafts`: codes and the proposals they were drawn from), and the initial
guesses of new draft slots (SJD's initialisation schemes).

`board [B, N]` holds what is known of each image: committed codes and the drafts already in the window
(`-1` elsewhere); `top1 [B, N]` the argmax of the latest distribution computed for each cell. A scheme
whose neighbour is unknown falls back to the next simpler one and finally to a uniform random code, so
no scheme ever degrades silently for lack of a grid width: the width comes from the session.

The left neighbour of a row's first cell is the previous row's last cell (the official SJD code draws a
random code there instead); on the built-in model the wrap needs fewer forwards (see README).

`fill_drafts` guesses a window's fresh slots all at once, where a slot's neighbour may itself be a fresh slot
of the same window (its guess is then the neighbour's guess: `repeat_horizontal` repeats the last known code
along the run). It resolves those chains by pointer jumping, a fixed number of vectorised rounds, with no
loop over slots; `refill` puts the guesses and their proposals into a window's `Drafts`.

A guess that is a uniform random code is declared with a uniform proposal (as SJD-PAC does), every other
guess with a point mass: both are the true distribution the draft was drawn from, so verification stays
exact, and a random draft of code `x` passes with probability `min(1, V * p(x))` instead of `p(x)`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .decoding import Decode

INIT_SCHEMES = ("random", "repeat_horizontal", "repeat_vertical", "sample_horizontal", "sample_vertical")


@dataclass
class Drafts:
    """A window's drafts and the proposals they were drawn from (views are fine: steps update them in place)."""

    codes: torch.Tensor  # [..., S] long
    proposals: torch.Tensor  # [..., S, V]

    def __getitem__(self, images: slice) -> Drafts:
        """The drafts of images `images` (views), as a tensor of per-image state slices."""
        return Drafts(self.codes[images], self.proposals[images])

    def slots(self, index: slice) -> Drafts:
        """The drafts of slots `index` (views over the slot dimension)."""
        return Drafts(self.codes[..., index], self.proposals[..., index, :])

    def replace(self, codes: torch.Tensor, proposals: torch.Tensor) -> None:
        """Take the next window's drafts, in place."""
        self.codes.copy_(codes)
        self.proposals.copy_(proposals)


def uses_top1(scheme: str) -> bool:
    """The scheme reads the latest argmax of each cell (the step keeps a `top1` board for it)."""
    return scheme.startswith("sample_")


def fill_drafts(
    scheme: str,
    drafts: torch.Tensor,
    *,
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
    random = random_codes(u, vocab_size)
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


def random_codes(u: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Uniform random codes in `0..V-1` from uniforms `u` (any shape)."""
    return (u * vocab_size).long().clamp_(max=vocab_size - 1)


def _lookup(values: torch.Tensor, cells: torch.Tensor) -> torch.Tensor:
    """`values[b, cells[b, ...]]` (any value where `cells < 0`)."""
    flat = cells.clamp(min=0).flatten(1)
    return values.gather(1, flat.clamp(max=values.shape[1] - 1)).view_as(cells)


def refill(
    drafts: Drafts,
    *,
    scheme: str,
    cells: torch.Tensor,
    inside: torch.Tensor,
    fresh: torch.Tensor,
    codes: torch.Tensor,
    top1: torch.Tensor | None,
    width: int,
    u: torch.Tensor,
    uniform: bool = True,
) -> None:
    """Give the `fresh [..., S]` slots of `drafts` their initial guesses and the proposals they were drawn
    from, in place. `cells [B, R, S]`: the cell each slot guesses; `inside`: slots inside the image (kept drafts
    there are what fresh slots see beside the committed `codes [B, N]`); `uniform`: whether a random guess
    keeps its uniform proposal (else a point mass, see `AcceptanceRule.uniform_guesses`). Other arguments as
    `fill_drafts`."""
    vocab_size = drafts.proposals.shape[-1]
    board = torch.cat([codes, torch.full_like(codes[:, :1], -1)], 1)
    scatter_where(board, cells, drafts.codes, inside & ~fresh)
    guesses, drawn = fill_drafts(
        scheme,
        drafts.codes,
        fresh=fresh,
        cells=cells,
        board=board[:, :-1],
        top1=top1,
        width=width,
        vocab_size=vocab_size,
        u=u,
    )
    proposal = guess_proposal(guesses, drawn & uniform, vocab_size)
    drafts.replace(guesses, torch.where(fresh[..., None], proposal, drafts.proposals))


def refill_window(
    drafts: Drafts,
    start: torch.Tensor,
    decode: Decode,
    *,
    scheme: str,
    fresh: torch.Tensor,
    top1: torch.Tensor,
    u: torch.Tensor,
    uniform: bool = True,
) -> None:
    """`refill` for one window per image whose `S` slots guess the cells `start [B]`, `start + 1`, ...: its
    `fresh [B, S]` slots inside the image get initial guesses from what `decode` has committed."""
    slots = drafts.codes.shape[-1]
    if not slots:
        return
    session = decode.session
    cells = start[:, None] + torch.arange(slots, device=start.device)
    inside = cells < session.num_cells
    refill(
        drafts,
        scheme=scheme,
        cells=cells,
        inside=inside,
        fresh=inside & fresh,
        codes=decode.trace.codes,
        top1=top1,
        width=session.grid[1],
        u=u,
        uniform=uniform,
    )


class GuessesFreshSlots:
    """For a stepper with one window of Jacobi drafts per image (`drafts`, the next cell `n [B]`, the latest
    argmax `top1`, `decode`, and a `sampler` with `init` and `acceptance` options, or a `guess_scheme` of its
    own): initial guesses, with the proposals they were drawn from, for its `fresh [B, S]` slots inside the
    image, drawn with the uniforms `u`."""

    def _guess(self, fresh: torch.Tensor, u: torch.Tensor) -> None:
        refill_window(
            self.drafts,
            self.n,
            self.decode,
            scheme=self.guess_scheme(),
            fresh=fresh,
            top1=self.top1,
            u=u,
            uniform=self.sampler.acceptance.uniform_guesses,
        )

    def guess_scheme(self) -> str:
        """How new draft slots are guessed: the sampler's `init`."""
        return self.sampler.init


def guess_proposal(codes: torch.Tensor, drawn: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """The proposal of an initial guess: uniform where it is a uniform random code (`drawn`), else a point
    mass at the guess."""
    uniform = torch.full((vocab_size,), 1.0 / vocab_size, device=codes.device)
    return torch.where(drawn[..., None], uniform, one_hot(codes, vocab_size))


def one_hot(codes: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """`[..., V]` point masses at `codes` (built by a scatter: `F.one_hot` reads the device to check them)."""
    return torch.zeros(*codes.shape, vocab_size, device=codes.device).scatter_(-1, codes[..., None], 1.0)


def scatter_where(
    target: torch.Tensor, cells: torch.Tensor, values: torch.Tensor, where: torch.Tensor
) -> None:
    """`target[b, cells] = values` where `where`; other entries go to the last column, kept as scratch."""
    scratch = target.shape[1] - 1
    target.scatter_(1, torch.where(where, cells, scratch).flatten(1), values.flatten(1).to(target.dtype))
    target[:, scratch] = -1 if target.dtype == torch.long else 0
