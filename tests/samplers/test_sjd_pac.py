"""`sjd-pac`: options, the tree's layout, the multi-draft rule on hand-made tensors, and decoding behaviour.
Its distribution against exact `ar` (and the negative controls) is tested in `test_lossless.py`."""

import numpy as np
import pytest
import torch

from arjet import samplers
from arjet.samplers import SJD, SJDPAC, sample
from arjet.samplers.jacobi import (
    candidate_proposal,
    draw_candidates,
    residual,
    verify_candidates,
)
from arjet.samplers.sjd_pac import TreeLayout, tree_nodes
from arjet.testing import tiny_pipeline

from families import all_cells
from stats import chisquare_p_value

DRAWS = 200_000


# -- options -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(window=0), "window must be an integer from 2 to 16384"),
        (dict(window=1, tree_depth=1), "window must be an integer from 2 to 16384"),  # no room for a draft
        (dict(tree_width=0), "tree_width must be an integer from 1 to 64"),
        (dict(tree_depth=1.5), "tree_depth must be an integer from 1 to 16"),
        (dict(coupling="yes"), "coupling"),
        (dict(init="diagonal"), "init must be one of random, .*; got 'diagonal'"),
        (
            dict(window=12),
            r"tree_width=3, tree_depth=3 make a tree of 13 nodes, more than window=12; use window >= 13",
        ),
        (dict(window=64, tree_width=4, tree_depth=4), "a tree of 85 nodes"),
        (
            dict(window=64, tree_width=4, tree_depth=7),
            "a tree of 5,461 nodes, .*; use window >= 5,461 or a smaller",
        ),
        (  # no window can hold it: only a smaller tree is suggested
            dict(window=64, tree_width=64, tree_depth=16),
            r"a tree of 1,257,589,881,178,799,009,421,332,545 nodes, more than window=64; a window holds at most "
            r"16,384; use a smaller tree$",
        ),
    ],
)
def test_bad_options_are_refused_naming_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SJDPAC(**kwargs)


def test_registry_spec_and_defaults():
    sampler = samplers.get("sjd-pac")
    assert (sampler.window, sampler.tree_width, sampler.tree_depth, sampler.coupling, sampler.init) == (
        64,
        3,
        3,
        True,
        "random",
    )
    assert samplers.get("sjd-pac:acceptance=lantern") == samplers.get("sjd-pac+lantern")
    sampler = samplers.get("sjd-pac:window=16,tree_width=2,tree_depth=2,coupling=false,init=repeat_vertical")
    assert (sampler.window, sampler.tree_width, sampler.tree_depth, sampler.coupling) == (16, 2, 2, False)
    for spec, message in [
        ("sjd-pac:tree_width=0", "tree_width must be an integer from 1 to 64, got '0'"),
        ("sjd-pac:tree_depth=17", "tree_depth must be an integer from 1 to 16"),
        ("sjd-pac:coupling=maybe", "coupling must be true or false"),
        ("sjd-pac:window=8", "make a tree of 13 nodes, more than window=8"),
        (
            "sjd-pac:acceptance=sometimes",
            "acceptance must be one of exact, lantern, gsd, entropy; got 'sometimes'",
        ),
    ]:
        with pytest.raises(ValueError, match=message):
            samplers.get(spec)


def test_a_tree_wider_than_the_vocabulary_is_refused():
    pipe = tiny_pipeline("janus", grid=(2, 2), vocab_size=4)
    with pytest.raises(ValueError, match="tree_width=5 is more than the 4 codes"):
        pipe("a red circle", sampler=SJDPAC(window=16, tree_width=5, tree_depth=2))


@pytest.mark.parametrize("family", ["janus", "lumina_mgpt"])
def test_every_tree_the_checks_accept_decodes(family):
    """Sizes that cannot work are refused with the other sampler checks, before any prompt is encoded; what
    the checks let through decodes (a one-input window used to fail inside the decode)."""
    pipe = tiny_pipeline(family, grid=(2, 2) if family == "janus" else (2, 1), vocab_size=4)
    for window in (1, 2, 3, 4, 7, 64):
        for width in (1, 2, 3, 4):
            for depth in (1, 2, 3):
                spec = f"sjd-pac:window={window},tree_width={width},tree_depth={depth}"
                try:
                    pipe.check_inputs("a red circle", sampler=spec)
                except ValueError:
                    continue
                assert pipe("a red circle", sampler=spec, seed=0, output_type="latent").codes.min() >= 0, spec


def test_a_window_larger_than_the_grid_is_refused_before_any_work():
    pipe = tiny_pipeline("janus", grid=(2, 2), vocab_size=4)
    with pytest.raises(ValueError, match="window=65 is larger than"):
        pipe("a red circle", sampler=SJDPAC(window=65))


