"""What a report says besides its table: notes on what its figures cannot tell, and names, not paths."""

from arjet.builtin import assets_dir, model_name
from arjet.eval.report import fid_note, judge_note
from arjet.eval.scoring import SamplerResult


def _row(images: int, fid: float | None = 40.0) -> SamplerResult:
    return SamplerResult("ar", images, fid, 60.0, 256.0, 1.0, 1.0, 1.0, 1.0)


def test_fid_from_fewer_images_than_feature_dimensions_gets_a_note():
    note = fid_note([_row(4)], {"fid_feature_dims": 128})
    assert note.startswith("FID from 4 images per sampler, fewer than its 128 feature dimensions")
    assert "--n 128" in note
    assert fid_note([_row(200)], {"fid_feature_dims": 128}) is None
    assert fid_note([_row(4, fid=None)], {"fid_feature_dims": 128}) is None  # no FID, no note
    assert fid_note([_row(4)], {}) is None


def test_the_domain_clip_judging_other_prompts_gets_a_note():
    note = judge_note("parti", "domain", "domain")
    assert "knows only the built-in shapes scenes" in note and "`parti`" in note
    assert "CLIP score and FID features" in note
    assert judge_note("shapes", "domain", "domain") is None
    assert judge_note("parti", "inception:/w.pth", None) is None
    assert "FID features" in judge_note("coco5k", "domain:/my/clip", "open_clip:ViT-B-32:/w.pt")


def test_reports_name_models_not_paths(tmp_path):
    assert model_name("shapes") == "shapes"
    assert model_name(str(assets_dir() / "shapes-sjd2")) == "shapes-sjd2"
    assert model_name("deepseek-community/Janus-Pro-1B") == "deepseek-community/Janus-Pro-1B"
    (tmp_path / "my-janus").mkdir()
    assert model_name(str(tmp_path / "my-janus")) == "my-janus"


def test_the_table_shows_a_drafters_cost_when_a_sampler_used_one():
    from dataclasses import replace

    from arjet.eval.report import results_table

    plain = results_table([_row(8)])
    assert "drafter forwards" not in plain
    drafted = results_table([_row(8), replace(_row(8), sampler="eagle", drafter_forwards=581.5)])
    header, _, ar_row, eagle_row = drafted.splitlines()
    assert header.endswith("| drafter forwards |")
    assert ar_row.endswith("| 0.0 |") and eagle_row.endswith("| 581.5 |")
