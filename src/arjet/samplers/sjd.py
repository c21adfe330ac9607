"""`sjd`: Speculative Jacobi Decoding (Teng et al., ICLR 2025), optionally with coupled drafts (MC-SJD) or
SJD++'s reuse of unaccepted drafts (`reuse`).

Every forward feeds a window: the last committed code, then drafts for the next `window - 1` cells. The
model's output at each position is the processed target `p` of the next cell; the drafts are verified left
to right against it, the first rejected one is resampled from the residual (or, if all passed, the next
cell gets a bonus code), and the samples of every later position become the next window's drafts
(`arjet.samplers.jacobi` has the maths). New draft slots get an initial guess (`jacobi.guess`),
declared with the proposal it was drawn from.

Notation (the paper's §3; `B` images, `N` cells per image, `V` the image vocabulary; `jacobi.py` has the
shared pieces' symbols):

| here                        | paper (symbol)                                 | shape        |
|-----------------------------|------------------------------------------------|--------------|
| `window` (`L`)              | `L`: inputs per forward, position `j`          |              |
|                             | predicts cell `n + j`                          |              |
| `slots` (`S = L - 1`)       | draft slots (slot `j`: cell `n + j`)           |              |
| `n`                         | `n`: the next undecoded cell of each image     | `[B]`        |
| `position_cells`            | `n, n + 1, ..., n + L - 1`                     | `[B, L]`     |
| `in_image`                  | positions whose cell is inside the image       | `[B, L]`     |
| `drafts.codes`              | `x̃_{n+j}`                                      | `[B, S]`     |
| `drafts.proposals` (`q`)    | `p_θ^{(k-1)}(·)`: what each draft was drawn    | `[B, S, V]`  |
|                             | from                                           |              |
| `p`                         | `p_θ^{(k)}(·)` (processed: CFG, temperature,   | `[B, L, V]`  |
|                             | top-k, top-p)                                  |              |
| `acceptance.verify`         | `min(1, p(x) / q(x))` (exact), LANTERN's       |              |
|                             | relaxed `p̃` (`jacobi.verify`)                  |              |
| `verdict.accepted`          | `τ`: drafts accepted                           | `[B]`        |
| `advanced`                  | cells committed: `τ`, plus the resampled or    | `[B]`        |
|                             | bonus code where its position is in the image  |              |
| `coupling`                  | MC-SJD: a re-draft keeps the old `x̃` w.p.      |              |
|                             | `min(1, p_t(x) / p_{t-1}(x))` (`jacobi.couple`)|              |
| `reuse` (`τ`)               | SJD++: a re-draft keeps the old `x̃` if         |              |
|                             | `p_t(x) / p_{t-1}(x) > τ`, declared with its   |              |
|                             | marginal `m` (`jacobi.reuse`)                  |              |
| `u_accept`, `u_draw`,       | one uniform stream per decision                | `[B, L]`     |
| `u_couple`, `u_guess`       |                                                |              |
| `top1`                      | the latest argmax of each cell (`sample_*`     | `[B, N + 1]` |
|                             | initial guesses; the last column is scratch)   |              |

Lossless: with the exact acceptance rule the codes have exactly the distribution of `ar` under the same
processed `p` (CFG, temperature, top-k, top-p), for every batch size; each image commits its own number of
codes per forward. Every step has the same shapes and reads nothing back from the device.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch

from .decode import Decode, Stepper, sample
from .jacobi import (
    INIT_SCHEMES,
    AcceptanceRule,
    Drafts,
    Exact,
    Redraw,
    RuleContext,
    RuleSampler,
    Uniforms,
    guess,
    redraft,
    resample,
    reusing,
    scatter_where,
    uses_top1,
    verify,
)
from .options import MAX_SIZE, check_fits_grid, option


@dataclass(frozen=True)
class SJD(RuleSampler):
    """`window`: positions per forward (the last code and `window - 1` drafts); `init`: how new draft slots
    are guessed; `coupling`: keep a re-drafted slot's old draft with probability `min(1, p_t(x)/p_{t-1}(x))`
    (MC-SJD, still lossless); `reuse`: SJD++'s threshold `tau`, keep a re-drafted slot's old draft where
    `p_t(x) / p_{t-1}(x) > tau` and declare it with its true marginal (`jacobi.reuse`, still lossless);
    `acceptance`: `Exact()` (lossless) or a relaxed rule such as `Lantern()`."""

    window: int = option(16, "draft slots verified per forward", minimum=1, maximum=MAX_SIZE)
    init: str = option("random", "how new draft slots are guessed", choices=INIT_SCHEMES)
    coupling: bool = option(False, "couple re-drafts with the old drafts (MC-SJD, still exact)")
    reuse: float | None = option(
        None,
        "SJD++: keep an unaccepted draft x where p_t(x)/p_{t-1}(x) > reuse (still exact); none: off",
        minimum=0,
    )
    acceptance: AcceptanceRule = field(default_factory=Exact)
    name: ClassVar[str] = "sjd"
    continuous: ClassVar[bool] = True

    def validate(self) -> None:
        super().validate()
        if self.coupling and self.reuse is not None:
            raise ValueError(
                f"coupling={self.coupling!r} and reuse={self.reuse!r} are two ways to re-draft a slot (MC-SJD, "
                "SJD++); give one of them"
            )

    def check_grid(
        self, grid: tuple[int, int], max_window: int | None = None, *, vocab_size: int | None = None
    ) -> None:
        check_fits_grid("window", self.window, type(self).window, grid, max_window)
        super().check_grid(grid, max_window, vocab_size=vocab_size)

    def run(self, decode: Decode) -> None:
        decode.run(self.stepper(decode), decode.session.num_cells - 1, fixed_steps=self.window == 1)

    def stepper(self, decode: Decode) -> WindowStepper:
        return WindowStepper(self, decode)


class WindowStepper(Stepper):
    """The state of an SJD decode between forwards, and its fixed-shape `step`.

    `window` is the window of the next step: the sampler's, unless an engine narrows it for a step (every
    window is exact; `arjet.engine` picks one from the load). Draft slots past a narrower window start afresh;
    a window of one is a plain AR step that leaves the drafts as they are (a draft verified later against
    its own proposal is exact however old it is; it is only less likely to pass)."""

    per_image = ("n", "drafts", "top1")

    def __init__(self, sampler: SJD, decode: Decode):
        self.sampler, self.decode = sampler, decode
        session = decode.session
        batch, cells, vocab, device = (
            session.batch_size,
            session.num_cells,
            session.vocab_size,
            session.device,
        )
        self.window = self.reach = window = sampler.window
        self.slots = slots = window - 1
        self.positions = torch.arange(window, device=device)  # [L]
        self.row_ends = (window - 1) // session.grid[1] + 1  # row ends one window's inputs can cross
        rule = sampler.acceptance
        self.soft_policy = decode.policy.soft() if decode.policy.greedy and rule.relaxes_greedy else None
        self.top1 = torch.full((batch, cells + 1), -1, dtype=torch.long, device=device)  # [B, N + 1]
        self.n = torch.ones(batch, dtype=torch.long, device=device)  # [B] the next cell to decode
        self.drafts = Drafts(
            torch.zeros(batch, slots, dtype=torch.long, device=device),  # [B, S]
            torch.zeros(batch, slots, vocab, device=device),  # [B, S, V]
        )

    def start(self, first: torch.Tensor) -> None:
        self.n.fill_(1)
        self.top1.fill_(-1)
        every_slot = torch.ones_like(self.drafts.codes, dtype=torch.bool)  # [B, S]
        self._guess(every_slot, self.decode.random.uniform(self.reach)[:, : self.slots])

    def stop(self) -> None:
        self.n.fill_(self.decode.session.num_cells)

    def step(self) -> None:
        if self.window == 1 < self.reach:
            self._ar_step()
            return
        session, trace, sampler = self.decode.session, self.decode.trace, self.sampler
        window, cells = self.window, session.num_cells
        slots, positions = window - 1, self.positions[:window]  # S, [L]

        # 1. draft: the window's inputs are the last committed code, then a draft for each of the next cells
        drafts = self.drafts if slots == self.slots else self.drafts.slots(slice(None, slots))  # [B, S]
        active = self.n < cells  # [B]
        length = torch.where(active, (cells - self.n).clamp(max=window), 0)  # [B] window cells in the image
        in_image = positions < length[:, None]  # [B, L]
        position_cells = self.n[:, None] + positions  # [B, L]
        last = trace.codes.gather(1, (self.n - 1)[:, None]).clamp(min=0)  # [B, 1]

        # 2. forward: one pass over the window; position j predicts cell n + j
        logits = session.logits(
            torch.where(in_image, position_cells, -1),
            torch.cat([last, drafts.codes], 1),
            row_ends=self.row_ends,
        )  # [B, L, V]

        # 3. target p and the uniforms; the proposals q are `drafts.proposals` [B, S, V]
        p = self.decode.policy.probs(logits)  # [B, L, V]
        context = RuleContext(session.codebook)
        if self.soft_policy is not None:
            context.soft_p = self.soft_policy.probs(logits[:, :slots])  # [B, S, V]
        if uses_top1(sampler.init):
            scatter_where(self.top1, position_cells, p.argmax(-1), in_image)
        u_accept, u_draw, u_couple, u_guess = self.decode.random.uniform(4, window).unbind(1)  # [B, L] each

        # 4. verify: drafts pass left to right while u·q(x) < t(x) (the rule's target t: p when exact)
        verdict = verify(
            p[:, :slots],
            drafts,
            usable=in_image[:, :slots],
            rule=sampler.acceptance,
            context=context,
            u_accept=u_accept[:, :slots],
        )

        # 5. resample: the first rejected position from norm(max(0, t - q)), else a bonus code from p
        advanced, committed, codes = resample(
            p, drafts.codes, valid=in_image, verdict=verdict, u_draw=u_draw
        )  # [B], [B, L], [B, L]

        # 6. commit: the accepted drafts' inputs to the cache, the committed codes to the trace
        session.commit(in_image & (positions <= verdict.accepted[:, None]))
        trace.commit(torch.where(committed, position_cells, -1), codes, bound=verdict.bound)
        self.n += advanced

        # 7. re-draft: every later position's sample from p (coupled with its old draft: MC-SJD; or its old
        #    draft kept: SJD++) becomes the next draft of its cell, with what it was drawn from as its
        #    proposal; slots that carried none get initial guesses
        if not self.slots:
            return
        next_drafts, next_proposals, carried = redraft(
            p,
            drafts,
            advanced=advanced,
            uniforms=Uniforms(u_accept, u_draw, u_couple),
            coupling=sampler.coupling,
            carry_limit=length,
            redraw=self.redraw(),
        )  # [B, S], [B, S, V], [B, S]
        drafts.replace(next_drafts, next_proposals)
        fresh = active[:, None] & ~carried  # [B, S]
        if slots < self.slots:  # a narrower window: the slots past it start afresh
            fresh = torch.cat([fresh, active[:, None].expand(-1, self.slots - slots)], 1)
            u_guess = self.decode.random.uniform(self.slots)
        self._guess(fresh, u_guess[:, : self.slots])

    def redraw(self) -> Redraw | None:
        """Stage 7's rule: SJD++'s `reuse` when the sampler sets it, else none (`redraft`'s own: independent,
        or maximally coupled with `coupling`)."""
        return None if self.sampler.reuse is None else reusing(self.sampler.reuse)

    def _guess(self, fresh: torch.Tensor, u: torch.Tensor) -> None:
        """`jacobi.guess` over the window's slots (cells `n`, `n + 1`, ...): the `fresh [B, S]` slots inside
        the image get initial guesses, with the proposals they were drawn from, from the uniforms `u [B, S]`."""
        guess(
            self.drafts,
            self.n[:, None] + self.positions[: self.slots],  # [B, S]
            self.decode,
            scheme=self.sampler.init,
            fresh=fresh,
            top1=self.top1,
            u=u,
            uniform=self.sampler.acceptance.uniform_guesses,
        )

    def _ar_step(self) -> None:
        """One code per image from the last committed one, as `ar` decodes (the window narrowed to one)."""
        session, trace = self.decode.session, self.decode.trace
        active = self.n < session.num_cells  # [B]
        cell = torch.where(active, self.n, -1)[:, None]  # [B, 1]
        last = trace.codes.gather(1, (self.n - 1)[:, None]).clamp(min=0)  # [B, 1]
        # 1. forward: the last committed code predicts the next cell
        p = self.decode.policy.probs(session.logits(cell, last, row_ends=1))  # [B, 1, V]
        # 2. sample it from p
        code = sample(p, self.decode.random.uniform(1))  # [B, 1]
        if uses_top1(self.sampler.init):
            scatter_where(self.top1, cell, p.argmax(-1), active[:, None])
        # 3. commit
        session.commit(active[:, None])
        trace.commit(cell, code)
        self.n += active.long()
