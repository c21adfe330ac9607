"""Jacobi decoding's shared pieces: the drafts a window carries, the acceptance rules, and the flat steps
every window sampler calls (SJD, MC-SJD, ZipAR's verified rows, SJD-PAC's tree and chain, EAGLE, SJD2,
LANTERN).

Notation (Teng et al., ICLR 2025, §3; `...` is any leading batch shape: `[B]` images or `[B, R]` lanes):

| here                     | paper (symbol)                      | shape         |
|--------------------------|-------------------------------------|---------------|
| `L` (positions)          | `L`: position `j` predicts `n + j`  |               |
| `n`                      | `n`: the next undecoded cell        | `[...]`       |
| `S = L - 1`              | draft slots (slot `j`: cell `n + j`)|               |
| `V`                      | the image vocabulary                |               |
| `drafts.codes`           | `x̃_{n+j}`                           | `[..., S]`    |
| `drafts.proposals` (`q`) | `p_θ^{(k-1)}(·)`                    | `[..., S, V]` |
| `p`                      | `p_θ^{(k)}(·)` (processed: CFG,     | `[..., L, V]` |
|                          | temperature, top-k, top-p)          |               |
| `t` (`rule.target`)      | `p` (exact), `p̃` (LANTERN)          | `[..., V]`    |
| `passes`                 | `u < min(1, t(x) / q(x))`           | `[...]`       |
| `residual`               | `norm(max(0, t - q))`               | `[..., V]`    |
| `Verdict.accepted`       | `τ`: drafts accepted                | `[...]`       |
| `couple`                 | MC-SJD: keep `x̃` w.p.               | `[...]`       |
|                          | `min(1, p(x) / q(x))`               |               |
| `gumbel_max`             | SCD's Gumbel coupling:              | `[...]`       |
|                          | `argmax(log p + G)`, `G` per cell   |               |
| `reuse`                  | SJD++: keep `x̃` if `p(x)/q(x) > τ`, | `[...]`       |
|                          | declared with its marginal `m`      |               |
| `verify_candidates`      | `K` candidates, `r_k`, `t_{k+1} =`  | `[..., K]`    |
|                          | `norm(max(0, t_k - r_k))`           |               |
| `Uniforms`               | `u`, one stream per decision        | `[..., L]`    |

A draft `x ~ q` is accepted with probability `min(1, t(x) / q(x))`; at the first rejection the position is
resampled from the residual `norm(max(0, t - q))`. The committed code is then distributed exactly as `t`.
One window step is:

1. `verify`: drafts pass left to right while their position is usable (`rule.verify` gives `t(x)` and the
   residual);
2. `resample`: the first rejected position draws from the residual; if every usable draft passed, the next
   position gives a bonus code from `p` where `p` is valid there;
3. commit (the step's own): the accepted drafts and that code;
4. `redraft`: every later position's sample from this `p` (coupled with its old draft when asked: MC-SJD,
   `couple`) becomes the draft of the same cell in the next window, with `p` as its proposal (a `Redraw` rule
   may draw otherwise, declaring what it drew from: `gumbel_max`, `reuse`); `guess` gives
   fresh slots their initial guesses (`fill_guesses`: SJD's initialisation schemes).

Which positions are valid is the caller's: a position past the end of a lane never is; in SJD2 one behind a
noisy input is not. SJD-PAC and EAGLE verify their trees' candidates with `verify_candidates` and hand the
outcome to the same `verify` (for the chain past the tree), `resample` and `redraft`.

Initial guesses: `board [B, N]` holds what is known of each image (committed codes and the drafts already in
the window, `-1` elsewhere); `top1 [B, N]` the argmax of the latest distribution computed for each cell. A
scheme whose neighbour is unknown falls back to the next simpler one and finally to a uniform random code,
so no scheme ever degrades silently for lack of a grid width: the width comes from the session. The left
neighbour of a row's first cell is the previous row's last cell (the official SJD code draws a random code
there instead); on the built-in model the wrap needs fewer forwards (see README). `fill_guesses` guesses a
window's fresh slots all at once, where a slot's neighbour may itself be a fresh slot of the same window (its
guess is then the neighbour's guess: `repeat_horizontal` repeats the last known code along the run); it
resolves those chains by pointer jumping, a fixed number of vectorised rounds, with no loop over slots.
A guess that is a uniform random code is declared with a uniform proposal (as SJD-PAC does), every other
guess with a point mass: both are the true distribution the draft was drawn from, so verification stays
exact, and a random draft of code `x` passes with probability `min(1, V * p(x))` instead of `p(x)`.

"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, NamedTuple, Protocol

import torch

from .base import Part, Sampler
from .decode import sample

if TYPE_CHECKING:
    from .decode import Decode


INIT_SCHEMES = ("random", "repeat_horizontal", "repeat_vertical", "sample_horizontal", "sample_vertical")


# -- drafts ------------------------------------------------------------------------------------------------
@dataclass
class Drafts:
    """A window's drafts and the proposals they were drawn from (views are fine: steps update them in place)."""

    codes: torch.Tensor  # [..., S] long
    proposals: torch.Tensor  # [..., S, V]

    def __getitem__(self, images: slice) -> Drafts:
        """The drafts of images `images` (views), as a tensor of per-image state slices."""
        return Drafts(self.codes[images], self.proposals[images])

    def slots(self, index: slice) -> Drafts:
        """The drafts of slots `index` (views over the slot dimension)."""
        return Drafts(self.codes[..., index], self.proposals[..., index, :])

    def replace(self, codes: torch.Tensor, proposals: torch.Tensor) -> None:
        """Take the next window's drafts, in place."""
        self.codes.copy_(codes)
        self.proposals.copy_(proposals)


