"""An `arjet eval` run folder stays usable: nothing written before the settings pass, only arjet's own
temporaries removed, foreign folders refused, the umask's modes kept, sampler lists compared as sets; and
it stays the run's own: only its own records and images are read, one run at a time."""

import json
import os
import re
import shutil
import stat
import subprocess
import sys

import PIL.Image
import pytest
import torch

from arjet.cli import main
from arjet.eval import runner
from arjet.eval.atomic import write_text
from arjet.eval.runner import run_eval
from arjet.eval.scoring import MetricOptions, load_images
from arjet.eval.settings import CONFIG_FILE, EvalSettings
from arjet.samplers import SamplingOptions
from arjet.testing import tiny_pipeline

from .test_images import png_claiming

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
        # fine alone, not with the model's guidance scale (5): found with the model loaded
        (_settings(model, sampling=SamplingOptions(temperature=1e-30)), "with guidance_scale=5.0 scales"),
        (_settings(model, samplers=["sjd:window=10000"]), "window=10000 is larger than"),
        (_settings(model, width=7), "makes 8x8 images only"),
    ]:
        with pytest.raises(ValueError, match=message):
            run_eval(settings, PROMPTS, out, MetricOptions(None, None), progress=False)
        assert not (out / CONFIG_FILE).exists()


def test_settings_carry_their_sampling_options_whole(tmp_path):
    with pytest.raises(
        ValueError, match="sampling must be an arjet.samplers.SamplingOptions, got {'top_k': 0}"
    ):
        _settings(tmp_path, sampling={"top_k": 0})
    settings = _settings(tmp_path, sampling=SamplingOptions(guidance_scale=2.0, top_k=3))
    assert settings.call_kwargs() == dict(
        height=None, width=None, compile=False, guidance_scale=2.0, temperature=1.0, top_k=3, top_p=None
    )


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


# -- a run reads only what it wrote ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def finished(model, tmp_path_factory):
    out = tmp_path_factory.mktemp("finished") / "run"
    assert main(args(model, out)) == 0
    return out


def _copy(finished, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(finished, out)
    return out


def _record(out, **changes) -> str:
    first = json.loads((out / "records" / "process-0.jsonl").read_text().splitlines()[0])
    return json.dumps({**first, **changes}) + "\n"


@pytest.fixture
def no_model_load(monkeypatch):
    """A refusal must come before the model loads."""

    def load(*_):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(runner, "_load_pipeline", load)


def test_a_record_file_the_run_did_not_write_is_refused_by_name(
    model, finished, tmp_path, capsys, no_model_load
):
    out = _copy(finished, tmp_path)
    metrics = (out / "metrics.json").read_bytes()
    (out / "records" / "extra.jsonl").write_text(_record(out, index=1, forward_passes=1))
    assert main(args(model, out)) == 2
    error = capsys.readouterr().err
    assert f"{out / 'records' / 'extra.jsonl'} is not a record log of this run" in error
    assert (out / "metrics.json").read_bytes() == metrics


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"image": "/etc/passwd"}, "its image '/etc/passwd' is not 'images/ar/0_0.png'"),
        ({"image": "../ref/0.png"}, "its image '../ref/0.png' is not"),
        ({"index": 7}, "prompt index 7 is not one of the run's 0 to 1"),
        ({"sampler": "sjd"}, "sampler 'sjd' is not one of the run's ['ar', 'zipar']"),
        ({"seed": 5}, "seed 5 is not one of the run's [0]"),
        ({"prompt": "something else"}, "its prompt is not the run's prompt 0"),
        ({"forward_passes": "many"}, "its forward_passes 'many' is not a number >= 0"),
        ({}, "records image ('ar', 0, 0) a second time"),
    ],
)
def test_a_record_the_run_would_not_write_is_refused_by_file_and_line(
    model, finished, tmp_path, capsys, no_model_load, changes, reason
):
    out = _copy(finished, tmp_path)
    log = out / "records" / "process-0.jsonl"
    lines = len(log.read_text().splitlines())
    with open(log, "a") as handle:
        handle.write(_record(out, **changes))
    assert main(args(model, out)) == 2
    error = capsys.readouterr().err
    assert f"{log}, line {lines + 1}" in error and reason in error


