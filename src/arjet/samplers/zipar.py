"""`zipar`: ZipAR spatial parallel decoding (He et al., ICML 2025), and `zipar+sjd`, its verified form.

Rows decode in parallel once the row above leads by enough codes; every running row advances in the same
forward. Plain ZipAR samples one code per row per forward (lossy: a row sees only part of the row above).
With `verify=SJD(...)` each running row advances by a verified SJD window instead: lossless with respect
to the context the schedule gives each cell. Two published schedules, for ZipAR's lead `w` (the paper's
"window size"):

- `schedule="lumina"` (default; the paper's Lumina-mGPT script): row `r + 1` starts once row `r` has
  `w - 1` codes, so row `r + 1`'s column `c` comes out of the same forward as row `r`'s column `c + w - 1`.
  A 48x48 grid with `w = 16` takes `(H - 1)(w - 1) + W = 753` forwards, the prefill included.
- `schedule="llamagen"` (the LlamaGen script): row 0 alone, row 1 once row 0 is complete, then row `r + 1`
  once row `r` has `w` codes: `(H - 2) w + 2 W` forwards (224 on LlamaGen's 24x24 grid with `w = 8`).

`w = None` takes the scripts' defaults: 16 on grids wider than 32 codes (Lumina-mGPT's 48), 8 otherwise
(LlamaGen's 24). A lag of at least the width is plain raster decoding, so `zipar` is then exactly `ar`:
`w >= W + 1` with the lumina schedule (a lag of `w - 1`), `w >= W` with llamagen's.

Each row is a run of cells decoded left to right in a row slot of its own (`RowStepper`). Every forward,
each running row with next cell `n` feeds the code of cell `n - 1` followed by its drafts for cells
`n, n+1, ...` (none for plain ZipAR: a window of one) and gets the processed target `p` for its next `L`
cells; SJD's shared pieces (`arjet.samplers.jacobi`: `verify`, `resample`, `redraft`, `guess`) verify,
resample and redraft, and the step commits. A row's drafts form their own group in the session, so no row
attends to another row's unverified drafts, while committed codes fed this forward (each row's first input)
are seen by every row below. A row that starts before the row above is complete feeds an ephemeral
placeholder for its missing predecessor; once the row above completes, its last code is fed for real and
kept (a *flush*).

Notation (ZipAR, He et al.; `B` images, `R` rows of `W` cells, `N = R W` cells per image, `V` the image
vocabulary; `jacobi.py` has the shared pieces' symbols, `sjd.py` SJD's):

| here                        | paper (symbol)                                 | shape           |
|-----------------------------|------------------------------------------------|-----------------|
| `w` (`lead(width)`)         | `w`: how far row `r` leads row `r + 1` (the    |                 |
|                             | paper's window size; the lag is `w - 1` or `w`)|                 |
| `lags`                      | codes row `r - 1` needs before row `r` starts: | `[R - 1]`       |
|                             | `w - 1` (lumina); `W`, then `w` (llamagen)     |                 |
| `row_slots` (`A`)           | rows running at once (row `r` in slot `r % A`) |                 |
| `row`                       | the row each slot holds (`R`: none yet)        | `[B, A]`        |
| `n`                         | the next undecoded cell of each slot's row     | `[B, A]`        |
| `window` (`L`)              | the SJD window of the `verify` option (1:      |                 |
|                             | plain ZipAR)                                   |                 |
| `slots` (`S = L - 1`)       | draft slots of each row                        |                 |
| `position_cells`            | `n, n + 1, ..., n + L - 1`                     | `[B, A, L]`     |
| `in_row`                    | positions whose cell is inside the row         | `[B, A, L]`     |
| `placeholder`               | a row start fed the latest code of the row     | `[B, A]`        |
|                             | above for its missing predecessor (ephemeral)  |                 |
| `flush`                     | a complete row's last code, fed for the row    | `[B, A]`        |
|                             | below once it runs                             |                 |
| `drafts.codes`              | `x̃_{n+j}` of each row                          | `[B, A, S]`     |
| `drafts.proposals` (`q`)    | `p_θ^{(k-1)}(·)`                               | `[B, A, S, V]`  |
| `p`                         | `p_θ^{(k)}(·)` (processed: CFG, temperature,   | `[B, A, L, V]`  |
|                             | top-k, top-p)                                  |                 |
| `verdict.accepted`          | `τ`: drafts accepted per row                   | `[B, A]`        |
| `advanced`                  | cells committed per row                        | `[B, A]`        |
| `fed`                       | cells whose code is in the cache (the last     | `[B, N + 1]`    |
|                             | column is scratch)                             |                 |
| `u_accept`, `u_draw`,       | one uniform stream per decision                | `[B, A, L]`     |
| `u_couple`, `u_guess`       |                                                |                 |

What arjet does differently from both scripts, on purpose: no query ever attends to an empty cache slot
(LlamaGen's static cache attends to zeros and stale slots); a started row's first input is the latest
committed code of the row above standing in for the missing last cell (Lumina feeds the row-end token
alone; LlamaGen a copy of the latest code of row `r - 2`), visible to that query only; the real last code
of a row is fed (and, with row-end tokens, their keys recomputed) as soon as it exists; positions are the
true raster ones; batches of any size with per-image random streams; grids and row-end tokens come from
the session, never hard-coded.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .base import Sampler
from .decode import Decode, Stepper
from .jacobi import (
    Drafts,
    RuleContext,
    Uniforms,
    Verdict,
    guess,
    redraft,
    resample,
    scatter_where,
    uses_top1,
    verify,
)
from .options import MAX_SIZE, option
from .sjd import SJD

SCHEDULES = ("lumina", "llamagen")


@dataclass(frozen=True)
class ZipAR(Sampler):
    """`w`: ZipAR's lead, the paper's window size (None: 16 on grids wider than 32 codes, else 8); `schedule`:
    `"lumina"` (row `r + 1` starts after `w - 1` codes of row `r`) or `"llamagen"` (row 1 after row 0, then
    after `w` codes); `verify`: an `SJD` whose window each row advances by (its acceptance rule applies)."""

    w: int | None = option(
        None,
        "ZipAR's window size: row r+1 starts once row r has w-1 codes (llamagen schedule: w); none: 16 on "
        "grids wider than 32, else 8",
        minimum=2,
        maximum=MAX_SIZE,
    )
    verify: SJD | None = None
    schedule: str = option(
        "lumina", "whose row schedule: lumina (the paper's) or llamagen", choices=SCHEDULES
    )

    def validate(self) -> None:
        if self.verify is not None and not isinstance(self.verify, SJD):
            raise ValueError(f"verify must be an SJD sampler or None, got {self.verify!r}")
        if self.verify is not None and (self.verify.reuse is not None or self.verify.coupling == "gumbel"):
            raise ValueError(
                f"zipar's rows re-draft independently or with the maximal coupling only; got the verifier "
                f"{self.verify!r} (SJD++'s reuse and the Gumbel coupling run on sjd / mc-sjd windows)"
            )
        super().validate()

    @property
    def name(self) -> str:  # type: ignore[override]
        return "zipar" if self.verify is None else "zipar+sjd"

    @property
    def parts(self) -> tuple[tuple[str, SJD], ...]:
        return () if self.verify is None else (("verifier", self.verify),)

    def check_grid(
        self, grid: tuple[int, int], max_window: int | None = None, *, vocab_size: int | None = None
    ) -> None:
        """Refuse a verify window the grid cannot use, or wider than a row: each running row feeds its own
        window every forward (up to `H` rows at once), and a row has only `W` cells to advance by, so a wider
        window would only multiply the step's inputs. `w` needs no bound: it is a lag that allocates nothing,
        and from `w = W + 1` on (`W` with the llamagen schedule) it is raster order."""
        super().check_grid(grid, max_window, vocab_size=vocab_size)
        if self.verify is not None:
            check_row_window(self.name, self.verify.window, type(self.verify).window, grid)

    def lead(self, width: int) -> int:
        """The lead `w`, or the scripts' default for a grid `width` codes wide."""
        return self.w if self.w is not None else (16 if width > 32 else 8)

    def lags(self, grid: tuple[int, int]) -> list[int]:
        """Codes row `r - 1` needs before row `r` starts, for `r = 1 .. H - 1`."""
        height, width = grid
        w = self.lead(width)
        if self.schedule == "lumina":
            return [w - 1] * (height - 1)
        return [width] + [w] * (height - 2) if height > 1 else []

    def run(self, decode: Decode) -> None:
        session = decode.session
        rows = Rows.from_grid(session.grid, self.lags(session.grid))
        verify = self.verify or SJD(window=1)  # plain ZipAR: one code per row per forward, no drafts
        stepper = RowStepper(rows, verify, decode)
        one_cell_each = verify.window == 1
        max_steps = rows.steps_one_cell_each() if one_cell_each else session.num_cells - 1
        decode.run(stepper, max_steps, fixed_steps=one_cell_each)


