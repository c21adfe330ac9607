"""`pjd`: Parallel Jacobi Decoding (Liao et al., CVPR 2026, arXiv 2606.05703): SJD on several rows at once.

One SJD window saturates: its later drafts condition on long chains of unverified drafts. PJD grows the
drafts in two dimensions instead. Once row `r` has `c` codes, row `r + 1` starts, and every running row
verifies a window of its own in the same forward (an "advancing diagonal front"). The rows are ZipAR's
(`zipar.py`'s `RowStepper`: row slots, placeholders, flushes); a row's drafts form their own query group, so
no row sees another row's unverified drafts (the paper's row-causal mask), while every row sees the codes
committed before it in raster order. What PJD decides differently from `zipar+sjd`, per row:

- the top row (the oldest running one: every row above it is complete) is SJD: its drafts pass while
  `u * q(x) < p(x)`, the first rejected one is resampled from `norm(max(0, p - q))`, and if every draft
  passed it takes the bonus code;
- a lower row commits only its accepted drafts (no residual, no bonus), and its window stops one cell short
  of the row above's count, so it never catches up with it (`window_cells`);
- after a rejection, a later draft `x ~ q` is kept as the next draft of its cell when `min(1, p(x)/q(x)) >
  keep` (the official code's 0.5), else the cell takes its new sample from `p` (`reuse`).

Guarantee: lossy. A lower row's codes are accepted against `p` given an incomplete raster prefix (the
unfinished right part of the rows above is missing) and are never revisited; the paper gives no bound, only
FID. The top row is SJD given the codes before it. With one row at a time (`c >= W`) every row is the top
row and `pjd` is exact: it has `ar`'s distribution. The official code stores a kept draft's old proposal
`q`, which is not what it was drawn from once the keep test has chosen it; `reuse` stores the true one (see
there), so `keep` costs the top row nothing.

Notation (the paper's; `zipar.py` has the rows' symbols, `jacobi.py` the shared pieces'):

| here                        | paper (symbol)                                  | shape           |
|-----------------------------|-------------------------------------------------|-----------------|
| `c` (`lag(width)`)          | `c`: codes row `r` needs before row `r + 1`     |                 |
|                             | starts (the context count; default `W / 4`)     |                 |
| `window` (`L`)              | `W`: each row's inputs per forward (its last    |                 |
|                             | code and `L - 1` drafts)                        |                 |
| `front`                     | the top active row of each image                | `[B, A]`        |
| `window_cells`              | a lower row's drafts: `min(W, c_{r-1} - c_r)`   | `[B, A]`        |
|                             | inputs with its anchor (the official code's)    |                 |
| `verdict.accepted`          | `k*`: drafts accepted before the first rejection| `[B, A]`        |
| `keep`                      | the keep threshold after a rejection (0.5)      |                 |
| `reuse`: `K(y)`             | `[min(1, p(y)/q(y)) > keep]`                    | `[B, A, S, V]`  |
| `reuse`: `m`                | what a reused slot's next draft is drawn from:  | `[B, A, S, V]`  |
|                             | `q K + (sum_y q (1 - K)) p`                     |                 |

What arjet does differently from the official code, on purpose: per-image rows and commits (the official
code commits the minimum over the batch), a kept draft's true proposal (above), grids and row starts from
the session (no hard-coded row-end tokens), and ZipAR's placeholders for a row's missing predecessor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch

from . import jacobi
from .decode import Decode
from .jacobi import INIT_SCHEMES, AcceptanceRule, Drafts, Exact, RuleSampler, Uniforms, Verdict
from .options import MAX_SIZE, check_fits_grid, option
from .sjd import SJD
from .zipar import Rows, RowStepper, check_row_window


@dataclass(frozen=True)
class PJD(RuleSampler):
    """`c`: codes a row needs before the row below starts (the paper's context count; None: a quarter of the
    grid's width, the paper's context coverage ratio of 0.25); `window`: each row's inputs per forward (the
    official code's 8); `keep`: after a rejection, keep a later draft whose `min(1, p/q)` exceeds it (the
    official code's 0.5; 1: never); `init`: how new draft slots are guessed; `acceptance`: `Exact()` or a
    relaxed rule."""

    c: int | None = option(
        None,
        "codes a row needs before the row below starts (c >= the grid's width: one row at a time, exact); "
        "none: a quarter of the width",
        minimum=1,
        maximum=MAX_SIZE,
    )
    window: int = option(8, "inputs each row verifies per forward", minimum=2, maximum=MAX_SIZE)
    keep: float = option(
        0.5,
        "after a rejection, keep a later draft whose min(1, p/q) exceeds this (1: never)",
        minimum=0,
        maximum=1,
    )
    init: str = option("random", "how new draft slots are guessed", choices=INIT_SCHEMES)
    acceptance: AcceptanceRule = field(default_factory=Exact)
    name: ClassVar[str] = "pjd"

    def check_grid(
        self, grid: tuple[int, int], max_window: int | None = None, *, vocab_size: int | None = None
    ) -> None:
        """Refuse a window the grid cannot use or wider than a row (each running row feeds its own window);
        `c` needs no bound: it is a lag, and from `c = W` on rows run one at a time."""
        check_fits_grid("window", self.window, type(self).window, grid, max_window)
        check_row_window(self.name, self.window, type(self).window, grid)
        super().check_grid(grid, max_window, vocab_size=vocab_size)

    def lag(self, width: int) -> int:
        """`c`, or a quarter of a grid `width` codes wide (at least 1)."""
        return self.c if self.c is not None else max(1, width // 4)

    def run(self, decode: Decode) -> None:
        session = decode.session
        rows = Rows.from_grid(session.grid, self.lag(session.grid[1]))
        verify = SJD(window=self.window, init=self.init, acceptance=self.acceptance)
        # the top row commits at least one code every forward
        decode.run(FrontStepper(rows, verify, decode, keep=self.keep), session.num_cells - 1)


class FrontStepper(RowStepper):
    """ZipAR's rows with PJD's rules: only the top row resamples and takes the bonus, a lower row stays behind
    the row above, and confident drafts after a rejection are reused (`keep < 1`)."""

    def __init__(self, rows: Rows, verify: SJD, decode: Decode, *, keep: float):
        super().__init__(rows, verify, decode)
        self.keep = keep

    def front(self, active: torch.Tensor) -> torch.Tensor:
        """`[B, A]`: the top running row of each image (every row above it is complete), of `active [B, A]`."""
        oldest = torch.where(active, self.row, self.count).amin(1, keepdim=True)  # [B, 1]
        return active & (self.row == oldest)

    def window_cells(self, active: torch.Tensor, end: torch.Tensor) -> torch.Tensor:
        """A lower row's window stops one cell before the column the row above has reached, so that it commits
        at most up to there and stays behind it (a row above a lower row is running, in its slot)."""
        cells = super().window_cells(active, end)  # [B, A]
        above = self.n.gather(1, (self.row - 1) % self.row_slots)  # [B, A] the next cell of the row above
        behind = (above + self.width - self.n - 1).clamp(min=0)  # [B, A] its count minus this row's, minus 1
        return torch.where(self.front(active), cells, torch.minimum(cells, behind))

    def settle(
        self,
        p: torch.Tensor,
        verdict: Verdict,
        *,
        valid: torch.Tensor,
        active: torch.Tensor,
        u_draw: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The top row as SJD; a lower row commits its accepted drafts only."""
        _, committed, codes = super().settle(p, verdict, valid=valid, active=active, u_draw=u_draw)
        drafted = self.positions < verdict.accepted[..., None]  # [B, A, L]
        committed = committed & (drafted | self.front(active)[..., None])
        return committed.long().sum(-1), committed, codes

    def draft_next(
        self,
        p: torch.Tensor,
        verdict: Verdict,
        *,
        advanced: torch.Tensor,
        uniforms: Uniforms,
        length: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        codes, proposals, carried = super().draft_next(
            p, verdict, advanced=advanced, uniforms=uniforms, length=length
        )
        if self.keep < 1:
            codes, proposals = reuse(
                p,
                self.drafts,
                codes,
                proposals,
                carried,
                advanced=advanced,
                verdict=verdict,
                keep=self.keep,
                u_draw=uniforms.draw,
            )
        return codes, proposals, carried


def reuse(
    p: torch.Tensor,
    drafts: Drafts,
    codes: torch.Tensor,
    proposals: torch.Tensor,
    carried: torch.Tensor,
    *,
    advanced: torch.Tensor,
    verdict: Verdict,
    keep: float,
    u_draw: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PJD's keep rule on the next drafts `codes [..., S]` (`proposals [..., S, V]`, `carried [..., S]`, as
    `jacobi.redraft` gave them after `advanced [...]` committed cells, its samples drawn with `u_draw [..., L]`):
    where verification stopped at a rejection, each later draft `x ~ q` (`drafts`) stays the next draft of its
    cell when `p(x) > keep q(x)` (`min(1, p/q) > keep`, for `keep < 1`), else the cell keeps its new sample
    from `p [..., L, V]`: SJD++'s re-draft (`jacobi.reuse`), on the slots after a rejection only.

    That draft is drawn from `m = q K + (sum_y q(y) (1 - K(y))) p` with `K(y) = [p(y) > keep q(y)]`, whichever
    way the test went, so `m` is stored as its proposal: the draft is then verified as the draw it is and the
    next verification stays exact. (Storing `q` for a kept draft, as the official code does, is not: a kept
    draft is `q` restricted to `K`.) Returns the next `(codes, proposals)`."""
    slots = drafts.codes.shape[-1]  # S
    source = advanced[..., None] + torch.arange(slots, device=codes.device)  # [..., S] old slot of each cell
    reused = carried & verdict.rejected[..., None] & (source > verdict.accepted[..., None]) & (source < slots)
    index = source.clamp(max=slots - 1)
    old = drafts.codes.gather(-1, index)  # [..., S]
    q = drafts.proposals.gather(-2, index[..., None].expand_as(drafts.proposals))  # [..., S, V]
    target = p.gather(-2, index[..., None].expand(*index.shape, p.shape[-1]))  # [..., S, V]
    draft, marginal = jacobi.reuse(
        target, old, q, keep, u_draw.gather(-1, index)
    )  # redraft's sample if not kept
    return torch.where(reused, draft, codes), torch.where(reused[..., None], marginal, proposals)
