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

Notation (the paper's; `B` images, `V` the image vocabulary, `d` the embedding width; SJD's symbols as in
`sjd.py`, the shared pieces' in `jacobi.py`):

| here                          | paper (symbol)                                 | shape        |
|-------------------------------|------------------------------------------------|--------------|
| `window` (`L`)                | `L`: inputs per forward, position `j`          |              |
|                               | predicts cell `n + j`                          |              |
| `slots` (`S = L - 1`)         | draft slots (slot `j`: cell `n + j`)           |              |
| `n`                           | `n`: the next undecoded cell of each image     | `[B]`        |
| `drafts.codes`                | `x̃_{n+j}`                                      | `[B, S]`     |
| `drafts.proposals` (`q`)      | `p_θ^{(k-1)}(·)`: what each draft was drawn    | `[B, S, V]`  |
|                               | from                                           |              |
| `p`                           | `p_θ^{(k)}(·)` (processed: CFG, temperature,   | `[B, L, V]`  |
|                               | top-k, top-p)                                  |              |
| `top` (`K`)                   | denoising steps from pure noise to clean       |              |
| `level`                       | each slot's level `k` in `0..K`; `t = k / K`   | `[B, S]`     |
|                               | (0: clean)                                     |              |
| `cap`                         | the noisiest level at distance `j` from the    | `[S]`        |
|                               | front (0 at the front, `K` at the far end)     |              |
| `noise.alpha`, `noise.sigma`  | `α_t = cos(πt / 2)`, `σ_t = sin(πt / 2)`       |              |
| `table[x]`                    | `e(x)`: code `x`'s embedding                   | `[V, d]`     |
| `state`                       | `z_t = α_t · norm(e) + σ_t · ε` (normalised)   | `[B, S, d]`  |
| `noise.model_input`           | `e_t = denorm(z_t) + level_embedding(t)`: the  | `[B, S, d]`  |
|                               | noisy slot's input                             |              |
| `noise.denoise_step`          | one DDIM step `z_t -> z_{t'}` towards          | `[B, S, d]`  |
|                               | `norm(e(x̃))`                                   |              |
| `noisy`                       | slots fed `e_t` (`t > 0`) instead of `e(x̃)`    | `[B, S]`     |
| `clean_before`                | positions whose `p` is a valid target: every   | `[B, L]`     |
|                               | input before them is clean                     |              |
| `verdict.accepted`            | `τ`: drafts accepted                           | `[B]`        |
| `advanced`                    | cells committed (`τ`, plus the resampled or    | `[B]`        |
|                               | bonus code where valid)                        |              |
| `coupling`                    | MC-SJD: a re-draft keeps the old `x̃` w.p.      |              |
|                               | `min(1, p(x) / q(x))` (`jacobi.couple`)        |              |
| `u_accept`, `u_draw`,         | one uniform stream per decision                | `[B, L]`     |
| `u_couple`, `u_fresh`         |                                                |              |
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from .base import Sampler
from .decode import Decode, Stepper
from .jacobi import (
    Drafts,
    Exact,
    RuleContext,
    Uniforms,
    guess_proposal,
    random_codes,
    redraft,
    resample,
    verify,
)
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
        window, slots, top, positions = self.window, self.slots, self.top, self.positions  # L, S, K, [L]
        vocab, dim = session.vocab_size, self.table.shape[-1]
        cells = session.num_cells
        active = self.n < cells  # [B]
        length = torch.where(active, (cells - self.n).clamp(max=window), 0)  # [B] window cells in the image
        position_cells = self.n[:, None] + positions  # [B, L]
        in_image = positions < length[:, None]  # [B, L]

        # 1. noisy inputs: the last committed code, then each slot's draft (clean) or its e_t (noisy)
        query_cells = torch.where(in_image, position_cells, -1)  # [B, L]
        last = trace.codes.gather(1, (self.n - 1).clamp(min=0)[:, None]).clamp(min=0)  # [B, 1]
        noisy = self.level > 0  # [B, S]
        inputs = torch.cat([last, drafts.codes], 1)  # [B, L]
        embeddings = torch.cat(
            [torch.zeros_like(self.state[:, :1]), noise.model_input(self.state, self.level / top)], 1
        )  # [B, L, d]
        embedded = torch.cat([torch.zeros_like(noisy[:, :1]), noisy], 1)  # [B, L]: fed `embeddings`

        # 2. forward: one pass over the window; position j predicts cell n + j
        logits = session.logits(
            query_cells,
            inputs,
            embeddings=embeddings,
            embedded=embedded,
            row_ends=(window - 1) // session.grid[1] + 1,
        )  # [B, L, V]

        # 3. target p and the uniforms; the proposals q are `drafts.proposals` [B, S, V]
        p = self.decode.policy.probs(logits)  # [B, L, V]
        # a position's p is a valid target only while every input before it is clean
        clean_before = torch.cat([torch.ones_like(noisy[:, :1]), (~noisy).long().cumprod(1).bool()], 1)
        valid = in_image & clean_before  # [B, L]
        u_accept, u_draw, u_couple, u_fresh = self.decode.random.uniform(4, window).unbind(1)  # [B, L] each

        # 4. verify: drafts pass left to right while u·q(x) < p(x), up to the first noisy input
        verdict = verify(
            p[:, :slots],
            drafts,
            usable=valid[:, :slots],
            rule=Exact(),
            context=RuleContext(),
            u_accept=u_accept[:, :slots],
        )

        # 5. resample: the first rejected position from norm(max(0, p - q)), else a bonus code from p
        advanced, committed, codes = resample(
            p, drafts.codes, valid=valid, verdict=verdict, u_draw=u_draw
        )  # [B], [B, L], [B, L]

        # 6. commit: the accepted clean inputs to the cache, the committed codes to the trace
        fed_clean = torch.cat([torch.ones_like(noisy[:, :1]), ~noisy], 1)  # [B, L]
        session.commit((positions <= verdict.accepted[:, None]) & fed_clean & in_image)
        trace.commit(torch.where(committed & in_image, position_cells, -1), codes)
        self.n += advanced

        # 7. slide and denoise: every slot's new draft is its cell's sample from p (coupled with the old draft:
        #    MC-SJD); each noisy slot takes one DDIM step towards its draft; new slots enter as pure noise
        next_drafts, next_proposals, inside = redraft(
            p,
            drafts,
            advanced=advanced,
            uniforms=Uniforms(u_accept, u_draw, u_couple),
            coupling=self.coupling,
            carry_limit=torch.full_like(self.n, window),
        )  # [B, S], [B, S, V], [B, S]: the slot's cell was in this window
        source = (advanced[:, None] + positions[:slots]).clamp(max=window - 1)  # [B, S]
        fresh = random_codes(u_fresh[:, :slots], vocab)  # [B, S]
        new_codes = torch.where(inside, next_drafts, fresh)  # [B, S]
        new_proposals = torch.where(
            inside[..., None], next_proposals, guess_proposal(new_codes, ~inside, vocab)
        )  # [B, S, V]
        noise_draws = self.decode.random.normal(window, dim)  # [B, L, d]
        shifted_level = torch.cat([self.level, torch.full_like(self.level[:, :1], top)], 1)  # [B, L]
        shifted_state = torch.cat([self.state, noise_draws[:, :1]], 1)  # [B, L, d]
        old_level = torch.where(inside, shifted_level.gather(1, source), top)  # [B, S]
        new_state = torch.where(
            inside[..., None],
            shifted_state.gather(1, source[..., None].expand(-1, -1, dim)),
            noise_draws[:, 1:],
        )  # [B, S, d]
        next_level = torch.minimum((old_level - inside.long()).clamp(min=0), self.cap)  # [B, S]
        denoised = noise.denoise_step(new_state, self.table[new_codes], old_level / top, next_level / top)
        self.state.copy_(torch.where((old_level > 0)[..., None], denoised, new_state))
        self.level.copy_(torch.where(active[:, None], next_level, self.level))
        drafts.replace(
            torch.where(active[:, None], new_codes, drafts.codes),
            torch.where(active[:, None, None], new_proposals, drafts.proposals),
        )
