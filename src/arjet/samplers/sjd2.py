"""`sjd2`: Speculative Jacobi-Denoising Decoding (Teng et al., NeurIPS 2025), arjet's reading of it.

Needs a model fine-tuned for noisy code embeddings (`requires = {"noise_conditioning"}`: its session has
`noise`). The window holds, after
the last committed code, one draft slot per upcoming cell. A slot is either *clean* (it feeds its draft
code) or *noisy* (it feeds a noisy embedding at a level in `1..K`). New slots enter as pure noise at the
far end; every forward, each noisy slot takes one deterministic DDIM step towards the embedding of its
current draft, and no slot is noisier than its distance to the committed prefix allows, so levels fall
towards the prefix and a slot is clean by the time it reaches the front.

Every forward predicts every slot. Drafts are verified exactly as in SJD: draft `x` of a slot was drawn
from `q`, the distribution that slot had in the previous forward (uniform for a new slot's random code), and is
accepted with probability `min(1, p(x) / q(x))`, where `p` is this forward's processed distribution.
A slot's `p` is only a valid target while every slot before it fed a clean draft, so verification stops
after the first noisy slot; a rejection is resampled from the residual, and a fully verified clean window
gives a bonus token. The result is exactly the fine-tuned model's `ar` distribution.

Every slot's new draft is a sample from this forward's `p`, coupled with its old draft as in MC-SJD: the
old draft is kept with probability `min(1, p(x) / q(x))`, else the new one comes from the residual. Its
marginal is still `p` (so the test above stays exact), but drafts stop flickering between equally likely
codes, and with them the targets the noisy slots are denoised towards (`coupling=False` turns it off;
the README's SJD2 section shows what it saves).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import torch

from .. import checks
from .base import DecodeTrace, commit_first_cell, run_steps
from .jacobi import RuleContext, jacobi_step
from .policy import LogitsPolicy
from .random import ImageRandom
from .sjd import check_size_fits, check_window
from .speculative import Exact, guess_proposal

if TYPE_CHECKING:
    from ..session import DecodingSession


@dataclass
class SJD2:
    """`window`: cells predicted per forward (default 64); `levels`: denoising steps a slot takes from pure
    noise to clean (default: `window // 16`, at most the checkpoint's). A slot moves several cells towards
    the front per forward, so with many levels it would still be noisy when it got there and the verified
    clean front of the window would shrink (the README's SJD2 section has the measurements). `coupling`: re-drafts
    coupled with the old drafts (MC-SJD, still exact; default on)."""

    window: int = 64
    levels: int | None = None
    coupling: bool = True
    name: ClassVar[str] = "sjd2"
    requires: ClassVar[frozenset[str]] = frozenset({"noise_conditioning"})

    def __post_init__(self) -> None:
        check_window(self.window)
        if self.window < 2:
            raise ValueError(f"sjd2 needs a window of at least 2 cells, got {self.window}")
        checks.optional_integer("levels", self.levels, 1)
        checks.boolean("coupling", self.coupling)

    def check_grid(self, grid: tuple[int, int], max_window: int | None = None) -> None:
        """Refuse a window (or more levels than the window has slots) the grid cannot use, before any work."""
        check_size_fits("window", self.window, type(self).window, grid, max_window)
        if self.levels is not None and self.levels > self.window:
            raise ValueError(
                f"levels={self.levels} is more than the window of {self.window}; use levels <= window"
            )

    def denoising_levels(self, trained: int) -> int:
        """Steps from pure noise to clean: `levels`, else `window // 16`, at least 1 and at most `trained`
        (the checkpoint's)."""
        return self.levels or max(1, min(trained, self.window // 16))

    def run(
        self, session: DecodingSession, policy: LogitsPolicy, rng: ImageRandom, trace: DecodeTrace
    ) -> None:
        if session.noise is None:  # pipelines refuse this earlier, naming the capability (`requires`)
            raise ValueError("sjd2 needs a session with noise conditioning (capability 'noise_conditioning')")
        decoder = _Denoiser(self, session, policy, rng, trace)
        run_steps(decoder.step, trace, session.num_cells - 1, reach=decoder.window)


class _Denoiser:
    """The state of an SJD2 decode and its fixed-shape `step`."""

    def __init__(
        self,
        sampler: SJD2,
        session: DecodingSession,
        policy: LogitsPolicy,
        rng: ImageRandom,
        trace: DecodeTrace,
    ):
        self.session, self.policy, self.rng, self.trace = session, policy, rng, trace
        self.noise = noise = session.noise
        self.coupling = sampler.coupling
        vocab, cells = session.vocab_size, session.num_cells
        self.window = window = min(sampler.window, cells)
        self.slots = slots = window - 1
        self.top = top = sampler.denoising_levels(noise.config.levels)
        device = session.device
        self.table = session.code_embeddings()
        self.positions = torch.arange(window, device=device)
        # the noisiest level a slot may have at distance j from the front: 0 at the front, `top` at the end
        cap = torch.div(
            top * torch.arange(slots, device=device) + slots - 2, max(slots - 1, 1), rounding_mode="floor"
        )
        self.cap = cap.clamp(max=top)

        commit_first_cell(session, policy, rng, trace)
        batch = session.batch_size
        self.n = torch.ones(batch, dtype=torch.long, device=device)
        self.drafts = _random_codes(rng.uniform(slots), vocab)
        self.proposals = guess_proposal(self.drafts, torch.ones_like(self.drafts, dtype=torch.bool), vocab)
        self.level = self.cap.expand(batch, slots).clone()
        self.state = noise.add_noise(
            self.table[self.drafts], self.level / top, rng.normal(slots, self.table.shape[-1])
        )

    def step(self) -> None:
        session, trace, noise = self.session, self.trace, self.noise
        window, slots, top, positions = self.window, self.slots, self.top, self.positions
        vocab, dim = session.vocab_size, self.table.shape[-1]
        cells = session.num_cells
        active = self.n < cells
        length = torch.where(active, (cells - self.n).clamp(max=window), 0)
        window_cells = self.n[:, None] + positions
        in_window = positions < length[:, None]
        query_cells = torch.where(in_window, window_cells, -1)
        last = trace.codes.gather(1, (self.n - 1).clamp(min=0)[:, None]).clamp(min=0)
        noisy = self.level > 0
        inputs = torch.cat([last, self.drafts], 1)
        embeddings = torch.cat(
            [torch.zeros_like(self.state[:, :1]), noise.model_input(self.state, self.level / top)], 1
        )
        embedded = torch.cat([torch.zeros_like(noisy[:, :1]), noisy], 1)
        logits = session.logits(
            query_cells,
            inputs,
            embeddings=embeddings,
            embedded=embedded,
            row_ends=(window - 1) // session.grid[1] + 1,
        )
        p = self.policy.probs(logits)

        # verify, resample, commit: a position's p is a valid target only while every input before it is clean
        clean_before = torch.cat([torch.ones_like(noisy[:, :1]), (~noisy).long().cumprod(1).bool()], 1)
        u = self.rng.uniform(4, window)
        outcome = jacobi_step(
            p,
            self.drafts,
            self.proposals,
            in_window & clean_before,
            Exact(),
            RuleContext(),
            u[:, :3],
            self.coupling,
            torch.full_like(self.n, window),
        )
        fed_clean = torch.cat([torch.ones_like(noisy[:, :1]), ~noisy], 1)
        session.commit((positions <= outcome.accepted[:, None]) & fed_clean & in_window)
        trace.commit(torch.where(outcome.committed & in_window, window_cells, -1), outcome.codes)

        # slide the window: every slot's new draft comes from this forward; denoise; new slots enter as noise
        inside = outcome.carried
        source = (outcome.advanced[:, None] + positions[:slots]).clamp(max=window - 1)
        fresh = _random_codes(u[:, 3, :slots], vocab)
        drafts = torch.where(inside, outcome.next_drafts, fresh)
        proposals = torch.where(
            inside[..., None], outcome.next_proposals, guess_proposal(drafts, ~inside, vocab)
        )
        noise_draws = self.rng.normal(window, dim)
        shifted_level = torch.cat([self.level, torch.full_like(self.level[:, :1], top)], 1)
        shifted_state = torch.cat([self.state, noise_draws[:, :1]], 1)
        old_level = torch.where(inside, shifted_level.gather(1, source), top)
        new_state = torch.where(
            inside[..., None],
            shifted_state.gather(1, source[..., None].expand(-1, -1, dim)),
            noise_draws[:, 1:],
        )
        next_level = torch.minimum((old_level - inside.long()).clamp(min=0), self.cap)
        denoised = noise.denoise_step(new_state, self.table[drafts], old_level / top, next_level / top)
        self.state.copy_(torch.where((old_level > 0)[..., None], denoised, new_state))
        self.level.copy_(torch.where(active[:, None], next_level, self.level))
        self.drafts.copy_(torch.where(active[:, None], drafts, self.drafts))
        self.proposals.copy_(torch.where(active[:, None, None], proposals, self.proposals))
        self.n += outcome.advanced


def _random_codes(u: torch.Tensor, vocab: int) -> torch.Tensor:
    return (u * vocab).long().clamp(max=vocab - 1)
