"""`sjd-pac`: SJD with proactive drafting and adaptive continuation (Kang et al., CVPR 2026), lossless.

Notation (Kang et al., CVPR 2026; `jacobi.py` has SJD's symbols; `B` images, `V` the image vocabulary):

| here                        | paper (symbol)                                        | shape               |
|-----------------------------|-------------------------------------------------------|---------------------|
| `tree_width` (`tree.width`) | `K`: candidates per depth (the main draft, siblings)  |                     |
| `tree_depth`                | `D`: tree levels, the root included                   |                     |
| `tree.depth`                | `D - 1`: draft depths with siblings (0 when `K = 1`)  |                     |
| `tree.main`                 | `M`: the main chain (the root, its drafts); position  |                     |
|                             | `j` predicts cell `n + j`                             |                     |
| `S = M - 1`                 | main draft slots (slot `j`: cell `n + j`)             |                     |
| `N`; `Q = D - 1 + N`        | tree nodes; queries (re-fed codes, then the nodes)    |                     |
| `n`                         | `n`: the next undecoded cell                          | `[B]`               |
| `drafts.codes`              | `x̃`: the main chain's drafts                          | `[B, S]`            |
| `drafts.proposals` (`q`)    | what each main draft was drawn from                   | `[B, S, V]`         |
| `siblings`                  | a depth's other `K - 1` candidates                    | `[B, D - 1, K - 1]` |
| `sibling_q`                 | what a depth's siblings are drawn from                | `[B, D - 1, V]`     |
| `candidate_proposal`        | `r_k`: `q` without the candidates before `k`          | `[B, V]`            |
| `t`                         | `p_θ(·)` at every tree node (processed)               | `[B, N, V]`         |
| `verify_candidates`         | `t_1 = t`, `t_{k+1} = norm(max(0, t_k - r_k))`        | `[B, K]`            |
| `line`                      | the node whose output predicts each position          | `[B, M]`            |
| `p`                         | `t` along the kept path                               | `[B, M, V]`         |
| `verdict.accepted`          | `τ`: candidates accepted                              | `[B]`               |

Every forward verifies a window of `window` inputs that form a tree: the root feeds the last committed code;
a main chain of drafts follows it, and at its first `tree_depth - 1` draft depths every node has
`tree_width` children: the main draft and `tree_width - 1` siblings, all depths sharing one candidate set
(a Cartesian tree). As in the official code the tree stands at the head of every window, right after the
token just resampled, where the next rejections are likeliest ("proactive drafting"); there is no entropy
gate. "Adaptive continuation" is MC-SJD's coupling of the re-drafts (`coupling=True`, the default): a later
position keeps its old draft with probability `min(1, p(x)/q(x))`, else draws from `norm(max(0, p - q))`.
Nothing after the first rejection is committed.

Verification walks the tree from the root. At a tree depth the siblings are tried in order against the
recursive residual (sibling `k` passes with probability `min(1, t_k(x)/r_k(x))`, `t_{k+1} = norm(max(0,
t_k - r_k))`); the first that passes is kept and the walk goes on below it; if none does, the depth's code
is drawn from the last residual. The siblings of a depth are drawn without replacement from the depth's
proposal after the main draft (`r_k` = the proposal without the codes drawn before, renormalised; uniform
over the codes not yet drawn where the proposal has no mass left, as for a point-mass guess). Past the tree
the main chain is verified as in SJD; a path that reaches a node without children takes a bonus token from
that node's output. This is the textbook multi-draft rule, so the committed code at every step is exactly
`p(. | committed prefix)`: the codes have exactly `ar`'s distribution (CFG, temperature, top-k, top-p).
Two things the official code does differently are not exact and are not done here: it keeps the root-to-
leaf path with the longest accepted prefix (a later sibling can override an earlier one that passed), and
it draws the next window's siblings from the coupling's residual while declaring them drawn from `p`.

`acceptance=Lantern(...)` verifies every candidate against LANTERN's relaxed target instead (the
training-free `lantern++`: a static tree with LANTERN's rule), and is then no longer exact (see `lantern`).
`eagle` (`arjet.samplers.eagle`) runs this same step with a drafter's proposals in place of the Jacobi drafts:
it sets the stepper's declared members (`scheme`, `coupled`, `tracks_top1`, `sibling_proposals`, `redraft`).

A path that left the main line sits in the session's branch slots; its codes are fed again at their own
slots at the head of the next window (so the window reserves `tree_depth - 1` more inputs).

Shapes are fixed for the whole decode and nothing reads the device; Python loops run over the tree's depths
and sibling ranks only.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from .decode import Decode, Stepper
from .jacobi import (
    INIT_SCHEMES,
    AcceptanceRule,
    Bound,
    Drafts,
    Exact,
    JacobiOutcome,
    RuleContext,
    RuleSampler,
    Uniforms,
    Verdict,
    draw_candidates,
    guess,
    redraft,
    resample,
    scatter_where,
    uses_top1,
    verify,
    verify_candidates,
)
from .options import MAX_SIZE, check_fits_grid, check_width, option


def tree_nodes(width: int, depth: int) -> int:
    """Nodes of a full `width`-ary tree with `depth` levels (the root included): the smallest window."""
    return depth if width == 1 else (width**depth - 1) // (width - 1)


class TreeSampler(RuleSampler):
    """A sampler that verifies a static tree of drafts in each window (`window`, `tree_width`, `tree_depth`
    options of the subclass): the tree is checked when the sampler is made and against each grid."""

    def validate(self) -> None:
        super().validate()
        check_tree(self.tree_width, self.tree_depth, self.window)

    def check_grid(
        self, grid: tuple[int, int], max_window: int | None = None, *, vocab_size: int | None = None
    ) -> None:
        """Refuse a window the grid cannot use, or more siblings than the vocabulary has codes."""
        check_fits_grid("window", self.window, type(self).window, grid, max_window)
        check_width(self.tree_width, vocab_size)
        super().check_grid(grid, max_window, vocab_size=vocab_size)

    def run(self, decode: Decode) -> None:
        decode.run(self.stepper(decode), decode.session.num_cells - 1)


@dataclass(frozen=True)
class SJDPAC(TreeSampler):
    """`window`: inputs per forward, tree nodes included (default 64, as the paper; clipped to the grid);
    `tree_width`: candidates per tree depth (default 3); `tree_depth`: tree levels counting the root (default
    3: siblings at the first 2 draft depths); `coupling`: MC-SJD re-drafts (default True; False is the
    paper's ablation); `init`: how new draft slots are guessed, as in `sjd`; `acceptance`: `Exact()`
    (lossless) or a relaxed rule such as `Lantern()` (the training-free `lantern++`)."""

    window: int = option(64, "inputs per forward, tree nodes included", minimum=2, maximum=MAX_SIZE)
    tree_width: int = option(
        3, "candidates per tree depth (the main draft and its siblings)", minimum=1, maximum=64
    )
    tree_depth: int = option(
        3,
        "tree levels, the root included (siblings at the first tree_depth - 1 draft depths)",
        minimum=1,
        maximum=16,
    )
    coupling: bool = option(
        True, "couple re-drafts with the old drafts (MC-SJD, the paper's adaptive continuation)"
    )
    init: str = option("random", "how new draft slots are guessed", choices=INIT_SCHEMES)
    acceptance: AcceptanceRule = field(default_factory=Exact)
    name: ClassVar[str] = "sjd-pac"
    continuous: ClassVar[bool] = True

    def stepper(self, decode: Decode) -> TreeStepper:
        self.check_grid(decode.session.grid, vocab_size=decode.session.vocab_size)
        return TreeStepper(self, decode)


def check_tree(width: int, depth: int, window: int) -> None:
    """Refuse a tree that does not fit in the window (suggesting a wider window only if one can hold it)."""
    nodes = tree_nodes(width, depth)
    if nodes > window:
        fix = (
            f"use window >= {nodes:,} or a smaller tree"
            if nodes <= MAX_SIZE
            else f"a window holds at most {MAX_SIZE:,}; use a smaller tree"
        )
        raise ValueError(
            f"tree_width={width}, tree_depth={depth} make a tree of {nodes:,} nodes, more than "
            f"window={window}; {fix}"
        )


@dataclass(frozen=True)
class TreeLayout:
    """The static shape of a window: node 0 is the root, node `c` the main draft of depth `c` (for cell
    `n + c - 1`, predicting cell `n + c`), then the off-main tree nodes. The session's queries are `depth`
    re-fed committed codes first (the oldest first), then the nodes."""

    width: int  # K: candidates per tree depth
    depth: int  # D - 1: draft depths with siblings (fewer on a short main chain; 0 when K = 1)
    main: int  # M: the positions verified per forward (the root, then the main chain's drafts)
    offset: torch.Tensor  # [Q] query predicts cell n + offset
    source: torch.Tensor  # [Q] index into cat(main drafts, siblings.flatten) (-1: a committed code)
    branch: torch.Tensor  # [Q] branch slot (-1: the cell's own slot)
    sees: torch.Tensor  # [Q, Q] ancestry
    children: torch.Tensor  # [N, K] child node of each node by sibling rank (-1: none)

    @classmethod
    def build(cls, width: int, depth: int, window: int, cells: int) -> TreeLayout:
        full_extra = tree_nodes(width, depth) - depth
        main = min(window - full_extra, cells)
        depth = min(depth, main) - 1 if width > 1 else 0  # a one-wide tree is just the chain
        slots = main - 1
        nodes: dict[tuple[int, ...], int] = {(0,) * c: c for c in range(main)}  # rank path -> node
        for c in range(1, depth + 1):
            for path in itertools.product(range(width), repeat=c):
                nodes.setdefault(path, len(nodes))
        count = len(nodes)
        children = torch.full((count, width), -1, dtype=torch.long)
        parent = [-1] * count
        source, node_depth, branch = (
            [-1] * count,
            [0] * count,
            [-1] * count,
        )  # the root feeds a committed code
        for path, node in nodes.items():
            c = len(path)
            node_depth[node] = c
            if c:
                parent[node] = nodes[path[:-1]]
                children[parent[node], path[-1]] = node
                rank = path[-1]
                source[node] = c - 1 if rank == 0 else slots + (c - 1) * (width - 1) + rank - 1
            if node >= main:
                branch[node] = node - main
        queries = depth + count
        sees = torch.zeros(queries, queries, dtype=torch.bool)
        sees[:depth, :depth] = torch.ones(depth, depth, dtype=torch.bool).tril()  # re-fed codes, in order
        sees[depth:, :depth] = True
        for node in range(count):
            ancestor = node
            while ancestor >= 0:
                sees[depth + node, depth + ancestor] = True
                ancestor = parent[ancestor]
        refeed = list(range(-depth, 0))
        return cls(
            width=width,
            depth=depth,
            main=main,
            offset=torch.tensor(refeed + node_depth),
            source=torch.tensor([-1] * depth + source),
            branch=torch.tensor([-1] * depth + branch),
            sees=sees,
            children=children,
        )

    @property
    def extra(self) -> int:
        """Off-main tree nodes: the branch slots a window needs."""
        return self.children.shape[0] - self.main

    def to(self, device: torch.device) -> TreeLayout:
        return dataclasses.replace(
            self,
            offset=self.offset.to(device),
            source=self.source.to(device),
            branch=self.branch.to(device),
            sees=self.sees.to(device),
            children=self.children.to(device),
        )


class TreeStepper(Stepper):
    """The state of an SJD-PAC decode between forwards, and its fixed-shape `step`.

    Where the drafts come from is the stepper's declared members, which `eagle`'s drafter stepper sets:
    `scheme` (fresh slots' guesses), `coupled` (MC-SJD re-drafts), `tracks_top1` (the latest argmax per cell),
    `sibling_proposals` (what the siblings are drawn from) and `redraft` (the next drafts, step 8)."""

    per_image = ("n", "pending", "drafts", "top1")

    def __init__(self, sampler: SJDPAC, decode: Decode):
        self.sampler, self.decode = sampler, decode
        session = decode.session
        cells, device = session.num_cells, session.device
        tree = TreeLayout.build(sampler.tree_width, sampler.tree_depth, sampler.window, cells)
        self.tree = tree = tree.to(device)
        session.reserve_branches(tree.extra)
        batch, vocab = session.batch_size, session.vocab_size
        self.slots = slots = tree.main - 1
        self.positions = torch.arange(tree.main, device=device)  # [M]
        width = session.grid[1]
        queries = tree.offset.shape[0]
        self.row_ends = min(queries, (tree.depth + tree.main - 1) // width + 1 + tree.extra)
        self.is_refeed = torch.arange(queries, device=device) < tree.depth  # [Q]
        self.main_nodes = torch.arange(tree.main, device=device)  # [M]
        self.reach = tree.main + tree.depth

        self.n = torch.ones(batch, dtype=torch.long, device=device)  # [B] the next cell to decode
        self.pending = torch.zeros(batch, dtype=torch.long, device=device)  # [B] codes to feed again
        self.drafts = Drafts(
            torch.zeros(batch, slots, dtype=torch.long, device=device),
            torch.zeros(batch, slots, vocab, device=device),
        )
        self.top1 = torch.full((batch, cells + 1), -1, dtype=torch.long, device=device)  # latest argmax

    @property
    def scheme(self) -> str:
        """How fresh draft slots are guessed: the sampler's `init`."""
        return self.sampler.init

    @property
    def coupled(self) -> bool:
        """Whether re-drafts are coupled with the old drafts (MC-SJD): the sampler's `coupling`."""
        return self.sampler.coupling

    @property
    def tracks_top1(self) -> bool:
        """Whether the latest argmax of every cell is kept (for the `scheme`s that read it)."""
        return uses_top1(self.scheme)

    def sibling_proposals(self) -> torch.Tensor:
        """`[B, D - 1, V]`: the proposal each tree depth's siblings are drawn from (without replacement, after
        the main draft): the main draft's own proposal here."""
        return self.drafts.proposals[:, : self.tree.depth]

    def start(self, first: torch.Tensor) -> None:
        self.n.fill_(1)
        self.pending.zero_()
        self.top1.fill_(-1)
        self._guess(
            torch.ones_like(self.drafts.codes, dtype=torch.bool), self.decode.random.uniform(self.slots)
        )

    def stop(self) -> None:
        self.n.fill_(self.decode.session.num_cells)
        self.pending.zero_()

    def step(self) -> None:
        session, trace, tree, drafts = self.decode.session, self.decode.trace, self.tree, self.drafts
        cells, n = session.num_cells, self.n
        active = n < cells  # [B]
        length = torch.where(active, (cells - n).clamp(max=tree.main), 0)  # [B] positions inside the image
        valid = self.positions < length[:, None]  # [B, M]: position j predicts cell n + j inside the image
        # the uniforms, [B, M] each
        u_accept, u_draw, u_couple, u_guess = self.decode.random.uniform(4, tree.main).unbind(1)
        # the siblings' draws and acceptance tests, [B, D - 1, K] each (no tree: no draw, so that a one-wide
        # tree decodes as mc-sjd)
        sibling_draw, sibling_accept = (
            self.decode.random.uniform(2, tree.depth, tree.width).unbind(1)
            if tree.depth
            else u_accept.new_zeros(2, n.shape[0], 0, 1).unbind(0)
        )

        # 1. queries: the re-fed committed codes, the root, the main chain, the off-main tree nodes (each
        #    depth's siblings drawn without replacement from `sibling_q` after its main draft)
        sibling_q = self.sibling_proposals()  # [B, D - 1, V]
        siblings = draw_candidates(sibling_q, drafts.codes[:, : tree.depth], sibling_draw[..., 1:])
        candidates = torch.cat([drafts.codes, siblings.flatten(1)], 1)  # [B, S + (D - 1)(K - 1)]
        query_cells = n[:, None] + tree.offset  # [B, Q]
        live = torch.where(
            self.is_refeed, active[:, None] & (-tree.offset <= self.pending[:, None]), query_cells < cells
        )
        committed = trace.codes.gather(1, (query_cells - 1).clamp(0, cells - 1))
        drafted = candidates.gather(1, tree.source.clamp(min=0).expand_as(query_cells))
        inputs = torch.where(tree.source < 0, committed, drafted).clamp(min=0)  # [B, Q]

        # 2. forward: every node sees the re-fed codes, its ancestors and itself (the off-main ones in branch
        #    slots)
        logits = session.logits(
            torch.where(live, query_cells, -1),
            inputs,
            row_ends=self.row_ends,
            branch=tree.branch.expand_as(query_cells),
            sees=tree.sees,
        )

        # 3. node targets: the processed output of every tree node
        t = self.decode.policy.probs(logits[:, tree.depth :])  # [B, N, V]

        # 4. walk the tree from the root: at each depth the candidates below the path's node are tried in
        #    order against its target (`verify_candidates`); the first that passes extends the path
        rule, context = self.sampler.acceptance, RuleContext(session.codebook, positions=self.slots)
        walk = walk_tree(
            t,
            drafts,
            siblings=siblings,
            sibling_q=sibling_q,
            valid=valid,
            u=sibling_accept,
            tree=tree,
            rule=rule,
            context=context,
        )
        beyond = self.main_nodes[tree.depth + 1 :].expand(n.shape[0], -1)
        line = torch.cat([walk.line, beyond], 1)  # [B, M] the node whose output predicts each position
        p = t.gather(1, line[..., None].expand(-1, -1, t.shape[-1]))  # [B, M, V]
        if self.tracks_top1:
            position_cells = n[:, None] + self.positions
            scatter_where(self.top1, position_cells, p.argmax(-1), valid)

        # 5. verify the main chain past the tree, as SJD does (where the walk stayed on it)
        chain = verify(
            p[:, tree.depth : self.slots],
            drafts.slots(slice(tree.depth, None)),
            usable=valid[:, tree.depth : self.slots] & walk.on_main[:, None],
            rule=rule,
            context=dataclasses.replace(context, position=self.positions[tree.depth + 1 :]),
            u_accept=u_accept[:, tree.depth : self.slots],
        )
        verdict = Verdict(
            walk.accepted + chain.accepted,
            walk.rejected | chain.rejected,
            torch.where(walk.rejected[:, None], walk.rest, chain.rest),
            walk.bound.join(chain.bound),
        )

        # 6. resample the first rejected position from its residual (or a bonus code from the path's last
        #    node), and every later position's sample for the next drafts (`conclude`)
        path = torch.cat([walk.codes, drafts.codes[:, tree.depth :]], 1)  # [B, S] kept candidates, then main
        outcome = self.conclude(p, path, valid, verdict, Uniforms(u_accept, u_draw, u_couple), length)

        # 7. commit: keep the inputs of the main line up to where the kept path leaves it; the kept path's
        #    off-main codes are fed again next step (`pending`)
        on_main = (walk.ranks == 0).long().cumprod(1).sum(1)  # [B] depths passed on the main line
        kept_main = torch.where(on_main >= tree.depth, verdict.accepted, on_main)
        keep_nodes = self.main_nodes <= kept_main[:, None]  # [B, M] the root and the main drafts kept
        refed, off_main = (
            torch.full_like(live[:, :1], flag).expand(-1, size)
            for flag, size in ((True, tree.depth), (False, tree.extra))
        )
        keep = torch.cat([refed, keep_nodes, off_main], 1)  # [B, Q]
        session.commit(keep)
        position_cells = n[:, None] + self.positions
        trace.commit(torch.where(outcome.committed, position_cells, -1), outcome.codes, bound=verdict.bound)
        self.pending.copy_(torch.where(active, outcome.advanced - 1 - kept_main, 0).clamp(min=0))
        self.n += outcome.advanced

        # 8. re-draft: the samples after the commit become the next drafts; fresh slots get initial guesses
        if self.slots:
            self.redraft(outcome, active=active, line=line, u_guess=u_guess)

    def conclude(
        self,
        p: torch.Tensor,
        path: torch.Tensor,
        valid: torch.Tensor,
        verdict: Verdict,
        uniforms: Uniforms,
        length: torch.Tensor,
    ) -> JacobiOutcome:
        """Step 6 along the window's line: `resample` the first rejected position (or a bonus), then every
        later position's sample (`redraft`, coupled when `coupled`). `p [B, M, V]`; `path [B, S]` holds the
        kept candidate of each tree depth, then the main drafts; `valid [B, M]`; `length [B]` the carry
        limit."""
        advanced, committed, codes = resample(p, path, valid=valid, verdict=verdict, u_draw=uniforms.draw)
        next_drafts, next_proposals, carried = redraft(
            p,
            Drafts(path, self.drafts.proposals),
            advanced=advanced,
            uniforms=uniforms,
            coupling=self.coupled,
            carry_limit=length,
        )
        return JacobiOutcome(
            advanced, committed, codes, verdict.accepted, next_drafts, next_proposals, carried
        )

    def redraft(
        self, outcome: JacobiOutcome, *, active: torch.Tensor, line: torch.Tensor, u_guess: torch.Tensor
    ) -> None:
        """Step 8: the samples after the commit become the next drafts; new slots get initial guesses.
        `line [B, M]`: the node whose output predicted each window position; `u_guess [B, M]` uniforms."""
        self.drafts.replace(outcome.next_drafts, outcome.next_proposals)
        self._guess(active[:, None] & ~outcome.carried, u_guess[:, : self.slots])

    def _guess(self, fresh: torch.Tensor, u: torch.Tensor) -> None:
        """Initial guesses (`jacobi.guess`), with the proposals they were drawn from, for the `fresh [B, S]`
        slots inside the image (slot `j` guesses cell `n + j`), drawn with the uniforms `u [B, S]`."""
        guess(
            self.drafts,
            self.n[:, None] + self.positions[: self.slots],  # [B, S]
            self.decode,
            scheme=self.scheme,
            fresh=fresh,
            top1=self.top1,
            u=u,
            uniform=self.sampler.acceptance.uniform_guesses,
        )


@dataclass
class Walk:
    """The tree part of a window's verification."""

    accepted: torch.Tensor  # [B] tree depths accepted
    rejected: torch.Tensor  # [B] bool: a tree depth rejected every candidate
    rest: torch.Tensor  # [B, V] that depth's last recursive residual
    ranks: torch.Tensor  # [B, D - 1] the kept sibling at each accepted depth (0 elsewhere)
    codes: torch.Tensor  # [B, D - 1] the kept candidate of each depth (the main draft where none was kept)
    line: torch.Tensor  # [B, D] the path's node at depths 0..D - 1, then rank-0 children past its end
    on_main: torch.Tensor  # [B] bool: every tree depth passed with its main draft (the chain goes on)
    bound: Bound  # [B] the rule's bound over the depths that decided a committed code


def walk_tree(
    t: torch.Tensor,
    drafts: Drafts,
    *,
    siblings: torch.Tensor,
    valid: torch.Tensor,
    u: torch.Tensor,
    tree: TreeLayout,
    sibling_q: torch.Tensor | None = None,
    rule: AcceptanceRule | None = None,
    context: RuleContext | None = None,
) -> Walk:
    """Verify the tree depths from the root: at each depth the candidates below the path's node are tried in
    order (`verify_candidates`, with `rule`: exact by default) and the first that passes extends the path.
    `t [B, N, V]` node outputs; `drafts` `[B, S]` (the main drafts), `siblings [B, D - 1, K - 1]` drawn
    from `sibling_q [B, D - 1, V]` (default: the main drafts' proposals); `valid [B, M]`;
    `u [B, D - 1, K]`."""
    batch = t.shape[0]
    node = torch.zeros(batch, dtype=torch.long, device=t.device)
    alive = torch.ones(batch, dtype=torch.bool, device=t.device)
    accepted = torch.zeros_like(node)
    rejected = torch.zeros_like(alive)
    rest = t.new_zeros(batch, t.shape[-1])
    bound = Bound.none(node)
    ranks, codes, line = [], [], [node]
    for j in range(tree.depth):  # the candidates of depth j + 1, for cell n + j
        context = dataclasses.replace(context or RuleContext(), position=j + 1)  # draft position j + 1
        usable = alive & valid[:, j]
        target = t.gather(1, node[:, None, None].expand(-1, 1, t.shape[-1]))[:, 0]
        candidates = torch.cat([drafts.codes[:, j : j + 1], siblings[:, j]], 1)
        spent = torch.zeros_like(bound.total)
        rank, found, left = verify_candidates(
            target,
            drafts.proposals[:, j],
            candidates,
            u[:, j],
            sibling_q=None if sibling_q is None else sibling_q[:, j],
            rule=rule,
            context=context,
            spent=spent,
        )
        bound = bound.add(spent, usable)  # a usable depth commits a code, passed or failed
        passed = usable & found
        failed = usable & ~found
        rejected |= failed
        rest = torch.where(failed[:, None], left, rest)
        rank = torch.where(passed, rank, 0)
        node = tree.children[node, rank]
        accepted += passed.long()
        alive = passed
        ranks.append(rank)
        codes.append(candidates.gather(1, rank[:, None])[:, 0])
        line.append(node)
    ranks_t, codes_t = (torch.stack(xs, 1) if xs else node.new_zeros(batch, 0) for xs in (ranks, codes))
    on_main = alive & (ranks_t == 0).all(1)
    return Walk(accepted, rejected, rest, ranks_t, codes_t, torch.stack(line, 1), on_main, bound)
