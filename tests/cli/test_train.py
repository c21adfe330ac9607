"""`arjet train`: bounded options from each stage's config, outputs under the working folder, missing inputs named, the saved path said."""

from pathlib import Path

import pytest

from arjet.builtin import assets_dir
from arjet.cli import main
from arjet.train import ar, clip, sjd2, vq


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
    ],
)
def test_bad_training_options_fail_at_parse_time(argv, message, capsys):
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"arjet train {argv[1]}: error: ") and message in error
