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
from typing import ClassVar

import torch

from .base import Sampler
from .decoding import Decode, Stepper
from .jacobi import Drafts, Exact, RuleContext, Uniforms, guess_proposal, jacobi_step, random_codes
from .options import MAX_SIZE, check_fits_grid, option


@dataclass(frozen=True)
class SJD2(Sampler):
    """`window`: cells predicted per forward (default 64); `levels`: denoising steps a slot takes from pure
    noise to clean (default: `window // 16`, at most the checkpoint's). A slot moves several cells towards
    the front per forward, so with many levels it would still be noisy when it got there and the verified
    clean front of the window would shrink (the README's SJD2 section has the measurements). `coupling`: re-drafts
    coupled with the old drafts (MC-SJD, still exact; default on)."""

    window: int = option(64, "cells predicted per forward", minimum=2, maximum=MAX_SIZE)
    levels: int | None = option(
        None, "denoising steps from noise to clean (none: window // 16)", minimum=1, maximum=MAX_SIZE
    )
    coupling: bool = option(True, "couple re-drafts with the old drafts (MC-SJD)")
    name: ClassVar[str] = "sjd2"
    requires: ClassVar[frozenset[str]] = frozenset({"noise_conditioning"})

    def check_grid(
        self, grid: tuple[int, int], max_window: int | None = None, *, vocab_size: int | None = None
    ) -> None:
        """Refuse a window (or more levels than the window has slots) the grid cannot use, before any work."""
        check_fits_grid("window", self.window, type(self).window, grid, max_window)
        if self.levels is not None and self.levels > self.window:
            raise ValueError(
                f"levels={self.levels} is more than the window of {self.window}; use levels <= window"
            )

    def denoising_levels(self, trained: int) -> int:
        """Steps from pure noise to clean: `levels`, else `window // 16`, at least 1 and at most `trained`
        (the checkpoint's)."""
        return self.levels or max(1, min(trained, self.window // 16))

    def run(self, decode: Decode) -> None:
        if decode.session.noise is None:  # pipelines refuse this earlier, naming the capability (`requires`)
            raise ValueError("sjd2 needs a session with noise conditioning (capability 'noise_conditioning')")
        stepper = DenoisingStepper(self, decode)
        decode.run(stepper, decode.session.num_cells - 1)


class DenoisingStepper(Stepper):
    """The state of an SJD2 decode between forwards, and its fixed-shape `step`."""

    def __init__(self, sampler: SJD2, decode: Decode):
        self.decode = decode
        session = decode.session
        self.noise = noise = session.noise
        self.coupling = sampler.coupling
        self.window = self.reach = window = min(sampler.window, session.num_cells)
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
        self.n = torch.ones(session.batch_size, dtype=torch.long, device=device)

    def start(self, first: torch.Tensor) -> None:
        """Every slot starts as a uniform random code whose embedding is noised to the slot's level."""
        rng, slots, vocab = self.decode.random, self.slots, self.decode.session.vocab_size
        codes = random_codes(rng.uniform(slots), vocab)
        self.drafts = Drafts(codes, guess_proposal(codes, torch.ones_like(codes, dtype=torch.bool), vocab))
        self.level = self.cap.expand(len(codes), slots).clone()
        self.state = self.noise.add_noise(
            self.table[codes], self.level / self.top, rng.normal(slots, self.table.shape[-1])
        )

    def step(self) -> None:
        session, trace, noise, drafts = self.decode.session, self.decode.trace, self.noise, self.drafts
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
        inputs = torch.cat([last, drafts.codes], 1)
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
        p = self.decode.policy.probs(logits)

        # verify, resample, commit: a position's p is a valid target only while every input before it is clean
        clean_before = torch.cat([torch.ones_like(noisy[:, :1]), (~noisy).long().cumprod(1).bool()], 1)
        accept, draw, couple, fresh_u = self.decode.random.uniform(4, window).unbind(1)
        outcome = jacobi_step(
            p,
            drafts,
            valid=in_window & clean_before,
            rule=Exact(),
            context=RuleContext(),
            uniforms=Uniforms(accept, draw, couple),
            coupling=self.coupling,
            carry_limit=torch.full_like(self.n, window),
        )
        fed_clean = torch.cat([torch.ones_like(noisy[:, :1]), ~noisy], 1)
        session.commit((positions <= outcome.accepted[:, None]) & fed_clean & in_window)
        trace.commit(torch.where(outcome.committed & in_window, window_cells, -1), outcome.codes)

        # slide the window: every slot's new draft comes from this forward; denoise; new slots enter as noise
        inside = outcome.carried
        source = (outcome.advanced[:, None] + positions[:slots]).clamp(max=window - 1)
        fresh = random_codes(fresh_u[:, :slots], vocab)
        codes = torch.where(inside, outcome.next_drafts, fresh)
        proposals = torch.where(
            inside[..., None], outcome.next_proposals, guess_proposal(codes, ~inside, vocab)
        )
        noise_draws = self.decode.random.normal(window, dim)
        shifted_level = torch.cat([self.level, torch.full_like(self.level[:, :1], top)], 1)
        shifted_state = torch.cat([self.state, noise_draws[:, :1]], 1)
        old_level = torch.where(inside, shifted_level.gather(1, source), top)
        new_state = torch.where(
            inside[..., None],
            shifted_state.gather(1, source[..., None].expand(-1, -1, dim)),
            noise_draws[:, 1:],
        )
        next_level = torch.minimum((old_level - inside.long()).clamp(min=0), self.cap)
        denoised = noise.denoise_step(new_state, self.table[codes], old_level / top, next_level / top)
        self.state.copy_(torch.where((old_level > 0)[..., None], denoised, new_state))
        self.level.copy_(torch.where(active[:, None], next_level, self.level))
        drafts.replace(
            torch.where(active[:, None], codes, drafts.codes),
            torch.where(active[:, None, None], proposals, drafts.proposals),
        )
        self.n += outcome.advanced
