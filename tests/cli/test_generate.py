"""`arjet generate` end to end on a saved tiny pipeline, and its checks that run before any model loads."""

import argparse
import json
import os

import numpy as np
import PIL.Image
import pytest
import torch

from arjet import cli, samplers
from arjet.builtin import load_model
from arjet.cli import generate
from arjet.cli.options import compile_argument
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
    out = tmp_path / "circle.png"
    threads = torch.get_num_threads()  # the command's and the Python call's: pixels compared bit for bit
    argv = ["generate", PROMPT, "--model", str(folder), "--sampler", "sjd", "--seed", "3"]
    code = cli.main([*argv, "--device", "cpu", "--out", str(out), "--json", "--threads", str(threads)])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) == {"prompt", "out", "threads", "stats"} and report["threads"] == threads
    assert report["prompt"] == PROMPT and report["out"] == str(out)
    (stat,) = report["stats"]
    assert {"sampler", "forward_passes", "tokens", "accepted_per_step", "compression", "seconds"} <= set(stat)
    assert "commit_step" not in stat
    assert stat["sampler"] == "sjd" and stat["tokens"] == 9 and stat["batch_size"] == 1
    assert 1 <= stat["forward_passes"] <= 9 and sum(stat["accepted_per_step"]) == 9
    # the file is the image the Python API gives for the same prompt, sampler and seed
    expected = pipe(PROMPT, sampler="sjd", seed=3, threads=threads).images[0]
    with PIL.Image.open(out) as image:
        assert image.size == expected.size == (6, 6)
        np.testing.assert_array_equal(np.asarray(image.convert("RGB")), np.asarray(expected))


def test_generate_runs_a_glm_image_folder_through_both_stages(tmp_path, capsys):
    """A folder laid out as zai-org/GLM-Image: the AR stage decodes the preview and target grids, the
    diffusion stage paints the image (64 x 96 px for 2 x 3 codes), the same as the Python API's. Both sides
    load the folder the same way and run on the same thread count, so float32 rounds alike: another count
    sums in another order, and a BLAS may round by the weights' memory alignment (2 of 18,432 pixels were
    one level apart)."""
    folder = tmp_path / "tiny-glm-image"
    tiny_pipeline("glm_image", grid=(2, 3), vocab_size=8, logit_scale=3.0).save_pretrained(folder)
    out = tmp_path / "glm.png"
    threads = torch.get_num_threads()
    argv = ["generate", PROMPT, "--model", str(folder), "--sampler", "mc-sjd", "--seed", "2", "--json"]
    assert cli.main([*argv, "--device", "cpu", "--out", str(out), "--threads", str(threads)]) == 0
    (stat,) = json.loads(capsys.readouterr().out)["stats"]
    assert stat["tokens"] == 2 + 6 and stat["preview_grid"] == [1, 2]
    pipe = load_model(str(folder), device="cpu")  # the command's own loader
    pipe.set_progress_bar_config(disable=True)
    expected = pipe(PROMPT, sampler="mc-sjd", seed=2, threads=threads).images[0]
    with PIL.Image.open(out) as image:
        assert image.size == expected.size == (96, 64)
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
        (["--sampler", "sjd:window=0"], "window must be an integer from 1 to 16384, got '0'"),
        (
            ["--sampler", "sjd:bogus=1"],
            "bad arguments for sampler 'sjd': no option 'bogus'; valid options: window",
        ),
        (["--sampler", "sjd:init=nope"], "init must be one of random, repeat_horizontal"),
        (["--sampler", "sjd:coupling=maybe"], "coupling must be true or false, got 'maybe'"),
        (
            ["--sampler", "sjd:acceptance=foo"],
            "acceptance must be one of exact, lantern, gsd, entropy; got 'foo'",
        ),
        (["--sampler", "sjd:window=16,window=32"], "option window is given twice"),
        (["--temperature", "inf"], "argument --temperature: must be a finite number >= 0, got 'inf'"),
        (["--temperature", "1e-45"], "temperature=1e-45 scales the logits by 1e+45, which overflows float32"),
        (["--guidance-scale", "nan"], "argument --guidance-scale: must be a finite number >= 0, got 'nan'"),
        (["--guidance-scale", "1e308"], "guidance_scale=1e+308 scales the logits by 1e+308"),
        (["--top-p", "2"], "argument --top-p: must be a finite number in (0, 1], got '2'"),
        (["--top-k", "0"], "argument --top-k: must be an integer >= 1, got '0'"),
        (["--num-images", "0"], "argument --num-images: must be an integer from 1 to 64, got '0'"),
        (["--num-images", "1000000000"], "argument --num-images: must be an integer from 1 to 64"),
        (["--height", "0"], "argument --height: must be an integer from 1 to 16384, got '0'"),
        (["--seed", "1.5"], "argument --seed: must be an integer from 0 to 9223372036854775807, got '1.5'"),
        (["--seed", "nan"], "argument --seed: must be an integer"),
        (["--seed", str(2**64)], "argument --seed: must be an integer from 0 to"),
        (["--seed", str(2**63 - 1), "--num-images", "2"], "--seed + 1 < 2**63"),
        (["--device", "bogus"], "argument --device: device 'bogus' is not a torch device"),
        (["--out", "image.nope"], "--out must end in an image extension arjet can write"),
        (["--out", "image.psd"], "--out must end in an image extension arjet can write"),
        (["--out", "."], "--out '.' is a folder; give a file name"),
        (["", "--out", "x.png"], "the prompt is empty"),
        (
            ["a red \udcff circle", "--out", "x.png"],
            "the prompt holds U+DCFF at character 6, a lone surrogate",
        ),
        (["--compile", "cuda-graphs", "--device", "cpu"], "--compile cuda-graphs needs a CUDA device"),
        (["--compile", "yes"], "argument --compile: invalid choice: 'yes'"),
    ],
)
def test_bad_options_fail_before_the_model_loads(option, message, tmp_path, monkeypatch, capsys):
    def no_load(args):
        raise AssertionError("the model was loaded before the options were checked")

    monkeypatch.setattr(generate, "load_pipeline", no_load)
    missing = tmp_path / "no-model-here"  # loading it would fail with a different error
    prompt = [] if option[0] == "" or option[0].startswith("a red") else [PROMPT]
    code = cli.main(["generate", *prompt, "--model", str(missing), *option])
    assert code == 2
    error = capsys.readouterr().err
    assert error.startswith("arjet generate: error: ") and message in error
    assert "Traceback" not in error


