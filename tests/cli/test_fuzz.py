"""Every command refuses bad values the same way: exit status 2, one `arjet CMD: error:` line naming the
option (or the bad value), no traceback, and no model work: loading a model, training or serving fails the
test. A few hundred random (option, bad value) pairs over generate, eval, domain-report, app and train."""

import random

import pytest

from arjet.cli import main

INTS = ["abc", "1.5", "nan", "", "0x10", "-1", str(-(2**70)), "1e3", "one", "1_0", "\uff11", "1" * 5000]
FLOATS = ["abc", "nan", "inf", "-inf", "-1", "", "1e400", "1,5"]
DEVICES = ["bogus", "cuda:99", "tpu", "", "cuda:x", "cpu:99", "cpu:1"]
SPECS = ["warp", "sjd:window=0", "sjd:coupling=maybe", "sjd:acceptance=foo", "sjd:window=16,window=32",
         "sjd:windw=3", "zipar:w=-1", "sjd2:window=1", "lantern:delta=nan", "sjd:", "sjd:window"]  # fmt: skip

COMMANDS = {
    "generate": {
        "base": ["generate", "a red circle"],
        "options": {
            "--seed": INTS + [str(2**64)], "--num-images": INTS + ["0", "1000000000"],
            "--height": INTS + ["0"], "--width": INTS + ["0"], "--top-k": INTS + ["0"],
            "--guidance-scale": FLOATS, "--temperature": FLOATS, "--top-p": FLOATS + ["0", "2"],
            "--device": DEVICES, "--dtype": ["float64", "int8"], "--sampler": SPECS,
            "--out": [".", "x.nope", "x.psd", "/etc/passwd/x.png"],
        },
    },
    "eval": {
        "base": ["eval"],
        "options": {
            "--n": INTS + ["0", "1000000000"], "--batch-size": INTS + ["0", "100000"], "--height": INTS, "--width": INTS,
            "--top-k": INTS, "--metric-batch-size": INTS + ["0"], "--grid-prompts": INTS + ["0"],
            "--guidance-scale": FLOATS, "--temperature": FLOATS, "--top-p": FLOATS,
            "--seeds": ["abc", "-1", "1-0", "0-99999999999", "1.5", ",", "0x1", str(2**63)],
            "--seed": ["1_0", "\uff11", "0-1_0", "abc", str(2**63)],
            "--samplers": SPECS, "--sampler": SPECS, "--device": DEVICES, "--dtype": ["float64"],
            "--fid-features": ["bogus", "open_clip:x", "domain:/nonexistent", "inception:/nonexistent",
                               "inception:/etc/passwd"],
            "--clip-model": ["bogus", "open_clip:RN50", "domain:/nonexistent"],
            "--prompts": ["nonexistent-set", "/nonexistent.txt"], "--reference-dir": ["/nonexistent/refs"],
            "--out": ["/etc/passwd"],
        },
    },
    "domain-report": {
        "base": ["domain-report"],
        "options": {
            "--n": INTS + ["0", "1", "100000"], "--seed": INTS, "--guidance-scale": FLOATS,
            "--temperature": FLOATS, "--top-p": FLOATS, "--top-k": INTS, "--sampler": SPECS, "--device": DEVICES,
            "--json": [".", "x.txt"], "--grid": [".", "x.txt", "x.psd"],
        },
    },
    "app": {
        "base": ["app"],
        "options": {
            "--port": INTS + ["0", "70000"], "--max-queue": INTS + ["0"], "--time-limit": FLOATS + ["0"],
            "--device": DEVICES, "--model": ["/nonexistent/model", "no-such-builtin"],
            "--host": ["not a host!", "256.1.1.1", "no-such-host.invalid"],
        },
    },
    "train vq": {
        "base": ["train", "vq"],
        "options": {"--batch-size": INTS + ["0"], "--max-minutes": FLOATS + ["0"], "--lr": FLOATS + ["0"],
                    "--codebook-size": INTS + ["0"], "--device": DEVICES, "--threads": INTS + ["0"],
                    "--image-size": INTS + ["0", "30", "2"]},
    },
    "train ar": {
        "base": ["train", "ar"],
        "options": {"--batch-size": INTS + ["0"], "--max-minutes": FLOATS, "--condition-dropout": FLOATS + ["1.5"],
                    "--eval-every": INTS + ["0"], "--bf16": ["maybe", "2"], "--device": DEVICES},
    },
    "train clip": {
        "base": ["train", "clip"],
        "options": {"--batch-size": INTS, "--max-steps": INTS, "--vision": ["bogus"],
                    "--vision-layers": ["x", "0"], "--eval-every": INTS, "--lr": FLOATS},
    },
    "train sjd2": {
        "base": ["train", "sjd2"],
        "options": {"--levels": INTS + ["0"], "--clean-share": FLOATS + ["2"], "--lora-rank": INTS,
                    "--max-minutes": FLOATS, "--bf16": ["maybe"]},
    },
}  # fmt: skip


