"""`mc-sjd`: SJD whose re-drafts are coupled with the drafts they replace (MC-SJD, also "Speculative Coupled
Decoding", SCD).

SJD re-drafts every position past the committed cells from the new target: the sample of `p_t` at a cell
becomes that cell's next draft. Drawn independently, it is often a different code from the old draft, so
the inputs after it change too and their targets move again; drafts rarely settle. MC-SJD draws the new
draft from a coupling with the old one instead, so that consecutive windows keep more of their inputs and
more drafts pass. Two couplings (`coupling=`):

- `maximal` (the default, the paper's π_MC): keep the old draft `x̃` with probability
  `min(1, p_t(x̃) / p_{t-1}(x̃))`, otherwise draw from the residual `norm(max(0, p_t - p_{t-1}))`
  (`jacobi.couple`, called by `jacobi.redraft`). The old draft survives as often as any draw from `p_t` can
  agree with it.
- `gumbel` (π_GS): every draft of a cell is the Gumbel-max sample `argmax(log p_t + G)` under noise `G` that
  the cell keeps across iterations (`GumbelStepper`); two successive drafts agree with probability at least
  `(1 - TV) / (1 + TV)`. The noise of a cell is replaced once the cell is committed, whether by a window or
  by a one-code step (the official code keeps it through its one-code phases, where consecutive codes then
  share noise).

Why it stays exact: either way the new draft's marginal is exactly `p_t`, the proposal it is declared with
(for `gumbel`: the cell's noise is independent of everything that decides the cells before it, and a cell
is verified once, then committed and its noise dropped). SJD's verification only needs each draft to be
drawn from its declared proposal (`u * q(x) < p(x)`, then the residual), so the committed codes have
exactly `ar`'s distribution, as with independent re-drafts.

The step is SJD's (`sjd.py`, its stage 7 with `coupling`, or `GumbelStepper`'s rule); this file names the
method. Notation (the paper's, beside `sjd.py`'s):

| here                         | paper (symbol)                                         | shape       |
|------------------------------|--------------------------------------------------------|-------------|
| `drafts.codes`               | `x̃`: the old drafts, drawn at the previous iteration   | `[B, S]`    |
| `drafts.proposals`           | `p_{t-1}`: what each old draft was drawn from          | `[B, S, V]` |
| `p`                          | `p_t`: the new target at each draft's cell             | `[B, L, V]` |
| `u_couple`                   | the uniform of the keep test `u < p_t(x̃) / p_{t-1}(x̃)` | `[B, L]`    |
| `u_draw`                     | the uniform of the residual draw when `x̃` is not kept  | `[B, L]`    |
| `noise`                      | `-log U`, `G = -log(noise)`: each cell's Gumbel noise  | `[B, L, V]` |
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from .decode import Decode
from .jacobi import Redraw, exponentials, noised
from .options import option
from .sjd import SJD, WindowStepper

COUPLINGS = ("maximal", "gumbel")


@dataclass(frozen=True)
class MCSJD(SJD):
    """SJD with coupled re-drafts; `coupling`: `maximal` (keep the old draft w.p. `min(1, p_t/p_{t-1})`, else
    the residual) or `gumbel` (each cell's drafts are Gumbel-max samples under noise kept for the cell until
    it is committed); `window`, `init` and `acceptance` as `SJD`'s. `SJD(coupling=True)` decodes the codes of
    `MCSJD()` (maximal) under the name `sjd`."""

    coupling: str = option("maximal", "how a re-draft is coupled with the old draft", choices=COUPLINGS)
    reuse: float | None = None  # not an option: SJD++'s reuse is another re-draft rule (`sjd:reuse=...`)
    name: ClassVar[str] = "mc-sjd"

    def validate(self) -> None:
        if self.coupling in (True, False):
            raise ValueError(
                f"mc-sjd always couples its re-drafts, got coupling={self.coupling!r}; choose one of "
                f"{', '.join(COUPLINGS)} (for SJD without coupling use SJD(), sampler 'sjd')"
            )
        if self.reuse is not None:
            raise ValueError(
                f"mc-sjd couples its re-drafts, so it reuses none, got reuse={self.reuse!r}; for SJD++ use "
                "SJD(reuse=...) (sampler 'sjd:reuse=...')"
            )
        super().validate()

    def stepper(self, decode: Decode) -> WindowStepper:
        return GumbelStepper(self, decode) if self.coupling == "gumbel" else WindowStepper(self, decode)


class GumbelStepper(WindowStepper):
    """SJD's window stepper whose re-drafts are Gumbel-max samples (`jacobi.gumbel_max`) under per-cell noise:
    `noise [B, L, V]` holds standard exponentials, row `j` for cell `n + j`. A cell keeps its row across
    iterations, so its successive drafts agree as often as their targets allow; once it is committed (by a
    window or a one-code step) the rows move up with `n` and the new last rows are fresh (`advanced_noise`),
    so no noise ever serves two cells."""

    per_image = (*WindowStepper.per_image, "noise")

    def __init__(self, sampler: MCSJD, decode: Decode):
        super().__init__(sampler, decode)
        session = decode.session
        self.noise = torch.ones(session.batch_size, self.reach, session.vocab_size, device=session.device)

    def start(self, first: torch.Tensor) -> None:
        self.noise.copy_(exponentials(self.decode.random.uniform(*self.noise.shape[1:])))
        super().start(first)

    def step(self) -> None:
        before = self.n.clone()  # [B]
        super().step()
        fresh = exponentials(self.decode.random.uniform(*self.noise.shape[1:]))  # [B, L, V]
        self.noise.copy_(advanced_noise(self.noise, self.n - before, fresh))

    def redraw(self) -> Redraw:
        return noised(self.noise)


def advanced_noise(noise: torch.Tensor, advanced: torch.Tensor, fresh: torch.Tensor) -> torch.Tensor:
    """The per-cell noise `noise [B, L, V]` after `advanced [B]` cells were committed: row `j` takes row
    `j + advanced`, and the rows past the end take `fresh [B, L, V]`'s."""
    rows = torch.arange(noise.shape[1], device=noise.device) + advanced[:, None]  # [B, L]
    shifted = noise.gather(1, rows.clamp(max=noise.shape[1] - 1)[..., None].expand_as(noise))
    return torch.where((rows < noise.shape[1])[..., None], shifted, fresh)
