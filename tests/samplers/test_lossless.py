"""Lossless samplers produce exactly `ar`'s distribution: tested against the exact joint of a tiny grid.

Every test draws a few thousand images with fixed seeds, with CFG, top-k and temperature != 1, and runs a
chi-square test against the joint distribution obtained by enumerating every code grid through an uncached
full forward. The negative controls show the same test rejects samplers whose rule is subtly wrong.
"""

import dataclasses
import functools
import itertools

import pytest
import torch

from arjet.samplers import (
    INIT_SCHEMES,
    MCSJD,
    SJD,
    SJDPAC,
    AcceptanceRule,
    CoolSD,
    Eagle,
    Eagle2,
    Lantern,
    LogitsPolicy,
    ZipAR,
    cool_sd,
    eagle,
    jacobi,
    mc_sjd,
    sjd_pac,
)
from arjet.samplers import eagle2 as eagle2_module
from arjet.samplers import sjd as sjd_module
from arjet.samplers.decode import sample as sampler_sample
from arjet.samplers.jacobi import verify_candidates
from arjet.samplers.sjd_pac import tree_nodes
from arjet.testing import tiny_drafter, tiny_pipeline

from families import guidance_of, statistical_logit_scale
from stats import drawn, exact_joint, goodness_of_fit

# Thousands of draws per test: the whole suite (CI) runs them, the fast lane (`-m "not slow"`) does not.
pytestmark = pytest.mark.slow

PROMPT = "a red circle left of a blue square"
POLICY = LogitsPolicy(temperature=0.8, top_k=3)
SAMPLES = 4000
# About 50 tests share this file: a lossless sampler must not fail any of them by chance (family-wise false
# alarm ~5e-4), while every negative control below lands far under REJECT_BELOW (see each test).
ALPHA = 1e-5
REJECT_BELOW = 1e-6
# Janus decodes square grids only; GLM-Image decodes a 1 x 2 preview grid before its 2 x 3 one, unguided (it
# has no CFG: every GLM-Image draw below runs without guidance)
GRIDS = {"janus": (2, 2), "emu3": (2, 3), "lumina_mgpt": (2, 3), "glm_image": (2, 3)}
LOGIT_SCALES = {  # peaky enough for the negative controls
    "janus": 3.0,
    "emu3": 3.0,
    "lumina_mgpt": 6.0,
    "glm_image": statistical_logit_scale("glm_image"),
}


@functools.cache
def _setup(family):
    grid = GRIDS[family]
    pipe = tiny_pipeline(family, grid=grid, vocab_size=4, logit_scale=LOGIT_SCALES[family])
    return pipe, exact_joint(pipe, PROMPT, grid, POLICY, guidance_of(pipe))


def _draw(pipe, sampler, samples=SAMPLES, seed=0, policy=POLICY):
    out = pipe(
        PROMPT,
        sampler=sampler,
        num_images_per_prompt=samples,
        seed=seed,
        guidance_scale=guidance_of(pipe),
        temperature=policy.temperature,
        top_k=policy.top_k,
        top_p=policy.top_p,
        output_type="latent",
    )
    return drawn(out)


def test_ar_itself_matches_the_exact_distribution(family):
    pipe, exact = _setup(family)
    assert goodness_of_fit(_draw(pipe, "ar"), exact) > ALPHA


@pytest.mark.parametrize("coupling", [False, True], ids=["sjd", "mc-sjd"])
@pytest.mark.parametrize("init", INIT_SCHEMES)
def test_sjd_is_lossless_in_a_batch(family, init, coupling):
    pipe, exact = _setup(family)
    sampler = SJD(window=3, init=init, coupling=coupling)
    assert goodness_of_fit(_draw(pipe, sampler), exact) > ALPHA


def test_sjd_is_lossless_with_top_p(family):
    pipe, _ = _setup(family)
    policy = LogitsPolicy(temperature=1.2, top_p=0.8)
    exact = exact_joint(pipe, PROMPT, GRIDS[family], policy, guidance_of(pipe))
    sampler = SJD(window=3, init="sample_horizontal", coupling=True)
    assert goodness_of_fit(_draw(pipe, sampler, policy=policy), exact) > ALPHA