# -- the tree --------------------------------------------------------------------------------------------
def test_tree_layout_of_the_official_defaults():
    """K = 3, D = 3, L = 64: 13 tree nodes, a main line of 54 (root + 53 drafts), 10 off-main nodes; 2 re-fed
    inputs lead the window."""
    assert tree_nodes(3, 3) == 13 and tree_nodes(1, 4) == 4 and tree_nodes(2, 3) == 7
    tree = TreeLayout.build(3, 3, 64, cells=256)
    assert (tree.main, tree.depth, tree.extra) == (54, 2, 10)
    assert tree.offset.shape == (2 + 64,)
    nodes = tree.children.shape[0]
    assert tree.children[0].tolist() == [1, 54, 55]  # the root's children: the main draft, two siblings
    assert tree.children[1].tolist() == [2, 56, 57]  # below the main draft of depth 1
    assert tree.children[2].tolist() == [3, -1, -1]  # the chain goes on below the main line only
    assert (tree.children[54] >= 0).all() and (tree.children[nodes - 1] < 0).all()
    depth = tree.offset[2:]
    assert depth[:54].tolist() == list(range(54)) and set(depth[54:].tolist()) == {1, 2}
    # every node sees the re-fed inputs and its ancestors, nothing else
    sees = tree.sees[2:, 2:]
    assert sees[56].nonzero().flatten().tolist() == [0, 1, 56]
    assert sees[3].nonzero().flatten().tolist() == [0, 1, 2, 3]
    assert tree.sees[2:, :2].all() and tree.sees[:2, :2].tolist() == [[True, False], [True, True]]
    assert tree.branch[2 + 54 :].tolist() == list(range(10)) and (tree.branch[: 2 + 54] < 0).all()


def test_tree_layout_on_a_small_grid_is_clipped():
    tree = TreeLayout.build(3, 3, 64, cells=2)  # the main line holds the image; the tree keeps 1 depth
    assert (tree.main, tree.depth, tree.extra) == (2, 1, 2)
    assert TreeLayout.build(1, 3, 8, cells=64).depth == 0  # a one-wide tree is just the chain


# -- the multi-draft rule on hand-made tensors -----------------------------------------------------------
T = torch.tensor([0.5, 0.3, 0.2, 0.0], dtype=torch.float64)
Q = torch.tensor([0.1, 0.6, 0.2, 0.1], dtype=torch.float64)


def test_the_first_passing_sibling_wins():
    candidates = torch.tensor([[1, 0, 2]])
    # the main draft (code 1, t/q = 0.5) passes with u = 0.4 although sibling 1 would pass too
    rank, found, _ = verify_candidates(T[None], Q[None], candidates, torch.tensor([[0.4, 0.1, 0.1]]))
    assert (rank.item(), found.item()) == (0, True)
    # u = 0.6 rejects it; sibling 1 (code 0) is tested against the residual
    rank, found, _ = verify_candidates(T[None], Q[None], candidates, torch.tensor([[0.6, 0.1, 0.1]]))
    assert (rank.item(), found.item()) == (1, True)


def test_recursive_residuals_by_hand():
    """Main draft 1 and sibling 0 rejected: t1 = norm(max(0, t - q)) = [0.4, 0, 0, 0]/0.4 -> [1, 0, 0, 0];
    sibling 0 is drawn from q without code 1 ([0.25, 0, 0.5, 0.25]), so r1(0) = 0.25 < t1(0) = 1 always
    passes; with code 2 instead it fails (t1(2) = 0) and t2 = norm(max(0, t1 - r1)) = [1, 0, 0, 0]."""
    r1 = candidate_proposal(Q[None], torch.tensor([[False, True, False, False]]))
    torch.testing.assert_close(r1[0], torch.tensor([0.25, 0.0, 0.5, 0.25], dtype=torch.float64))
    rank, found, rest = verify_candidates(
        T[None], Q[None], torch.tensor([[1, 2]]), torch.tensor([[0.9, 0.01]])
    )
    assert not found.item()
    t1 = residual(T, Q)
    t1 = t1 / t1.sum()
    t2 = residual(t1, r1[0])
    torch.testing.assert_close(rest[0], t2 / t2.sum())
    torch.testing.assert_close(rest[0], torch.tensor([1.0, 0, 0, 0], dtype=torch.float64))


