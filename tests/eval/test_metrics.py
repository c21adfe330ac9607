import sys

import PIL.Image
import pytest
import torch

from arjet.eval.clip import load_clip, parse_clip_spec
from arjet.eval.features import check_feature_spec, load_feature_network
from arjet.eval.metrics import (
    FeatureStatistics,
    clip_scores,
    feature_statistics,
    frechet_distance,
    reference_statistics,
)
from arjet.eval.reference import DomainReference, FolderReference, fit, reference_source

from .conftest import COLOURS, colour_squares, fake_data_module, to_pil

WARM = ["red", "yellow", "purple"] * 12
COOL = ["blue", "cyan", "green"] * 12


@pytest.fixture(scope="module")
def features(tiny_clip_dir):
    return load_feature_network(f"domain:{tiny_clip_dir}")


def test_fid_of_a_set_against_itself_is_about_zero_and_against_a_different_set_is_not(features):
    warm = to_pil(colour_squares(WARM, seed=1))
    reference = feature_statistics(features, warm)
    assert reference.count == len(WARM) and reference.total.dtype == torch.float64
    itself = frechet_distance(features, reference, warm)
    same_kind = frechet_distance(features, reference, to_pil(colour_squares(WARM, seed=2)))
    different = frechet_distance(features, reference, to_pil(colour_squares(COOL, seed=3)))
    assert abs(itself) < 1e-3
    assert different > 0.5
    assert different > 10 * max(same_kind, 1e-3)


def test_clip_score_ranks_matching_prompts_above_mismatched_ones(tiny_clip_dir):
    clip = load_clip(f"domain:{tiny_clip_dir}")
    names = list(COLOURS)
    images = to_pil(colour_squares(names * 3, seed=7))
    matrix = torch.tensor(
        [clip_scores(clip, images, [f"a {name} square"] * len(images)) for name in names]
    ).T  # [image, prompt]
    truth = torch.tensor([names.index(n) for n in names * 3])
    matching = matrix[torch.arange(len(images)), truth]
    mismatched = matrix.masked_fill(torch.nn.functional.one_hot(truth, len(names)).bool(), float("nan"))
    assert (matrix.argmax(1) == truth).float().mean() >= 0.9
    assert matching.mean() > mismatched.nanmean() + 20
    assert (matrix >= 0).all() and (matrix <= 100).all()
    with pytest.raises(ValueError, match="more images than the 2 prompts"):
        clip_scores(clip, images[:3], ["a red square"] * 2, batch_size=2)
    with pytest.raises(ValueError, match="3 images for 4 prompts"):
        clip_scores(clip, images[:3], ["a red square"] * 4)


def test_reference_statistics_are_cached_by_network_and_folder_contents(features, tmp_path, monkeypatch):
    folder = tmp_path / "real"
    folder.mkdir()
    for k, image in enumerate(to_pil(colour_squares(WARM[:6], seed=4, size=24))):
        image.save(folder / f"{k}.png")
    source = FolderReference(folder)
    source.check()
    first = reference_statistics(features, source, (16, 16), cache_dir=tmp_path / "cache")
    assert len(list((tmp_path / "cache").glob("*.npz"))) == 1
    computed = []
    monkeypatch.setattr("arjet.eval.metrics.feature_statistics", lambda *a, **k: computed.append(1) or first)
    again = reference_statistics(features, source, (16, 16), cache_dir=tmp_path / "cache")
    assert not computed and torch.equal(again.outer, first.outer) and again.count == 6
    to_pil(colour_squares(["blue"], seed=5, size=24))[0].save(folder / "extra.png")
    reference_statistics(features, FolderReference(folder), (16, 16), cache_dir=tmp_path / "cache")
    assert computed  # new folder contents: a new key
    assert isinstance(FeatureStatistics.load(next((tmp_path / "cache").glob("*.npz"))), FeatureStatistics)


def test_missing_reference_images_and_weights_say_what_to_put_where(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        FolderReference(tmp_path / "nowhere").check()
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="holds 0 images"):
        FolderReference(tmp_path / "empty").check()
    with pytest.raises(FileNotFoundError, match="open_clip_config.json and open_clip_model.safetensors"):
        check_feature_spec(f"domain:{tmp_path}")
    with pytest.raises(FileNotFoundError, match="weights file .*missing.bin"):
        check_feature_spec(f"open_clip:ViT-B-32:{tmp_path / 'missing.bin'}")
    with pytest.raises(ValueError, match="unknown FID feature network 'dino'"):
        check_feature_spec("dino")
    with pytest.raises(ValueError, match="open_clip:<model name>:<weights file>"):
        parse_clip_spec("open_clip:ViT-B-32")


def test_inception_needs_torch_fidelity_and_a_local_weights_file(tmp_path, monkeypatch):
    monkeypatch.delenv("ARJET_INCEPTION_WEIGHTS", raising=False)
    try:
        import torch_fidelity  # noqa: F401
    except ImportError:
        with pytest.raises(ValueError, match="pip install torch-fidelity"):
            check_feature_spec("inception")
        return
    with pytest.raises(FileNotFoundError, match="weights-inception-2015-12-05-6726825d.pth"):
        check_feature_spec("inception")
    with pytest.raises(FileNotFoundError, match="not found"):
        check_feature_spec(f"inception:{tmp_path / 'w.pth'}")