@pytest.mark.parametrize(
    "sampler",
    [SJD(window=4, init=init, coupling=coupling) for init in INIT_SCHEMES for coupling in (False, True)]
    + [ZipAR(w=2), ZipAR(w=3, verify=SJD(window=3)), ZipAR(w=3, verify=SJD(window=2, coupling=True))]
    + [
        SJDPAC(window=9, tree_width=2, tree_depth=3),
        SJDPAC(window=5, tree_width=3, tree_depth=2, coupling=False, init="repeat_vertical"),
    ]
    + [MCSJD(window=4, coupling="gumbel"), SJD(window=4, reuse=0.5)],
    ids=repr,
)
def test_one_image_at_a_time_decodes_exactly_as_in_a_batch(family, sampler):
    """Every image has its own random stream, so a batch member's codes are those of the same seed alone:
    the batch tests above then cover batch size 1, sample for sample."""
    pipe, _ = _setup(family)
    seeds = list(range(100, 112))
    batch = pipe(
        PROMPT,
        sampler=sampler,
        seed=seeds,
        num_images_per_prompt=len(seeds),
        guidance_scale=guidance_of(pipe),
        temperature=POLICY.temperature,
        top_k=POLICY.top_k,
        output_type="latent",
    )
    singles = [_draw(pipe, sampler, samples=1, seed=seed) for seed in seeds]
    assert torch.equal(torch.cat(singles), drawn(batch))


@pytest.mark.parametrize(
    "sampler",
    [
        ZipAR(w=4),
        ZipAR(w=8),
        ZipAR(w=4, verify=SJD(window=3)),
        ZipAR(w=4, verify=SJD(window=2, coupling=True)),
        ZipAR(w=3, schedule="llamagen"),
    ],
    ids=repr,
)
def test_zipar_whose_rows_wait_for_the_row_above_is_ar(family, sampler):
    """A lag of at least the width (`w - 1 >= W`; LlamaGen's `w >= W`) is raster order: exactly `ar`."""
    pipe, exact = _setup(family)
    assert goodness_of_fit(_draw(pipe, sampler), exact) > ALPHA


def test_lantern_with_delta_zero_is_sjd(family):
    pipe, _ = _setup(family)
    sjd = pipe(PROMPT, sampler=SJD(window=3), seed=7, num_images_per_prompt=64, output_type="latent").codes
    lantern = SJD(window=3, acceptance=Lantern(k=2, delta=0.0))
    assert torch.equal(
        pipe(PROMPT, sampler=lantern, seed=7, num_images_per_prompt=64, output_type="latent").codes, sjd
    )


class _TwiceTemperature(AcceptanceRule):
    """A subtly wrong rule: verifies against p sharpened once more (temperature applied twice)."""

    name = "wrong"

    def target(self, p, q, context):
        sharpened = p.pow(1.25)
        return sharpened / sharpened.sum(-1, keepdim=True)


def _before_top_k(q):
    """What a proposal taken before top-k looks like: the codes top-k removed keep some mass (point-mass
    drafts are left as they are)."""
    removed = (q == 0) & (q.amax(-1, keepdim=True) < 1)
    spread = removed / removed.sum(-1, keepdim=True).clamp(min=1)
    return torch.where(removed.any(-1, keepdim=True), 0.7 * q + 0.3 * spread, q)


_verify = jacobi.verify


def _verify_with_q_before_top_k(target_p, drafts, **kwargs):
    """Verification (acceptance test and residual) against proposals taken before top-k."""
    wrong = jacobi.Drafts(drafts.codes, _before_top_k(drafts.proposals))
    return _verify(target_p, wrong, **kwargs)


WRONG_MATHS = {  # attribute of arjet.samplers.jacobi (the shared window step) -> a subtly wrong one
    "residual-replaced-by-p": {"residual": lambda target, q: target},
    "q-taken-before-top-k": {"verify": _verify_with_q_before_top_k},
}


@pytest.mark.parametrize(
    "sampler",
    [SJD(window=3, acceptance=_TwiceTemperature()), SJD(window=3, acceptance=Lantern(k=2, delta=0.25))],
    ids=["temperature-applied-twice", "lantern-delta-0.25"],
)
def test_negative_control_a_wrong_rule_is_rejected(family, sampler):
    """4 * SAMPLES draws: with 2 * SAMPLES emu3's temperature control sat near 1e-6, at the mercy of the random
    stream; with 4 * SAMPLES it falls to p ~ 1e-24 on emu3 and lower on the others (measured when written)."""
    pipe, exact = _setup(family)
    assert goodness_of_fit(_draw(pipe, sampler, samples=4 * SAMPLES), exact) < REJECT_BELOW


