"""`eagle`: speculative decoding with a trained drafter (EAGLE, Li et al. 2024; the drafter LANTERN and
LANTERN++ train), over SJD-PAC's static tree; lossless with the exact rule.

Notation (as `sjd-pac`'s, `arjet.samplers.sjd_pac`: `K` = `tree_width`, `D` = `tree_depth`, `M` the main
chain, `S = M - 1` its draft slots, `r_k`, `t_{k+1}`; `B` images, `V` the image vocabulary):

| here                     | paper (symbol)                                              | shape            |
|--------------------------|-------------------------------------------------------------|------------------|
| `drafting`               | the drafter (EAGLE's draft head) and its own KV cache       |                  |
| `q`                      | the drafter's processed distribution at a chain slot, given | `[B, V]`         |
|                          | the chain before it                                         |                  |
| `drafts.codes`           | `x̃`: the main chain, drawn from `q` (`chain="drafter"`) or  | `[B, S]`         |
|                          | the Jacobi drafts (`chain="jacobi"`)                        |                  |
| `drafts.proposals`       | each main draft's proposal (`q`, or the Jacobi one)         | `[B, S, V]`      |
| `sibling_q`              | `chain="jacobi"`: the drafter's `q` at each tree depth,     | `[B, D - 1, V]`  |
|                          | what that depth's siblings are drawn from                   |                  |
| `hidden`                 | the drafter's output that feeds the next chain slot         | `[rows, d]`      |

The drafter (`session.drafter`, see `arjet.addons.drafter`) reads the target's last hidden states and
proposes the next codes. After every forward of the target it catches up on the cells just committed (one
drafter forward over the window: the target's hidden state at each committed input, paired with the
committed code), then drafts the main chain one code at a time from its own outputs, each code drawn from
the drafter's processed distribution (its CFG-mixed logits through the same temperature / top-k / top-p as
the target) and recorded with it as that slot's proposal. The target then verifies a window exactly as
`sjd-pac` does (`arjet.samplers.sjd_pac`): the root, the drafted main chain, and at the first
`tree_depth - 1` draft depths `tree_width - 1` siblings drawn without replacement from the same proposal
(a static Cartesian tree), verified with the multi-draft rule; a path that reaches a node without children
takes a bonus code from the target. Every candidate's proposal is fixed before it is drawn and never
depends on the target's draws, so with `Exact()` the committed codes have exactly `ar`'s distribution,
whatever the drafter (a random one only accepts less).

With `acceptance=Lantern(...)` (`lantern:drafter=true`, `lantern++:drafter=true`) each candidate is
verified against LANTERN's relaxed target instead: faster, and within the rule's bound of `ar` per code, not
exact (`arjet.samplers.lantern` says what each form guarantees).

`chain="jacobi"` keeps the target's own drafts on the main chain: `sjd-pac`'s Jacobi re-drafts with MC-SJD's
coupling (new slots guessed at random), which on image codes reach far past where a drafter's chain stops
being accepted; the drafter proposes only the tree's siblings, at depth 1 from the committed codes (its
best-informed proposal, where a Jacobi draft is most often rejected) and at depth `j` run along the main
chain's drafts of the depths before `j`, so never from a code it proposes a sibling of. The siblings are
tried after the main draft against its residual (`verify_candidates`), and every proposal is again fixed
before its draw: exact as well. On the built-in model it commits 1.15x `sjd-pac`'s codes per target forward
on the same window and tree (the README has the measurements).

Drafter cost per target forward: one catch-up forward and `window - tree nodes + tree_depth - 2` chain
forwards (`tree_depth - 2` with `chain="jacobi"`), each of one input per CFG row
(`DecodeStats.extra["drafter_forwards"]` counts them). Shapes are fixed, nothing reads the device, and Python
loops run over the chain's slots only. The drafter's cache is not split into lanes, so this sampler is not
continuous (an engine decodes its requests one call at a time).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch

from ..session.drafting import DraftingCache
from .decode import Decode, sample
from .jacobi import AcceptanceRule, Exact, JacobiOutcome
from .options import MAX_SIZE, option
from .sjd_pac import TreeSampler, TreeStepper

CHAINS = ("drafter", "jacobi")


@dataclass(frozen=True)
class Eagle(TreeSampler):
    """`window`: target inputs per forward, tree nodes included (the root, the drafted chain and the
    siblings); `tree_width`: candidates per tree depth; `tree_depth`: tree levels counting the root;
    `chain`: the main chain drafted by the drafter (EAGLE) or Jacobi drafts with the drafter's siblings;
    `acceptance`: `Exact()` (lossless) or a relaxed rule such as `Lantern()`."""

    window: int = option(16, "target inputs per forward, tree nodes included", minimum=2, maximum=MAX_SIZE)
    tree_width: int = option(
        3, "candidates per tree depth (the drafted code and its siblings)", minimum=1, maximum=64
    )
    tree_depth: int = option(
        3,
        "tree levels, the root included (siblings at the first tree_depth - 1 draft depths)",
        minimum=1,
        maximum=16,
    )
    chain: str = option(
        "drafter",
        "where the main chain's drafts come from: drafter (EAGLE's chain) or jacobi (the target's own "
        "re-drafts, MC-SJD-coupled as sjd-pac's, with the drafter proposing the tree's siblings)",
        choices=CHAINS,
    )
    acceptance: AcceptanceRule = field(default_factory=Exact)
    name: ClassVar[str] = "eagle"
    requires: ClassVar[frozenset[str]] = frozenset({"drafter"})

    def stepper(self, decode: Decode) -> DrafterStepper:
        if decode.session.drafter is None:
            raise ValueError(f"{self.name} needs a drafter (the capability 'drafter'); this session has none")
        self.check_grid(decode.session.grid, vocab_size=decode.session.vocab_size)
        return DrafterStepper(self, decode)


class DrafterStepper(TreeStepper):
    """SJD-PAC's tree step with the drafter's proposals as the drafts (`start`, `redraft`): the main chain's
    and the siblings' (`chain="drafter"`), or the siblings' only (`chain="jacobi"`). The base stepper's
    declared members it sets: `scheme`, `coupled`, `sibling_proposals`, `redraft` (`tracks_top1` follows
    `scheme`: a random guess reads no argmax)."""

    per_image = (*TreeStepper.per_image, "sibling_q")

    def __init__(self, sampler: Eagle, decode: Decode):
        super().__init__(sampler, decode)
        self.drafting = DraftingCache(decode.session)
        self.jacobi = sampler.chain == "jacobi"
        batch, vocab = self.n.shape[0], decode.session.vocab_size
        self.sibling_q = torch.zeros(batch, self.tree.depth, vocab, device=self.n.device)  # [B, D - 1, V]

    @property
    def scheme(self) -> str:
        return "random"  # a Jacobi chain's new slots (eagle takes no init: drafter chains guess nothing)

    @property
    def coupled(self) -> bool:
        return self.jacobi

    def sibling_proposals(self) -> torch.Tensor:
        return self.sibling_q if self.jacobi else super().sibling_proposals()

    def start(self, first: torch.Tensor) -> None:
        """Pair the prefill's hidden state with cell 0's code, then draft the first chain (or, with Jacobi
        drafts, guess it and let the drafter propose along it)."""
        if self.jacobi:
            super().start(first)
        else:
            self.n.fill_(1)
            self.pending.zero_()
        logits, out = self.drafting.start(first)
        self._chain(logits, out[:, 0])

    def redraft(
        self, outcome: JacobiOutcome, *, active: torch.Tensor, line: torch.Tensor, u_guess: torch.Tensor
    ) -> None:
        """With Jacobi drafts, re-draft the chain from this step's outputs first. Then catch up on the cells
        this step committed (the target's hidden state at the node that predicted each, with its code) and
        draft from the last one's output: the chain, or the siblings' proposals along the Jacobi chain."""
        if self.jacobi:
            super().redraft(outcome, active=active, line=line, u_guess=u_guess)
        start = self.n - outcome.advanced
        cells = torch.where(outcome.committed, start[:, None] + self.positions, -1)
        logits, out = self.drafting.catch_up(self.tree.depth + line, outcome.codes, cells, outcome.advanced)
        self._chain(logits, out[:, 0])

    def _chain(self, logits: torch.Tensor, hidden: torch.Tensor) -> None:
        """Draft along the main chain from `logits [B, V]` (predicting cell `n`) and `hidden [rows, d]`, the
        drafter's output that gave them: slot `j`'s proposal is the drafter's given the chain before it.
        With `chain="drafter"` every slot is drawn from it; with `chain="jacobi"` the chain is the Jacobi
        drafts and the proposals of the tree depths are kept for their siblings."""
        drafts, n = self.drafts, self.n
        slots = self.tree.depth if self.jacobi else self.slots
        u = None if self.jacobi else self.decode.random.uniform(slots)
        for j in range(slots):
            q = self.decode.policy.probs(logits)
            if self.jacobi:
                self.sibling_q[:, j] = q
                code = drafts.codes[:, j]
            else:
                code = sample(q, u[:, j])
                drafts.codes[:, j] = code
                drafts.proposals[:, j] = q
            if j + 1 < slots:
                logits, out = self.drafting.forward(hidden[:, None], code[:, None], (n + j)[:, None])
                logits, hidden = logits[:, 0], out[:, 0]