# -- acceptance rules --------------------------------------------------------------------------------------
@dataclass
class RuleContext:
    """What an acceptance rule may consult besides `p` and `q`: the VQ codebook `[V, d]` (LANTERN), under
    greedy decoding the non-greedy distribution behind the one-hot `p` (`soft_p`, same shape as `p`, for
    LANTERN's relaxed argmax; the step fills it in only for a rule that `relaxes_greedy`), and where the
    drafts sit along a drafter's chain or tree (COOL-SD's schedule): `position`, each verified draft's draft
    position `i` (1 for the first draft after the last committed code; an int, or a tensor broadcastable to
    the drafts' shape), and `positions`, the `L` draft positions a window verifies. Steps that verify no such
    chain leave both None."""

    codebook: torch.Tensor | None = None
    soft_p: torch.Tensor | None = None
    position: torch.Tensor | int | None = None
    positions: int | None = None


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

    def acceptance(self, p: torch.Tensor, q: torch.Tensor, context: RuleContext) -> torch.Tensor:
        """`a [..., V]`: the probability that a draft of each code `y ~ q [..., V]` passes against `p [..., V]`,
        `min(1, t(y) / q(y))` (any value where `q(y) = 0`: such a code is never drawn). A rule whose `verify`
        makes the target depend on the draft overrides it."""
        return pass_probability(self.target(p, q, context), q)

    def tv_bound(self, p: torch.Tensor, q: torch.Tensor, context: RuleContext) -> torch.Tensor:
        """`[...]`: a bound on the total variation from `p` of the code one position commits when a draft
        `~ q` is verified by this rule and a rejection resamples from the exact residual:
        `sum_y q(y) |a(y) - min(1, p(y) / q(y))|` (`acceptance` for `a`; 0 for the exact rule). Over a decode
        the total variation of the whole image is at most the sum over the positions verified."""
        return (q * (self.acceptance(p, q, context) - pass_probability(p, q)).abs()).sum(-1)


@dataclass(frozen=True)
class Exact(AcceptanceRule):
    """Lossless verification: the target is `p` itself."""


class RelaxedRule(AcceptanceRule):
    """A relaxed rule given by the probability `a(x)` that a draft `x` passes (GSD, the entropy rule): the step
    accepts when `u < a(x)` (`t_x = a(x) q(x)`), and a rejection resamples from the exact residual
    `norm(max(0, p - q))`, which is what `tv_bound` assumes. A subclass gives `acceptance` (every code's
    `a`); `passing` (the drafts' alone) gathers it unless the subclass has a cheaper way. A random initial
    guess is declared a point mass, as the published rules verify it (against a uniform proposal the ratio
    `V * p(x)` would pass almost any code)."""

    uniform_guesses: ClassVar[bool] = False

    def passing(
        self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, context: RuleContext
    ) -> torch.Tensor:
        """`a(x) [...]` for drafts `[...]` drawn from `q [..., V]`, against `p [..., V]`."""
        return self.acceptance(p, q, context).gather(-1, drafts[..., None]).squeeze(-1)

    def verify(
        self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, context: RuleContext
    ) -> tuple[torch.Tensor, torch.Tensor]:
        q_x = q.gather(-1, drafts[..., None]).squeeze(-1)
        return self.passing(p, q, drafts, context) * q_x, residual(p, q)


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