@dataclass
class Rows:
    """ZipAR's rows, run in parallel: row `r` covers cells `starts[r] <= c < ends[r]` and may start once row
    `r - 1` has committed `lags[r - 1]` codes or is complete."""

    starts: torch.Tensor  # [R]
    ends: torch.Tensor  # [R], exclusive
    lags: list[int]  # [R - 1]

    @classmethod
    def from_grid(cls, grid: tuple[int, int], lags: int | list[int]) -> Rows:
        starts = torch.arange(grid[0]) * grid[1]
        lags = [lags] * (grid[0] - 1) if isinstance(lags, int) else list(lags)
        if len(lags) != grid[0] - 1:
            raise ValueError(f"{grid[0]} rows need {grid[0] - 1} lags, got {len(lags)}")
        return cls(starts, starts + grid[1], lags=lags)

    def steps_one_cell_each(self) -> int:
        """Forwards after the prefill when every running row commits exactly one cell per forward (plain
        ZipAR). Mirrors `RowStepper`: cell 0 comes from the prefill, and a row starts once the row above
        has started and has `lag` codes or is complete, one new row per step."""
        starts, ends = self.starts.tolist(), self.ends.tolist()
        n = [starts[0] + 1]

        def start_next() -> None:
            above = len(n) - 1
            if len(n) < len(starts) and (
                n[above] - starts[above] >= self.lags[above] or n[above] >= ends[above]
            ):
                n.append(starts[len(n)])

        start_next()
        steps = 0
        while len(n) < len(starts) or any(cell < end for cell, end in zip(n, ends, strict=False)):
            n[:] = [min(cell + 1, end) for cell, end in zip(n, ends, strict=False)]
            steps += 1
            start_next()
        return steps


