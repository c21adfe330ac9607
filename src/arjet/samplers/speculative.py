"""Speculative sampling: the maths every window sampler shares (SJD, ZipAR's verified rows, SJD-PAC's chain,
SJD2), and the acceptance rules it verifies with.

Glossary (shapes: `...` is any leading batch shape, e.g. `[B]` images or `[B, A]` lanes):

- `L`: positions of a window; position `j` predicts cell `n + j` (`n`: the next undecoded cell).
- `S = L - 1`: draft slots; slot `j` holds a draft for cell `n + j`, fed at position `j + 1`.
- `V`: the image vocabulary.
- `p [..., L, V]`: the processed target at each position (CFG, temperature, top-k, top-p applied).
- `q [..., S, V]`: each draft's proposal, the distribution it was drawn from, fixed before it was drawn.
- `t`: the acceptance target a rule verifies against (`p` itself for exact decoding).

A draft `x ~ q` is accepted with probability `min(1, t(x) / q(x))`; at the first rejection the position is
resampled from the residual `norm(max(0, t - q))`. The committed code is then distributed exactly as `t`.
One window step (`jacobi_step`) is:

1. verify: drafts pass left to right while their position is usable;
2. resample: the first rejected position draws from the residual; if every usable draft passed, the next
   position gives a bonus code from `p` where `p` is valid there;
3. commit: the accepted drafts and that code;
4. redraft: every later position's sample from this `p` (coupled with its old draft when asked: MC-SJD)
   becomes the draft of the same cell in the next window, with `p` as its proposal.

Which positions are valid is the caller's: a position past the end of a lane never is; in SJD2 one behind a
noisy input is not. `jacobi_step` is `verify` (1) then `conclude` (2-4); SJD-PAC verifies its tree's
siblings itself and hands the outcome to the same `verify` (for the chain past the tree) and `conclude`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch

from .base import Part, Sampler
from .drafts import Drafts
from .random import sample


# -- acceptance rules --------------------------------------------------------------------------------------
@dataclass
class RuleContext:
    """What an acceptance rule may consult besides `p` and `q`: the VQ codebook `[V, d]` (LANTERN), and under
    greedy decoding the non-greedy distribution behind the one-hot `p` (`soft_p`, same shape as `p`, for
    LANTERN's relaxed argmax; the step fills it in only for a rule that `relaxes_greedy`)."""

    codebook: torch.Tensor | None = None
    soft_p: torch.Tensor | None = None


class AcceptanceRule(Part):
    """How drafts are verified. The defaults are the exact rule: verify against the processed target `p`
    itself. A relaxed rule overrides `target` (one target fixed before the draw) or `verify` (a target that
    depends on the draft, e.g. LANTERN as published); either way the window step calls `verify`."""

    name: ClassVar[str] = "exact"
    # under greedy decoding, verify against a relaxed argmax (the step then passes `context.soft_p`)
    relaxes_greedy: ClassVar[bool] = False
    # a random initial guess is verified as the uniform draw it is (else as a point mass, see `drafts`)
    uniform_guesses: ClassVar[bool] = True

    def target(self, p: torch.Tensor, q: torch.Tensor, context: RuleContext) -> torch.Tensor:
        """The target `[..., V]` drafts drawn from `q [..., V]` are verified against; `p` itself here."""
        return p

    def verify(
        self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, context: RuleContext
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`(t_x [...], rest [..., V])` for drafts `[...]` drawn from `q [..., V]` against the processed
        target `p [..., V]`: a draft passes when `u * q(x) < t_x`, a rejected one is resampled from `rest`
        (unnormalised)."""
        target = self.target(p, q, context)
        return target.gather(-1, drafts[..., None]).squeeze(-1), residual(target, q)


@dataclass(frozen=True)
class Exact(AcceptanceRule):
    """Lossless verification: the target is `p` itself."""


# -- the maths -----------------------------------------------------------------------------------------------
def passes(target: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The per-slot test `u < t(x) / q(x)` (written without a division: `q(x) > 0` for a drawn `x`)."""
    t_x = target.gather(-1, drafts[..., None]).squeeze(-1)
    q_x = q.gather(-1, drafts[..., None]).squeeze(-1)
    return u * q_x < t_x


class RuleSampler(Sampler):
    """A sampler that verifies its drafts with an `acceptance` rule (a dataclass field of the subclass): the
    rule is checked when the sampler is made and is its one part."""

    acceptance: AcceptanceRule

    def validate(self) -> None:
        if not isinstance(self.acceptance, AcceptanceRule):
            raise ValueError(
                f"acceptance must be an acceptance rule such as Exact() or Lantern(), got {self.acceptance!r}"
            )
        super().validate()

    @property
    def parts(self) -> tuple[tuple[str, AcceptanceRule], ...]:
        return (("acceptance rule", self.acceptance),)


def residual(target: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """`norm(max(0, t - q))` (unnormalised is fine for `sample`); falls back to `t` where `t == q`."""
    rest = (target - q).clamp_(min=0)
    return torch.where(rest.sum(-1, keepdim=True) > 0, rest, target)


def couple(
    p: torch.Tensor,
    previous: torch.Tensor,
    previous_q: torch.Tensor,
    u_keep: torch.Tensor,
    u_draw: torch.Tensor,
) -> torch.Tensor:
    """A new draft `~ p` maximally coupled with `previous ~ previous_q`: keep `previous` with probability
    `min(1, p(x) / q(x))`, else draw from `norm(max(0, p - q))` (MC-SJD). Its marginal is exactly `p`."""
    kept = passes(p, previous_q, previous, u_keep)
    return torch.where(kept, previous, sample(residual(p, previous_q), u_draw))


# -- one window step -----------------------------------------------------------------------------------------
class Uniforms(NamedTuple):
    """The uniforms of one window step, `[..., L]` each, one stream per decision."""

    accept: torch.Tensor  # the acceptance test of the draft at each position
    draw: torch.Tensor  # the resampled / bonus code, and every position's redraft
    couple: torch.Tensor  # keeping an old draft when redrafts are coupled


@dataclass
class Verdict:
    """How verification of a run of drafts ended."""

    accepted: torch.Tensor  # [...] drafts accepted
    rejected: torch.Tensor  # [...] bool: it stopped at a failed draft (not at the end of the usable ones)
    rest: torch.Tensor  # [..., V] where rejected: the distribution the failed position resamples from


@dataclass
class JacobiOutcome:
    advanced: torch.Tensor  # [...] cells committed (accepted drafts + the resampled / bonus code, if any)
    committed: torch.Tensor  # [..., L] bool: window positions committed
    codes: torch.Tensor  # [..., L] the code of each committed position
    accepted: torch.Tensor  # [...] drafts accepted
    next_drafts: torch.Tensor  # [..., S] draft of slot i in the next window (where `carried`)
    next_proposals: torch.Tensor  # [..., S, V]
    carried: torch.Tensor  # [..., S] bool: the slot's cell is still inside the carry limit


def verify(
    target_p: torch.Tensor,
    drafts: Drafts,
    *,
    usable: torch.Tensor,
    rule: AcceptanceRule,
    context: RuleContext,
    u_accept: torch.Tensor,
) -> Verdict:
    """Verify `drafts` (`[..., S]`) left to right against `target_p [..., S, V]` (the processed `p` at each
    draft's position) while `usable [..., S]`; the first failure stops the scan. `u_accept [..., S]`."""
    slots = drafts.codes.shape[-1]
    if not slots:
        zeros = torch.zeros(usable.shape[:-1], dtype=torch.long, device=usable.device)
        return Verdict(zeros, zeros.bool(), target_p.new_zeros(*usable.shape[:-1], target_p.shape[-1]))
    t_x, rest = rule.verify(target_p, drafts.proposals, drafts.codes, context)
    q_x = drafts.proposals.gather(-1, drafts.codes[..., None]).squeeze(-1)
    accepted = ((u_accept * q_x < t_x) & usable).long().cumprod(-1).sum(-1)
    rejected = accepted < usable.long().cumprod(-1).sum(-1)
    return Verdict(accepted, rejected, _take(rest, accepted.clamp(max=slots - 1)))


def settle(
    p: torch.Tensor, path: torch.Tensor, *, valid: torch.Tensor, verdict: Verdict, u_draw: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Resample and commit after `verdict` on the drafts `path [..., L - 1]`: the failed position draws from
    `verdict.rest`; if every usable draft passed, the next position gives a bonus code from `p [..., L, V]`
    where it is valid (`valid [..., L]`); `u_draw [..., L]`. Returns `(advanced [...], committed [..., L],
    codes [..., L])`: cells committed, the window positions committed, and their codes."""
    window = p.shape[-2]
    positions = torch.arange(window, device=p.device)
    accepted, rejected = verdict.accepted, verdict.rejected
    at = accepted.clamp(max=window - 1)
    token_valid = rejected | valid.gather(-1, at[..., None]).squeeze(-1)
    dist = torch.where(rejected[..., None], verdict.rest, _take(p, at))
    token = sample(dist, u_draw.gather(-1, at[..., None]).squeeze(-1))
    padded = torch.cat([path, path.new_zeros(*path.shape[:-1], 1)], -1)
    codes = torch.where(positions == accepted[..., None], token[..., None], padded)
    committed = (positions < accepted[..., None]) | (
        (positions == accepted[..., None]) & token_valid[..., None]
    )
    return accepted + token_valid.long(), committed, codes


def conclude(
    p: torch.Tensor,
    drafts: Drafts,
    *,
    valid: torch.Tensor,
    verdict: Verdict,
    uniforms: Uniforms,
    coupling: bool,
    carry_limit: torch.Tensor,
) -> JacobiOutcome:
    """`settle`, then redraft: every position after the committed ones gives its sample from `p` (coupled
    with its old draft when `coupling`) as the next draft of its cell. Shapes as `jacobi_step`."""
    window = p.shape[-2]
    slots = window - 1
    positions = torch.arange(window, device=p.device)
    advanced, committed, codes = settle(p, drafts.codes, valid=valid, verdict=verdict, u_draw=uniforms.draw)

    samples = sample(p, uniforms.draw)
    if coupling and slots:
        coupled = couple(
            p[..., :slots, :],
            drafts.codes,
            drafts.proposals,
            uniforms.couple[..., :slots],
            uniforms.draw[..., :slots],
        )
        samples = torch.cat([coupled, samples[..., slots:]], -1)
    source = advanced[..., None] + positions[:slots]
    carried = source < carry_limit[..., None]
    source = source.clamp(max=window - 1)
    next_drafts = torch.where(carried, samples.gather(-1, source), drafts.codes)
    carried_q = p.gather(-2, source[..., None].expand(*source.shape, p.shape[-1]))
    next_proposals = torch.where(carried[..., None], carried_q, drafts.proposals)
    return JacobiOutcome(advanced, committed, codes, verdict.accepted, next_drafts, next_proposals, carried)


def jacobi_step(
    p: torch.Tensor,
    drafts: Drafts,
    *,
    valid: torch.Tensor,
    rule: AcceptanceRule,
    context: RuleContext,
    uniforms: Uniforms,
    coupling: bool,
    carry_limit: torch.Tensor,
) -> JacobiOutcome:
    """One verify -> resample -> commit -> redraft step.

    `p [..., L, V]` processed target per position; `drafts` `[..., S]` (S = L - 1); `valid [..., L]` bool:
    `p` is a valid target at the position (drafts are verified while valid); `uniforms` `[..., L]` each;
    `carry_limit [...]`: positions below it carry their sample into the next window."""
    slots = p.shape[-2] - 1
    verdict = verify(
        p[..., :slots, :],
        drafts,
        usable=valid[..., :slots],
        rule=rule,
        context=context,
        u_accept=uniforms.accept[..., :slots],
    )
    return conclude(
        p,
        drafts,
        valid=valid,
        verdict=verdict,
        uniforms=uniforms,
        coupling=coupling,
        carry_limit=carry_limit,
    )


def _take(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """`values[..., index, :]` for values `[..., L, V]` and index `[...]`."""
    expanded = index[..., None, None].expand(*index.shape, 1, values.shape[-1])
    return values.gather(-2, expanded).squeeze(-2)
