"""`arjet train`: bounded options from each stage's config, outputs under the working folder, missing inputs named, the saved path said."""

from pathlib import Path

import pytest
import torch

from arjet.builtin import assets_dir
from arjet.cli import main
from arjet.train import ar, clip, sjd2, vq
from arjet.train.configs import MAX_BATCH_SIZE, MAX_HELDOUT, STAGES, DrafterTrainConfig
from arjet.train.scaffold import TrainingRun, check_outputs


@pytest.mark.parametrize(
    "config", [vq.VQTrainConfig(), ar.ARTrainConfig(), clip.ClipTrainConfig(), sjd2.SJD2TrainConfig()]
)
def test_no_stage_writes_into_the_installed_package_by_default(config, tmp_path, monkeypatch):
    monkeypatch.chdir(assets_dir().parents[2])  # the repository root, where `src/arjet/assets` is the package
    out = Path(config.out).resolve()
    assert not out.is_relative_to(assets_dir().resolve()), config.out
    assert not Path(config.out).is_absolute()  # under the working folder


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train", "ar", "--vq", "{tmp}/no-vq"], "--vq '{tmp}/no-vq': no such folder"),
        (["train", "ar", "--init", "{tmp}/no-ar"], "--init '{tmp}/no-ar': no such folder"),
        (["train", "clip", "--init", "{tmp}/no-clip"], "--init '{tmp}/no-clip': no such folder"),
        (["train", "sjd2", "--data", "{tmp}/pairs.jsonl"], "--data '{tmp}/pairs.jsonl': no such file"),
    ],
)
def test_missing_local_inputs_are_named_before_any_work_or_hub_lookup(
    argv, message, tmp_path, monkeypatch, capsys
):
    def no_hub(*args, **kwargs):
        raise AssertionError("looked the path up on the hub / loaded a model")

    monkeypatch.setattr("transformers.JanusVQVAE.from_pretrained", no_hub)
    monkeypatch.setattr("arjet.pipelines.ARPipeline.from_pretrained", no_hub)
    argv = [a.format(tmp=tmp_path) for a in argv] + ["--out", str(tmp_path / "out")]
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"arjet train {argv[1]}: error: ") and message.format(tmp=tmp_path) in error
    assert not (tmp_path / "out").exists()


def test_each_stage_says_where_it_saved(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(vq, "train_vq", lambda config: Path(config.out))
    monkeypatch.chdir(tmp_path)
    assert main(["train", "vq", "--out", "runs/vq"]) == 0
    assert (
        capsys.readouterr().out.strip()
        == f"arjet train: saved the VQ tokenizer to {tmp_path / 'runs' / 'vq'}"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["train", "ar", "--max-minutes", "-1"],
            "argument --max-minutes: must be a finite number > 0, got '-1'",
        ),
        (
            ["train", "ar", "--batch-size", "0"],
            "argument --batch-size: must be an integer from 1 to 4096, got '0'",
        ),
        (["train", "vq", "--device", "bogus"], "argument --device: device 'bogus' is not a torch device"),
        (
            ["train", "sjd2", "--clean-share", "1.5"],
            "argument --clean-share: must be a finite number from 0 to 1",
        ),
        (["train", "ar", "--bf16", "maybe"], "argument --bf16: must be true or false, got 'maybe'"),
        (["train", "vq", "--max-steps", "0"], "argument --max-steps: must be an integer >= 1, got '0'"),
        (["train", "sjd2", "--max-steps", "0"], "argument --max-steps: must be an integer >= 1, got '0'"),
        (["train", "vq", "--lr", "1e308"], "argument --lr: must be a finite number in (0, 1], got '1e308'"),
        (["train", "ar", "--min-lr", "2"], "argument --min-lr: must be a finite number from 0 to 1"),
        (
            ["train", "vq", "--channel-multiplier", "a,b"],
            "argument --channel-multiplier: must be integers >= 1 separated by commas, like '1,2,3'; got 'a,b'",
        ),
        (["train", "clip", "--vision-layers", "1,0"], "argument --vision-layers: must be integers >= 1"),
    ],
)
def test_bad_training_options_fail_at_parse_time(argv, message, capsys):
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"arjet train {argv[1]}: error: ") and message in error


