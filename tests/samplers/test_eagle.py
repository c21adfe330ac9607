"""`eagle` and the drafter forms of `lantern` / `lantern++`: their options, their checks, and what the relaxed
forms guarantee (exactness lives in `test_lossless.py`)."""

import pytest
import torch

from arjet.samplers import SJD, SJDPAC, Eagle, Eagle2, Exact, Lantern, get, options
from arjet.testing import tiny_drafter, tiny_pipeline

PROMPT = "a red circle left of a blue square"


@pytest.fixture(scope="module")
def drafted():
    return tiny_drafter(tiny_pipeline("emu3", grid=(4, 4), vocab_size=8, logit_scale=3.0), fc_scale=3.0)


def _codes(pipe, sampler, seeds=(0, 1, 2, 3, 4, 5)):
    out = pipe(
        PROMPT, sampler=sampler, seed=list(seeds), num_images_per_prompt=len(seeds), output_type="latent"
    )
    return out.codes, out.stats


def test_the_registry_builds_each_form():
    assert get("eagle") == Eagle() and get("eagle").acceptance == Exact()
    assert get("eagle2") == Eagle2() and get("eagle2").acceptance == Exact()
    dynamic = get("lantern:drafter=true,tree_width=3,expand=2,delta=0.2")
    assert isinstance(dynamic, Eagle2) and (dynamic.tree_width, dynamic.expand) == (3, 2)
    assert dynamic.tree_depth == Eagle2().tree_depth and dynamic.acceptance == Lantern(delta=0.2)
    assert isinstance(get("lantern"), SJD)
    tree = get("lantern++:drafter=true,lam=5,k=10")
    assert (
        isinstance(tree, Eagle) and tree.window == Eagle().window and tree.acceptance == Lantern(k=10, lam=5)
    )
    free = get("lantern++:lam=5")
    assert isinstance(free, SJDPAC) and free.window == SJDPAC().window and free.acceptance == Lantern(lam=5)
    assert {"drafter", "window", "tree_width", "k", "lam"} <= {option.name for option in options("lantern++")}


def test_jacobi_options_are_refused_with_a_drafter():
    with pytest.raises(ValueError, match="coupling applies to Jacobi drafts"):
        get("lantern:drafter=true,coupling=true")
    with pytest.raises(ValueError, match="init applies to Jacobi drafts"):
        get("lantern++:drafter=true,init=repeat_vertical")


def test_options_of_the_other_form_are_refused():
    with pytest.raises(ValueError, match="window applies to Jacobi drafts; lantern with drafter=true"):
        get("lantern:drafter=true,window=5")
    with pytest.raises(
        ValueError, match="expand shapes a drafter's tree; lantern takes it with drafter=true"
    ):
        get("lantern:expand=2")


def test_a_dynamic_tree_expands_no_more_nodes_than_the_root_has_children():
    with pytest.raises(ValueError, match="expand=4 is more than the root's tree_width=2 children"):
        get("eagle2:tree_width=2,expand=4")
    assert get("eagle2:tree_width=2,expand=4,tree_depth=2").expand == 4  # no level is expanded


def test_a_tree_larger_than_the_window_is_refused():
    with pytest.raises(ValueError, match="tree of 13 nodes, more than window=8"):
        get("eagle:window=8")
    huge = r"of 1,257,589,881,178,799,009,421,332,545 nodes, .*; use a smaller tree$"  # no window suggested
    with pytest.raises(ValueError, match=huge):
        get("lantern++:drafter=true,tree_width=64,tree_depth=16")


@pytest.mark.parametrize("sampler", ["eagle", "eagle2", "lantern:drafter=true", "lantern++:drafter=true"])
def test_a_pipeline_without_a_drafter_refuses_in_one_line_before_any_model_work(sampler, monkeypatch):
    pipe = tiny_pipeline("janus", grid=(2, 2))
    monkeypatch.setattr(pipe, "encode_prompts", lambda *a, **k: pytest.fail("model work before the check"))
    with pytest.raises(ValueError, match="needs a trained drafter") as error:
        pipe(PROMPT, sampler=sampler)
    assert "\n" not in str(error.value)


def test_the_chain_is_the_drafters_or_jacobi():
    assert Eagle().chain == "drafter" and get("eagle:chain=jacobi").chain == "jacobi"
    with pytest.raises(ValueError, match="chain must be one of drafter, jacobi; got 'medusa'"):
        get("eagle:chain=medusa")
    relaxed = get("lantern++:drafter=true,chain=jacobi,lam=5")
    assert relaxed.chain == "jacobi" and relaxed.acceptance == Lantern(lam=5)
    with pytest.raises(
        ValueError, match="chain=jacobi chooses what a drafter drafts; lantern\\+\\+ takes it"
    ):
        get("lantern++:chain=jacobi")