@pytest.mark.parametrize("wrong", list(WRONG_MATHS))
@pytest.mark.parametrize("grid_family", ["emu3", "lumina_mgpt", "glm_image"])
def test_negative_control_wrong_speculative_maths_is_rejected(grid_family, wrong, monkeypatch):
    """Janus's square 2x2 grid leaves SJD too few verifications for these small biases to show at this
    sample size; the 2x3 grids expose them (p < 1e-14 when this was written). Coupling without the residual
    is caught where it is large, in `test_speculative.py`."""
    pipe, exact = _setup(grid_family)
    for name, replacement in WRONG_MATHS[wrong].items():
        for module in (jacobi, sjd_module):  # where it is defined, and the step that calls it by name
            if hasattr(module, name):
                monkeypatch.setattr(module, name, replacement)
    assert goodness_of_fit(_draw(pipe, SJD(window=3), samples=2 * SAMPLES), exact) < REJECT_BELOW


# -- mc-sjd's Gumbel coupling, SJD++'s reuse --------------------------------------------------------------
REDRAFTS = [
    MCSJD(window=3, coupling="gumbel"),
    MCSJD(window=4, coupling="gumbel", init="sample_horizontal"),
    SJD(window=3, reuse=0.5),
    SJD(window=4, reuse=0.0, init="repeat_vertical"),
    SJD(window=4, reuse=2.0),
]


@pytest.mark.parametrize("sampler", REDRAFTS, ids=repr)
def test_gumbel_coupled_and_reused_redrafts_are_lossless(family, sampler):
    pipe, exact = _setup(family)
    assert goodness_of_fit(_draw(pipe, sampler), exact) > ALPHA


class _EveryOtherStepOneCode(mc_sjd.GumbelStepper):
    """Every other step narrowed to one code, as an engine may narrow a window."""

    def step(self):
        self.window = 1 if self.window > 1 else self.reach
        super().step()


@dataclasses.dataclass(frozen=True)
class _GumbelWithOneCodeSteps(MCSJD):
    def stepper(self, decode):
        return _EveryOtherStepOneCode(self, decode)


@pytest.mark.parametrize("grid_family", ["emu3", "lumina_mgpt"])
def test_the_gumbel_coupling_through_one_code_steps_is_lossless(grid_family):
    """The cells committed by one-code steps move the noise on too (`test_mc_sjd.py` checks the rows)."""
    pipe, exact = _setup(grid_family)
    assert goodness_of_fit(_draw(pipe, _GumbelWithOneCodeSteps(window=4, coupling="gumbel")), exact) > ALPHA


_exponentials = mc_sjd.exponentials


def _one_row(u):
    """Noise of the first row for every row: all cells of the window share it."""
    return _exponentials(u[:, :1]).expand_as(u)


def test_negative_control_gumbel_noise_never_advanced_is_rejected(family, monkeypatch):
    """One noise vector per image, shared by every cell and never replaced: the official code's one-code-phase
    reuse throughout the decode (a verified cell's noise serves the next cells). Measured when written, 8000
    draws of windows of 3: p ~ 1e-21 (emu3), 1e-73 (Lumina-mGPT), 1e-80 (GLM-Image), 0 (Janus); 4000 draws
    leave emu3 at 1e-5."""
    monkeypatch.setattr(mc_sjd, "advanced_noise", lambda noise, advanced, fresh: noise)
    monkeypatch.setattr(mc_sjd, "exponentials", _one_row)
    pipe, exact = _setup(family)
    codes = _draw(pipe, MCSJD(window=3, coupling="gumbel"), samples=2 * SAMPLES)
    assert goodness_of_fit(codes, exact) < REJECT_BELOW


_reuse = jacobi.reuse


def _reuse_declared_with_p(p, previous, previous_q, tau, u_draw):
    """SJD++'s draft declared with the new target `p` (the third-party reading), not its marginal."""
    codes, _ = _reuse(p, previous, previous_q, tau, u_draw)
    return codes, p


@pytest.mark.parametrize("grid_family", ["emu3", "lumina_mgpt", "glm_image"])
def test_negative_control_reused_drafts_declared_with_p_are_rejected(grid_family, monkeypatch):
    """Measured when written, 8000 draws at reuse=0 (a draft is kept wherever p allows it): p ~ 1e-28 (emu3),
    2e-12 (Lumina-mGPT), 1e-15 (GLM-Image, window 3). Janus's 2x2 grid leaves too few re-drafts to show it."""
    monkeypatch.setattr(jacobi, "reuse", _reuse_declared_with_p)
    pipe, exact = _setup(grid_family)
    assert goodness_of_fit(_draw(pipe, SJD(window=4, reuse=0.0), samples=2 * SAMPLES), exact) < REJECT_BELOW


