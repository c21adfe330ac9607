"""Every `arjet train` stage runs end to end at a toy size and leaves a loadable result."""

import json
import re

import numpy as np
import pytest
import torch

import arjet
from arjet.cli import main
from arjet.data import Scene, heldout_set
from arjet.eval.clip import load_clip
from arjet.train.clip import ClipTrainConfig, captions_with_negatives, clip_loss, swap_attribute


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A toy VQ and a toy AR model on top of it (shared by the tests below)."""
    root = tmp_path_factory.mktemp("train")
    assert (
        main(
            [
                "train",
                "vq",
                "--out",
                str(root / "vq"),
                "--image-size",
                "32",
                "--channel-multiplier",
                "1,2",
                "--num-res-blocks",
                "1",
                "--codebook-size",
                "16",
                "--batch-size",
                "4",
                "--max-steps",
                "2",
                "--workers",
                "0",
                "--eval-images",
                "8",
                "--log-every",
                "1",
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "train",
                "ar",
                "--vq",
                str(root / "vq"),
                "--out",
                str(root / "ar"),
                "--train-images",
                "16",
                "--heldout-images",
                "8",
                "--hidden-size",
                "32",
                "--layers",
                "1",
                "--heads",
                "2",
                "--kv-heads",
                "1",
                "--intermediate-size",
                "64",
                "--batch-size",
                "4",
                "--max-steps",
                "2",
                "--eval-every",
                "1",
            ]
        )
        == 0
    )
    return root


def test_vq_stage_reports_psnr_and_usage(trained):
    metrics = json.loads((trained / "vq" / "metrics.json").read_text())
    assert {"psnr_mean", "psnr_p10", "codebook_used"} <= set(metrics) and metrics["steps"] == 2


def test_ar_stage_saves_a_working_pipeline(trained):
    pipe = arjet.ARPipeline.from_pretrained(str(trained / "ar" / "pipeline"))
    pipe.set_progress_bar_config(disable=True)
    out = pipe("a red circle", seed=0, sampler="sjd:window=4")
    assert out.codes.shape == (1, 16, 16) and out.images[0].size == (32, 32)
    log = [json.loads(line) for line in (trained / "ar" / "train_log.jsonl").read_text().splitlines()]
    assert log[-1]["final"] and log[-1]["heldout_loss"] > 0


def _sjd2_args(trained, base, out, *extra):
    return [
        "train", "sjd2", "--base", str(base), "--out", str(out), "--data-cache", str(trained / "ar" / "cache"),
        "--images", "16", "--batch-size", "4", "--max-steps", "1", "--bf16", "false", *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def sjd2_trained(trained):
    """A toy SJD2 fine-tune of the toy AR model (4 levels)."""
    out = trained / "sjd2"
    assert (
        main(_sjd2_args(trained, trained / "ar" / "pipeline", out, "--max-steps", "2", "--levels", "4")) == 0
    )
    return out


def test_sjd2_stage_adds_noise_conditioning(sjd2_trained):
    pipe = arjet.ARPipeline.from_pretrained(str(sjd2_trained / "pipeline"))
    pipe.set_progress_bar_config(disable=True)
    assert pipe.noise_conditioning is not None
    assert pipe("a red circle", seed=0, sampler="sjd2:window=8").stats[0].tokens == 256


def test_sjd2_stage_continues_a_fine_tune_with_its_noise_conditioning(trained, sjd2_trained, capsys):
    base = sjd2_trained
    # one step at rates too small to move a weight: a fresh conditioning (another seed) would differ
    unchanged = ("--max-steps", "1", "--lr", "1e-12", "--noise-lr", "1e-12", "--seed", "7")
    assert (
        main(_sjd2_args(trained, base / "pipeline", trained / "sjd2-more", "--levels", "4", *unchanged)) == 0
    )
    before = arjet.ARPipeline.from_pretrained(str(base / "pipeline")).noise_conditioning.state_dict()
    after = arjet.ARPipeline.from_pretrained(str(trained / "sjd2-more" / "pipeline")).noise_conditioning
    for name, tensor in after.state_dict().items():
        torch.testing.assert_close(tensor, before[name], msg=name)
    assert main(_sjd2_args(trained, base / "pipeline", trained / "sjd2-bad", "--levels", "8")) == 2
    assert "continue it with --levels 4, not 8" in capsys.readouterr().err


@pytest.mark.parametrize(
    "tower", [["--vision", "resnet", "--vision-width", "8", "--vision-layers", "1,1,1,1"],
              ["--vision", "vit", "--patch-size", "8", "--vision-width", "32", "--vision-layers", "1"]],
    ids=["resnet", "vit"],
)  # fmt: skip
def test_clip_stage_saves_a_clip_folder_and_continues_from_it(tmp_path, tower):
    out = tmp_path / "clip"
    arguments = [
        "train",
        "clip",
        *tower,
        "--images",
        "64",
        "--image-size",
        "32",
        "--eval-scenes",
        "4",
        "--text-width",
        "32",
        "--text-layers",
        "1",
        "--embed-dim",
        "16",
        "--batch-size",
        "8",
        "--max-steps",
        "2",
    ]
    assert main([*arguments, "--out", str(out)]) == 0
    clip = load_clip(f"domain:{out}")
    assert clip.encode_texts(["a red circle"]).shape == (1, 16)
    assert clip.encode_images(torch.rand(1, 3, 32, 32)).shape == (1, 16)
    assert main([*arguments, "--out", str(tmp_path / "again"), "--init", str(out)]) == 0
    assert load_clip(f"domain:{tmp_path / 'again'}").encode_texts(["a blue star"]).shape == (1, 16)
    for run in (out, tmp_path / "again"):  # each run's log in its own folder, nothing appended to another's
        log = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
        assert [record["step"] for record in log] == [2]


@pytest.mark.parametrize("attribute,other", [("shape", "color"), ("color", "shape")])
def test_swapped_scenes_change_exactly_one_object_attribute(attribute, other):
    rng = np.random.default_rng(0)
    for item in heldout_set(60):
        scene = Scene.from_dict(item["scene"])
        swaps = swap_attribute(scene, attribute, rng, count=3)
        assert len(swaps) == 3
        targets = set()
        for swapped in swaps:
            changed = [
                getattr(a, attribute) != getattr(b, attribute)
                for a, b in zip(scene.objects, swapped.objects, strict=True)
            ]
            assert all(changed) if scene.layout == "count" else sum(changed) == 1
            assert [getattr(o, other) for o in swapped.objects] == [getattr(o, other) for o in scene.objects]
            targets.add(changed.index(True))
        assert len(targets) == 1  # one object per scene, swapped to three different values
        (target,) = targets
        values = [getattr(s.objects[target], attribute) for s in swaps]
        assert len(set(values)) == 3


def test_hard_negatives_share_the_caption_phrasing():
    config = ClipTrainConfig(shape_negatives=2, color_negatives=1)
    scenes = [Scene.from_dict(item["scene"]) for item in heldout_set(40)]
    texts = captions_with_negatives(scenes, config, np.random.default_rng(0))
    assert len(texts) == 4 * len(scenes)
    for index in range(len(scenes)):
        caption, *negatives = texts[4 * index : 4 * index + 4]
        for negative in negatives:
            words, other = caption.split(), negative.split()
            assert len(words) == len(other)  # same sentence, one or more attribute words swapped
            assert words != other


def test_clip_loss_prefers_the_caption_over_its_hard_negatives():
    torch.manual_seed(0)
    images = torch.nn.functional.normalize(torch.randn(6, 16), dim=-1)
    texts = torch.nn.functional.normalize(torch.randn(6, 3, 16), dim=-1)
    matched = texts.clone()
    matched[:, 0] = images
    scale = torch.tensor(20.0)
    loss_matched = clip_loss(images, matched.reshape(-1, 16), scale)
    loss_negative = clip_loss(
        images, torch.stack([texts[:, 0], images, texts[:, 2]], 1).reshape(-1, 16), scale
    )
    assert loss_matched < 0.1 < loss_negative
    assert (
        clip_loss(images, matched[:, :1].reshape(-1, 16), scale) < loss_matched
    )  # no negatives, no hard term


def test_a_cache_of_encoded_scenes_is_checked_before_it_is_read(tmp_path):
    """`--data-cache` is shared between runs, so anyone may have put files there: a codes file of another
    shape or a scenes file that is not JSON lines is named, never read into a run."""
    from arjet.train.ar import load_or_encode

    np.save(tmp_path / "train-2.npy", np.zeros((2, 16), dtype=np.uint16))
    (tmp_path / "train-2.jsonl").write_text('{"layout": "single"}\n{"layout": "single"}')
    codes, scenes = load_or_encode(None, tmp_path, "train", 2)  # read from the cache: no VQ needed
    assert codes.shape == (2, 16) and len(scenes) == 2
    for codes_file, scenes_text, message in (
        (np.zeros((3, 16), dtype=np.uint16), None, "holds uint16 codes of shape (3, 16), not the [2, cells]"),
        (np.zeros((2, 16), dtype=np.float64), None, "holds float64 codes of shape (2, 16)"),
        (None, "{}\n" + "[" * 100_000, "train-2.jsonl, line 2 holds JSON nested deeper than 64 levels"),
    ):
        if codes_file is not None:
            np.save(tmp_path / "train-2.npy", codes_file)
        if scenes_text is not None:
            (tmp_path / "train-2.jsonl").write_text(scenes_text)
            np.save(tmp_path / "train-2.npy", np.zeros((2, 16), dtype=np.uint16))
        with pytest.raises(ValueError, match=re.escape(message)):
            load_or_encode(None, tmp_path, "train", 2)
    (tmp_path / "train-2.npy").write_bytes(b"\x93NUMPY garbage")
    (tmp_path / "train-2.jsonl").write_text("{}\n{}")
    with pytest.raises(ValueError, match="train-2.npy is not a cache of encoded codes"):
        load_or_encode(None, tmp_path, "train", 2)
