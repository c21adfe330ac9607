"""Lossless samplers produce exactly `ar`'s distribution: tested against the exact joint of a tiny grid.

Every test draws a few thousand images with fixed seeds, with CFG, top-k and temperature != 1, and runs a
chi-square test against the joint distribution obtained by enumerating every code grid through an uncached
full forward. The negative controls show the same test rejects samplers whose rule is subtly wrong.
"""

import functools

import pytest
import torch

from arjet.samplers import INIT_SCHEMES, SJD, Lantern, LogitsPolicy, ZipAR, jacobi, speculative
from arjet.testing import tiny_pipeline

from stats import exact_joint, goodness_of_fit

PROMPT = "a red circle left of a blue square"
GUIDANCE, POLICY = 3.0, LogitsPolicy(temperature=0.8, top_k=3)
SAMPLES = 4000
# About 50 tests share this file: a lossless sampler must not fail any of them by chance (family-wise false
# alarm ~5e-4), while every negative control below lands far under REJECT_BELOW (see each test).
ALPHA = 1e-5
REJECT_BELOW = 1e-6
GRIDS = {"janus": (2, 2), "emu3": (2, 3), "lumina_mgpt": (2, 3)}  # Janus decodes square grids only
LOGIT_SCALES = {"janus": 3.0, "emu3": 3.0, "lumina_mgpt": 6.0}  # peaky enough for the negative controls


@functools.cache
def _setup(family):
    grid = GRIDS[family]
    pipe = tiny_pipeline(family, grid=grid, vocab_size=4, logit_scale=LOGIT_SCALES[family])
    return pipe, exact_joint(pipe, PROMPT, grid, POLICY, GUIDANCE)


def _draw(pipe, sampler, samples=SAMPLES, seed=0, policy=POLICY):
    out = pipe(
        PROMPT,
        sampler=sampler,
        num_images_per_prompt=samples,
        seed=seed,
        guidance_scale=GUIDANCE,
        temperature=policy.temperature,
        top_k=policy.top_k,
        top_p=policy.top_p,
        output_type="latent",
    )
    return out.codes.flatten(1)


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
    exact = exact_joint(pipe, PROMPT, GRIDS[family], policy, GUIDANCE)
    sampler = SJD(window=3, init="sample_horizontal", coupling=True)
    assert goodness_of_fit(_draw(pipe, sampler, policy=policy), exact) > ALPHA


@pytest.mark.parametrize(
    "sampler",
    [SJD(window=4, init=init, coupling=coupling) for init in INIT_SCHEMES for coupling in (False, True)]
    + [ZipAR(w=2), ZipAR(w=3, verify=SJD(window=3)), ZipAR(w=3, verify=SJD(window=2, coupling=True))],
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
        guidance_scale=GUIDANCE,
        temperature=POLICY.temperature,
        top_k=POLICY.top_k,
        output_type="latent",
    )
    singles = [_draw(pipe, sampler, samples=1, seed=seed) for seed in seeds]
    assert torch.equal(torch.cat(singles), batch.codes.flatten(1))


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


class _TwiceTemperature:
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


WRONG_MATHS = {  # attribute of arjet.samplers.jacobi (the shared window step) -> a subtly wrong replacement
    "residual-replaced-by-p": {"residual": lambda target, q: target},
    "q-taken-before-top-k": {
        "accept_prefix": lambda t, q, *rest: speculative.accept_prefix(t, _before_top_k(q), *rest),
        "residual": lambda t, q: speculative.residual(t, _before_top_k(q)),
    },
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
@pytest.mark.parametrize("grid_family", ["emu3", "lumina_mgpt"])
def test_negative_control_wrong_speculative_maths_is_rejected(grid_family, wrong, monkeypatch):
    """Janus's square 2x2 grid leaves SJD too few verifications for these small biases to show at this
    sample size; the 2x3 grids expose them (p < 1e-14 when this was written). Coupling without the residual
    is caught where it is large, in `test_speculative.py`."""
    pipe, exact = _setup(grid_family)
    for name, replacement in WRONG_MATHS[wrong].items():
        monkeypatch.setattr(jacobi, name, replacement)
    assert goodness_of_fit(_draw(pipe, SJD(window=3), samples=2 * SAMPLES), exact) < REJECT_BELOW