# -- sjd-pac -----------------------------------------------------------------------------------------------
PAC_TREES = [(2, 2), (2, 3), (3, 2), (3, 3)]  # (tree_width K, tree_depth D)


@pytest.mark.parametrize("coupling", [False, True], ids=["pd", "pd+ac"])
@pytest.mark.parametrize(("width", "depth"), PAC_TREES, ids=[f"K{k}-D{d}" for k, d in PAC_TREES])
def test_sjd_pac_is_lossless_in_a_batch(family, width, depth, coupling):
    """The window is the tree plus one chain draft, so on these 4- and 6-cell grids images often end inside
    the tree; first drafts are uniform random codes (uniform proposals, uniform siblings)."""
    pipe, exact = _setup(family)
    window = tree_nodes(width, depth) + 1
    sampler = SJDPAC(window=window, tree_width=width, tree_depth=depth, coupling=coupling)
    assert goodness_of_fit(_draw(pipe, sampler), exact) > ALPHA


@pytest.mark.parametrize("init", ["repeat_horizontal", "sample_vertical"])
def test_sjd_pac_with_guessed_drafts_is_lossless(family, init):
    """Guesses are point masses: their siblings come from the uniform fallback."""
    pipe, exact = _setup(family)
    sampler = SJDPAC(window=8, tree_width=3, tree_depth=2, init=init)
    assert goodness_of_fit(_draw(pipe, sampler), exact) > ALPHA


def test_sjd_pac_is_lossless_with_top_p(family):
    pipe, _ = _setup(family)
    policy = LogitsPolicy(temperature=1.2, top_p=0.8)
    exact = exact_joint(pipe, PROMPT, GRIDS[family], policy, guidance_of(pipe))
    sampler = SJDPAC(window=14, tree_width=3, tree_depth=3, init="sample_horizontal")
    assert goodness_of_fit(_draw(pipe, sampler, policy=policy), exact) > ALPHA


class _ContinuationCommits(sjd_pac.TreeStepper):
    """A subtly wrong continuation rule (what the paper's wording suggests): after a rejection on the main
    line, also commit the following main drafts whose coupling test passes against this forward's `p`, a
    target conditioned on the rejected draft, not on the committed resample (at most `tree.depth` of them:
    what the next window's re-fed inputs hold, so that the cache stays right and only the rule is wrong)."""

    def conclude(self, p, path, valid, verdict, uniforms, length):
        out = super().conclude(p, path, valid, verdict, uniforms, length)
        slots, accepted = self.slots, verdict.accepted[:, None]
        proposals, drafts = self.drafts.proposals, self.drafts.codes
        position = torch.arange(slots)
        kept = jacobi.passes(p[:, :slots], proposals, path, uniforms.couple[:, :slots]) & valid[:, :slots]
        run = (kept | (position <= accepted)).long().cumprod(1).sum(1) - (verdict.accepted + 1)
        main_line = ((path == drafts) | (position >= accepted)).all(1)
        more = torch.where(verdict.rejected & main_line, run.clamp(0, self.tree.depth), 0)
        window = torch.arange(p.shape[1])
        out.committed |= (window > accepted) & (window <= accepted + more[:, None])
        out.advanced = out.advanced + more
        source = position + more[:, None]
        out.carried = out.carried.gather(1, source.clamp(max=slots - 1)) & (source < slots)
        source = source.clamp(max=slots - 1)
        out.next_drafts = torch.where(out.carried, out.next_drafts.gather(1, source), drafts)
        shifted = out.next_proposals.gather(1, source[..., None].expand_as(proposals))
        out.next_proposals = torch.where(out.carried[..., None], shifted, proposals)
        return out


