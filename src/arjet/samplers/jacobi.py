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
noisy input is not.
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
    window = p.shape[-2]
    slots = window - 1
    u_accept, u_draw, u_couple = u.unbind(-2)
    positions = torch.arange(window, device=p.device)
    usable = valid[..., :slots]
    if slots and hasattr(rule, "verify"):  # a rule whose target depends on the draft (LANTERN as published)
        t_x, rest = rule.verify(p[..., :slots, :], proposals, drafts, context)
        q_x = proposals.gather(-1, drafts[..., None]).squeeze(-1)
        accepted = ((u_accept[..., :slots] * q_x < t_x) & usable).long().cumprod(-1).sum(-1)
    elif slots:
        target = rule.target(p[..., :slots, :], proposals, context)
        accepted = accept_prefix(target, proposals, drafts, u_accept[..., :slots], usable)
    else:
        accepted = torch.zeros(valid.shape[:-1], dtype=torch.long, device=p.device)
    rejected = accepted < usable.long().cumprod(-1).sum(-1)
    at = accepted.clamp(max=window - 1)
    token_valid = rejected | valid.gather(-1, at[..., None]).squeeze(-1)
    dist = _take(p, at)
    if slots:
        at_draft = accepted.clamp(max=slots - 1)
        if hasattr(rule, "verify"):
            resampled = _take(rest, at_draft)
        else:
            resampled = residual(_take(target, at_draft), _take(proposals, at_draft))
        dist = torch.where(rejected[..., None], resampled, dist)
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


def _take(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """`values[..., index, :]` for values `[..., L, V]` and index `[...]`."""
    expanded = index[..., None, None].expand(*index.shape, 1, values.shape[-1])
    return values.gather(-2, expanded).squeeze(-2)