def test_a_line_that_is_not_a_record_is_refused_but_a_line_cut_short_is_skipped(
    model, finished, tmp_path, capsys
):
    out = _copy(finished, tmp_path)
    log = out / "records" / "process-0.jsonl"
    with open(log, "a") as handle:
        handle.write('{"sampler": "ar", "ind')  # a kill mid-write: no newline yet
    assert main(args(model, out)) == 0
    with open(log, "a") as handle:
        handle.write("[1, 2]\n")
    assert main(args(model, out)) == 2
    assert "is not a record (a JSON object)" in capsys.readouterr().err


def test_images_outside_the_run_folder_are_not_read(tmp_path):
    out = tmp_path / "run"
    (out / "images" / "ar").mkdir(parents=True)
    outside = tmp_path / "secret.png"
    PIL.Image.new("RGB", (4, 4)).save(outside)
    (out / "images" / "ar" / "0_0.png").symlink_to(outside)
    with pytest.raises(
        ValueError, match="'images/ar/0_0.png' of a record is not a file inside the run folder"
    ):
        next(load_images(out, [{"image": "images/ar/0_0.png"}]))


# the lock of a run folder, held by another process until it is told to let go
HOLD_LOCK = """
import sys
from arjet.eval.lock import run_folder_lock
with run_folder_lock(sys.argv[1]):
    print("locked", flush=True)
    sys.stdin.readline()
"""


def test_a_second_eval_into_a_busy_folder_is_refused_before_any_work(model, tmp_path, capsys, monkeypatch):
    out = tmp_path / "busy"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with monkeypatch.context() as patched:
            patched.setattr(runner, "_load_pipeline", lambda *_: pytest.fail("the model was loaded"))
            assert main(args(model, out)) == 2
        error = capsys.readouterr().err
        assert f"--out {str(out)!r} is busy: another arjet eval is writing this run now" in error
        assert list(out.iterdir()) == []
    finally:
        holder.communicate("\n", timeout=60)
    assert main(args(model, out)) == 0  # the same command once the other run has ended


def test_a_refused_start_leaves_no_folder_behind(model, tmp_path):
    out = tmp_path / "never"
    assert main([*args(model, out), "--height", "64"]) == 2
    assert not out.exists()
    (tmp_path / "file").write_text("mine")  # and a file where the folder should be is named, not locked
    with pytest.raises(ValueError, match="is a file; pass a folder for the run"):
        run_eval(_settings(model), PROMPTS, tmp_path / "file", MetricOptions(None, None), progress=False)
    assert (tmp_path / "file").read_text() == "mine"


def test_eval_compiles_like_generate_and_bench(model, tmp_path, capsys, monkeypatch):
    """`--compile` is checked with the other options, stored with the run, and reaches every pipeline call
    (inductor's compiler replaced by a recorder here: compiling for real takes minutes on a CPU)."""
    assert main([*args(model, tmp_path / "gpu"), "--compile", "cuda-graphs"]) == 2
    assert "--compile cuda-graphs needs a CUDA device" in capsys.readouterr().err
    assert not (tmp_path / "gpu").exists()
    compiled = []

    def record(function, **options):
        compiled.append(function)
        return function

    monkeypatch.setattr(torch, "compile", record)
    out = tmp_path / "inductor"
    assert main([*args(model, out), "--compile", "inductor"]) == 0
    assert compiled and json.loads((out / CONFIG_FILE).read_text())["compile"] == "inductor"
    assert main(args(model, out)) == 2  # eager is another run
    assert "compile: 'inductor' there, False now" in capsys.readouterr().err


def test_a_run_of_int8_weights_says_so_and_resumes_only_as_int8(model, tmp_path, capsys):
    pytest.importorskip("torchao", reason="quantization needs torchao (pip install 'arjet[quant]')")
    out = tmp_path / "int8"
    assert main(args(model, out, "--quantize", "int8")) == 0
    assert json.loads((out / CONFIG_FILE).read_text())["quantization"] == "int8"
    assert "(JanusPipeline, torch.float32, int8 weights) on cpu" in (out / "report.md").read_text()
    capsys.readouterr()
    assert main(args(model, out)) == 2  # the float model is another model: not a resume of this run
    assert "quantization: 'int8' there, None now" in capsys.readouterr().err
    assert main(args(model, out, "--quantize", "int8")) == 0  # the same command resumes it


