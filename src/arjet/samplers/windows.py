"""The verified-window decoder behind `sjd`, `zipar` and `zipar+sjd`.

An image is split into *lanes*: runs of cells decoded left to right (SJD: one lane over the whole raster;
ZipAR: one lane per row, started once the row above has `lag` codes). Every forward, each active lane
with next cell `n` feeds the code of cell `n - 1` followed by its drafts for cells `n, n+1, ...` and gets
the processed target `p` for its next `L` cells. Drafts are verified left to right with the speculative
test; the first rejected cell is resampled from the residual, or, if every draft passed, the window's
last cell gives a bonus token. The samples drawn for the cells after the rejection become the next
drafts with `p` as their proposal (optionally coupled with the old draft: MC-SJD), and new draft slots
get an initial guess with a point-mass proposal. With `L = 1` there are no drafts and each lane simply
samples one code per forward: plain ZipAR is the same loop.

A lane's drafts form their own group in the session, so no lane attends to another lane's unverified
drafts, while committed codes fed this forward (each lane's first input) are seen by every lane below. A row that starts before the row above is complete feeds an ephemeral placeholder
for its missing predecessor; once the row above completes, its last code is fed for real and kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .base import DecodeTrace
from .drafts import initial_draft
from .policy import LogitsPolicy
from .random import ImageRandom, sample
from .speculative import AcceptanceRule, accept_prefix, couple, one_hot, residual

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
    `lag` codes or is complete."""

    starts: torch.Tensor  # [R]
    ends: torch.Tensor  # [R], exclusive
    lag: int

    @classmethod
    def whole_image(cls, cells: int) -> Lanes:
        return cls(torch.tensor([0]), torch.tensor([cells]), lag=0)

    @classmethod
    def rows(cls, grid: tuple[int, int], lag: int) -> Lanes:
        starts = torch.arange(grid[0]) * grid[1]
        return cls(starts, starts + grid[1], lag=lag)


class _State:
    """Per image and lane: next cell, drafts and their proposals; per image: what is fed and known."""

    def __init__(self, session: DecodingSession, lanes: Lanes, window: int):
        batch, count, device = session.batch_size, len(lanes.starts), session.device
        self.starts, self.ends = lanes.starts.to(device), lanes.ends.to(device)
        self.n = self.starts.expand(batch, count).clone()
        self.started = torch.zeros(batch, count, dtype=torch.bool, device=device)
        slots = max(window - 1, 1)
        self.drafts = torch.zeros(batch, count, slots, dtype=torch.long, device=device)
        self.proposals = torch.zeros(batch, count, slots, session.vocab_size, device=device)
        self.fed = torch.zeros(
            batch, session.num_cells + 1, dtype=torch.bool, device=device
        )  # code in the cache
        self.top1 = torch.full((batch, session.num_cells + 1), -1, dtype=torch.long, device=device)


