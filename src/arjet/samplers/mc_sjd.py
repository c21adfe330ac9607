"""`mc-sjd`: SJD whose re-drafts are maximally coupled with the drafts they replace (MC-SJD).

SJD re-drafts every position past the committed cells from the new target: the sample of `p_t` at a cell
becomes that cell's next draft. Drawn independently, it is often a different code from the old draft, so
the inputs after it change too and their targets move again; drafts rarely settle. MC-SJD draws the new
draft from a maximal coupling with the old one instead: keep the old draft `x̃` with probability
`min(1, p_t(x̃) / p_{t-1}(x̃))`, otherwise draw from the residual `norm(max(0, p_t - p_{t-1}))`
(`jacobi.couple`, called by `jacobi.redraft`). The old draft survives as often as any draw from `p_t` can
agree with it, so consecutive windows keep more of their inputs and more drafts pass.

Why it stays exact: the coupled draft's marginal is exactly `p_t`, the proposal it is declared with. SJD's
verification only needs each draft to be drawn from its declared proposal (`u * q(x) < p(x)`, then the
residual), so the committed codes have exactly `ar`'s distribution, as with independent re-drafts.

The step is SJD's (`sjd.py`, its stage 7 with `coupling`); this file names the method. Notation (the
paper's, beside `sjd.py`'s):

| here                         | paper (symbol)                                         | shape       |
|------------------------------|--------------------------------------------------------|-------------|
| `drafts.codes`               | `x̃`: the old drafts, drawn at the previous iteration   | `[B, S]`    |
| `drafts.proposals`           | `p_{t-1}`: what each old draft was drawn from          | `[B, S, V]` |
| `p`                          | `p_t`: the new target at each draft's cell             | `[B, L, V]` |
| `u_couple`                   | the uniform of the keep test `u < p_t(x̃) / p_{t-1}(x̃)` | `[B, L]`    |
| `u_draw`                     | the uniform of the residual draw when `x̃` is not kept  | `[B, L]`    |
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .sjd import SJD


@dataclass(frozen=True)
class MCSJD(SJD):
    """SJD with coupled re-drafts (`coupling` is always true: it is what the name says); `window`, `init`
    and `acceptance` as `SJD`'s. `SJD(coupling=True)` decodes the same codes under the name `sjd`."""

    coupling: bool = True  # not an option (no `option(...)`): mc-sjd's specs leave it out
    name: ClassVar[str] = "mc-sjd"

    def validate(self) -> None:
        if self.coupling is not True:
            raise ValueError(
                f"mc-sjd always couples its re-drafts, got coupling={self.coupling!r}; for SJD without "
                "coupling use SJD() (sampler 'sjd')"
            )
        super().validate()
