"""`eagle2`: speculative decoding with a trained drafter over a dynamic draft tree (EAGLE-2, Li et al. 2024;
the tree LANTERN drafts), lossless with the exact rule.

Notation (EAGLE-2, Li et al. 2024; `B` images, `V` the image vocabulary; the multi-draft rule's `r_k`,
`t_{k+1}` as in `arjet.samplers.sjd_pac`):

| here                     | paper (symbol)                                          | shape            |
|--------------------------|---------------------------------------------------------|------------------|
| `tree_width` (`K`)       | `K`: children drawn for every expanded node             |                  |
| `expand` (`M`)           | nodes expanded per level after the root's (top scores)  |                  |
| `tree_depth` (`D`)       | `D`: tree levels, the root included                     |                  |
| `shape.nodes` (`N`)      | `1 + K + (D - 2) * M * K` nodes, the root included      |                  |
| `shape.expansions` (`E`) | `1 + (D - 2) * M` expanded nodes, the root included     |                  |
| `codes`                  | the next tree's codes (node 0: the root, unused)        | `[B, N]`         |
| `expanded`               | the node each expansion expands                         | `[B, E]`         |
| `proposals`              | `q`: each expansion's drafter distribution (processed)  | `[B, E, V]`      |
| `scores`                 | path score `Σ log q` of a level's nodes                 | `[B, M * K]`,    |
|                          |                                                         | `[B, K]` level 1 |
| `t`                      | the target `p_θ(·)` at every node (processed)           | `[B, N, V]`      |
| `line`                   | the path's node at every level (the last one repeated)  | `[B, D]`         |
| `path`                   | the kept child at every level                           | `[B, D - 1]`     |
| `p`                      | `t` along the path                                      | `[B, D, V]`      |
| `verdict.accepted`       | `τ`: levels accepted                                    | `[B]`            |

Every node of the tree has its own proposal: the drafter's processed distribution (its CFG-mixed logits
through the target's temperature / top-k / top-p) given the node's whole path. The tree grows level by level
from the root (the last committed code). The root gets `tree_width` children, drawn without replacement from
its proposal; at every later level the `expand` nodes with the highest path score (the sum of the drafter's
log-probabilities of the path's codes: EAGLE-2's confidence) get `tree_width` children each, again drawn
without replacement from their own proposal, which one drafter forward over those `expand` nodes gives. So
with `K = tree_width`, `M = expand` and `D = tree_depth` levels (the root included) the tree has
`1 + K + (D - 2) * M * K` nodes, a fixed count: its shape changes from image to image and step to step,
its size does not.

The target verifies the whole tree in one forward (every node in a branch slot, seeing its ancestors) and
walks it from the root: at each node its children are tried in the order they were drawn with the
multi-draft rule `sjd-pac` uses (`verify_candidates`), the first that passes extends the path; when none
passes the level's code is drawn from the last residual, and a path that reaches a node without children
takes a bonus code from the target's output there. Which nodes are expanded depends only on the drafter's
probabilities of codes already drawn, never on a child's own draw or on the target, and every expanded
node keeps all its children, in draw order: so each level's candidates are exactly the draws without
replacement from the proposal the rule is told, and with `Exact()` the committed codes have exactly `ar`'s
distribution, whatever the drafter. (EAGLE-2's final re-ranking, which keeps the best-scored nodes of the
whole tree, drops children by their own probability; sampled, that is not exact, and it is not done.)
`children="top"` takes each node's `K` most likely codes instead, as LANTERN's EAGLE-2 tree does, and
verifies them as the fixed codes they are (point masses: a child passes with its target probability), which
is exact too; on image codes, whose distributions are flat, it accepts less than drawn children.

The accepted codes sit in branch slots, so the next forward feeds them again at their own cells before its
root (`tree_depth - 1` more inputs). The drafter catches up after every target forward on the cells just
committed (one forward of its own cache, as `eagle`), then drafts the next tree: `tree_depth - 2` forwards
of `expand` inputs per CFG row, so `tree_depth - 1` drafter forwards per target forward in all
(`DecodeStats.extra["drafter_forwards"]`). Shapes are fixed, nothing reads the device, and Python loops run
over the tree's levels and sibling ranks only. With `acceptance=Lantern(...)` (`lantern:drafter=true`) each
candidate is verified against LANTERN's relaxed target instead: not exact (see `arjet.samplers.lantern`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from ..session.drafting import DraftingCache
from .decode import Decode, Stepper, sample
from .jacobi import (
    AcceptanceRule,
    Bound,
    Exact,
    RuleContext,
    RuleSampler,
    Verdict,
    draw_candidates,
    resample,
    verify_candidates,
)
from .options import check_width, option, step_bound

CHILDREN = ("sample", "top")


@dataclass(frozen=True)
class Eagle2(RuleSampler):
    """`tree_width`: children drawn for every expanded node; `expand`: nodes expanded per level after the
    root's (the highest path scores); `tree_depth`: tree levels, the root included; `acceptance`: `Exact()`
    (lossless) or a relaxed rule such as `Lantern()`."""

    tree_width: int = option(4, "children drawn for every expanded node", minimum=1, maximum=64)
    expand: int = option(
        4,
        "nodes expanded per level after the root's (the drafter's most likely paths)",
        minimum=1,
        maximum=64,
    )
    tree_depth: int = option(5, "tree levels, the root included", minimum=2, maximum=16)
    children: str = option(
        "sample",
        "how an expanded node's children are chosen: sample (drawn without replacement from its proposal) "
        "or top (its most likely codes, verified as point masses, as LANTERN's EAGLE-2 tree)",
        choices=CHILDREN,
    )
    acceptance: AcceptanceRule = field(default_factory=Exact)
    name: ClassVar[str] = "eagle2"
    requires: ClassVar[frozenset[str]] = frozenset({"drafter"})

    def validate(self) -> None:
        super().validate()
        if self.expand > self.tree_width and self.tree_depth > 2:
            raise ValueError(
                f"expand={self.expand} is more than the root's tree_width={self.tree_width} children; "
                f"use expand <= {self.tree_width}"
            )

    @property
    def nodes(self) -> int:
        """The tree's nodes, the root included: the target's inputs per forward besides the re-fed codes."""
        return tree_size(self.tree_width, self.expand, self.tree_depth)

    def check_grid(
        self, grid: tuple[int, int], max_window: int | None = None, *, vocab_size: int | None = None
    ) -> None:
        """Refuse a tree with more nodes than a window may have inputs (the grid's cells, or the default
        tree's nodes on a smaller grid, and an operator's `max_window`): every node is a query of the target's
        forward, a slot of the session's cache and a proposal of the vocabulary's size. Also more children
        than the vocabulary has codes."""
        cls = type(self)
        allowed, bound = step_bound(tree_size(cls.tree_width, cls.expand, cls.tree_depth), grid, max_window)
        if self.nodes > allowed:
            raise ValueError(
                f"tree_width={self.tree_width}, expand={self.expand}, tree_depth={self.tree_depth} make a tree "
                f"of {self.nodes:,} nodes, more than {bound}; use a tree of at most {allowed} nodes "
                "(1 + tree_width + (tree_depth - 2) * expand * tree_width)"
            )
        check_width(self.tree_width, vocab_size)
        super().check_grid(grid, max_window, vocab_size=vocab_size)

    def stepper(self, decode: Decode) -> DynamicTreeStepper:
        session = decode.session
        if session.drafter is None:
            raise ValueError(f"{self.name} needs a drafter (the capability 'drafter'); this session has none")
        self.check_grid(session.grid, vocab_size=session.vocab_size)
        return DynamicTreeStepper(self, decode)

    def run(self, decode: Decode) -> None:
        decode.run(self.stepper(decode), decode.session.num_cells - 1)


def tree_size(width: int, expand: int, depth: int) -> int:
    """Nodes of a tree of `depth` levels whose root has `width` children and whose later levels expand
    `expand` nodes into `width` children each: `1 + K + (D - 2) * M * K`."""
    return 1 + width + (depth - 2) * expand * width


@dataclass(frozen=True)
class TreeShape:
    """Where every node sits, the same for every tree of a decode. Node 0 is the root; the `K` children of the
    root come next, then each later level's `M` blocks of `K` children, block by block. Expansion `e` is the
    root (`e = 0`) or the `m`-th expanded node of level `l >= 1` (`e = 1 + (l - 1) * M + m`); its children are
    the block at `block_start[e]`."""

    width: int  # K
    expand: int  # M
    depth: int  # D: levels, the root included
    level: torch.Tensor  # [N] each node's level
    block_start: torch.Tensor  # [E] the first child of each expansion
    block_of: torch.Tensor  # [N] the expansion whose child each node is (-1: the root)

    @classmethod
    def build(cls, width: int, expand: int, depth: int) -> TreeShape:
        sizes = [1, width] + [expand * width] * (depth - 2)
        level = torch.cat([torch.full((size,), index) for index, size in enumerate(sizes)])
        expansions = 1 + (depth - 2) * expand
        block_start = 1 + torch.arange(expansions) * width
        block_of = torch.cat([torch.tensor([-1]), torch.arange(expansions).repeat_interleave(width)])
        return cls(width, expand, depth, level, block_start, block_of)

    @property
    def nodes(self) -> int:
        return self.level.shape[0]

    @property
    def expansions(self) -> int:
        return self.block_start.shape[0]

    def level_start(self, level: int) -> int:
        """The first node of `level`."""
        if level < 2:
            return level
        return 1 + self.width + (level - 2) * self.expand * self.width

    def to(self, device: torch.device) -> TreeShape:
        return TreeShape(
            self.width,
            self.expand,
            self.depth,
            self.level.to(device),
            self.block_start.to(device),
            self.block_of.to(device),
        )


class DynamicTreeStepper(Stepper):
    """The state of an `eagle2` decode between forwards: the next tree (`codes [B, N]`, `expanded [B, E]`
    the node of each expansion, `proposals [B, E, V]` each expansion's proposal) and its fixed-shape `step`."""

    per_image = ("n", "pending", "codes", "expanded", "proposals")

    def __init__(self, sampler: Eagle2, decode: Decode):
        self.sampler, self.decode = sampler, decode
        session = decode.session
        device, batch = session.device, session.batch_size
        self.shape = shape = TreeShape.build(sampler.tree_width, sampler.expand, sampler.tree_depth).to(
            device
        )
        self.refeed = refeed = shape.depth - 1  # accepted codes fed again (they sat in branch slots)
        session.reserve_branches(shape.nodes - 1)
        self.drafting = DraftingCache(session, branches=(shape.depth - 2) * shape.expand)
        self.offset = torch.cat([torch.arange(-refeed, 0, device=device), shape.level])  # [Q]
        self.is_refeed = torch.arange(self.offset.shape[0], device=device) < refeed
        self.branch = torch.cat(
            [torch.full((refeed + 1,), -1, device=device), torch.arange(shape.nodes - 1, device=device)]
        )
        queries = self.offset.shape[0]
        self.row_ends = min(queries, (refeed + 1) // session.grid[1] + shape.nodes)
        self.positions = torch.arange(shape.depth, device=device)
        self.reach = 2 * shape.depth
        self.top = sampler.children == "top"

        self.n = torch.ones(batch, dtype=torch.long, device=device)
        self.pending = torch.zeros(batch, dtype=torch.long, device=device)
        self.codes = torch.zeros(batch, shape.nodes, dtype=torch.long, device=device)
        self.expanded = torch.zeros(batch, shape.expansions, dtype=torch.long, device=device)
        self.proposals = torch.zeros(batch, shape.expansions, session.vocab_size, device=device)

    def start(self, first: torch.Tensor) -> None:
        """Pair the prefill's hidden state with cell 0's code, then draft the first tree."""
        self.n.fill_(1)
        self.pending.zero_()
        self._draft(*self.drafting.start(first))

    def stop(self) -> None:
        self.n.fill_(self.decode.session.num_cells)
        self.pending.zero_()

    def step(self) -> None:
        session, trace, shape = self.decode.session, self.decode.trace, self.shape
        cells, n = session.num_cells, self.n
        active = n < cells  # [B]
        length = torch.where(active, cells - n, 0)  # [B] cells left: level j is usable while j < length
        u_accept = self.decode.random.uniform(shape.depth - 1, shape.width)  # [B, D - 1, K]
        u_draw = self.decode.random.uniform(shape.depth)  # [B, D]

        # 1. queries: the accepted codes fed again, the root, every tree node in its branch slot
        parent = self._parents()  # [B, N]
        query_cells = n[:, None] + self.offset  # [B, Q]
        live = torch.where(
            self.is_refeed, active[:, None] & (-self.offset <= self.pending[:, None]), query_cells < cells
        )
        committed = trace.codes.gather(1, (query_cells - 1).clamp(0, cells - 1))
        refed = self.refeed + 1  # the re-fed codes and the root feed committed codes
        inputs = torch.cat([committed[:, :refed], self.codes[:, 1:]], 1).clamp(min=0)  # [B, Q]

        # 2. forward: every node sees the re-fed codes, its ancestors and itself
        logits = session.logits(
            torch.where(live, query_cells, -1),
            inputs,
            row_ends=self.row_ends,
            branch=self.branch.expand_as(query_cells),
            sees=self._sees(parent),
        )

        # 3. node targets: the processed output of every node
        t = self.decode.policy.probs(logits[:, self.refeed :])  # [B, N, V]

        # 4. walk the tree from the root: at each level the path's node's children are tried in draw order
        #    (`verify_candidates`); the first that passes extends the path
        line, path, verdict = self._walk(t, length, u_accept)  # [B, D], [B, D - 1]
        p = t.gather(1, line[..., None].expand(-1, -1, t.shape[-1]))  # [B, D, V] along the path

        # 5. resample the level where every child failed from its last residual, or a bonus code from the
        #    path's last node
        valid = self.positions < length[:, None]  # [B, D]
        advanced, committed_at, codes = resample(p, path, valid=valid, verdict=verdict, u_draw=u_draw)

        # 6. commit: the re-fed codes and the root stay in the cache; the accepted nodes are fed again
        keep = torch.cat([torch.ones_like(live[:, :refed]), torch.zeros_like(live[:, refed:])], 1)
        session.commit(keep)
        trace.commit(torch.where(committed_at, n[:, None] + self.positions, -1), codes, bound=verdict.bound)
        self.pending.copy_(torch.where(active, verdict.accepted, 0))
        start = n.clone()
        self.n += advanced

        # 7. the drafter catches up on the committed cells (each paired with the target's hidden state at the
        #    node that predicted it), then drafts the next tree from the last one
        cells_at = torch.where(committed_at, start[:, None] + self.positions, -1)
        self._draft(*self.drafting.catch_up(self.refeed + line, codes, cells_at, advanced))

    def _walk(
        self, t: torch.Tensor, length: torch.Tensor, u: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, Verdict]:
        """Verify the tree from the root: `t [B, N, V]` node outputs, `length [B]` cells left, `u [B, D-1, K]`.
        Returns the path's node at every level `[B, D]` (its last node repeated past its end), the kept
        code of every level `[B, D - 1]`, and the verdict."""
        shape, session = self.shape, self.decode.session
        rule, context = self.sampler.acceptance, RuleContext(session.codebook, positions=shape.depth - 1)
        batch, vocab = t.shape[0], t.shape[-1]
        expansion_of = torch.full_like(self.codes, -1).scatter_(
            1, self.expanded, torch.arange(shape.expansions, device=t.device).expand(batch, -1)
        )
        ranks = torch.arange(shape.width, device=t.device)
        node = torch.zeros(batch, dtype=torch.long, device=t.device)
        alive = torch.ones(batch, dtype=torch.bool, device=t.device)
        accepted = torch.zeros_like(node)
        rejected = torch.zeros_like(alive)
        rest = t.new_zeros(batch, vocab)
        bound = Bound.none(node)
        line, path = [node], []
        for level in range(shape.depth - 1):  # the children of the path's node, for cell n + level
            context = dataclasses.replace(context, position=level + 1)  # draft position level + 1
            expansion = expansion_of.gather(1, node[:, None])[:, 0]
            usable = alive & (level < length) & (expansion >= 0)
            expansion = expansion.clamp(min=0)
            children = shape.block_start[expansion][:, None] + ranks  # [B, K]
            candidates = self.codes.gather(1, children)
            target = t.gather(1, node[:, None, None].expand(-1, 1, vocab))[:, 0]
            q = self.proposals.gather(1, expansion[:, None, None].expand(-1, 1, vocab))[:, 0]
            spent = torch.zeros_like(bound.total)
            rank, found, left = verify_candidates(
                target,
                q,
                candidates,
                u[:, level],
                rule=rule,
                context=context,
                point_masses=self.top,
                spent=spent,
            )
            bound = bound.add(spent, usable)  # a usable level commits a code, passed or failed
            passed, failed = usable & found, usable & ~found
            rejected |= failed
            rest = torch.where(failed[:, None], left, rest)
            rank = torch.where(passed, rank, 0)
            path.append(candidates.gather(1, rank[:, None])[:, 0])
            node = torch.where(passed, children.gather(1, rank[:, None])[:, 0], node)
            accepted += passed.long()
            alive = passed
            line.append(node)
        return torch.stack(line, 1), torch.stack(path, 1), Verdict(accepted, rejected, rest, bound)

    def _parents(self) -> torch.Tensor:
        """`[B, N]` each node's parent (`-1`: the root)."""
        shape = self.shape
        parent = self.expanded.gather(1, shape.block_of.clamp(min=0).expand(self.codes.shape[0], -1))
        return torch.where(shape.block_of >= 0, parent, -1)

    def _sees(self, parent: torch.Tensor) -> torch.Tensor:
        """`[B, Q, Q]`: the re-fed codes see those before them; every node sees them, its ancestors and itself."""
        shape, refeed = self.shape, self.refeed
        batch, nodes = parent.shape
        device = parent.device
        ancestry = torch.eye(nodes, dtype=torch.bool, device=device).expand(batch, -1, -1).clone()
        above = torch.arange(nodes, device=device).expand(batch, -1)
        for _ in range(shape.depth - 1):
            above = torch.where(above >= 0, parent.gather(1, above.clamp(min=0)), -1)
            ancestry |= (
                torch.nn.functional.one_hot(above.clamp(min=0), nodes).bool() & (above >= 0)[..., None]
            )
        queries = refeed + nodes
        sees = torch.zeros(batch, queries, queries, dtype=torch.bool, device=device)
        sees[:, :refeed, :refeed] = torch.ones(refeed, refeed, dtype=torch.bool, device=device).tril()
        sees[:, refeed:, :refeed] = True
        sees[:, refeed:, refeed:] = ancestry
        return sees

    def _draft(self, logits: torch.Tensor, root_out: torch.Tensor) -> None:
        """Grow the next tree from the root's drafter logits `[B, V]` (predicting cell `n`) and output
        `[rows, 1, d]`: draw the root's children, then level by level expand the `M` best-scored nodes."""
        shape, policy, session = self.shape, self.decode.policy, self.decode.session
        K, M = shape.width, shape.expand
        u = self.decode.random.uniform(shape.expansions, K)
        q = policy.probs(logits)
        children = self._children(q, u[:, 0])  # [B, K]
        self.proposals[:, 0] = q
        self.expanded[:, 0] = 0
        self.codes[:, 1 : 1 + K] = children
        scores = _log(q.gather(1, children))
        outputs = root_out  # [rows, blocks, d] the drafter outputs of the last level's expanded nodes
        ancestors = torch.full((q.shape[0], M, 0), -1, dtype=torch.long, device=q.device)
        active = self.n < session.num_cells
        for level in range(1, shape.depth - 1):
            start = shape.level_start(level)
            best = scores.topk(M, dim=1).indices  # [B, M] within the level
            nodes = start + best
            block = best // K  # the expansion (of the level above) each was drawn by
            hidden = outputs.gather(
                1, session.both_halves(block)[..., None].expand(-1, -1, outputs.shape[-1])
            )
            branch = (level - 1) * M + torch.arange(M, device=q.device)  # drafter branch slots of this level
            if level > 1:  # the chosen nodes' ancestors: their parent's, and their parent
                above = ancestors.gather(1, block[..., None].expand(-1, -1, ancestors.shape[-1]))
                parent_slot = (level - 2) * M + block
                ancestors = torch.cat([above, parent_slot[..., None]], -1)
            draft_logits, outputs = self.drafting.forward_branches(
                hidden,
                self.codes.gather(1, nodes),
                self.n[:, None] + level - 1,
                branch=branch.expand(q.shape[0], -1),
                ancestors=ancestors,
                committed=self.n,
                counted=active,
            )
            q = policy.probs(draft_logits)  # [B, M, V]
            expansions = slice(1 + (level - 1) * M, 1 + level * M)
            children = self._children(q, u[:, expansions])  # [B, M, K]
            self.proposals[:, expansions] = q
            self.expanded[:, expansions] = nodes
            child_start = shape.level_start(level + 1)
            self.codes[:, child_start : child_start + M * K] = children.flatten(1)
            chosen = scores.gather(1, best)
            scores = (chosen[..., None] + _log(q.gather(2, children))).flatten(1)

    def _children(self, q: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """`[..., K]` children for proposals `q [..., V]`: its `K` most likely codes, or draws with `u [..., K]`."""
        return q.topk(self.shape.width, dim=-1).indices if self.top else _draw_children(q, u)


def _draw_children(q: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """`[..., K]` codes drawn without replacement from `q [..., V]` with the uniforms `u [..., K]`: the first
    from `q`, the rest as `sjd-pac`'s siblings (`draw_candidates`), the order the rule verifies them in."""
    first = sample(q, u[..., 0])
    return torch.cat([first[..., None], draw_candidates(q, first, u[..., 1:])], -1)


def _log(probs: torch.Tensor) -> torch.Tensor:
    return probs.clamp(min=1e-30).log()
