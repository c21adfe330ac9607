"""An `arjet eval` run folder stays usable: nothing written before the settings pass, only arjet's own
temporaries removed, foreign folders refused, the umask's modes kept, sampler lists compared as sets."""

import json
import os
import stat

import pytest

from arjet.cli import main
from arjet.eval import runner
from arjet.eval.runner import run_eval
from arjet.eval.scoring import MetricOptions
from arjet.eval.settings import CONFIG_FILE, EvalSettings
from arjet.testing import tiny_pipeline

PROMPTS = ["a red square", "a blue circle"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    root = tmp_path_factory.mktemp("run-folder")
    tiny_pipeline("janus", grid=(4, 4), vocab_size=16, logit_scale=3.0).save_pretrained(root / "model")
    (root / "prompts.txt").write_text("\n".join(PROMPTS) + "\n")
    return root


def args(model, out, *extra):
    return [
        "eval", "--model", str(model / "model"), "--device", "cpu", "--prompts", str(model / "prompts.txt"),
        "--seeds", "0", "--samplers", "ar,zipar", "--fid-features", "none", "--clip-model", "none",
        "--no-progress", "--out", str(out), *extra,
    ]  # fmt: skip


def _settings(model, **changes) -> EvalSettings:
    values = dict(model=str(model / "model"), samplers=["ar"], prompts="x", n=2, seeds=[0])
    return EvalSettings(**{**values, **changes})


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--guidance-scale", "1e308"], "guidance_scale=1e+308 scales the logits"),
        (["--temperature", "1e-45"], "temperature=1e-45 scales the logits"),
        (["--top-k", "0"], "argument --top-k: must be an integer >= 1"),
        (["--model", "/nowhere/model"], "/nowhere/model"),
        (["--samplers", "ar,sjd:window=10000"], "window=10000 is larger than the 16 cells"),
        (["--height", "64"], "makes 8x8 images only"),
        (["--seeds", "0-1000000000"], "lists more than 1000 seeds"),
        (["--seeds", str(2**63 - 1)], "--seeds + 1 < 2**63"),
    ],
)
def test_a_failed_start_writes_nothing_and_the_corrected_command_runs(
    model, tmp_path, extra, message, capsys
):
    out = tmp_path / "run"
    assert main([*args(model, out), *extra]) == 2
    error = capsys.readouterr().err
    # one error line (after the loading progress bars, where the model had to be loaded to find the error)
    (line,) = [line for line in error.splitlines() if line.startswith("arjet eval: error: ")]
    assert message in line and "Traceback" not in error
    assert not (out / CONFIG_FILE).exists()
    if extra[0] == "--samplers":  # the one bad setting found only with the model loaded
        assert main(args(model, out)) == 0
        assert (out / CONFIG_FILE).is_file()


def test_run_eval_checks_its_settings_before_config_json(model, tmp_path):
    out = tmp_path / "api"
    for settings, message in [
        (_settings(model, top_k=0), "top_k must be a positive integer"),
        (_settings(model, guidance_scale=float("inf")), "guidance_scale must be a finite number"),
        (_settings(model, samplers=["sjd:window=10000"]), "window=10000 is larger than"),
        (_settings(model, width=7), "makes 8x8 images only"),
    ]:
        with pytest.raises(ValueError, match=message):
            run_eval(settings, PROMPTS, out, MetricOptions(None, None), progress=False)
        assert not (out / CONFIG_FILE).exists()


def test_an_existing_folder_that_is_not_a_run_is_refused(model, tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(args(model, out)) == 2
    assert "holds files but no arjet evaluation run (config.json)" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    (tmp_path / "file").write_text("")
    assert main(args(model, tmp_path / "file")) == 2
    assert "--out '" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(args(model, empty)) == 0  # an empty folder is fine


def test_a_resumed_run_removes_only_its_own_temporaries(model, tmp_path):
    out = tmp_path / "resume"
    assert main(args(model, out)) == 0
    images = out / "images" / "ar"
    own = [images / ".0_0.png.arjet-0a1b2c.tmp", out / ".metrics.json.arjet-3d4e5f.tmp"]
    foreign = [images / ".0_0.png.x1y2z3.tmp", images / "draft.tmp", out / "mine" / ".x.png.arjet-00.tmp"]
    for path in own + foreign:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"partial")
    assert main(args(model, out)) == 0
    assert not any(path.exists() for path in own)
    assert all(path.exists() for path in foreign)


def test_sampler_lists_compare_as_sets(model, tmp_path, monkeypatch):
    out = tmp_path / "order"
    assert main(args(model, out)) == 0
    calls = []
    monkeypatch.setattr(runner._Worker, "_generate", lambda self, *a: calls.append(a))
    assert main([*args(model, out), "--samplers", "zipar,ar"]) == 0
    assert not calls  # every image was already there
    assert main([*args(model, out), "--samplers", "ar"]) == 2  # a different set is a different run


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_outputs_keep_the_umask_modes(model, tmp_path, umask):
    out = tmp_path / f"umask-{umask:o}"
    previous = os.umask(umask)
    try:
        assert main(args(model, out)) == 0
    finally:
        os.umask(previous)
    expected = 0o666 & ~umask
    for relative in (
        CONFIG_FILE,
        "metrics.json",
        "records.jsonl",
        "records/process-0.jsonl",
        "images/ar/0_0.png",
    ):
        assert stat.S_IMODE((out / relative).stat().st_mode) == expected, relative
    assert json.loads((out / CONFIG_FILE).read_text())["samplers"] == ["ar", "zipar"]
