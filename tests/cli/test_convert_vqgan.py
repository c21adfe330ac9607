"""`arjet convert-vqgan`: Meta's Chameleon checkpoint in, a ChameleonVQGAN folder out, errors as one line."""

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