def _longest_path_walk(generator):
    """The official selection: every tree node is tested (sibling k against the recursive residual of
    siblings < k, whatever they did; one uniform per node) and the root-to-leaf path with the most leading
    passes is kept, the first such path on ties. Resampling and the bonus stay textbook, so that only the
    selection is wrong."""

    def walk(t, drafts, *, siblings, valid, u, tree, sibling_q=None, rule=None, context=None):
        proposals, drafts = drafts.proposals, drafts.codes  # sjd-pac draws its siblings from these too
        batch, depth, width = t.shape[0], tree.depth, tree.width
        u_node = torch.rand(batch, tree.children.shape[0], generator=generator, dtype=torch.float64)
        passed, after, parents = {}, {}, [0]
        for j in range(depth):
            below = []
            for parent in parents:
                target, q = t[:, parent], proposals[:, j]
                candidates = torch.cat([drafts[:, j : j + 1], siblings[:, j]], 1)
                drawn = torch.zeros_like(q, dtype=torch.bool)
                for k in range(width):
                    child = int(tree.children[parent, k])
                    r = q if k == 0 else jacobi.candidate_proposal(q, drawn)
                    passed[child] = jacobi.passes(target, r, candidates[:, k], u_node[:, child])
                    passed[child] &= valid[:, j]
                    rest = jacobi.residual(target, r)
                    target = rest / rest.sum(-1, keepdim=True)
                    drawn = drawn.scatter(-1, candidates[:, k : k + 1], True)
                    below.append(child)
                after[parent] = target
            parents = below
        paths = list(itertools.product(range(width), repeat=depth))
        lengths, path_nodes = [], []
        for ranks in paths:
            node, alive, length, nodes = (
                0,
                torch.ones(batch, dtype=torch.bool),
                torch.zeros(batch).long(),
                [0],
            )
            for k in ranks:
                node = int(tree.children[node, k])
                alive = alive & passed[node]
                length += alive.long()
                nodes.append(node)
            lengths.append(length)
            path_nodes.append(nodes)
        lengths = torch.stack(lengths, 1)
        best = lengths.argmax(1)  # the first longest path
        accepted = lengths.gather(1, best[:, None])[:, 0]
        ranks = torch.where(torch.arange(depth) < accepted[:, None], torch.tensor(paths)[best], 0)
        nodes = torch.tensor(path_nodes)[best]
        line = [nodes[:, 0]]
        for d in range(depth):  # the path up to `accepted`, then rank-0 children
            line.append(torch.where(d < accepted, nodes[:, d + 1], tree.children[line[-1], 0]))
        line = torch.stack(line, 1)
        stop = accepted.clamp(max=depth - 1)
        rejected = (accepted < depth) & valid[:, :depth].gather(1, stop[:, None])[:, 0]
        last = line.gather(1, accepted[:, None])[:, 0]
        rest = torch.zeros_like(t[:, 0])
        for parent, target in after.items():
            rest = torch.where((last == parent)[:, None], target, rest)
        codes = torch.cat([drafts[:, :depth, None], siblings], 2).gather(2, ranks[..., None])[..., 0]
        on_main = (accepted == depth) & (ranks == 0).all(1)
        bound = jacobi.Bound.none(accepted)  # the exact rule spends none
        return sjd_pac.Walk(accepted, rejected, rest, ranks, codes, line, on_main, bound)

    return walk


@functools.cache
def _one_tree_setup(policy):
    """A 1x3 emu3 grid (cell 0 from the prefill, then one window over cells 1 and 2), sharp enough (logit
    scale 8) that what a window does after its first code depends on that code: where the controls bite."""
    grid = (1, 3)
    pipe = tiny_pipeline("emu3", grid=grid, vocab_size=4, logit_scale=8.0)
    return pipe, exact_joint(pipe, PROMPT, grid, policy, guidance_of(pipe))


@functools.cache
def _one_tree_drafted():
    """`_one_tree_setup`'s pipeline (the same seeded weights) with a tiny random drafter."""
    return tiny_drafter(tiny_pipeline("emu3", grid=(1, 3), vocab_size=4, logit_scale=8.0), fc_scale=4.0)


NO_TOP_K = LogitsPolicy(
    temperature=0.8
)  # so that a wrong rule cannot be caught by a code outside the support
ONE_TREE = {"K2-D2": SJDPAC(window=4, tree_width=2, tree_depth=2), "K2-D3": SJDPAC(window=7, tree_width=2)}


@pytest.mark.parametrize("policy", [POLICY, NO_TOP_K], ids=["top-k", "no-top-k"])
@pytest.mark.parametrize("tree", list(ONE_TREE))
def test_sjd_pac_is_lossless_where_the_controls_are_not(tree, policy):
    pipe, exact = _one_tree_setup(policy)
    assert goodness_of_fit(_draw(pipe, ONE_TREE[tree], samples=2 * SAMPLES, policy=policy), exact) > ALPHA


@pytest.mark.parametrize("grid_family", ["emu3", "lumina_mgpt", "glm_image"])
def test_negative_control_sjd_pac_continuation_commits_is_rejected(grid_family, monkeypatch):
    """Measured when written (SAMPLES draws): p = 0 on both, as the rule commits codes outside the top-k
    support of their true conditional (joint TV to exact 0.20 / 0.18 against 0.16 / 0.14 for sjd-pac
    itself, which is sampling noise over 4096 outcomes). Janus's 2x2 grid leaves too little chain after a
    rejection for it to show."""
    monkeypatch.setattr(sjd_pac, "TreeStepper", _ContinuationCommits)
    pipe, exact = _setup(grid_family)
    sampler = SJDPAC(window=9, tree_width=2, tree_depth=3)
    assert goodness_of_fit(_draw(pipe, sampler), exact) < REJECT_BELOW