def test_siblings_are_drawn_without_replacement_and_fall_back_to_uniform():
    q = torch.tensor([[0.7, 0.2, 0.1, 0.0, 0.0]]).expand(5000, -1)
    main = sample(q, torch.rand(5000, generator=torch.Generator().manual_seed(0)))
    u = torch.rand(5000, 3, generator=torch.Generator().manual_seed(1))
    siblings = draw_candidates(q, main, u)
    everything = torch.cat([main[:, None], siblings], 1)
    assert all(len(set(row)) == 4 for row in everything.tolist())  # four distinct codes per depth
    # the proposal's support (3 codes) runs out at the third sibling: it is uniform over the two left
    assert set(siblings[:, 2].tolist()) <= {3, 4} and set(siblings[:, :2].flatten().tolist()) <= {0, 1, 2}
    # a point-mass proposal (a guessed draft) gets uniform siblings
    point = torch.tensor([[0.0, 1.0, 0.0, 0.0, 0.0]]).expand(5000, -1)
    siblings = draw_candidates(point, torch.ones(5000, dtype=torch.long), u[:, :1])
    counts = torch.bincount(siblings[:, 0], minlength=5)
    assert counts[1] == 0 and (counts[[0, 2, 3, 4]] > 1100).all()


def _multi_draft(target, q, width, seed, wrong=None, sibling_q=None):
    """One tree depth per draw: the main draft ~ q, `width - 1` siblings without replacement from
    `sibling_q` (default `q`), the first that passes kept, else a draw from the last residual."""
    generator = torch.Generator().manual_seed(seed)
    u = torch.rand(DRAWS, 2 * width + 1, generator=generator, dtype=torch.float64)
    t, q = target.expand(DRAWS, -1), q.expand(DRAWS, -1)
    sibling_q = q if sibling_q is None else sibling_q.expand(DRAWS, -1)
    declared = q if wrong == "siblings declared drawn from q" else sibling_q
    main = sample(q, u[:, 0])
    siblings = draw_candidates(sibling_q, main, u[:, 1:width])
    candidates = torch.cat([main[:, None], siblings], 1)
    if wrong == "siblings tested against t":  # no recursive residual: every sibling against the target
        ok = torch.stack(
            [u[:, width + k] * q.gather(1, candidates[:, k : k + 1])[:, 0] < t.gather(1, candidates[:, k : k + 1])[:, 0]
             for k in range(width)], 1)  # fmt: skip
        found, rank = ok.any(1), ok.long().argmax(1)
        rest = residual(t, q)
    else:
        rank, found, rest = verify_candidates(t, q, candidates, u[:, width : 2 * width], sibling_q=declared)
    if wrong == "resample from t":
        rest = t
    return torch.where(found, candidates.gather(1, rank[:, None])[:, 0], sample(rest, u[:, -1]))


@pytest.mark.parametrize("width", [1, 2, 3, 5])
@pytest.mark.parametrize("seed", range(3))
def test_recursive_rejection_over_siblings_gives_exactly_the_target(width, seed):
    generator = torch.Generator().manual_seed(seed)
    target = torch.rand(6, generator=generator, dtype=torch.float64) ** 3
    q = torch.rand(6, generator=generator, dtype=torch.float64) ** 3
    target[seed] = 0.0  # filtered out by top-k
    q[(seed + 2) % 6] = 0.0  # never drafted by the main proposal
    target, q = target / target.sum(), q / q.sum()
    assert chisquare_p_value(_multi_draft(target, q, width, seed), target) > 1e-3


@pytest.mark.parametrize("wrong", ["siblings tested against t", "resample from t"])
def test_negative_control_a_wrong_sibling_rule_is_rejected(wrong):
    assert chisquare_p_value(_multi_draft(T, Q, 3, 0, wrong=wrong), T) < 1e-12


@pytest.mark.parametrize("width", [2, 3, 5])
@pytest.mark.parametrize("seed", range(3))
def test_siblings_from_another_proposal_give_exactly_the_target(width, seed):
    """`eagle:chain=jacobi`: the main draft from one proposal (a Jacobi draft's), the siblings without
    replacement from another (the drafter's), which may put mass where the first has none."""
    generator = torch.Generator().manual_seed(10 + seed)
    target, q, other = torch.rand(3, 6, generator=generator, dtype=torch.float64) ** 3
    target[seed] = 0.0
    q[(seed + 2) % 6] = 0.0
    other[(seed + 4) % 6] = 0.0
    target, q, other = (x / x.sum() for x in (target, q, other))
    assert chisquare_p_value(_multi_draft(target, q, width, seed, sibling_q=other), target) > 1e-3


def test_negative_control_siblings_declared_drawn_from_the_main_proposal_are_rejected():
    """Siblings drawn from the drafter's proposal but verified as if drawn from the main draft's (here the
    main proposal leaves a residual with room for the siblings to matter, unlike `T` and `Q`)."""
    target = torch.tensor([0.35, 0.3, 0.2, 0.1, 0.05], dtype=torch.float64)
    q, other = target.flip(0), torch.tensor([0.6, 0.1, 0.1, 0.1, 0.1], dtype=torch.float64)
    assert chisquare_p_value(_multi_draft(target, q, 3, 0, sibling_q=other), target) > 1e-3
    codes = _multi_draft(target, q, 3, 0, wrong="siblings declared drawn from q", sibling_q=other)
    assert chisquare_p_value(codes, target) < 1e-12


