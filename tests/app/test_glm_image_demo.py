"""`arjet app --model FOLDER` with a GLM-Image folder: the demo lists it, loads it, offers its samplers and
decodes it (its canvas fills in with the codes' false colours, then the diffusion stage's image)."""

import PIL.Image
import pytest

from arjet import cli
from arjet.app import ui
from arjet.testing import tiny_pipeline


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-glm-image")
    tiny_pipeline("glm_image", grid=(2, 3), vocab_size=8, logit_scale=3.0).save_pretrained(folder)
    return folder


def test_the_app_lists_a_glm_image_folder(folder, monkeypatch):
    built = {}
    monkeypatch.setattr(ui, "serve", lambda demo, host, port: built.update(demo=demo))
    assert cli.main(["app", "--model", str(folder), "--device", "cpu"]) == 0
    (dropdown,) = [b for b in built["demo"].blocks.values() if getattr(b, "label", None) == "Model"]
    assert [choice[0] for choice in dropdown.choices] == [folder.name]


def test_the_app_decodes_glm_image_and_sets_its_cfg_scale_aside(folder):
    shelf = ui.ModelShelf({"glm": str(folder)}, device="cpu")
    offered = ui.sampler_choices(shelf.get("glm"))
    assert {"ar", "sjd", "mc-sjd", "sjd-pac", "zipar", "lantern"} <= set(offered) and "sjd2" not in offered
    inputs = ("a red circle", "sjd", "window=4", 0, 3.0, 1.0, 0)  # the page's default CFG scale of 3
    frames = list(ui._run(shelf, "glm", inputs, False, lambda *a, **k: None, 300, ui.Budget(None)))
    image, baseline, heat, stats = frames[-1]
    assert isinstance(image, PIL.Image.Image) and baseline is None and heat is not None
    assert "glm has no classifier-free guidance in its AR stage" in stats
    assert len(frames) >= 3  # canvases while decoding, then the result
