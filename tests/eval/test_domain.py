"""The domain report: canonical phrasings, attribute-swap variants, and the report on a few prompts."""

import pytest

from arjet.data import COLORS, SHAPES, Background, Scene, Shape, heldout_set
from arjet.eval.domain import _variants, canonical, domain_report


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


def test_report_on_a_few_prompts(builtin_pipe):
    report = domain_report(builtin_pipe, n=6, batch=6)
    assert report["n"] == 6 and report["sampler"] == "ar"
    for key in ("color_accuracy_generated", "shape_accuracy_references"):
        assert 0.0 <= report[key] <= 1.0
    assert report["fid_floor_references_vs_references"] >= 0.0
    assert report["clip_score_references"] > 0.0


def test_report_refuses_more_prompts_than_the_held_out_set_has(builtin_pipe):
    with pytest.raises(ValueError, match="n must be at most"):
        domain_report(builtin_pipe, n=len(heldout_set()) // 2 + 1)
