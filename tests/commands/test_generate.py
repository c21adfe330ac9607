"""`arjet generate` end to end on a saved tiny pipeline, and its checks that run before any model loads."""

import json

import numpy as np
import PIL.Image
import pytest

from arjet import cli, samplers
from arjet.commands import generate
from arjet.testing import tiny_pipeline

PROMPT = "a red circle left of a blue square"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny Janus pipeline saved with `save_pretrained`, and the pipeline itself."""
    folder = tmp_path_factory.mktemp("tiny-janus")
    pipe = tiny_pipeline("janus", grid=(3, 3), vocab_size=8, logit_scale=3.0)
    pipe.save_pretrained(folder)
    return folder, pipe


def test_generate_writes_the_image_and_prints_json_stats(saved, tmp_path, capsys):
    folder, pipe = saved
    out = tmp_path / "images" / "circle.png"
    argv = ["generate", PROMPT, "--model", str(folder), "--sampler", "sjd", "--seed", "3"]
    code = cli.main([*argv, "--device", "cpu", "--out", str(out), "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) == {"prompt", "out", "stats"}
    assert report["prompt"] == PROMPT and report["out"] == str(out)
    (stat,) = report["stats"]
    assert {"sampler", "forward_passes", "tokens", "accepted_per_step", "compression", "seconds"} <= set(stat)
    assert "commit_step" not in stat
    assert stat["sampler"] == "sjd" and stat["tokens"] == 9 and stat["batch_size"] == 1
    assert 1 <= stat["forward_passes"] <= 9 and sum(stat["accepted_per_step"]) == 9
    # the file is the image the Python API gives for the same prompt, sampler and seed
    expected = pipe(PROMPT, sampler="sjd", seed=3).images[0]
    with PIL.Image.open(out) as image:
        assert image.size == expected.size == (6, 6)
        np.testing.assert_array_equal(np.asarray(image.convert("RGB")), np.asarray(expected))


def test_generate_prints_a_summary_without_json(saved, tmp_path, capsys):
    folder, _ = saved
    out = tmp_path / "x.png"
    assert cli.main(["generate", PROMPT, "--model", str(folder), "--device", "cpu", "--out", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"saved {out}: 9 codes in 9 forward passes")
    assert out.is_file()


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--sampler", "nope"], f"unknown sampler 'nope'; available: {', '.join(samplers.available())}"),
        (["--sampler", "sjd:window=0"], "window must be an integer >= 1, got 0"),
        (["--sampler", "sjd:bogus=1"], "bad arguments for sampler 'sjd'"),
        (["--sampler", "sjd:init=nope"], "unknown draft init scheme 'nope'"),
        (["--temperature", "inf"], "temperature must be a finite number >= 0"),
        (["--guidance-scale", "nan"], "guidance_scale must be a finite number >= 0"),
        (["--top-p", "2"], r"top_p must be in (0, 1]"),
        (["--top-k", "0"], "top_k must be a positive integer"),
        (["--num-images", "0"], "--num-images must be >= 1"),
        (["--height", "0"], "--height must be a positive number of pixels"),
        (["--out", "image.nope"], "--out must end in an image extension"),
    ],
)
def test_bad_options_fail_before_the_model_loads(option, message, tmp_path, monkeypatch, capsys):
    def no_load(args):
        raise AssertionError("the model was loaded before the options were checked")

    monkeypatch.setattr(generate, "load_pipeline", no_load)
    missing = tmp_path / "no-model-here"  # loading it would fail with a different error
    code = cli.main(["generate", PROMPT, "--model", str(missing), *option])
    assert code == 2
    error = capsys.readouterr().err
    assert error.startswith("arjet generate: error: ") and message in error
