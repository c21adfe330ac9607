"""`arjet convert-vqgan`: Meta's Chameleon checkpoint in, a ChameleonVQGAN folder out, errors as one line."""

import pytest
import torch
from tiny_vqgan import YAML, tiny_vqgan

from arjet.cli import main


def test_convert_vqgan_writes_the_folder_and_names_a_missing_checkpoint(tmp_path, capsys):
    torch.save({"state_dict": tiny_vqgan().state_dict()}, tmp_path / "vqgan.ckpt")
    (tmp_path / "vqgan.yaml").write_text(YAML)
    args = [str(tmp_path / "vqgan.ckpt"), str(tmp_path / "out"), "--config", str(tmp_path / "vqgan.yaml")]
    assert main(["convert-vqgan", *args]) == 0
    assert (tmp_path / "out" / "diffusion_pytorch_model.safetensors").is_file()
    assert main(["convert-vqgan", str(tmp_path / "missing.ckpt"), str(tmp_path / "out2")]) == 2
    assert "missing.ckpt" in capsys.readouterr().err


def test_convert_vqgan_refuses_a_folder_that_is_not_empty(tmp_path, capsys):
    torch.save({"state_dict": tiny_vqgan().state_dict()}, tmp_path / "vqgan.ckpt")
    (tmp_path / "vqgan.yaml").write_text(YAML)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    args = [str(tmp_path / "vqgan.ckpt"), str(tmp_path / "out"), "--config", str(tmp_path / "vqgan.yaml")]
    assert main(["convert-vqgan", *args]) == 2
    error = capsys.readouterr().err
    assert f"arjet convert-vqgan: error: OUT '{tmp_path / 'out'}' is a folder that is not empty" in error
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == ["notes.txt"]


def test_convert_vqgan_refuses_a_config_too_large_before_reading_the_checkpoint(
    tmp_path, monkeypatch, capsys
):
    import arjet.vq.convert as convert

    monkeypatch.setattr(convert, "load_vqgan_state_dict", lambda path: pytest.fail("read before the sizes"))
    (tmp_path / "huge.yaml").write_text(YAML.replace("n_embed: 16", "n_embed: 1000000000000"))
    args = [str(tmp_path / "vqgan.ckpt"), str(tmp_path / "out"), "--config", str(tmp_path / "huge.yaml")]
    assert main(["convert-vqgan", *args]) == 2
    error = capsys.readouterr().err
    assert "error: the VQGAN config " in error and "huge.yaml describes a model of" in error
    assert "Traceback" not in error and not (tmp_path / "out").exists()


def test_convert_vqgan_names_a_config_nested_too_deep_in_one_line(tmp_path, capsys):
    (tmp_path / "deep.yaml").write_text("[" * 100_000)
    args = [str(tmp_path / "vqgan.ckpt"), str(tmp_path / "out"), "--config", str(tmp_path / "deep.yaml")]
    assert main(["convert-vqgan", *args]) == 2
    error = capsys.readouterr().err
    assert error.startswith(
        f"arjet convert-vqgan: error: {tmp_path / 'deep.yaml'} nests deeper than a YAML reader can follow"
    )
    assert error.count("\n") == 1 and not (tmp_path / "out").exists()