class ModelWork(BaseException):
    """Raised by every loader, trainer and server: `main` must never get that far with a bad value."""


@pytest.fixture
def no_model_work(monkeypatch, tmp_path):
    def refuse(*args, **kwargs):
        raise ModelWork("reached model work with a bad value")

    import arjet.app.ui
    import arjet.cli.bench
    import arjet.cli.domain_report
    import arjet.cli.generate
    import arjet.cli.options
    import arjet.eval.runner
    import arjet.pipelines.base
    import arjet.train.ar
    import arjet.train.clip
    import arjet.train.sjd2
    import arjet.train.vq

    for module, name in [
        (arjet.cli.options, "load_pipeline"),
        (arjet.cli.generate, "load_pipeline"),
        (arjet.cli.bench, "load_pipeline"),
        (arjet.cli.domain_report, "load_pipeline"),
        (arjet.eval.runner, "_load_pipeline"),
        (arjet.app.ui, "build_demo"),
        (arjet.app.ui, "serve"),
        (arjet.train.vq, "train_vq"),
        (arjet.train.ar, "train_ar"),
        (arjet.train.clip, "train_clip"),
        (arjet.train.sjd2, "train_sjd2"),
    ]:
        monkeypatch.setattr(module, name, refuse)
    monkeypatch.setattr(arjet.pipelines.base.BaseARPipeline, "from_pretrained", classmethod(refuse))
    monkeypatch.chdir(tmp_path)  # relative outputs land in the test's folder


def _cases(count: int, seed: int = 16) -> list[tuple[str, str, str]]:
    rng = random.Random(seed)
    commands = sorted(COMMANDS)
    cases = []
    for _ in range(count):
        command = rng.choice(commands)
        option = rng.choice(sorted(COMMANDS[command]["options"]))
        cases.append((command, option, rng.choice(COMMANDS[command]["options"][option])))
    return cases


def test_fuzz_every_command_refuses_bad_values_cleanly_before_any_work(no_model_work, tmp_path, capsys):
    for command, option, value in _cases(300):
        argv = [*COMMANDS[command]["base"], option, value]
        if command == "eval" and option != "--out":
            argv += ["--out", str(tmp_path / "run")]
        code = main(argv)
        error = capsys.readouterr().err
        case = f"{argv}: {error!r}"
        assert code == 2, case
        lines = [line for line in error.splitlines() if line.startswith(f"arjet {command}: error: ")]
        assert len(lines) == 1 and "Traceback" not in error, case
        named = option in lines[0] or option.strip("-").replace("-", "_") in lines[0]
        named = named or (
            command == "eval" and option in ("--samplers", "--sampler") and "sampler" in lines[0]
        )
        named = named or ("sampler" in option and "sampler" in lines[0])
        assert named or (len(value) >= 3 and value in lines[0]), case
    assert not (tmp_path / "run").exists()


def test_help_and_a_missing_command_exit_like_argparse(capsys):
    assert main(["--help"]) == 0
    assert main([]) == 2
    assert main(["generate"]) == 2  # no prompt
    assert "arjet generate: error: the following arguments are required: prompt" in capsys.readouterr().err


# -- issue 33: a hostile probe's command lines, each refused in one line before any work --------------------
EARLIER_RUN = {"metrics.json": '{"psnr_mean": 30.1}', "train_log.jsonl": '{"step": 100}\n'}


@pytest.fixture
def hostile(no_model_work, tmp_path):
    """The probe's files in the working folder: an earlier training run, model and CLIP folders with a file
    cut short or JSON nested 100,000 deep, LANTERN's layout with such a config, a YAML nested as deep."""
    import shutil

    from arjet.builtin import assets_dir

    (tmp_path / "earlier").mkdir()
    for name, text in EARLIER_RUN.items():
        (tmp_path / "earlier" / name).write_text(text)
    deep = "[" * 100_000 + "]" * 100_000
    damages = {
        "cut-model": ("shapes", "model/model.safetensors", None),
        "deep-index": ("shapes", "model_index.json", deep),
        "deep-config": ("shapes", "model/config.json", '{"a": ' * 100_000),
        "cut-clip": ("shapes-clip", "open_clip_model.safetensors", None),
        "deep-clip": ("shapes-clip", "open_clip_config.json", deep),
    }
    for name, (source, file, text) in damages.items():
        shutil.copytree(assets_dir() / source, tmp_path / name)
        path = tmp_path / name / file
        path.write_bytes(path.read_bytes()[:1000] if text is None else text.encode())
    (tmp_path / "lantern").mkdir()
    (tmp_path / "lantern" / "config.json").write_text(deep)
    (tmp_path / "deep.yaml").write_text(deep)
    (tmp_path / "x.ckpt").write_bytes(b"")
    return tmp_path


