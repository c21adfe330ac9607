"""Speculative accept / resample, the maths every lossless sampler shares.

A draft `x` drawn from a proposal `q` (fixed before `x` was drawn) is accepted with probability
`min(1, t(x) / q(x))`; at the first rejection the slot is resampled from `norm(max(0, t - q))`. The
committed token is then distributed exactly as the target `t`. `t` is the processed `p` (CFG, top-k,
top-p, temperature) for exact decoding; an `AcceptanceRule` may relax it (LANTERN).
"""

from __future__ import annotations

from typing import ClassVar, Protocol

import torch

from .random import sample


class AcceptanceRule(Protocol):
    """Maps the processed target `p` and the proposal `q` (`[B, n, V]` each) to the verification target."""

    name: ClassVar[str]

    def target(self, p: torch.Tensor, q: torch.Tensor, context: object) -> torch.Tensor: ...


class Exact:
    """Lossless verification: the target is `p` itself."""

    name: ClassVar[str] = "exact"

    def target(self, p: torch.Tensor, q: torch.Tensor, context: object) -> torch.Tensor:
        return p

    def __repr__(self) -> str:
        return "Exact()"


def passes(target: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The per-slot test `u < t(x) / q(x)` (written without a division: `q(x) > 0` for a drawn `x`)."""
    t_x = target.gather(-1, drafts[..., None]).squeeze(-1)
    q_x = q.gather(-1, drafts[..., None]).squeeze(-1)
    return u * q_x < t_x


def accept_prefix(
    target: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, u: torch.Tensor, usable: torch.Tensor
) -> torch.Tensor:
    """Number of leading drafts accepted `[..]`: the scan stops at the first failed or unusable slot."""
    return (passes(target, q, drafts, u) & usable).long().cumprod(-1).sum(-1)


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


def one_hot(codes: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """`[..., V]` point masses at `codes` (built by a scatter: `F.one_hot` reads the device to check them)."""
    return torch.zeros(*codes.shape, vocab_size, device=codes.device).scatter_(-1, codes[..., None], 1.0)


def guess_proposal(codes: torch.Tensor, drawn: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """The proposal of an initial guess: uniform where it is a uniform random code (`drawn`), else a point
    mass at the guess."""
    uniform = torch.full((vocab_size,), 1.0 / vocab_size, device=codes.device)
    return torch.where(drawn[..., None], uniform, one_hot(codes, vocab_size))