def test_negative_control_sjd_pac_continuation_commits_shifts_the_distribution(monkeypatch):
    """Without top-k the rule commits only possible codes, with the wrong probabilities. Measured when written
    (8000 draws): joint TV 0.040 against 0.021 for sjd-pac, p ~ 7e-11 (on the 2x3 grid it hides in the noise
    of 4096 outcomes: p ~ 0.07)."""
    monkeypatch.setattr(sjd_pac, "TreeStepper", _ContinuationCommits)
    pipe, exact = _one_tree_setup(NO_TOP_K)
    codes = _draw(pipe, ONE_TREE["K2-D2"], samples=2 * SAMPLES, policy=NO_TOP_K)
    assert goodness_of_fit(codes, exact) < REJECT_BELOW


@pytest.mark.parametrize("policy", [POLICY, NO_TOP_K], ids=["top-k", "no-top-k"])
def test_negative_control_sjd_pac_longest_path_is_rejected(policy, monkeypatch):
    """The official selection (a later sibling whose subtree goes deeper overrides an earlier one that
    passed). Measured when written, 8000 draws: joint TV to exact 0.050 against 0.020 for sjd-pac, p ~ 1e-11
    (no top-k: 0.049 against 0.026, p ~ 5e-8; 16000 draws: p ~ 1e-39; Lumina-mGPT's 1x3 grid at scale 10:
    p ~ 4e-13). With a single tree depth the two rules coincide; on the 2x3 grids of `_setup` the bias is
    there but small (p ~ 2e-6 at 16000 draws on emu3)."""
    pipe, exact = _one_tree_setup(policy)
    monkeypatch.setattr(sjd_pac, "walk_tree", _longest_path_walk(torch.Generator().manual_seed(0)))
    codes = _draw(pipe, ONE_TREE["K2-D3"], samples=2 * SAMPLES, policy=policy)
    assert goodness_of_fit(codes, exact) < REJECT_BELOW


# -- eagle: a drafter's proposals on sjd-pac's tree --------------------------------------------------------
@functools.cache
def _drafted(family):
    """`_setup`'s pipeline (the same seeded weights, so the same exact joint) with a tiny random drafter."""
    grid = GRIDS[family]
    pipe = tiny_pipeline(family, grid=grid, vocab_size=4, logit_scale=LOGIT_SCALES[family])
    return tiny_drafter(pipe, fc_scale=4.0), _setup(family)[1]


DRAFTED_TREES = {  # eagle: (tree_width, tree_depth, window); eagle2: (tree_width, expand, tree_depth)
    **{f"eagle-K{k}-D{d}-W{w}": Eagle(window=w, tree_width=k, tree_depth=d) for k, d, w in
       [(1, 1, 3), (2, 2, 4), (2, 3, 8), (3, 2, 6)]},
    "eagle-jacobi-K2-D3-W8": Eagle(window=8, tree_width=2, tree_depth=3, chain="jacobi"),
    **{f"eagle2-K{k}-M{m}-D{d}": Eagle2(tree_width=k, expand=m, tree_depth=d) for k, m, d in
       [(2, 1, 3), (2, 2, 3), (3, 2, 4)]},
}  # fmt: skip


@pytest.mark.parametrize("tree", list(DRAFTED_TREES))
def test_drafted_trees_are_lossless_in_a_batch(family, tree):
    """Proposals from a random drafter (its CFG-mixed, processed distribution), verified on its tree:
    `eagle`'s static one, `eagle2`'s dynamic one."""
    pipe, exact = _drafted(family)
    assert goodness_of_fit(_draw(pipe, DRAFTED_TREES[tree]), exact) > ALPHA


def test_eagle_is_lossless_with_top_p(family):
    pipe, _ = _drafted(family)
    policy = LogitsPolicy(temperature=1.2, top_p=0.8)
    exact = exact_joint(pipe, PROMPT, GRIDS[family], policy, guidance_of(pipe))
    assert (
        goodness_of_fit(_draw(pipe, Eagle(window=6, tree_width=2, tree_depth=2), policy=policy), exact)
        > ALPHA
    )


def test_eagle_is_lossless_where_the_controls_are_not():
    _, exact = _one_tree_setup(NO_TOP_K)
    drafted = _one_tree_drafted()
    codes = _draw(drafted, Eagle(window=4, tree_width=2, tree_depth=2), samples=2 * SAMPLES, policy=NO_TOP_K)
    assert goodness_of_fit(codes, exact) > ALPHA


