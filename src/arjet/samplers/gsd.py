"""GSD, grouped speculative decoding (So et al., ICCV 2025, arXiv 2508.07747): an acceptance rule for any
sampler that verifies with one (`sjd+gsd`, `mc-sjd+gsd`, `sjd-pac+gsd`, `zipar+sjd+gsd`); `gsd` is the
paper's name for `sjd+gsd`.

Image codes are redundant: many codes decode to near-identical patches and the target's top probability is
small, so SJD's ratio `p(x) / q(x)` rejects drafts that would look fine. GSD tests a group of plausible codes
around the draft instead: the draft passes with probability `min(1, p(G) / q(G))`.

The group of a draft `x` (the official code's construction, not the paper's fixed partition):

1. rank the vocabulary by `p` (ascending; ties keep code order) and take the `group` ranks around `x`'s:
   `group // 2` below it, `x`, the rest above (the official 7 / 6 at the default `group=14`), cut at both
   ends of the vocabulary;
2. keep a code `v` of that window when `|p(v) - p(x)| < prob_gap` and, unless `distance` is none, when
   `||e_v - e_x||^2 < distance * mean ||e||^2` over the VQ codebook vectors `e` (the official threshold is
   0.5 on Lumina-mGPT's input embeddings; here it is taken relative to the codebook's mean squared norm,
   so it means the same on every model, and for the unit-norm codebooks of Janus and the built-in model it
   is the official number: cosine above 0.75). `x` itself always stays.

Rejection resamples from the token-level residual `norm(max(0, p - q))` (as the official code does), so the
derived bound holds: each committed code is within `sum_y q(y) |a(y) - min(1, p(y) / q(y))|` of `p` in total
variation (`tv_bound`; the decode's stats add it up per image). GSD's `a` can be below SJD's for a code
whose neighbours have more `q` than `p` mass, so it is not always more permissive.

Departures from the official code, each a guard: a window cut at the bottom of the vocabulary keeps the
codes it has (the official slice is empty there, the ratio 0/0, and the draft always rejected); every model
uses its VQ codebook for the distance (the official code reads Lumina's input embeddings, rows 0..9999);
a random initial guess is a point mass (as in the official code: `a = min(1, p(G))`). With `group=1` the
rule is exactly SJD's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from .codebook import placed
from .jacobi import RelaxedRule, RuleContext, pass_probability
from .options import option

MAX_GROUP = 256  # the paper uses up to 50
BOUND_CHUNK = 2048  # `tv_bound` gathers the groups of this many codes at a time: [..., BOUND_CHUNK, group]


@dataclass(frozen=True)
class GSD(RelaxedRule):
    """`group`: codes ranked around the draft (the draft included; the paper's G); `prob_gap`: the most a
    member's probability may differ from the draft's; `distance`: the most a member's squared codebook
    distance may be, relative to the codebook's mean squared norm (none: no distance filter, no codebook
    needed)."""

    group: int = option(
        14,
        "codes ranked around the draft that may form its group (the paper's G)",
        minimum=1,
        maximum=MAX_GROUP,
    )
    prob_gap: float = option(
        0.15, "the most a member's p may differ from the draft's", minimum=0.0, maximum=1.0
    )
    distance: float | None = option(
        0.5,
        "the most a member's squared codebook distance to the draft may be, over the mean squared norm",
        minimum=0.0,
        maximum=1e6,
        note="none drops the distance filter",
    )
    name: ClassVar[str] = "gsd"

    @property
    def requires(self) -> frozenset[str]:  # type: ignore[override]
        """The codebook, for the distance filter."""
        return frozenset({"codebook"}) if self.distance is not None else frozenset()

    def acceptance(self, p: torch.Tensor, q: torch.Tensor, context: RuleContext) -> torch.Tensor:
        """`a [..., V]`: every code's group ratio `min(1, p(G) / q(G))` (1 where its group has no `q` mass)."""
        order = p.sort(dim=-1, stable=True).indices
        ranks = torch.arange(p.shape[-1], device=p.device).expand_as(order)
        return torch.empty_like(p).scatter_(-1, order, self._ratio(p, q, order, ranks, context))

    def tv_bound(self, p: torch.Tensor, q: torch.Tensor, context: RuleContext) -> torch.Tensor:
        """The derived bound `sum_y q(y) |a(y) - min(1, p(y) / q(y))|`, its sum taken over the codes by rank in
        chunks of `BOUND_CHUNK`: every code's group at once is `[..., V, group]` (at a 16384-code vocabulary,
        `group=50` and 8 images of 16 slots, 840 MB an index tensor)."""
        order = p.sort(dim=-1, stable=True).indices
        exact = pass_probability(p, q)
        total = torch.zeros(p.shape[:-1], dtype=p.dtype, device=p.device)
        for start in range(0, p.shape[-1], BOUND_CHUNK):
            ranks = torch.arange(start, min(start + BOUND_CHUNK, p.shape[-1]), device=p.device)
            ranks = ranks.expand(*p.shape[:-1], -1)  # [..., chunk]
            codes = order.gather(-1, ranks)
            a = self._ratio(p, q, order, ranks, context)
            total += (q.gather(-1, codes) * (a - exact.gather(-1, codes)).abs()).sum(-1)
        return total

    def passing(
        self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, context: RuleContext
    ) -> torch.Tensor:
        order = p.sort(dim=-1, stable=True).indices
        rank = (order == drafts[..., None]).long().argmax(-1, keepdim=True)  # [..., 1]
        return self._ratio(p, q, order, rank, context).squeeze(-1)

    def _ratio(
        self,
        p: torch.Tensor,
        q: torch.Tensor,
        order: torch.Tensor,
        ranks: torch.Tensor,
        context: RuleContext,
    ) -> torch.Tensor:
        """`min(1, p(G) / q(G)) [..., M]` for the codes at `ranks [..., M]` of `order [..., V]` (the codes by
        ascending `p`)."""
        vocab, below = p.shape[-1], self.group // 2
        offsets = torch.arange(-below, self.group - below, device=p.device)  # [G]
        window = ranks[..., None] + offsets  # [..., M, G]
        inside = (window >= 0) & (window < vocab)
        members = order.gather(-1, window.clamp(0, vocab - 1).flatten(-2)).view_as(window)
        centre = order.gather(-1, ranks)  # [..., M] the codes whose groups these are
        p_members = p.gather(-1, members.flatten(-2)).view_as(members)
        keep = inside & ((p_members - p.gather(-1, centre)[..., None]).abs() < self.prob_gap)
        if self.distance is not None:
            keep &= self._close(centre[..., None], members, context, p.device)
        keep |= offsets == 0  # the draft itself
        q_members = q.gather(-1, members.flatten(-2)).view_as(members)
        p_group, q_group = (p_members * keep).sum(-1), (q_members * keep).sum(-1)
        return pass_probability(p_group, q_group)

    def _close(
        self, codes: torch.Tensor, others: torch.Tensor, context: RuleContext, device: torch.device
    ) -> torch.Tensor:
        """Whether each pair of `codes` and `others` (broadcast) is within `distance` (`close_pairs`)."""
        if context.codebook is None:
            raise ValueError(
                "gsd's distance filter needs the image tokenizer's codebook, and this model's session has none; "
                "pass gsd:distance=none or use sampler='sjd'"
            )
        packed = placed(
            context.codebook,
            ("close", self.distance),
            lambda vectors: close_pairs(vectors, self.distance),
            device,
        )
        codes, others = torch.broadcast_tensors(codes, others)
        bytes_ = packed[codes, others >> 3]  # byte b // 8 of row a holds bit b % 8
        return (bytes_ >> (others & 7).to(torch.uint8)) & 1 > 0


def close_pairs(codebook: torch.Tensor, distance: float, chunk: int = 1024) -> torch.Tensor:
    """`[V, ceil(V / 8)]` uint8: bit `b % 8` of byte `[a, b // 8]` says whether codes `a` and `b` are within
    `distance` (squared L2 over the mean squared norm of the codebook's vectors); built in row chunks, packed
    eight pairs a byte (a 16384-code vocabulary takes 32 MB)."""
    vectors = codebook.detach().float().cpu()
    vocab = vectors.shape[0]
    limit = distance * vectors.square().sum(-1).mean()
    columns = -(-vocab // 8) * 8
    weights = 2 ** torch.arange(8)
    rows = []
    for start in range(0, vocab, chunk):
        close = torch.cdist(vectors[start : start + chunk], vectors).square() < limit
        close = torch.nn.functional.pad(close, (0, columns - vocab))
        rows.append((close.view(close.shape[0], -1, 8).long() * weights).sum(-1).to(torch.uint8))
    return torch.cat(rows)
