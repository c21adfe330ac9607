"""LANTERN relaxed acceptance (Jang et al., ICLR 2025; LANTERN++), as an acceptance rule for `sjd` and
`zipar+sjd`.

Image codes whose VQ codebook vectors are close decode to similar patches. LANTERN lets a draft `x`
claim the probability of its nearest codebook neighbours: `A(x)` is the longest distance-ordered prefix
of `x`'s `k` neighbours whose total mass under `p` stays within `delta` (or, LANTERN++'s form, within
`(lam - 1) * p(x)`), and that mass moves onto `x`.

LANTERN applies that move to whichever draft was drawn. With a sampled proposal (SJD's carried drafts)
that target depends on the draw, and the committed token can then stray from `p` by several times
`delta`. arjet therefore verifies against one target fixed before the draw: the `q`-weighted mixture of
LANTERN's per-draft targets over `q`'s `top` most likely codes. Speculative sampling is exact for that
target, so every committed token is distributed within total variation `delta` of `p` (for a point-mass
draft the target is exactly LANTERN's). `delta = 0` is exact SJD.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import ClassVar

import torch

_TABLES: OrderedDict[tuple, torch.Tensor] = OrderedDict()
_TABLE_CACHE_SIZE = 4


@dataclass(frozen=True)
class Lantern:
    """`k` nearest codebook neighbours (L2); `delta`: total-variation budget per token; `lam`: LANTERN++'s
    multiplicative form (`p'(x) <= lam * p(x)`), used instead of `delta` when given; `top`: how many of the
    proposal's most likely codes the relaxation considers."""

    k: int = 1000
    delta: float = 0.1
    lam: float | None = None
    top: int = 8
    name: ClassVar[str] = "lantern"
    needs_codebook: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"lantern k (neighbours per code) must be an integer >= 1, got {self.k!r}")
        if isinstance(self.delta, bool) or not isinstance(self.delta, (int, float)) or not self.delta >= 0:
            raise ValueError(
                f"lantern delta (total-variation bound) must be a number >= 0, got {self.delta!r}"
            )
        if self.lam is not None and (not isinstance(self.lam, (int, float)) or not self.lam >= 1):
            raise ValueError(
                f"lantern lam must be a number >= 1 (LANTERN++'s p'(x) <= lam * p(x)), got {self.lam!r}"
            )
        if isinstance(self.top, bool) or not isinstance(self.top, int) or self.top < 1:
            raise ValueError(f"lantern top must be an integer >= 1, got {self.top!r}")

    def target(self, p: torch.Tensor, q: torch.Tensor, context: object) -> torch.Tensor:
        codebook = getattr(context, "codebook", None)
        if codebook is None:
            raise ValueError(
                "the lantern acceptance rule needs the image tokenizer's codebook, and this model's session has "
                "none; use the exact rule (sampler='sjd') instead"
            )
        neighbours = neighbour_table(codebook, self.k).to(p.device)  # [V, k]
        weights, drafts = q.topk(min(self.top, q.shape[-1]), dim=-1)  # [..., M]
        near = neighbours[drafts]  # [..., M, k]
        near_p = p.gather(-1, near.flatten(-2)).view_as(near)
        if self.lam is not None:
            budget = (self.lam - 1) * p.gather(-1, drafts)
        else:
            budget = torch.full_like(weights, float(self.delta))
        claimed = (near_p.cumsum(-1) <= budget[..., None]) * near_p  # the prefix A(x) and its mass
        relaxed = p.scatter_add(-1, drafts, weights * claimed.sum(-1))
        relaxed = relaxed.scatter_add(-1, near.flatten(-2), -(weights[..., None] * claimed).flatten(-2))
        return relaxed.clamp_(min=0)


def neighbour_table(codebook: torch.Tensor, k: int, chunk: int = 1024) -> torch.Tensor:
    """`[V, min(k, V-1)]` indices of each code's nearest other codes by L2 distance, nearest first; built in
    row chunks (memory ~ chunk x V) and cached per codebook."""
    codebook = codebook.detach().float().cpu()
    k = min(k, codebook.shape[0] - 1)
    if k < 1:
        raise ValueError(f"a codebook of {codebook.shape[0]} code(s) has no neighbours")
    key = (
        tuple(codebook.shape),
        k,
        float(codebook.sum()),
        float(codebook.square().sum()),
        float(codebook[0].sum()),
    )
    if key in _TABLES:
        _TABLES.move_to_end(key)
        return _TABLES[key]
    rows = []
    for start in range(0, codebook.shape[0], chunk):
        distances = torch.cdist(codebook[start : start + chunk], codebook)
        distances[torch.arange(distances.shape[0]), torch.arange(start, start + distances.shape[0])] = float(
            "inf"
        )
        rows.append(distances.topk(k, largest=False).indices)
    table = torch.cat(rows)
    _TABLES[key] = table
    while len(_TABLES) > _TABLE_CACHE_SIZE:
        _TABLES.popitem(last=False)
    return table