@pytest.mark.parametrize("stage", list(STAGES))
def test_every_stage_bounds_its_batch_size_and_held_out_images_alike(stage, tmp_path, monkeypatch, capsys):
    """`train drafter --batch-size 10**9` generated data for a minute, then ran out of memory; `train vq
    --eval-images 10**9` trained, then evaluated for days: refused at parse time, with the bounds every
    stage shares."""
    from arjet.cli import train

    monkeypatch.setattr(
        train, "_trainer", lambda stage: pytest.fail("trained before the options were checked")
    )
    held_out = {"vq": "eval_images", "ar": "heldout_images", "clip": "eval_scenes", "drafter": "val_images"}
    options = [("batch_size", MAX_BATCH_SIZE)] + (
        [(held_out[stage], MAX_HELDOUT)] if stage in held_out else []
    )
    for name, most in options:
        flag = "--" + name.replace("_", "-")
        assert main(["train", stage, flag, str(10**9), "--out", str(tmp_path / "out")]) == 2
        error = capsys.readouterr().err
        assert f"arjet train {stage}: error: argument {flag}: must be an integer from " in error
        assert f" to {most}, got '1000000000'" in error and not (tmp_path / "out").exists()


@pytest.mark.parametrize("stage", ["vq", "ar", "clip", "sjd2"])
def test_outputs_are_checked_before_any_work(stage, tmp_path, monkeypatch, capsys):
    def no_work(config):
        raise AssertionError("trained before checking where the run writes")

    monkeypatch.setattr(f"arjet.train.{stage}.train_{stage}", no_work)
    (tmp_path / "file").write_text("")
    assert main(["train", stage, "--out", str(tmp_path / "file")]) == 2
    assert "error: --out '" in capsys.readouterr().err
    assert main(["train", stage, "--out", "/proc/self/run"]) == 2
    assert "no file can be written in '/proc/self'" in capsys.readouterr().err