def run_windows(
    session: DecodingSession,
    policy: LogitsPolicy,
    rng: ImageRandom,
    trace: DecodeTrace,
    lanes: Lanes,
    config: WindowConfig,
) -> None:
    window, vocab = config.window, session.vocab_size
    state = _State(session, lanes, window)
    positions = torch.arange(window, device=session.device)
    draft_slots = window - 1
    lane_ids = torch.arange(len(lanes.starts), device=session.device).expand_as(state.n)

    while not bool(trace.done.all()):
        _start_lanes(state, lanes.lag, config, trace, rng)
        batch, count = state.n.shape
        active = state.started & (state.n < state.ends)
        length = torch.where(active, (state.ends - state.n).clamp(max=window), 0)  # valid window cells

        # 1. queries: each active lane's window, plus a finished row's last code once the row below runs
        previous = (state.n - 1).clamp(min=0)
        previous_code = trace.codes.gather(1, previous)
        placeholder = active & (state.n > 0) & (previous_code < 0)
        last = torch.where(
            placeholder, _latest_code_above(trace.codes, state, session.grid[1]), previous_code
        )
        flush = _needs_flush(state) & ~trace.done[:, None]
        window_cells = state.n[..., None] + positions
        query_cells = torch.cat(
            [
                torch.where(positions < length[..., None], window_cells, -1),
                torch.where(flush, state.ends, -1)[..., None],
            ],
            -1,
        )
        flush_code = trace.codes.gather(1, (state.ends - 1).expand_as(state.n)).clamp(min=0)
        inputs = torch.cat(
            [last.clamp(min=0)[..., None], state.drafts[..., :draft_slots], flush_code[..., None]], -1
        )
        ephemeral = torch.zeros_like(query_cells, dtype=torch.bool)
        ephemeral[..., 0] = placeholder
        group = (lane_ids + 1)[..., None].expand_as(query_cells).clone()
        group[..., 0] = 0  # committed codes are shared with every lane; drafts stay in their lane's group
        group[..., window] = 0
        logits = session.logits(
            query_cells.flatten(1), inputs.flatten(1), ephemeral=ephemeral.flatten(1), group=group.flatten(1)
        ).view(batch, count, window + 1, vocab)
        p = policy.probs(logits[..., :window, :])
        in_window = positions < length[..., None]
        _scatter_where(state.top1, window_cells, p.argmax(-1), in_window)

        # 2. verify the drafts; resample the first rejected cell, or take a bonus token
        u_accept, u_draw, u_couple = (rng.uniform(count, window) for _ in range(3))
        usable_drafts = length.clamp(max=draft_slots)
        if draft_slots:
            q = state.proposals[..., :draft_slots, :]
            target = config.acceptance.target(p[..., :draft_slots, :], q, session)
            usable = positions[:draft_slots] < usable_drafts[..., None]
            accepted = accept_prefix(
                target, q, state.drafts[..., :draft_slots], u_accept[..., :draft_slots], usable
            )
        else:
            accepted = torch.zeros_like(state.n)
        needs_token = accepted < length
        at = accepted.clamp(max=window - 1)
        dist = _take(p, at)
        if draft_slots:
            rejected = accepted < usable_drafts
            at_draft = at.clamp(max=draft_slots - 1)
            dist = torch.where(
                rejected[..., None], residual(_take(target, at_draft), _take(q, at_draft)), dist
            )
        token = sample(dist, u_draw.gather(-1, at[..., None]).squeeze(-1))

        # 3. commit the accepted drafts and the new token, and keep the inputs that fed them
        drafted = torch.cat([state.drafts[..., :draft_slots], torch.zeros_like(state.n)[..., None]], -1)
        new_codes = torch.where(positions == accepted[..., None], token[..., None], drafted)
        committed = (
            in_window
            & (positions <= accepted[..., None])
            & ((positions < accepted[..., None]) | needs_token[..., None])
        )
        keep = torch.cat(
            [in_window & (positions <= accepted[..., None]) & ~ephemeral[..., :window], flush[..., None]], -1
        )
        session.commit(keep.flatten(1))
        _scatter_where(state.fed, query_cells - 1, torch.ones_like(keep), keep & (query_cells > 0))
        trace.commit(torch.where(committed, window_cells, -1).flatten(1), new_codes.flatten(1))
        advanced = torch.where(active, (accepted + needs_token.long()).clamp(max=length), 0)

        # 4. the samples after the rejection become the next drafts; new slots get initial guesses
        if draft_slots:
            samples = sample(p, u_draw)
            if config.coupling:
                old = torch.cat([state.drafts, state.drafts[..., -1:]], -1)[..., :window]
                old_q = torch.cat([state.proposals, state.proposals[..., -1:, :]], -2)[..., :window, :]
                had_draft = positions < usable_drafts[..., None]
                samples = torch.where(had_draft, couple(p, old, old_q, u_couple, u_draw), samples)
            source = advanced[..., None] + positions[:draft_slots]
            carried = (source < length[..., None]) & active[..., None]
            source = source.clamp(max=window - 1)
            state.drafts = torch.where(carried, samples.gather(-1, source), state.drafts)
            carried_q = p.gather(-2, source[..., None].expand(-1, -1, -1, vocab))
            state.proposals = torch.where(carried[..., None], carried_q, state.proposals)
            state.n = state.n + advanced
            _fill_drafts(state, carried.sum(-1), active, config, trace, rng.uniform(*state.drafts.shape[1:]))
        else:
            state.n = state.n + advanced


