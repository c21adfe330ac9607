"""COOL-SD's annealed relaxation of speculative decoding (AAAI 2026, arXiv 2601.09212): an acceptance rule
for the drafter samplers (`eagle+cool-sd`, `eagle2+cool-sd`; `cool-sd` is `eagle+cool-sd`, the paper's
EAGLE-1 drafter), relaxing early draft positions more than later ones.

Notation (`...` is any leading shape; `p`, `q` the processed target and proposal as in `jacobi`):

| here                | paper (symbol)                                              | shape      |
|---------------------|-------------------------------------------------------------|------------|
| `context.position`  | `i`: a draft's position along the chain (1: the first)      | `[...]`    |
| `context.positions` | `L`: the draft positions a window verifies                  |            |
| `delta`, `nu`       | `δ`, `ν` (0.7)                                              |            |
| `weight`            | `ω_i = δ exp(-ν i - μ)`                                     | `[...]`    |
| `verify`: `t_x`     | `ω_i p(x)`: `x` passes w.p. `f_i = min(1, ω_i p(x) / q(x))` | `[...]`    |
| `relaxed_residual`  | `G*_i = norm(max(0, p - q f_i))`                            | `[..., V]` |

The rule. A draft `x ~ q` at draft position `i` passes with probability `f_i(x) = min(1, ω_i p(x) / q(x))`;
a rejected one is resampled from `G*_i = norm(max(0, p - q f_i))` and the window stops there, as in exact
speculative decoding (`ω ≡ 1`, which this rule then is). The schedule is `ω_i = δ exp(-ν i - μ)` with
`ν = 0.7` and `δ` the one knob (the paper reports 1.1 and 2); `μ` normalises it, and the reading taken here
is that the mean of `ω` over the window's `L` positions is `δ` (the implementation notes' reading of a
survey, UNVERIFIED against the paper's equations): `ω_i = δ L exp(-ν i) / sum_j exp(-ν j)`. So with
`ν > 0` the first positions are relaxed (`ω > 1`) and the last ones can be stricter than exact (`ω < 1`);
`ν < 0` gives an increasing schedule (the paper's ablation), `ν = 0` a uniform one.

Each position's total variation from `p` (one draft; derived here, checked by enumeration in the tests):
the committed code is distributed as `P = min(q, ω p) + R G*` with `R = 1 - sum min(q, ω p)`.
- `ω >= 1`: `G*` is the exact residual `norm(max(0, p - q))` (the paper's Prop. 1), `P <= p` where `q <= p`
  and `P = min(q, ω p) >= p` where `q > p`, so `TV(P, p) = sum_y max(0, min(q, ω p) - min(q, p))`: the
  gain in acceptance, which is also the generic bound `sum_y q |a - min(1, p/q)|` (`AcceptanceRule`).
- `ω < 1`: `min(q, ω p) <= p`, so `max(0, p - q f) = p - min(q, ω p)` sums to `R` and `P = p` exactly: a
  stricter acceptance costs codes per forward, not fidelity. With the exact residual instead `P != p`.
`tv_bound` is therefore `sum_y q(y) max(0, a(y) - min(1, p(y) / q(y)))`, which for one draft is the
position's total variation itself (the generic bound would charge an `ω < 1` position its lost acceptance
rate). At a tree depth with siblings each candidate is verified the same way against the recursive
residual (`verify_candidates`), so the depth's total variation is at most the sum over the candidates
tried of each one's bound against its own target and proposal. Over a decode the image's total variation
is at most the sum over the committed positions.

Steps pass `position` and `positions` in the `RuleContext`: `eagle` (and `sjd-pac`'s tree step it runs)
numbers the tree depths and the chain past them `1..S` (`S` main draft slots), `eagle2` its levels
`1..tree_depth - 1`. A step that passes neither (`sjd`, `zipar`, ...) has no chain to anneal along; the
rule then refuses to verify, and the registry composes it only after `eagle` and `eagle2`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from .jacobi import AcceptanceRule, RuleContext, pass_probability
from .options import option

NU = 0.7  # the paper's decay of the weights along the chain


@dataclass(frozen=True)
class CoolSD(AcceptanceRule):
    """`delta`: the mean weight `δ` over a window's draft positions (1 with `nu=0`: exact speculative
    decoding); `nu`: the decay `ν` of the weights along the chain (`ω_i ∝ exp(-ν i)`)."""

    delta: float = option(
        1.1,
        "the relaxation's mean weight over a window's draft positions (1 with nu=0: exact)",
        minimum=0.0,
        maximum=1e6,
    )
    nu: float = option(
        NU,
        "the weights' decay along the chain, w_i ~ exp(-nu i) (0: uniform; negative: increasing)",
        minimum=-10.0,
        maximum=10.0,
    )
    name: ClassVar[str] = "cool-sd"

    def weight(self, context: RuleContext) -> torch.Tensor | float:
        """`ω_i` at `context.position` (a float for an int position, else a tensor of its shape)."""
        position, positions = context.position, context.positions
        if position is None or positions is None:
            raise ValueError(
                "the cool-sd acceptance rule needs each draft's position along a drafter's chain, which eagle "
                "and eagle2 pass; use eagle+cool-sd or eagle2+cool-sd"
            )
        if self.delta == 0:
            return 0.0 if isinstance(position, int) else torch.zeros(position.shape, device=position.device)
        shift = math.log(self.delta) - _log_mean_decay(self.nu, positions)
        if isinstance(position, int):
            return math.exp(shift - self.nu * position)
        return torch.exp(shift - self.nu * position.float())

    def verify(
        self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, context: RuleContext
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`(ω p(x) [...], G* [..., V])` for drafts `[...]` drawn from `q [..., V]`: the step accepts when
        `u q(x) < ω p(x)` and resamples a rejected draft from `G*` (unnormalised)."""
        weight = _like(self.weight(context), p)
        p_x = p.gather(-1, drafts[..., None]).squeeze(-1)
        return weight * p_x, relaxed_residual(p, q, weight)

    def acceptance(self, p: torch.Tensor, q: torch.Tensor, context: RuleContext) -> torch.Tensor:
        """`min(1, ω p(y) / q(y)) [..., V]` (1 where `q(y) = 0`: such a code is never drawn)."""
        return pass_probability(_per_code(_like(self.weight(context), p)) * p, q)

    def tv_bound(self, p: torch.Tensor, q: torch.Tensor, context: RuleContext) -> torch.Tensor:
        """`[...]`: `sum_y q(y) max(0, a(y) - min(1, p(y) / q(y)))`, one draft's total variation from `p` when
        a rejection resamples from `G*` (0 where `ω <= 1`; see the module docstring)."""
        exact = AcceptanceRule.acceptance(self, p, q, context)  # the base rule's `min(1, p / q)`
        return (q * (self.acceptance(p, q, context) - exact).clamp(min=0)).sum(-1)