def test_a_clip_log_is_a_new_file_and_goes_into_out_by_default(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(clip, "train_clip", lambda config: pytest.fail("trained before checking --log"))
    (tmp_path / "log.jsonl").write_text('{"step": 100}\n')  # an earlier run's
    for log in (tmp_path, tmp_path / "log.jsonl"):
        argv = ["train", "clip", "--out", str(tmp_path / "clip"), "--log", str(log)]
        assert main(argv) == 2
        error = capsys.readouterr().err
        assert f"error: --log '{log}' already exists; arjet train writes a new file for every run" in error
    assert not (tmp_path / "clip").exists() and (tmp_path / "log.jsonl").read_text() == '{"step": 100}\n'
    assert clip.ClipTrainConfig().log == ""  # the log of a run is OUT/train_log.jsonl, one run per folder
    run = TrainingRun(clip.ClipTrainConfig(out=str(tmp_path / "clip")), "clip", log=None)
    assert run.log_path == tmp_path / "clip" / "train_log.jsonl"


EARLIER_RUN = {
    "metrics.json": '{"psnr_mean": 30.1}',
    "train_log.jsonl": '{"step": 100}\n',
    "model.safetensors": "w",
}


@pytest.mark.parametrize("stage", ["vq", "ar", "clip", "sjd2", "drafter"])
def test_no_stage_writes_over_an_earlier_run(stage, tmp_path, monkeypatch, capsys):
    """A folder that holds an earlier run is refused before any work: its metrics, weights and log stay as
    they were (no stage resumes a run; ar and clip continue from saved weights with --init)."""
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    for name, text in EARLIER_RUN.items():
        (earlier / name).write_text(text)
    monkeypatch.setattr(f"arjet.train.{stage}.train_{stage}", lambda config: pytest.fail("trained"))
    assert main(["train", stage, "--out", str(earlier)]) == 2
    error = capsys.readouterr().err
    assert error.startswith(
        f"arjet train {stage}: error: --out '{earlier}' is a folder that is not empty (it "
    )
    assert "a folder holds one training run" in error and error.count("\n") == 1
    assert {path.name: path.read_text() for path in earlier.iterdir()} == EARLIER_RUN


@pytest.mark.parametrize(
    "config",
    [
        vq.VQTrainConfig(),
        ar.ARTrainConfig(),
        clip.ClipTrainConfig(),
        sjd2.SJD2TrainConfig(),
        DrafterTrainConfig(),
    ],
    ids=["vq", "ar", "clip", "sjd2", "drafter"],
)
def test_the_library_refuses_an_earlier_run_too(config, tmp_path):
    """`train_STAGE(config)` checks where it writes first, as the command line does."""
    from arjet.train import drafter

    (tmp_path / "metrics.json").write_text("{}")
    config.out = str(tmp_path)
    trainer = {
        vq.VQTrainConfig: vq.train_vq,
        ar.ARTrainConfig: ar.train_ar,
        clip.ClipTrainConfig: clip.train_clip,
        sjd2.SJD2TrainConfig: sjd2.train_sjd2,
        DrafterTrainConfig: drafter.train_drafter,
    }[type(config)]
    with pytest.raises(ValueError, match="is a folder that is not empty \\(it holds metrics.json\\)"):
        trainer(config)
    assert [path.name for path in tmp_path.iterdir()] == ["metrics.json"]


def test_caches_are_shared_between_runs_but_must_be_writable(tmp_path, capsys):
    """`--data-cache` (ar, sjd2) and `--data-dir` (drafter) may hold an earlier run's data: that is what they
    are for; a cache that cannot be a folder is refused before any work."""
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "train-16.npy").write_bytes(b"")
    assert check_outputs(ar.ARTrainConfig(out=str(tmp_path / "ar"), data_cache=str(cache))) == [
        tmp_path / "ar"
    ]
    (tmp_path / "file").write_text("")
    for argv in (
        ["train", "ar", "--data-cache", str(tmp_path / "file")],
        ["train", "sjd2", "--data-cache", str(tmp_path / "file")],
        ["train", "drafter", "--data-dir", str(tmp_path / "file")],
    ):
        assert main([*argv, "--out", str(tmp_path / "out")]) == 2
        option = argv[2]
        assert f"error: {option} '{tmp_path / 'file'}' is a file, not a folder" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_refused_run_removes_the_empty_folders_it_made(tmp_path, monkeypatch, capsys):
    def refuse(config):
        Path(config.out).mkdir(parents=True)  # as TrainingRun does before a stage reads its inputs
        raise ValueError("the weights of component 'vq' do not match the model")

    monkeypatch.setattr(vq, "train_vq", refuse)
    (tmp_path / "kept").mkdir()
    assert main(["train", "vq", "--out", str(tmp_path / "new" / "vq")]) == 2
    assert main(["train", "vq", "--out", str(tmp_path / "kept")]) == 2
    assert "do not match the model" in capsys.readouterr().err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["kept"]  # an existing folder stays


def test_a_model_too_large_for_memory_is_refused_before_any_folder(tmp_path, capsys):
    argv = ["train", "vq", "--out", str(tmp_path / "vq"), "--base-channels", "1000000", "--max-steps", "1"]
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert (
        "error: the VQ of these options describes a model of" in error and "GB to train, more than" in error
    )
    assert not (tmp_path / "vq").exists()


def test_a_diverged_run_saves_nothing(tmp_path):
    run = TrainingRun(vq.VQTrainConfig(out=str(tmp_path / "vq")), "vq")
    model = torch.nn.Linear(2, 2)
    run.check_finite(model)
    with torch.no_grad():
        model.weight[0, 0] = float("nan")
    with pytest.raises(ValueError, match="training diverged: after 0 steps the weight weight holds NaN"):
        run.check_finite(model)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (  # a 4-million-pixel-a-side canvas for each render, 58 TiB (the probe of issue 33)
            ["train", "vq", "--image-size", "1000000"],
            "error: a step of --batch-size 64 images of --image-size 1000000 would take at least",
        ),
        (
            ["train", "vq", "--image-size", "1024", "--batch-size", "1", "--workers", "100000"],
            "error: rendering images of --image-size 1024 in 100000 process(es) would take at least",
        ),
        (
            ["train", "clip", "--images", "100000000", "--image-size", "256"],
            "error: rendering --images 100000000 of --image-size 256 would take at least",
        ),
    ],
    ids=["vq-step", "vq-renders", "clip-renders"],
)
def test_work_too_large_for_memory_is_refused_before_anything_is_allocated(argv, message, tmp_path, capsys):
    assert main([*argv, "--out", str(tmp_path / "out"), "--max-steps", "1"]) == 2
    error = capsys.readouterr().err
    assert message in error and "GB of memory free on cpu" in error and error.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_the_memory_a_vq_step_needs_is_counted_from_its_options():
    config = vq.VQTrainConfig(image_size=64, batch_size=64, base_channels=32, channel_multiplier="2,2")
    # the batch and its reconstruction (3 channels each), one full-size map of 64 channels at each end
    assert vq.step_bytes(config) == 4 * 64 * 64**2 * (2 * 3 + 2 * 64)
    assert vq.step_bytes(config) < 0.2e9  # the defaults never come near a machine's memory