def test_a_run_made_before_a_setting_existed_resumes_with_its_default(model, finished, tmp_path, monkeypatch):
    out = _copy(finished, tmp_path)
    config = json.loads((out / CONFIG_FILE).read_text())
    del config["compile"]
    (out / CONFIG_FILE).write_text(json.dumps(config))
    calls = []
    monkeypatch.setattr(runner._Worker, "_generate", lambda self, *a: calls.append(a))
    assert main(args(model, out)) == 0 and not calls


# config.json as the first layout (version 1) has it, the sampling options as four keys of their own
V1_KEYS = [
    "model", "samplers", "prompts", "n", "seeds", "prompts_sha1", "height", "width",
    "guidance_scale", "temperature", "top_k", "top_p", "dtype", "compile", "version",
]  # fmt: skip


def test_config_json_keeps_the_first_layout_and_such_a_run_resumes(
    model, finished, tmp_path, monkeypatch, capsys
):
    """A run folder written before the settings carried `SamplingOptions` whole (its config.json written
    by hand here, key by key) resumes without an image made again; another temperature is another run."""
    out = _copy(finished, tmp_path)
    written = json.loads((out / CONFIG_FILE).read_text())
    assert list(written) == V1_KEYS and written["version"] == 1
    flat = {
        "model": written["model"],
        "samplers": ["ar", "zipar"],
        "prompts": written["prompts"],
        "n": 2,
        "seeds": [0],
        "prompts_sha1": written["prompts_sha1"],
        "height": None,
        "width": None,
        "guidance_scale": None,
        "temperature": 1.0,
        "top_k": None,
        "top_p": None,
        "dtype": None,
        "compile": False,
        "version": 1,
    }
    (out / CONFIG_FILE).write_text(json.dumps(flat, indent=2) + "\n")
    calls = []
    monkeypatch.setattr(runner._Worker, "_generate", lambda self, *a: calls.append(a))
    assert main(args(model, out)) == 0 and not calls
    (out / CONFIG_FILE).write_text(json.dumps({**flat, "temperature": 0.5}))
    assert main(args(model, out)) == 2
    assert "different settings (temperature: 0.5 there, 1.0 now)" in capsys.readouterr().err


def test_a_drafters_forward_passes_are_recorded_and_reported(tmp_path):
    """`eagle` on a pipeline with a (random) drafter: each record counts the drafter's forwards, the report's
    table shows their mean; a sampler without a drafter counts none."""
    import arjet

    pipe = tiny_pipeline("janus", grid=(4, 4), vocab_size=16, logit_scale=3.0)
    pipe.register_modules(drafter=arjet.Drafter.for_adapter(pipe.session_adapter()))
    pipe.save_pretrained(tmp_path / "model")
    (tmp_path / "prompts.txt").write_text("\n".join(PROMPTS) + "\n")
    out = tmp_path / "run"
    command = args(tmp_path, out)
    command[command.index("ar,zipar")] = "ar;eagle:window=4,tree_width=1,tree_depth=1"
    assert main(command) == 0
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    drafted = {r["sampler"]: r["drafter_forwards"] for r in records}
    assert drafted["ar"] == 0 and drafted["eagle:window=4,tree_width=1,tree_depth=1"] > 0
    assert "| drafter forwards |" in (out / "report.md").read_text()


@pytest.mark.parametrize("name", ["records.jsonl", "metrics.json", "report.md"])
def test_a_folder_where_the_run_writes_a_file_is_named_before_the_model_loads(
    model, finished, tmp_path, capsys, no_model_load, name
):
    """It was named only after the run, and then as the temporary file beside it."""
    out = _copy(finished, tmp_path)
    (out / name).unlink()
    (out / name).mkdir()
    assert main(args(model, out)) == 2
    error = capsys.readouterr().err
    assert f"arjet eval: error: {out / name} is a folder where the run writes its file {name}" in error
    assert ".tmp" not in error and "Traceback" not in error


def test_an_atomic_write_over_a_folder_names_the_folder(tmp_path):
    (tmp_path / "report.md").mkdir()
    with pytest.raises(IsADirectoryError, match=re.escape(str(tmp_path / "report.md"))):
        write_text(tmp_path / "report.md", "x")
    assert list(tmp_path.iterdir()) == [tmp_path / "report.md"]  # no temporary left