def relaxed_residual(p: torch.Tensor, q: torch.Tensor, weight: torch.Tensor | float) -> torch.Tensor:
    """`G* = max(0, p - min(q, ω p))` `[..., V]` (unnormalised) for the weights `ω [...]` (or one float):
    the exact residual `max(0, p - q)` where `ω >= 1`, more mass where `ω < 1`. Falls back to `p` where it
    is empty (then `q = p` and `ω >= 1`, so no draft is ever rejected)."""
    rest = (p - torch.minimum(q, _per_code(weight) * p)).clamp_(min=0)
    return torch.where(rest.sum(-1, keepdim=True) > 0, rest, p)


def schedule(delta: float, nu: float, positions: int) -> list[float]:
    """`[ω_1, ..., ω_L]`: the weights of a window of `positions` draft positions."""
    rule = CoolSD(delta=delta, nu=nu)
    return [float(rule.weight(RuleContext(position=i, positions=positions))) for i in range(1, positions + 1)]


def _log_mean_decay(nu: float, positions: int) -> float:
    """`log(mean_{j=1..L} exp(-ν j))` in closed form (a geometric sum), without overflow for any `ν`, `L`."""
    if nu == 0:
        return 0.0
    decay = abs(nu)
    # sum_{k=0}^{L-1} exp(-|ν| k) = (1 - exp(-|ν| L)) / (1 - exp(-|ν|)), times the largest term: j = 1 for
    # ν > 0, j = L for ν < 0
    geometric = math.log(-math.expm1(-decay * positions)) - math.log(-math.expm1(-decay))
    largest = -nu if nu > 0 else -nu * positions
    return largest + geometric - math.log(positions)


def _like(weight: torch.Tensor | float, p: torch.Tensor) -> torch.Tensor | float:
    """A tensor weight in `p`'s dtype (a float stays one: no tensor is made from it during a step)."""
    return weight.to(p.dtype) if isinstance(weight, torch.Tensor) else weight


def _per_code(weight: torch.Tensor | float) -> torch.Tensor | float:
    """The weights `[...]` broadcast over the codes `[..., V]`."""
    return weight[..., None] if isinstance(weight, torch.Tensor) else weight