def _start_lanes(state: _State, lag: int, config: WindowConfig, trace: DecodeTrace, rng: ImageRandom) -> None:
    ready = torch.ones_like(state.started)
    if ready.shape[1] > 1:
        done_above = state.n[:, :-1] >= state.ends[:-1]
        ready[:, 1:] = ((state.n[:, :-1] - state.starts[:-1]) >= lag) | done_above
    ready[:, 1:] &= state.started[:, :-1]
    newly = ~state.started & ready
    state.started |= newly
    if config.window > 1:
        # every image draws its uniforms at every step, whether or not a lane starts: an image's random
        # stream (and so its codes) must not depend on how fast the other images of the batch go
        u = rng.uniform(*state.drafts.shape[1:])
        if bool(newly.any()):
            _fill_drafts(state, torch.zeros_like(state.n), newly, config, trace, u)


def _fill_drafts(
    state: _State,
    first: torch.Tensor,
    lanes: torch.Tensor,
    config: WindowConfig,
    trace: DecodeTrace,
    u: torch.Tensor,
) -> None:
    """Initial guesses for draft slots `>= first` of the selected lanes (point-mass proposals), drawn with
    the uniforms `u [B, lanes, slots]`."""
    batch, count, slots = state.drafts.shape
    width = trace.session.grid[1]
    vocab = trace.session.vocab_size
    board = torch.cat([trace.codes, torch.full_like(trace.codes[:, :1], -1)], 1)  # last column absorbs writes
    for j in range(slots):
        cell = state.n + j
        inside = cell < state.ends
        _scatter_where(board, cell, state.drafts[..., j], inside & (j < first))
        fresh = lanes & inside & (j >= first)
        guess = initial_draft(
            config.init,
            torch.where(fresh, cell, -1).flatten(),
            board.repeat_interleave(count, 0),
            state.top1.repeat_interleave(count, 0),
            width,
            vocab,
            u[..., j].flatten(),
        ).view(batch, count)
        state.drafts[..., j] = torch.where(fresh, guess, state.drafts[..., j])
        state.proposals[..., j, :] = torch.where(
            fresh[..., None], one_hot(guess, vocab), state.proposals[..., j, :]
        )
        _scatter_where(board, cell, guess, fresh)


def _needs_flush(state: _State) -> torch.Tensor:
    """Lanes that are complete while the lane below already ran its first window without their last code."""
    flush = torch.zeros_like(state.started)
    if flush.shape[1] > 1:
        complete = state.n[:, :-1] >= state.ends[:-1]
        last_fed = state.fed.gather(1, (state.ends[:-1] - 1).expand_as(complete))
        below_past_start = state.started[:, 1:] & (state.n[:, 1:] > state.starts[1:])
        flush[:, :-1] = complete & ~last_fed & below_past_start
    return flush


def _latest_code_above(codes: torch.Tensor, state: _State, width: int) -> torch.Tensor:
    """The most recently committed code of the row above each lane: ZipAR's placeholder input."""
    above = (state.starts - width).clamp(min=0)
    columns = torch.arange(width, device=codes.device)
    cells = (above[:, None] + columns).expand(codes.shape[0], -1, -1)
    values = codes.gather(1, cells.flatten(1)).view_as(cells)
    latest = ((values >= 0) * (columns + 1)).argmax(-1, keepdim=True)
    return values.gather(-1, latest).squeeze(-1).clamp(min=0)


def _take(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """`values[b, r, index[b, r]]` for values `[B, R, L, ...]`."""
    expanded = index.view(*index.shape, 1, *([1] * (values.dim() - 3))).expand(
        *index.shape, 1, *values.shape[3:]
    )
    return values.gather(2, expanded).squeeze(2)


def _scatter_where(
    target: torch.Tensor, cells: torch.Tensor, values: torch.Tensor, where: torch.Tensor
) -> None:
    """`target[b, cells] = values` where `where`; other entries go to the last column, kept as scratch."""
    scratch = target.shape[1] - 1
    target.scatter_(1, torch.where(where, cells, scratch).flatten(1), values.flatten(1).to(target.dtype))
    target[:, scratch] = target[:, scratch].clone().fill_(-1 if target.dtype == torch.long else 0)