@pytest.mark.parametrize(
    ("where", "content", "reason"),
    [
        ("records/process-0.jsonl", "[" * 100_000 + "\n", "line 5 holds JSON nested deeper than 64 levels"),
        ("records/process-0.jsonl", '{"a": ' * 3000 + "1" + "}" * 3000 + "\n", "line 5 holds JSON nested"),
        (CONFIG_FILE, '{"samplers": ' + "[" * 100_000, "config.json holds JSON nested deeper than 64 levels"),
        (CONFIG_FILE, '{"n": 2, "seeds": [0' + ", 0" * 10, "config.json is not valid JSON ("),
    ],
    ids=["deep-record", "deep-record-objects", "deep-config", "bad-config"],
)
def test_deeply_nested_or_broken_json_in_a_run_is_named_before_the_model_loads(
    model, finished, tmp_path, capsys, no_model_load, where, content, reason
):
    """Python's JSON reader recurses once per level: a few kB of brackets were a RecursionError."""
    out = _copy(finished, tmp_path)
    path = out / where
    with open(path, "a" if where.startswith("records") else "w") as handle:
        handle.write(content)
    assert main(args(model, out)) == 2
    error = capsys.readouterr().err
    (line,) = [line for line in error.splitlines() if line.startswith("arjet eval: error: ")]
    assert line.startswith(f"arjet eval: error: {path}") and reason in line and "Traceback" not in error


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (png_claiming(5000, 5000), "is 5000 x 5000 pixels, more than the 16,777,216 arjet reads there"),
        (png_claiming(40000, 40000), "claims more pixels than PIL will decode (a decompression bomb)"),
        (png_claiming(16, 16), "is 16 x 16 pixels, not 8 x 8"),
        (b"GIF89a", "is not an image arjet can read ("),
    ],
    ids=["too-many-pixels", "bomb", "other-size", "not-an-image"],
)
def test_a_bad_image_in_a_run_is_named_when_the_run_resumes(
    model, finished, tmp_path, capsys, content, reason
):
    """Resuming a finished run scores it and draws its plots again from the images on disk: an image swapped
    for a decompression bomb (or any other file) is refused by name, from its header, before the model
    loads and before anything of the run is written again."""
    out = _copy(finished, tmp_path)
    image = out / "images" / "zipar" / "0_0.png"  # read after the first sampler's image of prompt 0
    image.write_bytes(content)
    metrics = (out / "metrics.json").read_bytes()
    assert main(args(model, out)) == 2
    error = capsys.readouterr().err
    (line,) = [line for line in error.splitlines() if line.startswith("arjet eval: error: ")]
    assert line.startswith(f"arjet eval: error: {image} {reason}")
    assert line.endswith("; remove it with its record, or pass a new --out")
    assert "Traceback" not in error and (out / "metrics.json").read_bytes() == metrics


def _snapshot(folder) -> dict[str, tuple[bytes, int] | None]:
    """Every entry under `folder`: a file's bytes and modification time, a folder as None."""
    return {
        str(path.relative_to(folder)): (path.read_bytes(), path.stat().st_mtime_ns)
        if path.is_file()
        else None
        for path in sorted(folder.rglob("*"))
    }


def test_an_image_whose_data_is_cut_off_is_refused_before_the_model_loads(
    model, finished, tmp_path, capsys, no_model_load
):
    """Its header is intact (PIL opens it and reports its size), only its pixel data is cut off: the resumed
    run decodes every recorded image before the model loads, so it is refused by name there, and nothing
    in the run folder changes (records.jsonl is not rewritten)."""
    out = _copy(finished, tmp_path)
    image = out / "images" / "ar" / "1_0.png"
    data = image.read_bytes()
    image.write_bytes(data[: len(data) // 2])
    with PIL.Image.open(image) as opened:
        assert opened.size == (8, 8)  # the header alone passes
    before = _snapshot(out)
    assert main(args(model, out)) == 2
    error = capsys.readouterr().err
    (line,) = [line for line in error.splitlines() if line.startswith("arjet eval: error: ")]
    assert line.startswith(f"arjet eval: error: {image} is not an image arjet can read (")
    assert "truncated" in line and "Traceback" not in error
    assert _snapshot(out) == before