# -- the maths -----------------------------------------------------------------------------------------------
def pass_probability(target: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """`min(1, t / q)` elementwise: the probability a draft drawn from `q` passes against `t` (1 where
    `q = 0`: such a code is never drawn)."""
    return torch.where(q > 0, target / q.clamp(min=torch.finfo(q.dtype).tiny), 1.0).clamp(max=1.0)


def passes(target: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The per-slot test `u < t(x) / q(x)` (written without a division: `q(x) > 0` for a drawn `x`)."""
    t_x = target.gather(-1, drafts[..., None]).squeeze(-1)
    q_x = q.gather(-1, drafts[..., None]).squeeze(-1)
    return u * q_x < t_x


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


def gumbel_max(p: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """A draw `~ p [..., V]` by the Gumbel-max trick, `argmax(log p + G)` with `G = -log(noise)`, written as
    `argmax(p / noise)`; `noise [..., V]` holds standard exponentials (`exponentials`). Drafts of one cell that
    share its noise agree as often as `p` allows (SCD's Gumbel coupling); each is still exactly a draw of its
    `p` when the noise is independent of `p`."""
    return (p / noise).argmax(-1)


def exponentials(u: torch.Tensor) -> torch.Tensor:
    """Standard exponential noise `-log(u)` (float32) from uniforms `u` in (0, 1), any shape."""
    return u.log().neg_().float()


def reuse(
    p: torch.Tensor, previous: torch.Tensor, previous_q: torch.Tensor, tau: float, u_draw: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """SJD++'s re-draft: keep `previous ~ previous_q [..., V]` where `p(x) / q(x) > tau`, else draw from `p
    [..., V]` (`u_draw`). Returns the draft and its true marginal, the proposal it must be declared with:
    `m(y) = q(y) 1[p(y) / q(y) > tau] + (q's mass on codes not kept) p(y)` (neither `p` nor `q`)."""
    keeps = p > tau * previous_q  # [..., V]: a draft of this code is kept (q(y) = 0: never drawn)
    not_kept = previous_q.masked_fill(keeps, 0.0).sum(-1, keepdim=True)
    marginal = previous_q.masked_fill(~keeps, 0.0) + not_kept * p
    kept = keeps.gather(-1, previous[..., None]).squeeze(-1)
    return torch.where(kept, previous, sample(p, u_draw)), marginal


# -- one window step: verify, resample, redraft --------------------------------------------------------
class Uniforms(NamedTuple):
    """The uniforms of one window step, `[..., L]` each, one stream per decision."""

    accept: torch.Tensor  # the acceptance test of the draft at each position
    draw: torch.Tensor  # the resampled / bonus code, and every position's redraft
    couple: torch.Tensor  # keeping an old draft when redrafts are coupled


class Bound(NamedTuple):
    """What a step's verification adds to the total-variation bound of the codes it commits, `[...]` each:
    the sum (`total`) and the max (`worst`) of the rule's per-position bound (`AcceptanceRule.tv_bound`)
    over the positions whose verification decided a committed code (0 under the exact rule)."""

    total: torch.Tensor
    worst: torch.Tensor

    @classmethod
    def none(cls, like: torch.Tensor) -> Bound:
        """No bound spent, shaped as `like [...]`."""
        zeros = torch.zeros(like.shape, device=like.device)
        return cls(zeros, zeros)

    def add(self, spent: torch.Tensor, where: torch.Tensor) -> Bound:
        """This bound and one more position's `spent [...]` where `where [...]` (it decided a code)."""
        spent = torch.where(where, spent, 0.0)
        return Bound(self.total + spent, torch.maximum(self.worst, spent))

    def join(self, other: Bound) -> Bound:
        """Both bounds' positions together (sums add, maxima take the larger)."""
        return Bound(self.total + other.total, torch.maximum(self.worst, other.worst))


def position_bounds(
    rule: AcceptanceRule, p: torch.Tensor, q: torch.Tensor, context: RuleContext
) -> torch.Tensor | None:
    """`rule.tv_bound [...]` of drafts `~ q [..., V]` verified against `p [..., V]`; None for the exact rule
    (its bound is 0, and the step computes nothing for it)."""
    return None if isinstance(rule, Exact) else rule.tv_bound(p, q, context)


@dataclass
class Verdict:
    """How verification of a run of drafts ended."""

    accepted: torch.Tensor  # [...] drafts accepted
    rejected: torch.Tensor  # [...] bool: it stopped at a failed draft (not at the end of the usable ones)
    rest: torch.Tensor  # [..., V] where rejected: the distribution the failed position resamples from
    bound: Bound | None = None  # the rule's bound over the positions that decided a committed code


@dataclass
class JacobiOutcome:
    advanced: torch.Tensor  # [...] cells committed (accepted drafts + the resampled / bonus code, if any)
    committed: torch.Tensor  # [..., L] bool: positions committed
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
        rest = target_p.new_zeros(*usable.shape[:-1], target_p.shape[-1])
        return Verdict(zeros, zeros.bool(), rest, Bound.none(zeros))
    t_x, rest = rule.verify(target_p, drafts.proposals, drafts.codes, context)
    q_x = drafts.proposals.gather(-1, drafts.codes[..., None]).squeeze(-1)
    accepted = ((u_accept * q_x < t_x) & usable).long().cumprod(-1).sum(-1)
    rejected = accepted < usable.long().cumprod(-1).sum(-1)
    bound = Bound.none(accepted)
    spent = position_bounds(rule, target_p, drafts.proposals, context)  # [..., S]
    if spent is not None:  # the accepted drafts and the rejected one decided committed codes
        decided = torch.arange(slots, device=usable.device) < (accepted + rejected.long())[..., None]
        spent = torch.where(decided, spent, 0.0)
        bound = Bound(spent.sum(-1), spent.amax(-1))
    return Verdict(accepted, rejected, _take(rest, accepted.clamp(max=slots - 1)), bound)


def resample(
    p: torch.Tensor, path: torch.Tensor, *, valid: torch.Tensor, verdict: Verdict, u_draw: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Resample and commit after `verdict` on the drafts `path [..., L - 1]`: the failed position draws from
    `verdict.rest`; if every usable draft passed, the next position gives a bonus code from `p [..., L, V]`
    where it is valid (`valid [..., L]`); `u_draw [..., L]`. Returns `(advanced [...], committed [..., L],
    codes [..., L])`: cells committed, the positions committed, and their codes."""
    last = p.shape[-2] - 1  # L - 1
    positions = torch.arange(last + 1, device=p.device)
    accepted, rejected = verdict.accepted, verdict.rejected
    at = accepted.clamp(max=last)
    token_valid = rejected | valid.gather(-1, at[..., None]).squeeze(-1)
    dist = torch.where(rejected[..., None], verdict.rest, _take(p, at))
    token = sample(dist, u_draw.gather(-1, at[..., None]).squeeze(-1))
    padded = torch.cat([path, path.new_zeros(*path.shape[:-1], 1)], -1)
    codes = torch.where(positions == accepted[..., None], token[..., None], padded)
    committed = (positions < accepted[..., None]) | (
        (positions == accepted[..., None]) & token_valid[..., None]
    )
    return accepted + token_valid.long(), committed, codes


class Redraw(Protocol):
    """A re-draft rule: `(samples [..., L], proposals [..., L, V])`, every position's draft for the next window
    and the distribution it was drawn from, given `p [..., L, V]`, the old `drafts` (`[..., S]`, slot `j` at
    position `j`'s cell) and the step's `uniforms`."""

    def __call__(
        self, p: torch.Tensor, drafts: Drafts, uniforms: Uniforms
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


def reusing(tau: float) -> Redraw:
    """SJD++ as a `Redraw`: each slot's old draft kept or replaced by `reuse` and declared with its marginal;
    the last position (no old draft there) samples `p`."""

    def redraw(p: torch.Tensor, drafts: Drafts, uniforms: Uniforms) -> tuple[torch.Tensor, torch.Tensor]:
        slots = p.shape[-2] - 1
        kept, marginal = reuse(
            p[..., :slots, :], drafts.codes, drafts.proposals, tau, uniforms.draw[..., :slots]
        )
        last = sample(p[..., slots:, :], uniforms.draw[..., slots:])
        return torch.cat([kept, last], -1), torch.cat([marginal, p[..., slots:, :]], -2)

    return redraw


def noised(noise: torch.Tensor) -> Redraw:
    """SCD's Gumbel coupling as a `Redraw`: every position's `gumbel_max` sample of `p` under its cell's noise
    (`noise [..., >= L, V]`, row `j`: position `j`'s cell), declared with `p`."""

    def redraw(p: torch.Tensor, drafts: Drafts, uniforms: Uniforms) -> tuple[torch.Tensor, torch.Tensor]:
        return gumbel_max(p, noise[..., : p.shape[-2], :]), p

    return redraw


def redraft(
    p: torch.Tensor,
    drafts: Drafts,
    *,
    advanced: torch.Tensor,
    uniforms: Uniforms,
    coupling: bool | str,
    carry_limit: torch.Tensor,
    redraw: Redraw | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every position after the `advanced [...]` committed cells gives its sample from `p [..., L, V]`
    (coupled with its old draft in `drafts` `[..., S]` when `coupling`, `True` or mc-sjd's `"maximal"`) as
    the next draft of its cell, with `p` there as its proposal; `uniforms` `[..., L]` each; slots whose cell
    reaches `carry_limit [...]` keep their drafts. A `redraw` rule replaces those samples and proposals (`coupling` is then not
    read). Returns `(next_drafts [..., S], next_proposals [..., S, V], carried [..., S])` (`carried`: the
    slot took a new draft)."""
    slots = p.shape[-2] - 1  # S = L - 1
    positions = torch.arange(slots + 1, device=p.device)
    if redraw is not None:
        samples, proposals = redraw(p, drafts, uniforms)
    else:
        if isinstance(coupling, str) and coupling != "maximal":  # mc-sjd's other couplings need their stepper
            raise ValueError(
                f"coupling={coupling!r} needs mc-sjd's own window stepper; this one couples maximally"
            )
        samples, proposals = sample(p, uniforms.draw), p
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
    source = source.clamp(max=slots)
    next_drafts = torch.where(carried, samples.gather(-1, source), drafts.codes)
    carried_q = proposals.gather(-2, source[..., None].expand(*source.shape, p.shape[-1]))
    next_proposals = torch.where(carried[..., None], carried_q, drafts.proposals)
    return next_drafts, next_proposals, carried


def _take(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """`values[..., index, :]` for values `[..., L, V]` and index `[...]`."""
    expanded = index[..., None, None].expand(*index.shape, 1, values.shape[-1])
    return values.gather(-2, expanded).squeeze(-2)


# -- the multi-draft rule (SJD-PAC's tree, EAGLE) -----------------------------------------------------------
def candidate_proposal(q: torch.Tensor, drawn: torch.Tensor) -> torch.Tensor:
    """The distribution of the next sibling: `q [..., V]` without the codes `drawn [..., V]` so far,
    renormalised; uniform over the codes not drawn where `q` has no mass left (a point-mass guess)."""
    left = q.masked_fill(drawn, 0.0)
    base = torch.where(left.sum(-1, keepdim=True) > 0, left, (~drawn).to(q.dtype))
    return base / base.sum(-1, keepdim=True)


def draw_candidates(q: torch.Tensor, main: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """`[..., K-1]` siblings of the main drafts `main [...]`, drawn one by one without replacement from the
    proposals `q [..., V]` (`candidate_proposal`) with the uniforms `u [..., K-1]`."""
    drawn = _marked(torch.zeros_like(q, dtype=torch.bool), main)
    siblings = []
    for k in range(u.shape[-1]):
        code = sample(candidate_proposal(q, drawn), u[..., k])
        drawn = _marked(drawn, code)
        siblings.append(code)
    return torch.stack(siblings, -1) if siblings else main[..., None][..., :0]


def verify_candidates(
    target: torch.Tensor,
    q: torch.Tensor,
    candidates: torch.Tensor,
    u: torch.Tensor,
    *,
    sibling_q: torch.Tensor | None = None,
    rule: AcceptanceRule | None = None,
    context: RuleContext | None = None,
    point_masses: bool = False,
    spent: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Recursive rejection over `candidates [..., K]` (the main draft, drawn from `q [..., V]`, then siblings
    drawn without replacement from `sibling_q [..., V]`, default `q`, see `candidate_proposal`) against
    `target [..., V]`, uniforms `u [..., K]`.
    Candidate `k` passes with probability `min(1, t_k(x)/r_k(x))`; after a failure `t_{k+1} = norm(max(0,
    t_k - r_k))`. Returns the first passing rank `[...]`, whether one passed, and the last residual `t_K`
    (what the depth draws from when none passed); the committed code is then distributed exactly as
    `target`. That needs only each candidate to be a draw from its `r_k` given the candidates before it, so
    the siblings may come from another proposal than the main draft (`eagle:chain=jacobi`: a drafter's);
    leaving the main draft out of their draws loses nothing, as `t_1` has no mass at a rejected main draft.
    With `point_masses` the candidates are distinct fixed codes (not draws, e.g. the drafter's
    most likely ones) and `r_k` is the point mass on candidate `k`: it passes with probability `t_k(x)`, and
    `t_{k+1}` is `t_k` without `x`. A relaxed `rule` (LANTERN) verifies each candidate against its own
    relaxed target `t~_k(x)` and continues from that target's residual (`AcceptanceRule.verify`); the code
    is then within the rule's bound of `target`, not exact. `spent [...]`, when given, gains that bound in
    place: the sum over the candidates tried of the rule's `tv_bound` against each one's target and proposal
    (a candidate's rejection continues with the next one, so the bounds add up)."""
    rule = rule or Exact()
    context = context or RuleContext()
    sibling_q = q if sibling_q is None else sibling_q
    drawn = torch.zeros_like(q, dtype=torch.bool)
    rank = torch.zeros(candidates.shape[:-1], dtype=torch.long, device=q.device)
    found = torch.zeros_like(rank, dtype=torch.bool)
    for k in range(candidates.shape[-1]):
        code = candidates[..., k]
        if point_masses:
            proposal = _marked(torch.zeros_like(drawn), code).to(q.dtype)
        else:
            proposal = q if k == 0 else candidate_proposal(sibling_q, drawn)
        t_x, rest = rule.verify(target, proposal, code, context)
        if spent is not None:
            tried = position_bounds(rule, target, proposal, context)
            if tried is not None:
                spent += torch.where(found, 0.0, tried)
        q_x = proposal.gather(-1, code[..., None]).squeeze(-1)
        ok = ~found & (u[..., k] * q_x < t_x)
        rank = torch.where(ok, k, rank)
        found |= ok
        target = torch.where(found[..., None], target, rest / rest.sum(-1, keepdim=True))
        drawn = _marked(drawn, code)
    return rank, found, target


def _marked(drawn: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    return drawn.scatter(-1, codes[..., None], True)


# -- initial guesses of fresh slots -------------------------------------------------------------------------
def uses_top1(scheme: str) -> bool:
    """The scheme reads the latest argmax of each cell (the step keeps a `top1` board for it)."""
    return scheme.startswith("sample_")


def guess(
    drafts: Drafts,
    cells: torch.Tensor,
    decode: Decode,
    *,
    scheme: str,
    fresh: torch.Tensor,
    top1: torch.Tensor | None,
    u: torch.Tensor,
    uniform: bool = True,
    end: torch.Tensor | int | None = None,
) -> None:
    """Give the `fresh [..., S]` slots of `drafts` whose cells `cells [B, ..., S]` lie before `end` (default:
    the image's cell count) their initial guesses and the proposals they were drawn from, in place, from
    what `decode` has committed and the drafts already kept before `end` (what fresh slots see). `top1`: the
    latest argmax per cell (`uses_top1` schemes); `u`: uniforms like `fresh`; `uniform`: whether a random
    guess keeps its uniform proposal (else a point mass, see `AcceptanceRule.uniform_guesses`)."""
    if not cells.shape[-1]:
        return
    session = decode.session
    inside = cells < (session.num_cells if end is None else end)
    fresh = fresh & inside
    codes = decode.trace.codes
    vocab_size = drafts.proposals.shape[-1]
    board = torch.cat([codes, torch.full_like(codes[:, :1], -1)], 1)
    scatter_where(board, cells, drafts.codes, inside & ~fresh)
    guesses, drawn = fill_guesses(
        scheme,
        drafts.codes,
        fresh=fresh,
        cells=cells,
        board=board[:, :-1],
        top1=top1,
        width=session.grid[1],
        vocab_size=vocab_size,
        u=u,
    )
    proposal = guess_proposal(guesses, drawn & uniform, vocab_size)
    drafts.replace(guesses, torch.where(fresh[..., None], proposal, drafts.proposals))


def fill_guesses(
    scheme: str,
    drafts: torch.Tensor,
    *,
    fresh: torch.Tensor,
    cells: torch.Tensor,
    board: torch.Tensor,
    top1: torch.Tensor | None,
    width: int,
    vocab_size: int,
    u: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`drafts [B, R, S]` with every `fresh` slot replaced by its initial guess, and `[B, R, S]` bool: the
    slots whose guess is a uniform random code (their proposal is uniform; every other guess is a function
    of what is known, a point mass).

    Slot `j` of lane `r` guesses cell `cells[b, r, j]` (a lane's slots are consecutive cells, and its fresh
    slots are the last ones). `board [B, N]` holds the committed codes and the lanes' kept drafts; `top1`
    (for the `sample_*` schemes) the latest argmax per cell. A neighbour that is a fresh slot of the same
    lane gives that slot's guess; one in another lane's fresh slots counts as unknown."""
    random = random_codes(u, vocab_size)
    if scheme == "random":
        return torch.where(fresh, random, drafts), fresh
    slot = torch.arange(drafts.shape[-1], device=drafts.device).expand_as(drafts)
    value = torch.where(fresh, random, drafts)  # the last fallback: a random code
    pointing = torch.zeros_like(fresh)  # the guess is that of slot `pointer` (an earlier fresh slot)
    pointer = slot
    drawn = fresh  # the guess is the slot's own random code
    # fallbacks first, so that the scheme's own neighbour overrides them: left, above, latest argmax
    steps = [1] if scheme.endswith("horizontal") else [1, width]
    for step in steps:
        in_run = fresh & (slot >= step) & fresh.gather(-1, (slot - step).clamp(min=0))
        found = _lookup(board, cells - step)
        has_value = fresh & ~in_run & (cells >= step) & (found >= 0)
        value = torch.where(has_value, found, value)
        pointing = torch.where(in_run, True, pointing & ~has_value)
        pointer = torch.where(in_run, slot - step, pointer)
        drawn = drawn & ~in_run & ~has_value
    if uses_top1(scheme):
        found = _lookup(top1, cells - steps[-1])
        has_top1 = fresh & (cells >= steps[-1]) & (found >= 0)
        value = torch.where(has_top1, found, value)
        pointing &= ~has_top1
        drawn &= ~has_top1
    for _ in range(math.ceil(math.log2(drafts.shape[-1])) + 1):  # pointer jumping: chains halve each round
        target_pointing = pointing.gather(-1, pointer)
        value = torch.where(pointing & ~target_pointing, value.gather(-1, pointer), value)
        pointer = torch.where(pointing & target_pointing, pointer.gather(-1, pointer), pointer)
        pointing &= target_pointing
    return value, drawn


def random_codes(u: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Uniform random codes in `0..V-1` from uniforms `u` (any shape)."""
    return (u * vocab_size).long().clamp_(max=vocab_size - 1)


def _lookup(values: torch.Tensor, cells: torch.Tensor) -> torch.Tensor:
    """`values[b, cells[b, ...]]` (any value where `cells < 0`)."""
    flat = cells.clamp(min=0).flatten(1)
    return values.gather(1, flat.clamp(max=values.shape[1] - 1)).view_as(cells)


def guess_proposal(codes: torch.Tensor, drawn: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """The proposal of an initial guess: uniform where it is a uniform random code (`drawn`), else a point
    mass at the guess."""
    uniform = torch.full((vocab_size,), 1.0 / vocab_size, device=codes.device)
    return torch.where(drawn[..., None], uniform, one_hot(codes, vocab_size))


def one_hot(codes: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """`[..., V]` point masses at `codes` (built by a scatter: `F.one_hot` reads the device to check them)."""
    return torch.zeros(*codes.shape, vocab_size, device=codes.device).scatter_(-1, codes[..., None], 1.0)


def scatter_where(
    target: torch.Tensor, cells: torch.Tensor, values: torch.Tensor, where: torch.Tensor
) -> None:
    """`target[b, cells] = values` where `where`; other entries go to the last column, kept as scratch."""
    scratch = target.shape[1] - 1
    target.scatter_(1, torch.where(where, cells, scratch).flatten(1), values.flatten(1).to(target.dtype))
    target[:, scratch] = -1 if target.dtype == torch.long else 0
