"""`zipar`: ZipAR spatial parallel decoding (He et al., ICML 2025), and `zipar+sjd`, its verified form.

Rows decode in parallel once the row above is far enough ahead; every running row advances in the same
forward. Plain ZipAR samples one code per row per forward (lossy: a row sees only part of the row above).
With `verify=SJD(...)` each running row advances by a verified SJD window instead: lossless with respect
to the context the schedule gives each cell. Two published schedules, for ZipAR's window size `w`:

- `schedule="lumina"` (default; the paper's Lumina-mGPT script): row `r + 1` starts once row `r` has
  `w - 1` codes, so row `r + 1`'s column `c` comes out of the same forward as row `r`'s column `c + w - 1`.
  A 48x48 grid with `w = 16` takes `(H - 1)(w - 1) + W = 753` forwards, the prefill included.
- `schedule="llamagen"` (the LlamaGen script): row 0 alone, row 1 once row 0 is complete, then row `r + 1`
  once row `r` has `w` codes: `(H - 2) w + 2 W` forwards (224 on LlamaGen's 24x24 grid with `w = 8`).

`w = None` takes the scripts' defaults: 16 on grids wider than 32 codes (Lumina-mGPT's 48), 8 otherwise
(LlamaGen's 24). A lag of at least the width is plain raster decoding, so `zipar` is then exactly `ar`:
`w >= W + 1` with the lumina schedule (a lag of `w - 1`), `w >= W` with llamagen's.

Rows are *lanes*: runs of cells decoded left to right, each in a lane slot of its own (`RowStepper`). Every
forward, each running lane with next cell `n` feeds the code of cell `n - 1` followed by its drafts for
cells `n, n+1, ...` (none for plain ZipAR: a window of one) and gets the processed target `p` for its next
`L` cells; SJD's window step (`arjet.samplers.jacobi.jacobi_step`) verifies, resamples, commits and
redrafts. A lane's drafts form their own group in the session, so no lane attends to another lane's
unverified drafts, while committed codes fed this forward (each lane's first input) are seen by every lane
below. A row that starts before the row above is complete feeds an ephemeral placeholder for its missing
predecessor; once the row above completes, its last code is fed for real and kept (a *flush*).

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
from .decoding import Decode, Stepper
from .jacobi import Drafts, RuleContext, Uniforms, jacobi_step, refill, scatter_where, uses_top1
from .options import MAX_SIZE, option
from .sjd import SJD

SCHEDULES = ("lumina", "llamagen")


@dataclass(frozen=True)
class ZipAR(Sampler):
    """`w`: ZipAR's window size (None: 16 on grids wider than 32 codes, else 8); `schedule`: `"lumina"` (row
    `r + 1` starts after `w - 1` codes of row `r`) or `"llamagen"` (row 1 after row 0, then after `w`
    codes); `verify`: an `SJD` whose window each row advances by (its acceptance rule applies)."""

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
            width, widest = grid[1], max(grid[1], type(self.verify).window)
            if self.verify.window > widest:
                raise ValueError(
                    f"window={self.verify.window} is wider than the {width} codes of a row of this "
                    f"{grid[0]}x{grid[1]} grid, and {self.name} advances each row by at most its width, with "
                    f"up to {grid[0]} rows in one forward; use window <= {widest}"
                )

    def window_size(self, width: int) -> int:
        """`w`, or the scripts' default for a grid `width` codes wide."""
        return self.w if self.w is not None else (16 if width > 32 else 8)

    def lags(self, grid: tuple[int, int]) -> list[int]:
        """Codes row `r - 1` needs before row `r` starts, for `r = 1 .. H - 1`."""
        height, width = grid
        w = self.window_size(width)
        if self.schedule == "lumina":
            return [w - 1] * (height - 1)
        return [width] + [w] * (height - 2) if height > 1 else []

    def run(self, decode: Decode) -> None:
        session = decode.session
        lanes = Lanes.rows(session.grid, self.lags(session.grid))
        verify = self.verify or SJD(window=1)  # plain ZipAR: one code per row per forward, no drafts
        stepper = RowStepper(lanes, verify, decode)
        exact = verify.window == 1
        max_steps = lanes.steps_one_cell_each() if exact else session.num_cells - 1
        decode.run(stepper, max_steps, exact=exact)


