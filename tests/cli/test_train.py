"""`arjet train`: bounded options from each stage's config, outputs under the working folder, missing inputs named, the saved path said."""

from pathlib import Path

import pytest
import torch

from arjet.builtin import assets_dir
from arjet.cli import main
from arjet.train import ar, clip, sjd2, vq
from arjet.train.scaffold import TrainingRun


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
        (["train", "ar", "--batch-size", "0"], "argument --batch-size: must be an integer >= 1, got '0'"),
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


def test_a_clip_log_is_an_output_file(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(clip, "train_clip", lambda config: pytest.fail("trained before checking --log"))
    argv = ["train", "clip", "--out", str(tmp_path / "clip"), "--log", str(tmp_path)]
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert f"error: --log '{tmp_path}' is a folder; give a file name" in error
    assert not (tmp_path / "clip").exists()


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