def test_siblings_raise_acceptance():
    """What the tree buys at one depth: P(some candidate passes) grows with the width (Q and T overlap little)."""
    accepted = []
    for width in (1, 2, 3):
        generator = torch.Generator().manual_seed(0)
        u = torch.rand(DRAWS, 2 * width, generator=generator, dtype=torch.float64)
        q = Q.expand(DRAWS, -1)
        main = sample(q, u[:, 0])
        candidates = torch.cat([main[:, None], draw_candidates(q, main, u[:, 1:width])], 1)
        _, found, _ = verify_candidates(T.expand(DRAWS, -1), q, candidates, u[:, width:])
        accepted.append(found.double().mean().item())
    overlap = torch.minimum(T, Q).sum().item()  # 1 - TV: SJD's acceptance
    assert abs(accepted[0] - overlap) < 5 * np.sqrt(overlap * (1 - overlap) / DRAWS)
    assert accepted[0] < accepted[1] < accepted[2]


# -- decoding ------------------------------------------------------------------------------------------
def test_a_one_wide_tree_decodes_exactly_as_sjd(family):
    """With tree_width=1 there are no siblings and no re-fed inputs: the same codes and forwards as sjd
    (coupling=False) and mc-sjd (coupling=True), seed for seed."""
    grid = (4, 4) if family == "janus" else (3, 5)
    pipe = tiny_pipeline(family, grid=grid, vocab_size=8, logit_scale=3.0)
    if (
        family == "glm_image"
    ):  # a preview grid as large as the target (the equality needs grids of >= window cells)
        pipe.register_to_config(preview_side=4)
    prompts = ["a red circle", "green star"] * 2
    for coupling, init in ((False, "random"), (True, "sample_vertical")):
        runs = [
            pipe(prompts, sampler=sampler, seed=0, top_k=5, output_type="latent")
            for sampler in (
                SJDPAC(window=5, tree_width=1, coupling=coupling, init=init),
                SJD(window=5, coupling=coupling, init=init),
            )
        ]
        assert torch.equal(runs[0].codes, runs[1].codes)
        assert [s.forward_passes for s in runs[0].stats] == [s.forward_passes for s in runs[1].stats]


def test_each_image_commits_its_own_number_of_tokens(family):
    grid = (4, 4) if family == "janus" else (3, 4)
    pipe = tiny_pipeline(family, grid=grid, vocab_size=16, logit_scale=3.0)
    sampler = SJDPAC(window=9, tree_width=2, tree_depth=3)
    out = pipe(["a red circle", "green star on a blue background"] * 3, sampler=sampler, seed=0)
    assert len({tuple(s.accepted_per_step) for s in out.stats}) > 1  # ragged
    for stat in out.stats:
        assert sum(stat.accepted_per_step) == stat.tokens == all_cells(pipe, grid)
        assert len(stat.accepted_per_step) == stat.forward_passes
        assert stat.commit_step.max() == stat.forward_passes
    alone = pipe("green star on a blue background", sampler=sampler, seed=3)
    assert torch.equal(alone.codes[0], out.codes[3])
    assert alone.stats[0].forward_passes == out.stats[3].forward_passes


def test_greedy_sjd_pac_reproduces_greedy_ar(family):
    grid = (4, 4) if family == "janus" else (3, 4)
    pipe = tiny_pipeline(family, grid=grid, vocab_size=16, logit_scale=3.0)
    prompts = ["a red circle", "green star"]
    ar = pipe(prompts, temperature=0).codes
    for sampler in (
        SJDPAC(window=16),
        SJDPAC(window=7, tree_width=2, init="repeat_horizontal", coupling=False),
    ):
        assert torch.equal(pipe(prompts, sampler=sampler, temperature=0).codes, ar)


def test_siblings_save_forwards_over_the_same_main_line():
    """On a peaky tiny model, a tree over the first two draft depths needs fewer forwards than the same main
    line without siblings (a sanity check of what the siblings are for, not a benchmark)."""
    pipe = tiny_pipeline("emu3", grid=(4, 6), vocab_size=6, logit_scale=4.0)
    prompts = ["a red circle", "green star"] * 16

    def passes(sampler):
        return sum(
            s.forward_passes for s in pipe(prompts, sampler=sampler, seed=0, output_type="latent").stats
        )

    tree = SJDPAC(window=14, tree_width=3, tree_depth=3)  # main line of 4: root + 3 drafts, 10 siblings
    assert TreeLayout.build(3, 3, 14, cells=24).main == 4
    assert passes(tree) < passes(SJDPAC(window=4, tree_width=1))