def test_output_paths_are_checked_before_the_model_loads(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(generate, "load_pipeline", lambda args: pytest.fail("loaded before checking --out"))
    (tmp_path / "file").write_text("")
    os.mkfifo(tmp_path / "fifo.png")
    (tmp_path / "full.png").symlink_to("/dev/full")
    (tmp_path / "notes.txt").write_text("keep me")
    (tmp_path / "link.png").symlink_to(tmp_path / "notes.txt")
    cases = {
        str(tmp_path / "file" / "x.png"): "is a file, so no folder can be made there",
        str(tmp_path): "is a folder; give a file name",
        str(tmp_path / "nonexistent" / "dir" / "x.png"): "does not exist; create it first",
        str(tmp_path / "fifo.png"): "is not a regular file (a device, FIFO or socket)",
        str(tmp_path / "full.png"): "is a symbolic link to '/dev/full', which is not an image file",
        str(tmp_path / "link.png"): "notes.txt', which is not an image file arjet may overwrite",
        "/proc/self/x.png": "no file can be written in '/proc/self'",
    }
    for out, message in cases.items():
        assert cli.main(["generate", PROMPT, "--out", out]) == 2
        error = capsys.readouterr().err
        assert error.startswith("arjet generate: error: --out ") and message in error, (out, error)
    assert not (tmp_path / "nonexistent").exists()
    assert (tmp_path / "notes.txt").read_text() == "keep me"


def test_a_link_to_an_image_is_written_through(saved, tmp_path, capsys):
    folder, _ = saved
    (tmp_path / "old.png").write_bytes(b"")
    (tmp_path / "latest.png").symlink_to(tmp_path / "old.png")
    argv = [
        "generate",
        PROMPT,
        "--model",
        str(folder),
        "--device",
        "cpu",
        "--out",
        str(tmp_path / "latest.png"),
    ]
    assert cli.main(argv) == 0
    assert (tmp_path / "latest.png").is_symlink()
    with PIL.Image.open(tmp_path / "old.png") as image:
        assert image.size == (6, 6)


def test_a_missing_model_folder_is_named_before_any_load(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(generate, "load_pipeline", lambda args: pytest.fail("loaded a missing model"))
    missing = tmp_path / "nowhere" / "model"
    assert cli.main(["generate", PROMPT, "--model", str(missing), "--out", str(tmp_path / "x.png")]) == 2
    error = capsys.readouterr().err
    assert error.startswith("arjet generate: error: ") and str(missing) in error


def test_several_images_print_what_each_cost(saved, tmp_path, capsys):
    folder, _ = saved
    out = tmp_path / "grid.png"
    argv = ["generate", PROMPT, "--model", str(folder), "--device", "cpu", "--sampler", "sjd: window=4"]
    assert cli.main([*argv, "--num-images", "3", "--seed", "5", "--out", str(out), "--threads", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"saved {out}: 3 images as one grid, row by row"
    assert [line.split(":")[0] for line in lines[1:]] == [f"  image {i} (seed {5 + i})" for i in range(3)]
    assert all("with sjd:window=4," in line for line in lines[1:])


@pytest.mark.parametrize(
    ("choice", "value"),
    [("off", False), ("auto", "auto"), ("inductor", "inductor"), ("cuda-graphs", "cuda-graphs")],
)
def test_compile_choices_are_the_pipelines_compile_values(choice, value):
    assert compile_argument(argparse.Namespace(compile=choice, device="cuda")) == value
    assert compile_argument(argparse.Namespace(compile=choice, device="cuda"), recorded=True) == value


def test_compile_defaults_to_auto_which_a_cpu_run_records_as_eager():
    """Every command's --compile is auto; a run folder (eval's) keeps what ran: on the CPU, eager (False)."""
    from arjet.cli.main import build_parser

    parser = build_parser()
    required = {"generate": ["a red circle"], "eval": ["--out", "x"]}
    for command in ("generate", "bench", "eval", "serve", "app"):
        args = parser.parse_args([command, *required.get(command, [])])
        assert args.compile == "auto", command
    cpu = argparse.Namespace(compile="auto", device="cpu")
    assert compile_argument(cpu) == "auto" and compile_argument(cpu, recorded=True) is False


def test_a_folder_whose_drafter_does_not_fit_the_model_is_refused_in_one_line(tmp_path, capsys):
    from arjet.addons.drafter import Drafter
    from arjet.testing import tiny_drafter

    folder, out = tmp_path / "model", tmp_path / "x.png"
    tiny_drafter(tiny_pipeline("janus", grid=(3, 3))).save_pretrained(folder)
    Drafter(hidden_size=16, intermediate_size=32, num_attention_heads=2).save_pretrained(folder / "drafter")
    capsys.readouterr()  # the saving's progress bars
    argv = ["generate", PROMPT, "--model", str(folder), "--sampler", "eagle", "--out", str(out)]
    assert cli.main([*argv, "--device", "cpu"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("arjet generate: error: ") and error.count("\n") == 1, error
    assert "the drafter has hidden_size=16, but this model's hidden states are 32 wide" in error
    assert not out.exists()


@pytest.mark.parametrize(
    "make", [os.mkfifo, lambda path: path.symlink_to("/dev/zero")], ids=["fifo", "dev-zero"]
)
def test_a_model_folder_whose_config_is_not_a_regular_file_is_refused_in_one_line(tmp_path, capsys, make):
    """The fifth re-probe's X1 / X2: reading such a config blocked forever, or filled memory from /dev/zero."""
    folder = tmp_path / "model"
    tiny_pipeline("janus", grid=(3, 3)).save_pretrained(folder)
    (folder / "model" / "config.json").unlink()
    make(folder / "model" / "config.json")
    capsys.readouterr()
    assert cli.main(["generate", PROMPT, "--model", str(folder), "--out", str(tmp_path / "x.png")]) == 2
    error = capsys.readouterr().err
    assert error.startswith("arjet generate: error: ") and error.count("\n") == 1, error
    assert "config.json is not a regular file (a directory, FIFO, socket or device)" in error


def test_generate_with_int8_weights_writes_the_builtin_models_image(tmp_path, capsys):
    out = tmp_path / "quantized.png"
    assert cli.main(["generate", PROMPT, "--quantize", "int8", "--device", "cpu", "--out", str(out)]) == 0
    assert "saved" in capsys.readouterr().out
    assert PIL.Image.open(out).size == (64, 64)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal of a machine without CUDA")
def test_a_quantization_without_a_kernel_here_is_one_line_before_loading(monkeypatch, capsys):
    from arjet.pipelines import base

    monkeypatch.setattr(
        base, "load_component", lambda *a, **k: pytest.fail("weights read before the refusal")
    )
    assert cli.main(["generate", PROMPT, "--quantize", "fp8", "--device", "cpu"]) == 2
    error = capsys.readouterr().err
    assert (
        error.startswith("arjet generate: error: fp8 quantization needs a CUDA GPU")
        and error.count("\n") == 1
    )


def test_without_torchao_quantize_is_one_line_naming_the_extra(monkeypatch, capsys):
    """It was a 30-line ImportError traceback (the message was right, main reports ValueErrors only)."""
    from arjet import quantize
    from arjet.pipelines import base

    monkeypatch.setattr(quantize, "torchao_installed", lambda: False)
    monkeypatch.setattr(
        base, "load_component", lambda *a, **k: pytest.fail("weights read before the refusal")
    )
    assert cli.main(["generate", PROMPT, "--quantize", "int8", "--device", "cpu"]) == 2
    error = capsys.readouterr().err
    assert error == "arjet generate: error: quantization='int8' needs torchao: pip install 'arjet[quant]'\n"