@pytest.mark.parametrize(
    "sampler",
    [
        Eagle(window=8, tree_width=2, tree_depth=2),
        Eagle(window=8, tree_width=2, tree_depth=3, chain="jacobi"),
        Eagle2(tree_width=3, expand=2, tree_depth=4),
    ],
    ids=["eagle", "eagle-jacobi", "eagle2"],
)
def test_an_image_decodes_alone_as_in_a_batch(drafted, sampler):
    """Each image has its own random streams, and the drafter's rows (and tree) are its own."""
    batch, _ = _codes(drafted, sampler)
    singles = [_codes(drafted, sampler, seeds=(seed,))[0] for seed in range(6)]
    assert torch.equal(torch.cat(singles), batch)


def test_relaxed_forms_that_claim_nothing_are_eagle(drafted):
    """LANTERN with delta = 0 (or LANTERN++ with lam = 1) moves no mass onto a draft: every decision is
    eagle's, code for code."""
    exact, _ = _codes(drafted, Eagle(window=8, tree_width=2, tree_depth=2))
    for spec in (
        "lantern++:drafter=true,window=8,tree_width=2,tree_depth=2,lam=1",
        "lantern++:drafter=true,window=8,tree_width=2,tree_depth=2,delta=0",
    ):
        assert torch.equal(_codes(drafted, spec)[0], exact), spec
    over_jacobi, _ = _codes(drafted, Eagle(window=8, tree_width=2, tree_depth=2, chain="jacobi"))
    spec = "lantern++:drafter=true,chain=jacobi,window=8,tree_width=2,tree_depth=2,lam=1"
    assert torch.equal(_codes(drafted, spec)[0], over_jacobi)
    dynamic, _ = _codes(drafted, Eagle2(tree_width=3, expand=2, tree_depth=4))
    spec = "lantern:drafter=true,tree_width=3,expand=2,tree_depth=4,delta=0"
    assert torch.equal(_codes(drafted, spec)[0], dynamic)


def test_the_training_free_form_that_claims_nothing_is_sjd_pac(drafted):
    exact, _ = _codes(drafted, SJDPAC(window=8, tree_width=2, tree_depth=2))
    assert torch.equal(_codes(drafted, "lantern++:window=8,tree_width=2,tree_depth=2,delta=0")[0], exact)


@pytest.mark.parametrize(
    ("exact", "relaxed"),
    [
        (
            Eagle(window=8, tree_width=2, tree_depth=2),
            "lantern++:drafter=true,window=8,tree_width=2,tree_depth=2",
        ),
        (
            Eagle2(tree_width=2, expand=2, tree_depth=4),
            "lantern:drafter=true,tree_width=2,expand=2,tree_depth=4",
        ),
    ],
    ids=["static-tree", "dynamic-tree"],
)
def test_relaxing_accepts_more_codes_per_forward(drafted, exact, relaxed):
    """A loose budget (half the mass of any 7 neighbours) commits more codes per target forward than the
    exact rule on the same drafter's tree, and every code is still a code of the grid."""
    exact_stats = _codes(drafted, exact, seeds=range(24))[1]
    relaxed_codes, relaxed_stats = _codes(drafted, f"{relaxed},delta=0.5,k=7", seeds=range(24))
    passes = [sum(s.forward_passes for s in stats) for stats in (exact_stats, relaxed_stats)]
    assert passes[1] < passes[0]
    assert ((relaxed_codes >= 0) & (relaxed_codes < 8)).all()


@pytest.mark.parametrize("depth", [2, 4])
def test_eagle2_runs_its_drafter_once_per_tree_level(drafted, depth):
    """Per image: one catch-up and `depth - 2` tree levels before every tree the target verifies (its
    forwards less the prefill); after the last, the catch-up alone."""
    _, stats = _codes(drafted, Eagle2(tree_width=2, expand=2, tree_depth=depth), seeds=(0, 1))
    for image in stats:
        assert image.extra["drafter_forwards"] == (depth - 1) * (image.forward_passes - 1) + 1


def test_stats_count_the_drafter_forwards(drafted):
    _, stats = _codes(drafted, Eagle(window=8, tree_width=2, tree_depth=2), seeds=(0,))
    assert stats[0].extra["drafter_forwards"] > stats[0].forward_passes
    _, plain = _codes(drafted, "sjd-pac:window=8,tree_width=2,tree_depth=2", seeds=(0,))
    assert "drafter_forwards" not in plain[0].extra


@pytest.mark.parametrize("depth", [2, 3])
def test_over_jacobi_drafts_the_drafter_runs_once_per_tree_depth(drafted, depth):
    """Per image: one catch-up and `depth - 2` forwards along the main chain before every window the target
    verifies (its forwards less the prefill); after the last, the catch-up alone."""
    _, stats = _codes(drafted, Eagle(window=8, tree_width=2, tree_depth=depth, chain="jacobi"), seeds=(0, 1))
    for image in stats:
        assert image.extra["drafter_forwards"] == (depth - 1) * (image.forward_passes - 1) + 1