DEVICE_COMMANDS = [["generate", "a red circle"], ["eval", "--out", "run"], ["bench"], ["domain-report"]]
ISSUE_33 = [
    # 1. an earlier run is never written over, nor its log added to
    *[(["train", stage, "--out", "earlier"], "--out 'earlier' is a folder that is not empty (it holds metrics.json")
      for stage in ("vq", "ar", "clip", "sjd2", "drafter")],
    (["train", "clip", "--out", "new", "--log", "earlier/train_log.jsonl"],
     "--log 'earlier/train_log.jsonl' already exists; arjet train writes a new file for every run"),
    # 2. files cut short, JSON nested too deep, bytes that are no pickle: named, no traceback
    (["generate", "a red circle", "--model", "cut-model"],
     "--model 'cut-model': cut-model/model/model.safetensors is not a readable safetensors file"),
    (["generate", "a red circle", "--model", "deep-index"],
     "--model 'deep-index': deep-index/model_index.json holds JSON nested deeper than 64 levels"),
    (["eval", "--model", "deep-config", "--out", "run"], "deep-config/model/config.json holds JSON nested deeper"),
    (["bench", "--model", "cut-model"], "cut-model/model/model.safetensors is not a readable safetensors file"),
    (["domain-report", "--model", "deep-index"], "deep-index/model_index.json holds JSON nested deeper"),
    (["eval", "--fid-features", "inception:/etc/passwd", "--out", "run"],
     "/etc/passwd is not a torch weights file (list index out of range)"),
    (["eval", "--fid-features", "domain:deep-clip", "--out", "run"],
     "deep-clip/open_clip_config.json holds JSON nested deeper than 64 levels"),
    (["eval", "--clip-model", "domain:cut-clip", "--out", "run"],
     "cut-clip/open_clip_model.safetensors is not a readable safetensors file"),
    (["convert-drafter", "lantern", "out"], "SOURCE 'lantern': lantern/config.json holds JSON nested deeper"),
    (["convert-vqgan", "x.ckpt", "out", "--config", "deep.yaml"],
     "deep.yaml nests deeper than a YAML reader can follow"),
    # 3. sizes no machine has (the memory checks of training: tests/cli/test_train.py)
    (["train", "vq", "--image-size", "30", "--out", "new"], "image_size 30: with 3 levels"),
    # 4. one integer parser, devices that exist, --n within the set
    (["eval", "--seed", "1_0", "--out", "run"], "--seed takes integers >= 0 like '0', '0,1,2' or '0-3', got '1_0'"),
    (["eval", "--seed", "\uff11", "--out", "run"], "--seed takes integers >= 0"),
    (["eval", "--seed", "0-\u0663", "--out", "run"], "--seed takes integers >= 0"),
    (["generate", "a red circle", "--seed", "\uff11"], "argument --seed: must be an integer from 0 to"),
    *[([*command, "--device", "cpu:99"], "argument --device: device 'cpu:99': this machine has one cpu device")
      for command in DEVICE_COMMANDS],
    (["eval", "--n", "1000000000", "--out", "run"],
     "--n 1000000000 is more than the 1,000 prompts of 'shapes'; pass --n 1000 or fewer"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "message"), ISSUE_33, ids=[" ".join(argv)[:60] for argv, _ in ISSUE_33])
def test_the_probes_of_issue_33_are_refused_in_one_line_before_any_work(hostile, argv, message, capsys):
    before = {path: path.read_bytes() for path in (hostile / "earlier").iterdir()}
    assert main(argv) == 2
    error = capsys.readouterr().err
    command = " ".join(argv[:2]) if argv[0] == "train" else argv[0]
    lines = [line for line in error.splitlines() if line.startswith(f"arjet {command}: error: ")]
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in error, error
    assert {path: path.read_bytes() for path in (hostile / "earlier").iterdir()} == before
    assert not any((hostile / name).exists() for name in ("run", "new", "out"))