def _sharpened_draws(probs, u):
    """Draws from `probs` squared (renormalised) while the stepper records `probs` as the proposal."""
    return sampler_sample(probs.square() / probs.square().sum(-1, keepdim=True), u)


def test_negative_control_eagle_drafts_not_from_their_proposal_is_rejected(monkeypatch):
    """A drafter whose codes are drawn from another distribution than the one recorded as their proposal
    (e.g. a temperature applied to the draw only)."""
    monkeypatch.setattr(eagle, "sample", _sharpened_draws)
    _, exact = _one_tree_setup(NO_TOP_K)
    drafted = _one_tree_drafted()
    codes = _draw(drafted, Eagle(window=4, tree_width=2, tree_depth=2), samples=2 * SAMPLES, policy=NO_TOP_K)
    assert goodness_of_fit(codes, exact) < REJECT_BELOW


JACOBI_CHAIN = Eagle(window=4, tree_width=2, tree_depth=2, chain="jacobi")
LONG_ROW = (1, 5)  # four decoded cells: a window of three commits at most, so every image re-drafts


@functools.cache
def _long_row_drafted():
    """A 1x5 emu3 row, its exact joint (no top-k), and the same seeded pipeline with a tiny random drafter."""
    pipe = tiny_pipeline("emu3", grid=LONG_ROW, vocab_size=4, logit_scale=8.0)
    exact = exact_joint(pipe, PROMPT, LONG_ROW, NO_TOP_K, guidance_of(pipe))
    drafted = tiny_drafter(tiny_pipeline("emu3", grid=LONG_ROW, vocab_size=4, logit_scale=8.0), fc_scale=4.0)
    return drafted, exact


def _as_jacobi_draws(*args, sibling_q=None, **kwargs):
    """The drafter's siblings verified as if drawn from the Jacobi draft's proposal."""
    return verify_candidates(*args, **kwargs)


def test_eagle_over_jacobi_drafts_is_lossless_where_the_controls_are_not():
    _, exact = _one_tree_setup(NO_TOP_K)
    codes = _draw(_one_tree_drafted(), JACOBI_CHAIN, samples=2 * SAMPLES, policy=NO_TOP_K)
    assert goodness_of_fit(codes, exact) > ALPHA


def test_negative_control_drafter_siblings_verified_as_jacobi_draws_is_rejected(monkeypatch):
    monkeypatch.setattr(sjd_pac, "verify_candidates", _as_jacobi_draws)
    _, exact = _one_tree_setup(NO_TOP_K)
    codes = _draw(_one_tree_drafted(), JACOBI_CHAIN, samples=2 * SAMPLES, policy=NO_TOP_K)
    assert goodness_of_fit(codes, exact) < REJECT_BELOW


def test_eagle_over_jacobi_drafts_is_lossless_across_windows():
    """Drafts carried (coupled) from window to window while the drafter's siblings keep taking paths off the
    main chain (at these 16000 samples the control below lands near p = 1e-217)."""
    drafted, exact = _long_row_drafted()
    codes = _draw(drafted, JACOBI_CHAIN, samples=4 * SAMPLES, policy=NO_TOP_K)
    assert goodness_of_fit(codes, exact) > ALPHA


def test_negative_control_drafter_siblings_verified_as_jacobi_draws_across_windows(monkeypatch):
    monkeypatch.setattr(sjd_pac, "verify_candidates", _as_jacobi_draws)
    drafted, exact = _long_row_drafted()
    codes = _draw(drafted, JACOBI_CHAIN, samples=4 * SAMPLES, policy=NO_TOP_K)
    assert goodness_of_fit(codes, exact) < REJECT_BELOW


# -- eagle2: a drafter's dynamic tree, each node with its own proposal ----------------------------------------
def test_eagle2_is_lossless_where_the_controls_are_not():
    _, exact = _one_tree_setup(NO_TOP_K)
    drafted = _one_tree_drafted()
    codes = _draw(drafted, Eagle2(tree_width=2, expand=1, tree_depth=3), samples=2 * SAMPLES, policy=NO_TOP_K)
    assert goodness_of_fit(codes, exact) > ALPHA


_DRAW_CHILDREN = eagle2_module._draw_children


def _children_by_confidence(q, u):
    """EAGLE-2's order: the drawn children sorted by the drafter's probability, most likely first, while the
    rule still takes them for draws in that order."""
    children = _DRAW_CHILDREN(q, u)
    order = q.gather(-1, children).argsort(dim=-1, descending=True, stable=True)
    return children.gather(-1, order)