def test_the_domain_reference_renders_the_heldout_scenes(features, tmp_path, monkeypatch):
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "arjet.data", None)  # the data module missing: a clear error
        with pytest.raises(FileNotFoundError, match="pass --reference-dir"):
            reference_source(None, "shapes", 4).check()
    assert reference_source(None, "parti", 4) is None
    monkeypatch.setitem(sys.modules, "arjet.data", fake_data_module("red"))
    source = reference_source(None, "shapes", 6)
    assert isinstance(source, DomainReference) and len(source) == 6
    source.check()
    rendered = list(source.images((16, 16)))
    assert len(rendered) == 6 and {image.size for image in rendered} == {(16, 16)}
    red = reference_statistics(features, source, (16, 16), cache_dir=tmp_path)
    assert red.count == 6
    monkeypatch.setitem(sys.modules, "arjet.data", fake_data_module("blue"))
    blue_source = reference_source(None, "shapes", 6)
    assert blue_source.key((16, 16)) != source.key((16, 16))  # new pixels, new cache entry
    blue = reference_statistics(features, blue_source, (16, 16), cache_dir=tmp_path)
    assert not torch.equal(blue.total, red.total)
    assert isinstance(reference_source(tmp_path, "shapes", 6), FolderReference)  # a folder wins


def test_reference_images_are_centre_cropped_and_resized_like_the_generated_ones():
    wide = PIL.Image.new("RGB", (30, 10), "blue")
    wide.paste(PIL.Image.new("RGB", (10, 10), "red"), (10, 0))
    square = fit(wide, (5, 5))
    assert square.size == (5, 5) and square.getpixel((2, 2)) == (255, 0, 0)


def test_inception_features_load_from_a_local_file(tmp_path):
    """Runs where torch-fidelity is installed (not a dependency of arjet): random weights saved to a file."""
    from unittest import mock

    fidelity = pytest.importorskip("torch_fidelity.feature_extractor_inceptionv3")
    extractor = fidelity.FeatureExtractorInceptionV3
    with mock.patch.object(torch, "load"), mock.patch.object(extractor, "load_state_dict"):
        random_net = extractor("inception-v3-compat", ["2048"], feature_extractor_weights_path="unused")
    torch.save(random_net.state_dict(), tmp_path / "inception.pth")
    features = load_feature_network(f"inception:{tmp_path / 'inception.pth'}")
    assert features.num_features == 2048 and features.key.startswith("inception:")
    images = to_pil(colour_squares(WARM[:4], seed=1))
    assert abs(frechet_distance(features, feature_statistics(features, images), images)) < 1e-3


def test_the_shipped_domain_clip_scores_held_out_renders():
    """The built-in domain CLIP, as `arjet eval` uses it by default: FID of a set against itself ~ 0 and far
    above the two-reference-set floor for clearly different images; matching prompts score above rolled ones."""
    from arjet.data import heldout_set, render_reference

    items = heldout_set(240)
    renders = [render_reference(item, 64) for item in items]
    features = load_feature_network("domain")
    first = feature_statistics(features, renders[:120])
    assert abs(frechet_distance(features, first, renders[:120])) < 1e-3
    floor = frechet_distance(features, first, renders[120:])
    colours = torch.randint(0, 256, (120, 3), generator=torch.Generator().manual_seed(0)).tolist()
    flat = [PIL.Image.new("RGB", (64, 64), tuple(colour)) for colour in colours]
    assert frechet_distance(features, first, flat) > 3 * floor

    clip = load_clip("domain")
    prompts = [item["prompt"] for item in items[:120]]
    matching = torch.tensor(clip_scores(clip, renders[:120], prompts))
    rolled = torch.tensor(clip_scores(clip, renders[:120], prompts[1:] + prompts[:1]))
    assert (matching > rolled).float().mean() >= 0.9


def test_any_open_clip_model_with_local_weights_gives_features_and_scores(tiny_clip_dir, monkeypatch):
    """`open_clip:<model name>:<weights file>`: a model open_clip knows by name, weights from a local file
    (here the tiny test CLIP, registered under a name of its own)."""
    import open_clip
    from open_clip import factory

    from .conftest import TINY_CLIP_CONFIG

    monkeypatch.setitem(factory._MODEL_CONFIGS, "arjet-tiny-test", TINY_CLIP_CONFIG)
    assert "arjet-tiny-test" in open_clip.list_models()
    spec = f"open_clip:arjet-tiny-test:{tiny_clip_dir / 'open_clip_model.safetensors'}"
    features = load_feature_network(spec)
    assert features.key.startswith("clip:")
    warm = to_pil(colour_squares(WARM, seed=1))
    reference = feature_statistics(features, warm)
    assert abs(frechet_distance(features, reference, warm)) < 1e-3
    assert frechet_distance(features, reference, to_pil(colour_squares(COOL, seed=3))) > 0.5
    clip = load_clip(spec)
    images = to_pil(colour_squares(["red", "blue"], seed=5))
    red, blue = (clip_scores(clip, images, [f"a {name} square"] * 2) for name in ("red", "blue"))
    assert red[0] > blue[0] and blue[1] > red[1]