@dataclass
class Lanes:
    """Lane `r` covers cells `starts[r] <= c < ends[r]` and may start once lane `r - 1` has committed
    `lags[r - 1]` codes or is complete."""

    starts: torch.Tensor  # [R]
    ends: torch.Tensor  # [R], exclusive
    lags: list[int]  # [R - 1]

    @classmethod
    def rows(cls, grid: tuple[int, int], lags: int | list[int]) -> Lanes:
        starts = torch.arange(grid[0]) * grid[1]
        lags = [lags] * (grid[0] - 1) if isinstance(lags, int) else list(lags)
        if len(lags) != grid[0] - 1:
            raise ValueError(f"{grid[0]} rows need {grid[0] - 1} lags, got {len(lags)}")
        return cls(starts, starts + grid[1], lags=lags)

    def steps_one_cell_each(self) -> int:
        """Forwards after the prefill when every running lane commits exactly one cell per forward (plain
        ZipAR). Mirrors `RowStepper`: cell 0 comes from the prefill, and a lane starts once the lane above
        has started and has `lag` codes or is complete, one new lane per step."""
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

    Lanes run in `A` lane slots (lane `r` in slot `r % A`), enough for every lane plain ZipAR keeps running
    at once (`ceil(W / lag) + 1`); a lane starts only when its slot's previous lane is complete and flushed,
    which keeps every forward at `A x (L + 1)` queries. Each lane advances by `verify`'s SJD window (a window
    of one, no drafts, for plain ZipAR)."""

    def __init__(self, lanes: Lanes, verify: SJD, decode: Decode):
        self.decode, self.verify = decode, verify
        session = decode.session
        batch, device = session.batch_size, session.device
        self.window = window = verify.window
        self.reach = window + session.grid[1]  # a new row starts one row on
        self.slots = window - 1
        self.width = session.grid[1]
        count = len(lanes.starts)
        self.count = count
        self.lane_slots = slots = lane_slots(count, self.width, min(lanes.lags, default=self.width))
        # codes lane r - 1 needs before lane r starts (lane 0 needs none)
        self.lane_lag = torch.tensor([0, *lanes.lags, 0], device=device)
        # per lane, plus a padding lane (index `count`) that is empty: start = end = 0
        self.lane_start = torch.cat([lanes.starts, lanes.starts.new_zeros(1)]).to(device)
        self.lane_end = torch.cat([lanes.ends, lanes.ends.new_zeros(1)]).to(device)
        self.lane_first = self.lane_start.clone()
        self.lane_first[:1].clamp_(min=1)  # cell 0 comes from the prefill
        self.row = torch.full((batch, slots), count, dtype=torch.long, device=device)  # lane held by a slot
        self.next_lane = torch.zeros(batch, 1, dtype=torch.long, device=device)
        self.n = torch.zeros(batch, slots, dtype=torch.long, device=device)
        draft_slots = max(self.slots, 1)
        self.drafts = Drafts(
            torch.zeros(batch, slots, draft_slots, dtype=torch.long, device=device),
            torch.zeros(batch, slots, draft_slots, session.vocab_size, device=device),
        ).slots(slice(None, self.slots))
        self.fed = torch.zeros(batch, session.num_cells + 1, dtype=torch.bool, device=device)  # code in cache
        self.track_top1 = uses_top1(verify.init)
        relaxes_greedy = verify.acceptance.relaxes_greedy
        self.soft_policy = decode.policy.soft() if decode.policy.greedy and relaxes_greedy else None
        self.top1 = torch.full((batch, session.num_cells + 1), -1, dtype=torch.long, device=device)
        self.positions = torch.arange(window, device=device)
        self.slot_ids = torch.arange(slots, device=device)
        # query groups: committed codes (a lane's first input, a flush) are shared with every lane (group 0),
        # drafts only within their own lane (group = lane slot + 1)
        column = torch.arange(window + 1, device=device)
        is_draft = (column >= 1) & (column < window)
        self.group = torch.where(is_draft, self.slot_ids[:, None] + 1, 0)[None]  # [1, A, L + 1]
        # each lane slot queries its window (at most (L-1)//W + 1 row ends) plus one flush (one more)
        self.row_ends = slots * ((window - 1) // self.width + 2)

    def start(self, first: torch.Tensor) -> None:
        newly = self._start_lane()  # lane 0
        newly |= self._start_lane()  # the lane below, if cell 0 is already enough (as if cell 0 were a step)
        u = self.decode.random.uniform(self.lane_slots, self.window)
        self._fill(newly, torch.zeros_like(newly)[..., None], u)

    @property
    def slot_start(self) -> torch.Tensor:
        """`[B, A]` the first cell of the lane each slot holds."""
        return self.lane_start[self.row]

    @property
    def slot_end(self) -> torch.Tensor:
        """`[B, A]` the end (exclusive) of the lane each slot holds."""
        return self.lane_end[self.row]

    # -- one step ------------------------------------------------------------------------------------
    def step(self) -> None:
        session, trace, window = self.decode.session, self.decode.trace, self.window
        batch, slots = self.n.shape
        vocab = session.vocab_size
        end = self.slot_end
        active = self.n < end
        length = torch.where(active, (end - self.n).clamp(max=window), 0)  # valid window cells

        # 1. queries: each running lane's window, plus a finished lane's last code once the lane below runs
        previous_code = trace.codes.gather(1, (self.n - 1).clamp(min=0))
        placeholder = active & (self.n > 0) & (previous_code < 0)
        last = torch.where(placeholder, self._latest_code_above(), previous_code)
        flush = self._needs_flush() & ~trace.done[:, None]
        window_cells = self.n[..., None] + self.positions
        in_window = self.positions < length[..., None]
        query_cells = torch.cat(
            [torch.where(in_window, window_cells, -1), torch.where(flush, end, -1)[..., None]], -1
        )
        flush_code = trace.codes.gather(1, (end - 1).clamp(min=0)).clamp(min=0)
        inputs = torch.cat([last.clamp(min=0)[..., None], self.drafts.codes, flush_code[..., None]], -1)
        ephemeral = torch.cat(
            [placeholder[..., None], torch.zeros_like(query_cells[..., 1:], dtype=torch.bool)], -1
        )
        group = self.group.expand(batch, -1, -1)
        logits = session.logits(
            query_cells.flatten(1),
            inputs.flatten(1),
            ephemeral=ephemeral.flatten(1),
            group=group.flatten(1),
            row_ends=self.row_ends,
        ).view(batch, slots, window + 1, vocab)
        p = self.decode.policy.probs(logits[..., :window, :])
        context = RuleContext(session.codebook)
        if self.soft_policy is not None:
            context.soft_p = self.soft_policy.probs(logits[..., : self.slots, :])
        if self.track_top1:
            scatter_where(self.top1, window_cells, p.argmax(-1), in_window)

        # 2. verify, resample, commit; keep the inputs that fed committed cells
        accept, draw, couple, guess = self.decode.random.uniform(slots, 4, window).unbind(2)
        outcome = jacobi_step(
            p,
            self.drafts,
            valid=in_window,
            rule=self.verify.acceptance,
            context=context,
            uniforms=Uniforms(accept, draw, couple),
            coupling=self.verify.coupling,
            carry_limit=length,
        )
        used = in_window & (self.positions <= outcome.accepted[..., None]) & ~ephemeral[..., :window]
        keep = torch.cat([used, flush[..., None]], -1)
        session.commit(keep.flatten(1))
        scatter_where(self.fed, query_cells - 1, torch.ones_like(keep), keep & (query_cells > 0))
        trace.commit(torch.where(outcome.committed, window_cells, -1).flatten(1), outcome.codes.flatten(1))
        self.n += outcome.advanced

        # 3. the samples after the rejection become the next drafts; new lanes and slots get initial guesses
        newly = self._start_lane()
        if self.slots:
            self.drafts.replace(outcome.next_drafts, outcome.next_proposals)
            self._fill(newly, active[..., None] & ~outcome.carried, guess)

    # -- lanes and drafts ----------------------------------------------------------------------------
    def _start_lane(self) -> torch.Tensor:
        """Start the next lane of each image when the lane above has the lane's lag in codes (or is complete)
        and the lane's slot is free; returns `[B, A]` the slots that took a new lane."""
        lane = self.next_lane  # [B, 1]
        above = (lane - 1).clamp(min=0)
        n_above = self.n.gather(1, above % self.lane_slots)
        lag = self.lane_lag[lane.clamp(max=self.count)]
        ready = (lane == 0) | (n_above - self.lane_start[above] >= lag) | (n_above >= self.lane_end[above])
        slot = lane % self.lane_slots
        held = self.row.gather(1, slot)
        free = (self.n.gather(1, slot) >= self.lane_end[held]) & ~self._needs_flush().gather(1, slot)
        newly = ((lane < self.count) & ready & free) & (self.slot_ids == slot)  # [B, A]
        self.row.copy_(torch.where(newly, lane, self.row))
        self.n.copy_(torch.where(newly, self.lane_first[lane.clamp(max=self.count)], self.n))
        self.next_lane += newly.any(1, keepdim=True)
        return newly

    def _fill(self, newly: torch.Tensor, fresh: torch.Tensor, u: torch.Tensor) -> None:
        """Initial guesses (uniform or point-mass proposals, see `guess_proposal`) for every slot of the lanes
        in `newly [B, A]` and for the `fresh [B, A, S]` slots of running lanes, drawn with the uniforms
        `u [B, A, >= S]`."""
        if not self.slots:
            return
        cells = self.n[..., None] + self.positions[: self.slots]
        inside = cells < self.slot_end[..., None]
        refill(
            self.drafts,
            scheme=self.verify.init,
            cells=cells,
            inside=inside,
            fresh=inside & (newly[..., None] | fresh),
            codes=self.decode.trace.codes,
            top1=self.top1 if self.track_top1 else None,
            width=self.width,
            u=u[..., : self.slots],
            uniform=self.verify.acceptance.uniform_guesses,
        )

    def _needs_flush(self) -> torch.Tensor:
        """`[B, A]`: lanes that are complete while the lane below already ran its first window without their
        last code."""
        end = self.slot_end
        complete = (self.row < self.count) & (self.n >= end)
        last_fed = self.fed.gather(1, (end - 1).clamp(min=0))
        below = self.row + 1
        below_slot = below % self.lane_slots
        below_started = below < self.next_lane
        n_below = self.n.gather(1, below_slot)
        below_past_start = below_started & (n_below > self.lane_start[below.clamp(max=self.count)])
        return complete & ~last_fed & below_past_start & (below < self.count)

    def _latest_code_above(self) -> torch.Tensor:
        """The most recently committed code of the row above each lane: ZipAR's placeholder input."""
        codes = self.decode.trace.codes
        above = (self.slot_start - self.width).clamp(min=0)
        columns = torch.arange(self.width, device=codes.device)
        cells = above[..., None] + columns  # [B, A, W]
        values = codes.gather(1, cells.flatten(1)).view_as(cells)
        latest = ((values >= 0) * (columns + 1)).argmax(-1, keepdim=True)
        return values.gather(-1, latest).squeeze(-1).clamp(min=0)


def lane_slots(lanes: int, width: int, lag: int) -> int:
    """Lanes running at once in plain ZipAR with the smallest `lag` (each takes `width` forwards and one more
    to flush its last code, and a new one starts every `lag` forwards): `ceil(width / lag) + 1`, one when
    rows run one after another."""
    if lag >= width:
        return 1
    return min(lanes, -(-width // max(lag, 1)) + 1)
