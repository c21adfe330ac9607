"""LANTERN relaxed acceptance (Jang et al., ICLR 2025; LANTERN++, ICLR-W 2025): an acceptance rule for any
sampler that verifies with one (`sjd+lantern`, `zipar+sjd+lantern`, ...), and the sampler names the papers
use (`lantern`, `lantern++`: `FORMS`).

Image codes whose VQ codebook vectors are close decode to similar patches. For a draft `x` and the
processed target `p`, LANTERN's proximity set `A(x)` is the longest prefix of `x`'s `k` nearest codes
(L2, nearest first, `x` itself excluded) whose mass under `p` stays within `delta` (LANTERN++: within
`(lam - 1) * p(x)`). The draft is verified against the relaxed target `p~_x`: `p` with the mass of `A(x)`
moved onto `x`, so `p~_x(x) = p(x) + p(A(x))`.

Forms (`bound`), and what each guarantees for one committed token, with `m_x = p(A(x))` the mass a draft
claims (`<= delta`; LANTERN++: `<= (lam - 1) * p(x)`):

- `bound="draft"` (default): LANTERN as published. Accept `x ~ q` when `u * q(x) < p~_x(x)`; a rejected
  slot is resampled from the exact residual of its own relaxed target, `norm(max(0, p~_x - q))`.
  * point-mass draft (`q` one-hot: SJD's initial guesses, random ones included, see `uniform_guesses`):
    the committed token is distributed exactly as `p~_x`, so its total variation to `p` is `m_x`
    (`<= delta`).
  * sampled draft (SJD's carried drafts): the target depends on the draw, so `delta` alone bounds
    nothing. Writing the committed distribution as exact SJD's plus the change in acceptance and in the
    residuals gives `TV <= (alpha_relaxed - alpha_exact) + (2 / TV(p, q)) * sum_x max(0, q(x) - p(x)) * m_x
    <= (alpha_relaxed - alpha_exact) + 2 * delta`, where `alpha` is the slot's acceptance probability.
    The first term is real: a proposal whose codes sit next to the target's mass is accepted almost
    always, and the committed token then follows `q`, not `p` (TV up to 1 whatever `delta`).
- `bound="tv"`: one target fixed before the draw, the `q`-weighted mixture of the per-draft targets over
  `q`'s `top` most likely codes (the rest of `q`'s mass verifies against `p`). Speculative sampling is
  exact for a fixed target, so the committed token is within `delta * q(top codes) <= delta` of `p` for
  every proposal. It relaxes far less (the boost is scaled by `q(x)`). For a point-mass draft both forms
  are the same rule.

Rejection handling: the exact residual, not the official code's. On rejecting a point-mass draft the
official code zeroes `x` and, when anything was claimed, all of `x`'s `k + 1` nearest codes (not just
`A(x)`), and resamples from what is left; the committed token then misses the whole neighbourhood (total
variation = its mass, most of `p` at the default `k = 1000`), and under top-k it deviates even at
`delta = 0` (zero-mass neighbours count as claimed). Its sampled-draft (static tree) path resamples from
`p - q` with `q` zeroed on those codes, again without a bound. The exact residual keeps the published
per-token bound for point-mass drafts and makes `delta = 0` exactly SJD.

LANTERN++: the same rule on a static tree of drafts, with a multiplicative budget. LANTERN drafts with
EAGLE-2's dynamic tree, which picks paths by the drafter's confidence; on image codes that confidence is low
and flat, so the picked paths are short. LANTERN++ verifies a static tree instead, and bounds what a draft
may claim by its own probability, `p~(x) <= lam * p(x)` (`lam`), rather than by a fixed `delta`. Here the
tree is `sjd-pac`'s over Jacobi drafts (training-free) or `eagle`'s over a trained drafter's chain.

The sampler names (`FORMS`, read by `arjet.samplers.registry`): each paper name is an alias of one
canonical spec, `method+lantern`, chosen by its `drafter` option:

| name        | builds             | with `drafter=true`                                                |
|-------------|--------------------|--------------------------------------------------------------------|
| `lantern`   | `sjd+lantern`      | `eagle2+lantern` (the paper's: a drafter's dynamic tree)           |
| `lantern++` | `sjd-pac+lantern`  | `eagle+lantern` (a drafter's chain on a static tree; its `chain`)  |

A name takes the options of both its forms; one the chosen form lacks is refused unless it is at its
default (`refusal`). `lantern++`'s `window` defaults to the built method's (`sjd-pac`'s 64, `eagle`'s 16).

Greedy decoding (`bound="draft"`, LANTERN's relaxed argmax): the draft is accepted when it is the argmax
of its relaxed distribution built from the non-greedy `p` (ties go to the draft; the official code keeps
the claimed codes' mass too, which differs only in ties); otherwise the slot takes the plain argmax. The
decode step passes that distribution as `context.soft_p` (same shape as `p`: the guided logits through
top-k / top-p at temperature 1); without it the relaxation of a one-hot `p` changes nothing and the rule
is exact greedy, as is `bound="tv"`.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import ClassVar

import torch

from .codebook import placed
from .jacobi import AcceptanceRule, RuleContext, residual
from .options import MAX_SIZE, Option, option

BOUNDS = ("draft", "tv")

_TABLES: OrderedDict[tuple, torch.Tensor] = OrderedDict()
_TABLE_CACHE_SIZE = 4


@dataclass(frozen=True)
class Lantern(AcceptanceRule):
    """`k` nearest codebook neighbours (L2) a draft may claim; `delta`: probability mass a draft may claim
    (LANTERN's total-variation budget, in [0, 1]); `lam`: LANTERN++'s multiplicative form
    (`p~(x) <= lam * p(x)`), used instead of `delta` when given; `bound`: `"draft"` (LANTERN as published,
    the budget bounds each draft's relaxed target) or `"tv"` (the budget bounds every committed token);
    `top`: how many of the proposal's most likely codes the `"tv"` mixture covers."""

    k: int = option(1000, "nearest codebook neighbours a draft may claim", minimum=1, maximum=MAX_SIZE)
    delta: float = option(
        0.1,
        "probability mass a draft may claim from its neighbours",
        minimum=0.0,
        maximum=1.0,
        note="for LANTERN++'s bound p~(x) <= lam * p(x) pass lam; the official code reads delta > 1 as lam",
    )
    lam: float | None = option(
        None, "LANTERN++'s p'(x) <= lam * p(x), instead of delta", minimum=1.0, maximum=1e6
    )
    bound: str = option(
        "draft",
        "draft: LANTERN as published (delta bounds each draft's relaxed target); tv: delta bounds every "
        "committed token's total variation",
        choices=BOUNDS,
    )
    top: int = option(
        8, "the proposal's most likely codes the bound=tv mixture covers", minimum=1, maximum=MAX_SIZE
    )
    name: ClassVar[str] = "lantern"
    requires: ClassVar[frozenset[str]] = frozenset({"codebook"})  # it compares codes by their vectors

    @property
    def relaxes_greedy(self) -> bool:  # type: ignore[override]
        """Greedy decoding verifies against the relaxed argmax (the step then passes `context.soft_p`)."""
        return self.bound == "draft"

    @property
    def uniform_guesses(self) -> bool:  # type: ignore[override]
        """Whether a random initial guess is verified as the uniform draw it is (see `guess_proposal`). The
        published form declares it a point mass instead: against a uniform `q` its acceptance would be
        `min(1, V * p~_x(x))`, which admits almost any code that has a few likely neighbours and voids the
        per-token bound; as a point mass the committed token follows `p~_x`, within `delta` of `p`. The
        `"tv"` form is exact for its fixed target under any proposal, so it keeps the uniform one, as does a
        rule that claims nothing (`delta = 0` or `lam = 1`), which is then exactly `sjd`."""
        claims_nothing = self.delta == 0 if self.lam is None else self.lam == 1
        return self.bound == "tv" or claims_nothing

    def check_grid(
        self, grid: tuple[int, int], max_window: int | None = None, *, vocab_size: int | None = None
    ) -> None:
        """Refuse a `bound="tv"` mixture that holds more per input than the logits do: it gathers `k`
        neighbours for each of `top` codes (`[inputs, top, k]` per step), so `top * k` may reach the
        vocabulary's size (or the defaults' `8 * 1000`), no more."""
        if vocab_size is None or self.bound != "tv":
            return
        entries = min(self.top, vocab_size) * min(self.k, vocab_size - 1)
        default = type(self).top * type(self).k
        allowed = max(vocab_size, default)
        if entries > allowed:
            bound = (
                f"the {vocab_size} codes of this model's vocabulary"
                if allowed == vocab_size
                else f"the defaults' top * k of {default}"
            )
            raise ValueError(
                f"bound=tv with top={self.top}, k={self.k} gathers {entries:,} neighbour masses per input, more "
                f"than {bound}; use top * k <= {allowed}"
            )

    # -- the rule the speculative step calls --------------------------------------------------------
    def verify(
        self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, context: RuleContext
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`(t_x [...], residual [..., V])` for drafts `[...]` drawn from `q [..., V]` against the processed
        target `p [..., V]`: the step accepts a slot when `u * q(x) < t_x` and resamples a rejected one from
        `residual` (unnormalised). The `"tv"` form is the base rule over its fixed `target`."""
        if self.bound == "tv":
            return super().verify(p, q, drafts, context)
        table = self._table(context, p.device)
        soft = context.soft_p
        if soft is not None:  # greedy: p is one-hot; the relaxed argmax needs the distribution behind it
            if soft.shape != p.shape:
                raise ValueError(
                    f"context.soft_p must have p's shape {tuple(p.shape)}, got {tuple(soft.shape)}"
                )
            relaxed = self.relaxed(soft, drafts, table)
            best = relaxed.gather(-1, drafts[..., None]).squeeze(-1) >= relaxed.amax(-1)
            return best.to(p.dtype), p
        relaxed = self.relaxed(p, drafts, table)
        return relaxed.gather(-1, drafts[..., None]).squeeze(-1), residual(relaxed, q)

    def relaxed(self, p: torch.Tensor, drafts: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        """`p~_x [..., V]` for each draft: `p` with the mass of `A(x)` moved onto `x` (`table`: `[V, k]`
        nearest codes, see `neighbour_table`)."""
        near, claimed = self._claim(p, drafts[..., None], table)  # [..., 1, k]
        near, claimed = near.squeeze(-2), claimed.squeeze(-2)
        kept = p.gather(-1, near) - claimed
        relaxed = p.scatter(-1, near, kept)  # A(x) emptied (x is never its own neighbour)
        return relaxed.scatter_add(-1, drafts[..., None], claimed.sum(-1, keepdim=True))

    def tv_bound(self, p: torch.Tensor, q: torch.Tensor, context: RuleContext) -> torch.Tensor:
        """`[...]`: a bound on the total variation from `p [..., V]` of the code one slot commits for a draft
        `~ q [..., V]` (LANTERN resamples from its own target's residual, not `p`'s, so the generic bound does
        not apply). `"tv"`: the fixed target is met exactly, so it is `TV(t, p)` itself. `"draft"`: the
        module docstring's bound with each claimed mass `m_y` replaced by its cap `c_y` (`delta`, or
        `(lam - 1) * p(y)`; both terms grow with `m_y`), capped at 1: no neighbour table over the vocabulary
        is needed. Greedy with the relaxed argmax: the mass of drafts other than the argmax."""
        if self.bound == "tv":
            return 0.5 * (self.target(p, q, context) - p).abs().sum(-1)
        if context.soft_p is not None:
            return 1 - q.gather(-1, p.argmax(-1, keepdim=True)).squeeze(-1)
        cap = float(self.delta) if self.lam is None else (self.lam - 1) * p
        gain = (torch.minimum(q, p + cap) - torch.minimum(q, p)).sum(-1)
        over = (q - p).clamp(min=0)
        distance = over.sum(-1)  # TV(p, q)
        spread = 2 * (over * cap).sum(-1) / distance.clamp(min=torch.finfo(p.dtype).tiny)
        return (gain + spread).clamp(max=1.0)

    # -- the single target a target-only loop can verify against --------------------------------------
    def target(self, p: torch.Tensor, q: torch.Tensor, context: RuleContext) -> torch.Tensor:
        """The `"tv"` form's target `[..., V]`: the `q`-weighted mixture of the per-draft relaxed targets over
        `q`'s `top` codes. A loop that cannot pass the drafts (`target` without `verify`) gets this form
        whatever `bound` says."""
        table = self._table(context, p.device)
        weights, drafts = q.topk(min(self.top, q.shape[-1]), dim=-1)  # [..., M]
        near, claimed = self._claim(p, drafts, table)  # [..., M, k]
        mixed = p.scatter_add(-1, drafts, weights * claimed.sum(-1))
        mixed = mixed.scatter_add(-1, near.flatten(-2), -(weights[..., None] * claimed).flatten(-2))
        return mixed.clamp_(min=0)

    # -- internals --------------------------------------------------------------------------------
    def _claim(
        self, p: torch.Tensor, drafts: torch.Tensor, table: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """For drafts `[..., M]`: their nearest codes `[..., M, k]` and the mass each claims from them (the
        distance-ordered prefix within the budget; zero elsewhere)."""
        near = table[drafts]
        near_p = p.gather(-1, near.flatten(-2)).view_as(near)
        if self.lam is not None:
            budget = ((self.lam - 1) * p.gather(-1, drafts))[..., None]
        else:
            budget = float(self.delta)
        # masses are >= 0, so the running sum never decreases and `inside` is a prefix
        inside = near_p.cumsum(-1) <= budget
        return near, near_p * inside

    def _table(self, context: RuleContext, device: torch.device) -> torch.Tensor:
        codebook = context.codebook
        if codebook is None:
            raise ValueError(
                "the lantern acceptance rule needs the image tokenizer's codebook, and this model's session has "
                "none; use the exact rule (sampler='sjd') instead"
            )
        return _placed_table(codebook, self.k, device)


# -- the sampler names: LANTERN's rule over Jacobi drafts or over a trained drafter's ---------------------
DRAFTER = Option(
    "drafter",
    bool,
    False,
    "propose with the pipeline's trained drafter (pipe.drafter) instead of Jacobi drafts",
)


@dataclass(frozen=True)
class Form:
    """A paper name of LANTERN's rule: the canonical spec it builds over Jacobi drafts (`jacobi`) and, with
    `drafter=true`, over a trained drafter's (`drafted`); `window`: the name's own window option when both
    forms take one with different defaults (`none`: the built method's)."""

    jacobi: str
    drafted: str
    window: Option | None = None


FORMS = {
    "lantern": Form("sjd+lantern", "eagle2+lantern"),
    "lantern++": Form(
        "sjd-pac+lantern",
        "eagle+lantern",
        window=Option(
            "window",
            int,
            None,
            "inputs per forward, tree nodes included (none: sjd-pac's default, or eagle's with drafter=true)",
            minimum=2,
            maximum=MAX_SIZE,
            none=True,
        ),
    ),
}
# a drafter form's option that is no tree shape, as a refusal without `drafter=true` says what it does
_DRAFTING = {"chain": "{option}={value} chooses what a drafter drafts"}


def refusal(name: str, option: str, value: object, drafter: bool) -> str:
    """Why `name` refuses `option=value` (away from its default) in the form `drafter` chose: an option of
    Jacobi drafts with a drafter's, or an option of a drafter's tree without one."""
    if drafter:
        return f"{option} applies to Jacobi drafts; {name} with drafter=true takes no {option}"
    said = _DRAFTING.get(option, "{option} shapes a drafter's tree").format(option=option, value=value)
    return f"{said}; {name} takes it with drafter=true only"


def _placed_table(codebook: torch.Tensor, k: int, device: torch.device) -> torch.Tensor:
    """`neighbour_table` on `device`, remembered per codebook object (`codebook.placed`)."""
    return placed(codebook, ("neighbours", k), lambda vectors: neighbour_table(vectors, k), device)


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
