"""The speculative Jacobi step every window sampler shares (SJD's lanes, ZipAR's rows, SJD2's window).

A window of `L` positions predicts cells `n .. n+L-1`; position `j < S = L-1` holds a draft for cell
`n+j`, drawn from the proposal `q` it was drafted with. One forward gives the processed target `p` at
every position. Then:

1. verify: drafts pass left to right with probability `min(1, t(x)/q(x))` (`t` = the acceptance rule's
   target, `p` itself for exact decoding) while their position is usable;
2. resample: the first rejected position draws from the residual `norm(max(0, t - q))`; if every usable
   draft passed, the next position gives a bonus token from `p` when `p` is valid there;
3. commit: the accepted drafts and that token;
4. redraft: every position's sample from this `p` (coupled with its old draft when asked: MC-SJD) becomes
   the draft of the same cell in the next window, with `p` as its proposal.

Which positions are valid is the caller's: a position past the lane's end never is; in SJD2 one behind a
noisy input is not. `jacobi_step` is `verify` (1) then `conclude` (2-4); SJD-PAC verifies its tree's
siblings itself and hands the outcome to the same `verify` (for the chain past the tree) and `conclude`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .random import sample
from .speculative import AcceptanceRule, accept_prefix, couple, residual


@dataclass
class RuleContext:
    """What an acceptance rule may consult besides `p` and `q`: the VQ codebook (LANTERN), and under greedy
    decoding the non-greedy distribution behind the one-hot `p` (`soft_p`, for LANTERN's relaxed argmax)."""

    codebook: torch.Tensor | None = None
    soft_p: torch.Tensor | None = None


@dataclass
class JacobiOutcome:
    advanced: torch.Tensor  # [...] cells committed (accepted drafts + the token, if any)
    committed: torch.Tensor  # [..., L] bool: window positions committed
    codes: torch.Tensor  # [..., L] the code of each committed position
    accepted: torch.Tensor  # [...] drafts accepted
    next_drafts: torch.Tensor  # [..., S] draft of slot i in the next window (where `carried`)
    next_proposals: torch.Tensor  # [..., S, V]
    carried: torch.Tensor  # [..., S] bool: the slot's cell is still inside the carry limit


@dataclass
class Verdict:
    """How verification of a run of drafts ended."""

    accepted: torch.Tensor  # [...] drafts accepted
    rejected: torch.Tensor  # [...] bool: it stopped at a failed draft (not at the end of the usable ones)
    rest: torch.Tensor  # [..., V] where rejected: the distribution the failed position resamples from


def verify(
    target_p: torch.Tensor,
    drafts: torch.Tensor,
    proposals: torch.Tensor,
    usable: torch.Tensor,
    rule: AcceptanceRule,
    context: object,
    u_accept: torch.Tensor,
) -> Verdict:
    """Verify drafts `[..., S]` (drawn from `proposals [..., S, V]`) left to right against `target_p [..., S, V]`
    (the processed `p` at each draft's position) while `usable [..., S]`; the first failure stops the scan."""
    slots = drafts.shape[-1]
    if not slots:
        zeros = torch.zeros(usable.shape[:-1], dtype=torch.long, device=usable.device)
        return Verdict(zeros, zeros.bool(), target_p.new_zeros(*usable.shape[:-1], target_p.shape[-1]))
    if hasattr(rule, "verify"):  # a rule whose target depends on the draft (LANTERN as published)
        t_x, rest = rule.verify(target_p, proposals, drafts, context)
        q_x = proposals.gather(-1, drafts[..., None]).squeeze(-1)
        accepted = ((u_accept * q_x < t_x) & usable).long().cumprod(-1).sum(-1)
    else:
        target = rule.target(target_p, proposals, context)
        accepted = accept_prefix(target, proposals, drafts, u_accept, usable)
    rejected = accepted < usable.long().cumprod(-1).sum(-1)
    at_draft = accepted.clamp(max=slots - 1)
    if hasattr(rule, "verify"):
        resampled = _take(rest, at_draft)
    else:
        resampled = residual(_take(target, at_draft), _take(proposals, at_draft))
    return Verdict(accepted, rejected, resampled)


def conclude(
    p: torch.Tensor,
    drafts: torch.Tensor,
    proposals: torch.Tensor,
    valid: torch.Tensor,
    verdict: Verdict,
    u_draw: torch.Tensor,
    u_couple: torch.Tensor,
    coupling: bool,
    carry_limit: torch.Tensor,
) -> JacobiOutcome:
    """Resample, commit and redraft after `verdict`: the failed position draws from `verdict.rest`; if every
    usable draft passed, the next position gives a bonus token from `p` where `p` is valid there; every later
    position's sample from `p` (coupled with its old draft when `coupling`) becomes the next draft of its cell.
    Shapes as `jacobi_step`; `u_draw`, `u_couple` `[..., L]`."""
    window = p.shape[-2]
    slots = window - 1
    positions = torch.arange(window, device=p.device)
    accepted, rejected = verdict.accepted, verdict.rejected
    at = accepted.clamp(max=window - 1)
    token_valid = rejected | valid.gather(-1, at[..., None]).squeeze(-1)
    dist = torch.where(rejected[..., None], verdict.rest, _take(p, at))
    token = sample(dist, u_draw.gather(-1, at[..., None]).squeeze(-1))
    padded = torch.cat([drafts, drafts.new_zeros(*drafts.shape[:-1], 1)], -1)
    codes = torch.where(positions == accepted[..., None], token[..., None], padded)
    committed = (positions < accepted[..., None]) | (
        (positions == accepted[..., None]) & token_valid[..., None]
    )
    advanced = accepted + token_valid.long()

    samples = sample(p, u_draw)
    if coupling and slots:
        coupled = couple(p[..., :slots, :], drafts, proposals, u_couple[..., :slots], u_draw[..., :slots])
        samples = torch.cat([coupled, samples[..., slots:]], -1)
    source = advanced[..., None] + positions[:slots]
    carried = source < carry_limit[..., None]
    source = source.clamp(max=window - 1)
    next_drafts = torch.where(carried, samples.gather(-1, source), drafts)
    carried_q = p.gather(-2, source[..., None].expand(*source.shape, p.shape[-1]))
    next_proposals = torch.where(carried[..., None], carried_q, proposals)
    return JacobiOutcome(advanced, committed, codes, accepted, next_drafts, next_proposals, carried)


def jacobi_step(
    p: torch.Tensor,
    drafts: torch.Tensor,
    proposals: torch.Tensor,
    valid: torch.Tensor,
    rule: AcceptanceRule,
    context: object,
    u: torch.Tensor,
    coupling: bool,
    carry_limit: torch.Tensor,
) -> JacobiOutcome:
    """One verify -> resample -> commit -> redraft step.

    `p [..., L, V]` processed target per position; `drafts [..., S]` and `proposals [..., S, V]` (S = L-1);
    `valid [..., L]` bool: `p` is a valid target at the position (drafts are verified while valid);
    `u [..., 3, L]` uniforms (accept, draw, couple); `carry_limit [...]`: positions below it carry their
    sample into the next window."""
    slots = p.shape[-2] - 1
    u_accept, u_draw, u_couple = u.unbind(-2)
    verdict = verify(
        p[..., :slots, :], drafts, proposals, valid[..., :slots], rule, context, u_accept[..., :slots]
    )
    return conclude(p, drafts, proposals, valid, verdict, u_draw, u_couple, coupling, carry_limit)


def _take(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """`values[..., index, :]` for values `[..., L, V]` and index `[...]`."""
    expanded = index[..., None, None].expand(*index.shape, 1, values.shape[-1])
    return values.gather(-2, expanded).squeeze(-2)