def test_negative_control_eagle2_children_in_confidence_order_are_rejected(monkeypatch):
    monkeypatch.setattr(eagle2_module, "_draw_children", _children_by_confidence)
    _, exact = _one_tree_setup(NO_TOP_K)
    drafted = _one_tree_drafted()
    codes = _draw(drafted, Eagle2(tree_width=2, expand=1, tree_depth=3), samples=2 * SAMPLES, policy=NO_TOP_K)
    assert goodness_of_fit(codes, exact) < REJECT_BELOW


def test_eagle2_with_the_drafters_top_codes_is_lossless(family):
    """Children fixed as the drafter's most likely codes, each verified as a point mass."""
    pipe, exact = _drafted(family)
    sampler = Eagle2(tree_width=2, expand=2, tree_depth=3, children="top")
    assert goodness_of_fit(_draw(pipe, sampler), exact) > ALPHA


def test_negative_control_eagle2_top_codes_verified_as_draws_are_rejected():
    """The drafter's top codes verified as if drawn from its proposal (`min(1, p/q)`), as EAGLE-2's sampling
    path does: not exact."""
    _, exact = _one_tree_setup(NO_TOP_K)
    drafted = _one_tree_drafted()
    sampler = Eagle2(tree_width=2, expand=1, tree_depth=3, children="top")
    stepper = eagle2_module.DynamicTreeStepper
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(stepper, "__init__", _as_draws(stepper.__init__))
        codes = _draw(drafted, sampler, samples=2 * SAMPLES, policy=NO_TOP_K)
    assert goodness_of_fit(codes, exact) < REJECT_BELOW


def _as_draws(init):
    def wrapped(self, sampler, decode):
        init(self, sampler, decode)
        self._children = lambda q, u: q.topk(self.shape.width, dim=-1).indices
        self.top = False  # verified as draws from q

    return wrapped


# -- cool-sd: COOL-SD's annealed rule on the drafter trees ---------------------------------------------------
UNIT = CoolSD(delta=1.0, nu=0.0)  # w = 1 at every position: exact speculative decoding
COOL_TREES = {
    "eagle": Eagle(window=4, tree_width=2, tree_depth=2, acceptance=UNIT),
    "eagle2": Eagle2(tree_width=2, expand=1, tree_depth=3, acceptance=UNIT),
}
STRICT = Eagle(window=4, tree_width=2, tree_depth=2, acceptance=CoolSD(delta=0.5, nu=0.0))  # w = 0.5 < 1


@pytest.mark.parametrize("tree", list(COOL_TREES))
def test_cool_sd_with_unit_weights_is_lossless_in_a_batch(family, tree):
    pipe, exact = _drafted(family)
    assert goodness_of_fit(_draw(pipe, COOL_TREES[tree]), exact) > ALPHA


def test_cool_sd_stricter_than_exact_is_lossless_with_its_residual():
    """Weights below 1 accept less than exact speculative decoding, and the optimal residual
    `norm(max(0, p - q f))` gives back exactly what they refused (see `arjet.samplers.cool_sd`)."""
    _, exact = _one_tree_setup(NO_TOP_K)
    codes = _draw(_one_tree_drafted(), STRICT, samples=2 * SAMPLES, policy=NO_TOP_K)
    assert goodness_of_fit(codes, exact) > ALPHA


def test_negative_control_cool_sd_stricter_with_the_exact_residual_is_rejected(monkeypatch):
    """The same weights with the exact residual `norm(max(0, p - q))`, which holds too little mass where
    `q` passes less than it should."""
    monkeypatch.setattr(cool_sd, "relaxed_residual", lambda p, q, weight: jacobi.residual(p, q))
    _, exact = _one_tree_setup(NO_TOP_K)
    codes = _draw(_one_tree_drafted(), STRICT, samples=2 * SAMPLES, policy=NO_TOP_K)
    assert goodness_of_fit(codes, exact) < REJECT_BELOW


def test_negative_control_cool_sd_relaxed_is_rejected():
    """Weights above 1 are the relaxation itself: not exact."""
    _, exact = _one_tree_setup(NO_TOP_K)
    relaxed = Eagle(window=4, tree_width=2, tree_depth=2, acceptance=CoolSD(delta=2.0, nu=0.0))
    codes = _draw(_one_tree_drafted(), relaxed, samples=2 * SAMPLES, policy=NO_TOP_K)
    assert goodness_of_fit(codes, exact) < REJECT_BELOW
