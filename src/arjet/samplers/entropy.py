"""Entropy-informed acceptance (NeurIPS 2025, arXiv 2510.09012): an acceptance rule for any sampler that
verifies with one (`sjd+entropy`, `mc-sjd+entropy`, `sjd-pac+entropy`; `sjd:acceptance=entropy` and
`mc-sjd:acceptance=entropy` at its defaults).

The entropy `H` of the target at a position tracks how much there is to decide there: low over flat
regions, high over objects and texture. SJD accepts a draft when `min(1, p(x) / q(x)) > u`; this rule
scales the uniform by `H / e` and damps its noise by `1 - H / lam`:

    accept  iff  min(1, p(x) / q(x)) > (H / e) * (0.5 + (u - 0.5) * (1 - H / lam))

with `H` the entropy (nats) of the processed target `p` at the draft's position, `e = 8`, `lam = 16`
(the paper's; its text reads "(1 - lam * H)", which only makes sense as `H / lam`: the official code does not
contain the rule, so the form is this reading of the text). The threshold is affine in `u`, so the pass
probability `a(x)` has a closed form (`acceptance`): below `H = e` the rule is more permissive than SJD, above
it stricter. Rejection resamples from the exact residual `norm(max(0, p - q))` (the paper does not say),
so each committed code is within `sum_y q(y) |a(y) - min(1, p(y) / q(y))|` of `p` (`tv_bound`).

`temperature=true` adds the paper's temperature rule: the verified target becomes `p` at the per-position
temperature `2.5 * exp(-H / 3) + 0.6` (times the call's), i.e. `p' ∝ p ** (1 / (2.5 exp(-H / 3) + 0.6))`.
That changes the target on purpose (more randomness where `H` is low), so it is off by default; drafts are
verified against `p'` (and a rejection resamples from `p'`'s residual), while a bonus code (every draft
passed) still comes from `p`. The bound stays against the untempered `p`: `tv_bound` adds `TV(p', p)`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from .jacobi import RelaxedRule, RuleContext, pass_probability, residual
from .options import option

TEMPERATURE = (2.5, 3.0, 0.6)  # the paper's T0, alpha, theta: the multiplier T0 * exp(-H / alpha) + theta


@dataclass(frozen=True)
class Entropy(RelaxedRule):
    """`e`: the entropy (nats) at which the rule's threshold is SJD's uniform's scale; `lam`: the entropy at
    which the uniform's noise is damped away; `temperature`: verify against the paper's entropy-tempered
    target (changes the target)."""

    e: float = option(8.0, "entropy (nats) that scales the threshold: H / e", minimum=1e-6, maximum=1e6)
    lam: float = option(
        16.0, "entropy (nats) that damps the uniform's noise: 1 - H / lam", minimum=1e-6, maximum=1e6
    )
    temperature: bool = option(
        False, "verify against the entropy-tempered target p ** (1 / (2.5 exp(-H / 3) + 0.6)) (changes it)"
    )
    name: ClassVar[str] = "entropy"

    def acceptance(self, p: torch.Tensor, q: torch.Tensor, context: RuleContext) -> torch.Tensor:
        """`a [..., V]`: `P_u(r > (H / e) (0.5 + (u - 0.5) d))` with `r = min(1, t / q)`, `d = 1 - H / lam`,
        `t` the verified target (`p`, or `p'` with `temperature`)."""
        entropy = self.entropy(p)[..., None]
        ratio = pass_probability(self.verified(p, entropy), q)
        scale, damping = entropy / self.e, 1 - entropy / self.lam
        tiny = torch.finfo(p.dtype).tiny
        # r > scale * (0.5 + (u - 0.5) * damping)  <=>  (u - 0.5) * damping < r / scale - 0.5
        level = ratio / scale.clamp(min=tiny) - 0.5
        crossing = 0.5 + level / torch.where(damping.abs() > tiny, damping, 1.0)
        passing = torch.where(damping > 0, crossing, 1 - crossing).clamp(0.0, 1.0)
        passing = torch.where(damping.abs() > tiny, passing, (level > 0).to(p.dtype))
        return torch.where(scale > 0, passing, (ratio > 0).to(p.dtype))

    def verify(
        self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, context: RuleContext
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`u < a(x)`, and a rejection resamples from the exact residual of the verified target."""
        q_x = q.gather(-1, drafts[..., None]).squeeze(-1)
        target = self.verified(p, self.entropy(p)[..., None])
        return self.passing(p, q, drafts, context) * q_x, residual(target, q)

    def tv_bound(self, p: torch.Tensor, q: torch.Tensor, context: RuleContext) -> torch.Tensor:
        """The derived bound against the verified target `t`, `sum_y q(y) |a(y) - min(1, t(y) / q(y))|`, plus
        (with `temperature`) that target's own distance `TV(t, p)` from `p`."""
        target = self.verified(p, self.entropy(p)[..., None])
        bound = (q * (self.acceptance(p, q, context) - pass_probability(target, q)).abs()).sum(-1)
        if self.temperature:
            bound = (bound + 0.5 * (target - p).abs().sum(-1)).clamp(max=1.0)
        return bound

    def verified(self, p: torch.Tensor, entropy: torch.Tensor) -> torch.Tensor:
        """The target drafts are verified against: `p`, or with `temperature` `p ** (1 / m) `normalised,
        `m = 2.5 exp(-H / 3) + 0.6` (`entropy [..., 1]`)."""
        if not self.temperature:
            return p
        t0, alpha, theta = TEMPERATURE
        multiplier = t0 * torch.exp(-entropy / alpha) + theta
        logits = p.clamp(min=torch.finfo(p.dtype).tiny).log() / multiplier
        return torch.where(p > 0, logits, -math.inf).softmax(-1)

    @staticmethod
    def entropy(p: torch.Tensor) -> torch.Tensor:
        """`H(p) [...]` in nats (zero-probability codes add nothing)."""
        return -(p * p.clamp(min=torch.finfo(p.dtype).tiny).log()).sum(-1)
