"""The domain report: canonical phrasings, attribute-swap variants, and the report on a few prompts."""

import numpy as np
import PIL.Image
import pytest

from arjet.data import COLORS, SHAPES, Background, Scene, Shape, heldout_set, render_reference
from arjet.eval.domain import _variants, canonical, domain_report, reconstruct


def _shape(shape="circle", color="red", x=0.3, y=0.5):
    return Shape(shape=shape, color=color, size="small", x=x, y=y)


@pytest.mark.parametrize(
    "scene, text",
    [
        (Scene((_shape(),), Background("plain", ("white",))), "a red circle on a white background"),
        (
            Scene(
                (_shape(), _shape("square", "blue")), Background("stripes", ("red", "blue")), "pair", "left"
            ),
            "a red circle left of a blue square",
        ),
        (
            Scene((_shape("cross", "orange"),) * 3, Background("checker", ("white", "gray")), "count"),
            "three orange crosses",
        ),
        (
            Scene(
                (_shape(), _shape("star", "green"), _shape("triangle", "orange")),
                Background("noise", ("red",)),
                "group",
            ),
            "a red circle, a green star and an orange triangle",
        ),
    ],
)
def test_canonical_phrasing(scene, text):
    assert canonical(scene) == text


def test_variants_swap_one_object_and_mark_the_truth():
    scene = Scene((_shape(), _shape("square", "blue")), Background("plain", ("white",)), "pair", "above")
    colour_variants = _variants(scene, "color")
    assert len(colour_variants) == 2 and all(len(texts) == len(COLORS) for texts, _ in colour_variants)
    texts, truth = colour_variants[1]
    assert texts[truth] == canonical(scene)
    assert texts[list(COLORS).index("green")] == "a red circle above a green square on a white background"
    count = Scene((_shape("star"),) * 2, Background("plain", ("white",)), "count")
    ((texts, truth),) = _variants(count, "shape")
    assert len(texts) == len(SHAPES) and texts[truth] == "two red stars on a white background"


def test_report_on_a_few_prompts(builtin_pipe, tmp_path):
    report = domain_report(builtin_pipe, n=6, batch=6, grid=tmp_path / "grid.png", grid_rows=4)
    with PIL.Image.open(tmp_path / "grid.png") as grid:
        assert grid.height > 4 * 64  # four prompts down, enlarged
    assert report["n"] == 6 and report["sampler"] == "ar"
    for name in ("generated", "reconstructions", "references"):
        for attribute in ("color", "shape"):
            assert 0.0 <= report[f"{attribute}_accuracy_{name}"] <= 1.0
        assert report[f"clip_score_{name}"] > 0.0
    assert report["fid_floor_references_vs_references"] >= 0.0
    assert report["fid_reconstructions_vs_references"] >= 0.0
    assert report["clip_score_references"] > 0.0


def test_report_refuses_more_prompts_than_the_held_out_set_has(builtin_pipe):
    with pytest.raises(ValueError, match=f"n must be an integer from 2 to {len(heldout_set()) // 2}"):
        domain_report(builtin_pipe, n=len(heldout_set()) // 2 + 1)


def _psnr(a, b) -> float:
    error = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    return float(10 * np.log10(255.0**2 / np.mean(error**2)))


def test_reconstructions_are_the_references_through_the_tokenizer(builtin_pipe):
    references = [render_reference(item, 64) for item in heldout_set(8)]
    reconstructions = reconstruct(builtin_pipe, references, batch=3)
    assert [image.size for image in reconstructions] == [(64, 64)] * 8
    own = [_psnr(r, x) for r, x in zip(references, reconstructions, strict=True)]
    assert np.mean(own) > 24.0  # the shipped tokenizer's held-out mean is 28.4 dB
    others = [_psnr(r, x) for r, x in zip(references[1:] + references[:1], reconstructions, strict=True)]
    assert all(a > b + 3 for a, b in zip(own, others, strict=True))  # in order, each its own image
