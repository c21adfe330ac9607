"""The verified-window decoder behind `sjd`, `zipar` and `zipar+sjd`.

An image is split into *lanes*: runs of cells decoded left to right (SJD: one lane over the whole raster;
ZipAR: one lane per row, started once the row above has `lag` codes). Every forward, each active lane
with next cell `n` feeds the code of cell `n - 1` followed by its drafts for cells `n, n+1, ...` and gets
the processed target `p` for its next `L` cells; `jacobi_step` verifies, resamples, commits and redrafts.
New draft slots get an initial guess, declared with the proposal it was drawn from (see `drafts`). With `L = 1` there are no drafts and each
lane simply samples one code per forward: plain ZipAR is the same loop.

A lane's drafts form their own group in the session, so no lane attends to another lane's unverified
drafts, while committed codes fed this forward (each lane's first input) are seen by every lane below. A
row that starts before the row above is complete feeds an ephemeral placeholder for its missing
predecessor; once the row above completes, its last code is fed for real and kept.

Every step has the same shapes (`lanes x (L + 1)` queries) and reads nothing back from the device: lanes
that are not running, and images that are done, query nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .base import DecodeTrace, commit_first_cell, run_steps
from .drafts import refill_drafts, scatter_where, uses_top1
from .jacobi import RuleContext, jacobi_step
from .policy import LogitsPolicy
from .random import ImageRandom
from .speculative import AcceptanceRule

if TYPE_CHECKING:
    from ..session import DecodingSession


@dataclass(frozen=True)
class WindowConfig:
    window: int
    init: str
    coupling: bool
    acceptance: AcceptanceRule


@dataclass
class Lanes:
    """Lane `r` covers cells `starts[r] <= c < ends[r]` and may start once lane `r - 1` has committed
    `lags[r - 1]` codes or is complete."""

    starts: torch.Tensor  # [R]
    ends: torch.Tensor  # [R], exclusive
    lags: list[int]  # [R - 1]

    @classmethod
    def whole_image(cls, cells: int) -> Lanes:
        return cls(torch.tensor([0]), torch.tensor([cells]), lags=[])

    @classmethod
    def rows(cls, grid: tuple[int, int], lags: int | list[int]) -> Lanes:
        starts = torch.arange(grid[0]) * grid[1]
        lags = [lags] * (grid[0] - 1) if isinstance(lags, int) else list(lags)
        if len(lags) != grid[0] - 1:
            raise ValueError(f"{grid[0]} rows need {grid[0] - 1} lags, got {len(lags)}")
        return cls(starts, starts + grid[1], lags=lags)

    def steps_one_cell_each(self) -> int:
        """Forwards after the prefill when every running lane commits exactly one cell per forward (plain
        ZipAR). Mirrors `WindowDecoder`: cell 0 comes from the prefill, and a lane starts once the lane above
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


class WindowDecoder:
    """The state of a verified-window decode and its fixed-shape `step`.

    Lanes run in `A` lane slots (lane `r` in slot `r % A`), enough for every lane plain ZipAR keeps running
    at once (`ceil(W / lag) + 1`, one lane for SJD); a lane starts only when its slot's previous lane is
    complete and flushed, which keeps every forward at `A x (L + 1)` queries."""

    def __init__(
        self,
        session: DecodingSession,
        policy: LogitsPolicy,
        rng: ImageRandom,
        trace: DecodeTrace,
        lanes: Lanes,
        config: WindowConfig,
    ):
        self.session, self.policy, self.rng, self.trace, self.config = session, policy, rng, trace, config
        batch, device = session.batch_size, session.device
        self.window = window = config.window
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
        self.drafts = torch.zeros(batch, slots, draft_slots, dtype=torch.long, device=device)
        self.proposals = torch.zeros(batch, slots, draft_slots, session.vocab_size, device=device)
        self.fed = torch.zeros(batch, session.num_cells + 1, dtype=torch.bool, device=device)  # code in cache
        self.track_top1 = uses_top1(config.init)
        relaxes_greedy = getattr(config.acceptance, "relaxes_greedy", False)
        self.soft_policy = policy.soft() if policy.greedy and relaxes_greedy else None
        self.uniform_guesses = getattr(config.acceptance, "uniform_guesses", True)
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

        commit_first_cell(session, policy, rng, trace)
        newly = self._start_lane()  # lane 0
        newly |= self._start_lane()  # the lane below, if cell 0 is already enough (as if cell 0 were a step)
        self._fill(newly, torch.zeros_like(newly)[..., None], self.rng.uniform(slots, window))

    @property
    def start(self) -> torch.Tensor:
        return self.lane_start[self.row]

    @property
    def end(self) -> torch.Tensor:
        return self.lane_end[self.row]

    # -- one step ------------------------------------------------------------------------------------
    def step(self) -> None:
        session, trace, window = self.session, self.trace, self.window
        batch, slots = self.n.shape
        vocab = session.vocab_size
        end = self.end
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
        inputs = torch.cat(
            [last.clamp(min=0)[..., None], self.drafts[..., : self.slots], flush_code[..., None]], -1
        )
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
        p = self.policy.probs(logits[..., :window, :])
        context = RuleContext(session.codebook)
        if self.soft_policy is not None:
            context.soft_p = self.soft_policy.probs(logits[..., : self.slots, :])
        if self.track_top1:
            scatter_where(self.top1, window_cells, p.argmax(-1), in_window)

        # 2. verify, resample, commit; keep the inputs that fed committed cells
        u = self.rng.uniform(slots, 4, window)
        outcome = jacobi_step(
            p,
            self.drafts[..., : self.slots],
            self.proposals[..., : self.slots, :],
            in_window,
            self.config.acceptance,
            context,
            u[:, :, :3],
            self.config.coupling,
            length,
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
            self.drafts.copy_(outcome.next_drafts)
            self.proposals.copy_(outcome.next_proposals)
            self._fill(newly, active[..., None] & ~outcome.carried, u[:, :, 3])

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

    def _fill(self, newly: torch.Tensor, refill: torch.Tensor, u: torch.Tensor) -> None:
        """Initial guesses (uniform or point-mass proposals, see `guess_proposal`) for every slot of the lanes
        in `newly [B, A]` and for the `refill [B, A, S]` slots of running lanes, drawn with the uniforms
        `u [B, A, >= S]`."""
        if not self.slots:
            return
        cells = self.n[..., None] + self.positions[: self.slots]
        inside = cells < self.end[..., None]
        refill_drafts(
            self.config.init,
            self.drafts[..., : self.slots],
            self.proposals[..., : self.slots, :],
            cells,
            inside,
            inside & (newly[..., None] | refill),
            self.trace.codes,
            self.top1 if self.track_top1 else None,
            self.width,
            u[..., : self.slots],
            self.uniform_guesses,
        )

    def _needs_flush(self) -> torch.Tensor:
        """`[B, A]`: lanes that are complete while the lane below already ran its first window without their
        last code."""
        end = self.end
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
        codes = self.trace.codes
        above = (self.start - self.width).clamp(min=0)
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


def run_windows(
    session: DecodingSession,
    policy: LogitsPolicy,
    rng: ImageRandom,
    trace: DecodeTrace,
    lanes: Lanes,
    config: WindowConfig,
) -> None:
    decoder = WindowDecoder(session, policy, rng, trace, lanes, config)
    exact = config.window == 1
    max_steps = lanes.steps_one_cell_each() if exact else session.num_cells - 1
    reach = config.window + (session.grid[1] if len(lanes.starts) > 1 else 0)  # a new row starts one row on
    run_steps(decoder.step, trace, max_steps, reach, exact=exact)