@pytest.mark.parametrize("size", ["30", "8", "2"])
def test_a_vq_image_size_the_levels_cannot_halve_is_refused(size, tmp_path, capsys):
    argv = [
        "train",
        "vq",
        "--image-size",
        size,
        "--channel-multiplier",
        "1,2,3",
        "--out",
        str(tmp_path / "vq"),
    ]
    assert main(argv) == 2
    assert (
        f"error: image_size {size}: with 3 levels (channel_multiplier 1,2,3) the VQ halves the image 2 times, "
        "so it must be a multiple of 4 and at least 16" in capsys.readouterr().err
    )


def test_a_drafter_too_large_for_memory_is_refused_before_its_data_is_generated(
    tmp_path, monkeypatch, capsys
):
    from arjet.train import drafter

    monkeypatch.setattr(
        drafter, "distill", lambda *a, **k: pytest.fail("generated data for a drafter that cannot fit")
    )
    argv = ["train", "drafter", "--base", "shapes", "--intermediate-size", "1000000000000", "--images", "1"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert "error: the drafter of these options (--intermediate-size, --heads) describes a model of" in error
    assert "GB to train, more than" in error and not (tmp_path / "out").exists()


def _model_folder(tmp_path):
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(assets_dir() / "shapes", folder)
    return folder


def _cut_short(path):
    path.write_bytes(path.read_bytes()[:100_000])


@pytest.mark.parametrize(
    ("stage", "option", "damage", "message"),
    [
        ("ar", "--init", lambda f: _cut_short(f / "model" / "model.safetensors"), "is not a readable safetensors"),
        ("ar", "--vq", lambda f: (f / "config.json").write_text("[" * 5000), "holds JSON nested deeper than 64"),
        ("sjd2", "--base", lambda f: (f / "model_index.json").write_text('{"a": ' * 5000), "holds JSON nested deeper"),
        ("drafter", "--base", lambda f: _cut_short(f / "drafter" / "diffusion_pytorch_model.safetensors"),
         "is not a readable safetensors file"),
    ],
    ids=["ar-init", "ar-vq", "sjd2-base", "drafter-base"],
)  # fmt: skip
def test_a_model_folder_with_a_file_cut_short_or_malformed_is_named(
    stage, option, damage, message, tmp_path, monkeypatch, capsys
):
    """Each file by name, in one line, before any model loads (not safetensors' or json's traceback)."""

    def no_load(*args, **kwargs):
        raise AssertionError("loaded a model")

    monkeypatch.setattr("arjet.pipelines.ARPipeline.from_pretrained", no_load)
    monkeypatch.setattr("arjet.builtin.load_model", no_load)
    folder = _model_folder(tmp_path)
    if option == "--vq":
        folder = folder / "model"
    damage(folder)
    assert main(["train", stage, option, str(folder), "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert (
        error.startswith(f"arjet train {stage}: error: {option} '{folder}': {folder}/") and message in error
    )
    assert "Traceback" not in error and not (tmp_path / "out").exists()


def test_a_data_set_line_that_is_not_a_record_is_named_before_the_model_loads(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(
        "arjet.pipelines.ARPipeline.from_pretrained", lambda *a, **k: pytest.fail("loaded the base")
    )
    data = tmp_path / "pairs.jsonl"
    for text, message in (
        ('{"prompt": "a"}\n' + "[" * 100_000 + "\n", f"{data}, line 2 holds JSON nested deeper than 64"),
        ('{"prompt": "a"}\n[1, 2]\n', f"{data}: a record is not a JSON object, got [1, 2]"),
        ("\n\n", f"{data} holds no records"),
    ):
        data.write_text(text)
        assert main(["train", "sjd2", "--data", str(data), "--out", str(tmp_path / "out")]) == 2
        assert message in capsys.readouterr().err