class RowStepper(Stepper):
    """The state of a ZipAR decode between forwards, and its fixed-shape `step`.

    Rows run in `A` row slots (row `r` in slot `r % A`), enough for every row plain ZipAR keeps running at
    once (`ceil(W / lag) + 1`); a row starts only when its slot's previous row is complete and flushed, which
    keeps every forward at `A x (L + 1)` queries. Each row advances by `verify`'s SJD window (a window of one,
    no drafts, for plain ZipAR). A method on these rows (`pjd`) changes what `window_cells`, `settle` and
    `draft_next` decide for each row; the rest of the step is this one."""

    def __init__(self, rows: Rows, verify: SJD, decode: Decode):
        self.decode, self.verify = decode, verify
        session = decode.session
        batch, device = session.batch_size, session.device
        self.window = window = verify.window
        self.reach = window + session.grid[1]  # a new row starts one row on
        self.slots = window - 1
        self.width = session.grid[1]
        count = len(rows.starts)
        self.count = count  # R
        self.row_slots = slots = row_slots(count, self.width, min(rows.lags, default=self.width))  # A
        # codes row r - 1 needs before row r starts (row 0 needs none)
        self.row_lag = torch.tensor([0, *rows.lags, 0], device=device)  # [R + 1]
        # per row, plus a padding row (index `count`) that is empty: start = end = 0
        self.row_start = torch.cat([rows.starts, rows.starts.new_zeros(1)]).to(device)  # [R + 1]
        self.row_end = torch.cat([rows.ends, rows.ends.new_zeros(1)]).to(device)  # [R + 1]
        self.row_first = self.row_start.clone()
        self.row_first[:1].clamp_(min=1)  # cell 0 comes from the prefill
        self.row = torch.full((batch, slots), count, dtype=torch.long, device=device)  # [B, A] row held
        self.next_row = torch.zeros(batch, 1, dtype=torch.long, device=device)  # [B, 1]
        self.n = torch.zeros(batch, slots, dtype=torch.long, device=device)  # [B, A]
        draft_slots = max(self.slots, 1)
        self.drafts = Drafts(
            torch.zeros(batch, slots, draft_slots, dtype=torch.long, device=device),
            torch.zeros(batch, slots, draft_slots, session.vocab_size, device=device),
        ).slots(slice(None, self.slots))  # [B, A, S], [B, A, S, V]
        self.fed = torch.zeros(batch, session.num_cells + 1, dtype=torch.bool, device=device)  # code in cache
        self.track_top1 = uses_top1(verify.init)
        relaxes_greedy = verify.acceptance.relaxes_greedy
        self.soft_policy = decode.policy.soft() if decode.policy.greedy and relaxes_greedy else None
        self.top1 = torch.full((batch, session.num_cells + 1), -1, dtype=torch.long, device=device)
        self.positions = torch.arange(window, device=device)  # [L]
        self.slot_ids = torch.arange(slots, device=device)  # [A]
        # query groups: committed codes (a row's first input, a flush) are shared with every row (group 0),
        # drafts only within their own row (group = row slot + 1)
        column = torch.arange(window + 1, device=device)
        is_draft = (column >= 1) & (column < window)
        self.group = torch.where(is_draft, self.slot_ids[:, None] + 1, 0)[None]  # [1, A, L + 1]
        # each row slot queries its window (at most (L-1)//W + 1 row ends) plus one flush (one more)
        self.row_ends = slots * ((window - 1) // self.width + 2)

    def start(self, first: torch.Tensor) -> None:
        newly = self._start_row()  # row 0
        newly |= self._start_row()  # the row below, if cell 0 is already enough (as if cell 0 were a step)
        u = self.decode.random.uniform(self.row_slots, self.window)
        self._guess(newly, torch.zeros_like(newly)[..., None], u)

    @property
    def slot_start(self) -> torch.Tensor:
        """`[B, A]` the first cell of the row each slot holds."""
        return self.row_start[self.row]

    @property
    def slot_end(self) -> torch.Tensor:
        """`[B, A]` the end (exclusive) of the row each slot holds."""
        return self.row_end[self.row]

    # -- one step ------------------------------------------------------------------------------------
    def step(self) -> None:
        session, trace, verifier = self.decode.session, self.decode.trace, self.verify
        window, slots, positions = self.window, self.slots, self.positions  # L, S, [L]
        batch, vocab = self.n.shape[0], session.vocab_size  # B, V
        end = self.slot_end  # [B, A]
        active = self.n < end  # [B, A]
        length = self.window_cells(active, end)  # [B, A] window cells each row decodes

        # 1. rows' windows, placeholders and flushes: each running row feeds the code of cell n - 1 (a
        #    placeholder, the latest code of the row above, while that cell is not decoded yet), then its
        #    drafts; a complete row whose last code the row below has not seen feeds it as one more query
        previous_code = trace.codes.gather(1, (self.n - 1).clamp(min=0))  # [B, A]
        placeholder = (length > 0) & (self.n > 0) & (previous_code < 0)  # [B, A]
        last = torch.where(placeholder, self._latest_code_above(), previous_code)  # [B, A]
        flush = self._needs_flush() & ~trace.done[:, None]  # [B, A]
        position_cells = self.n[..., None] + positions  # [B, A, L]
        in_row = positions < length[..., None]  # [B, A, L]
        query_cells = torch.cat(
            [torch.where(in_row, position_cells, -1), torch.where(flush, end, -1)[..., None]], -1
        )  # [B, A, L + 1]
        flush_code = trace.codes.gather(1, (end - 1).clamp(min=0)).clamp(min=0)  # [B, A]
        inputs = torch.cat([last.clamp(min=0)[..., None], self.drafts.codes, flush_code[..., None]], -1)
        ephemeral = torch.cat(
            [placeholder[..., None], torch.zeros_like(query_cells[..., 1:], dtype=torch.bool)], -1
        )  # [B, A, L + 1]: only a placeholder is ephemeral

        # 2. forward: one pass over every row slot's queries; a row's drafts are seen by that row alone
        group = self.group.expand(batch, -1, -1)  # [B, A, L + 1]
        logits = session.logits(
            query_cells.flatten(1),
            inputs.flatten(1),
            ephemeral=ephemeral.flatten(1),
            group=group.flatten(1),
            row_ends=self.row_ends,
        ).view(batch, self.row_slots, window + 1, vocab)  # [B, A, L + 1, V]; the flush's output is unused

        # 3. target p and the uniforms; the proposals q are `drafts.proposals` [B, A, S, V]
        p = self.decode.policy.probs(logits[..., :window, :])  # [B, A, L, V]
        context = RuleContext(session.codebook)
        if self.soft_policy is not None:
            context.soft_p = self.soft_policy.probs(logits[..., :slots, :])  # [B, A, S, V]
        if self.track_top1:
            scatter_where(self.top1, position_cells, p.argmax(-1), in_row)
        uniforms = self.decode.random.uniform(self.row_slots, 4, window)  # [B, A, 4, L]
        u_accept, u_draw, u_couple, u_guess = uniforms.unbind(2)  # [B, A, L] each

        # 4. verify: each row's drafts pass left to right while u·q(x) < t(x) (the rule's target t: p when
        #    exact)
        verdict = verify(
            p[..., :slots, :],
            self.drafts,
            usable=in_row[..., :slots],
            rule=verifier.acceptance,
            context=context,
            u_accept=u_accept[..., :slots],
        )

        # 5. resample: the first rejected position from norm(max(0, t - q)), else a bonus code from p
        advanced, committed, codes = self.settle(
            p, verdict, valid=in_row, active=active, u_draw=u_draw
        )  # [B, A], [B, A, L], [B, A, L]

        # 6. commit: the inputs that fed committed cells (not a placeholder) and the flushes to the cache, and
        #    mark their cells fed; the committed codes to the trace
        used = in_row & (positions <= verdict.accepted[..., None]) & ~ephemeral[..., :window]  # [B, A, L]
        keep = torch.cat([used, flush[..., None]], -1)  # [B, A, L + 1]
        session.commit(keep.flatten(1))
        scatter_where(self.fed, query_cells - 1, torch.ones_like(keep), keep & (query_cells > 0))
        trace.commit(
            torch.where(committed, position_cells, -1).flatten(1), codes.flatten(1), bound=verdict.bound
        )
        self.n += advanced

        # 7. re-draft and new rows: a row starts where the row above leads by its lag and its slot is free;
        #    every later position's sample from p (coupled with its old draft: MC-SJD) becomes the next draft
        #    of its cell; a new row's slots and the slots that carried none get initial guesses
        newly = self._start_row()  # [B, A]
        if not slots:  # plain ZipAR: no drafts
            return
        next_drafts, next_proposals, carried = self.draft_next(
            p, verdict, advanced=advanced, uniforms=Uniforms(u_accept, u_draw, u_couple), length=length
        )  # [B, A, S], [B, A, S, V], [B, A, S]
        self.drafts.replace(next_drafts, next_proposals)
        self._guess(newly, (length > 0)[..., None] & ~carried, u_guess)

    # -- what a method on these rows may change ------------------------------------------------------
    def window_cells(self, active: torch.Tensor, end: torch.Tensor) -> torch.Tensor:
        """`[B, A]` the cells each row's window covers this step (0: the row feeds nothing): up to `L`, within
        the row, for every running row (`active [B, A]`, rows ending at `end [B, A]`)."""
        return torch.where(active, (end - self.n).clamp(max=self.window), 0)

    def settle(
        self,
        p: torch.Tensor,
        verdict: Verdict,
        *,
        valid: torch.Tensor,
        active: torch.Tensor,
        u_draw: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`(advanced [B, A], committed [B, A, L], codes [B, A, L])` after `verdict`: every row resamples its
        first rejected position, or takes the bonus code (`jacobi.resample`); `active [B, A]`: running rows."""
        return resample(p, self.drafts.codes, valid=valid, verdict=verdict, u_draw=u_draw)

    def draft_next(
        self,
        p: torch.Tensor,
        verdict: Verdict,
        *,
        advanced: torch.Tensor,
        uniforms: Uniforms,
        length: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`(codes [B, A, S], proposals [B, A, S, V], carried [B, A, S])`: every position past a row's
        `advanced` cells gives the next draft of its cell (`jacobi.redraft`, coupled when the verifier
        couples), up to the row's `length` window cells."""
        return redraft(
            p,
            self.drafts,
            advanced=advanced,
            uniforms=uniforms,
            coupling=self.verify.coupling,
            carry_limit=length,
        )

    # -- rows and drafts -----------------------------------------------------------------------------
    def _start_row(self) -> torch.Tensor:
        """Start the next row of each image when the row above leads by the row's lag (or is complete) and
        the row's slot is free; returns `[B, A]` the slots that took a new row."""
        row = self.next_row  # [B, 1]
        above = (row - 1).clamp(min=0)
        n_above = self.n.gather(1, above % self.row_slots)
        lag = self.row_lag[row.clamp(max=self.count)]
        ready = (row == 0) | (n_above - self.row_start[above] >= lag) | (n_above >= self.row_end[above])
        slot = row % self.row_slots
        held = self.row.gather(1, slot)
        free = (self.n.gather(1, slot) >= self.row_end[held]) & ~self._needs_flush().gather(1, slot)
        newly = ((row < self.count) & ready & free) & (self.slot_ids == slot)  # [B, A]
        self.row.copy_(torch.where(newly, row, self.row))
        self.n.copy_(torch.where(newly, self.row_first[row.clamp(max=self.count)], self.n))
        self.next_row += newly.any(1, keepdim=True)
        return newly

    def _guess(self, newly: torch.Tensor, fresh: torch.Tensor, u: torch.Tensor) -> None:
        """`jacobi.guess` over every row's slots (cells `n`, `n + 1`, ... of the row): initial guesses
        (uniform or point-mass proposals, see `guess_proposal`) for every slot of the rows in `newly [B, A]`
        and for the `fresh [B, A, S]` slots of running rows, drawn with the uniforms `u [B, A, >= S]`."""
        if not self.slots:
            return
        guess(
            self.drafts,
            self.n[..., None] + self.positions[: self.slots],  # [B, A, S]
            self.decode,
            scheme=self.verify.init,
            fresh=newly[..., None] | fresh,
            top1=self.top1 if self.track_top1 else None,
            u=u[..., : self.slots],
            uniform=self.verify.acceptance.uniform_guesses,
            end=self.slot_end[..., None],
        )

    def _needs_flush(self) -> torch.Tensor:
        """`[B, A]`: rows that are complete while the row below already ran its first window without their
        last code."""
        end = self.slot_end
        complete = (self.row < self.count) & (self.n >= end)
        last_fed = self.fed.gather(1, (end - 1).clamp(min=0))
        below = self.row + 1
        below_slot = below % self.row_slots
        below_started = below < self.next_row
        n_below = self.n.gather(1, below_slot)
        below_past_start = below_started & (n_below > self.row_start[below.clamp(max=self.count)])
        return complete & ~last_fed & below_past_start & (below < self.count)

    def _latest_code_above(self) -> torch.Tensor:
        """The most recently committed code of the row above each slot's row: ZipAR's placeholder input."""
        codes = self.decode.trace.codes
        above = (self.slot_start - self.width).clamp(min=0)
        columns = torch.arange(self.width, device=codes.device)
        cells = above[..., None] + columns  # [B, A, W]
        values = codes.gather(1, cells.flatten(1)).view_as(cells)
        latest = ((values >= 0) * (columns + 1)).argmax(-1, keepdim=True)
        return values.gather(-1, latest).squeeze(-1).clamp(min=0)


def check_row_window(sampler: str, window: int, default: int, grid: tuple[int, int]) -> None:
    """Refuse a window wider than a row of `grid` (or than the `default` window, on a narrower grid): a
    sampler that advances each row by its own window (up to `H` rows in one forward) never uses more."""
    width, widest = grid[1], max(grid[1], default)
    if window > widest:
        raise ValueError(
            f"window={window} is wider than the {width} codes of a row of this {grid[0]}x{grid[1]} grid, and "
            f"{sampler} advances each row by at most its width, with up to {grid[0]} rows in one forward; use "
            f"window <= {widest}"
        )


def row_slots(rows: int, width: int, lag: int) -> int:
    """Rows running at once in plain ZipAR with the smallest `lag` (each takes `width` forwards and one more
    to flush its last code, and a new one starts every `lag` forwards): `ceil(width / lag) + 1`, one when
    rows run one after another."""
    if lag >= width:
        return 1
    return min(rows, -(-width // max(lag, 1)) + 1)
