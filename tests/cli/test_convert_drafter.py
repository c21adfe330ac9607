"""`arjet convert-drafter`: LANTERN's folder in, an arjet drafter folder out, errors as one line."""

from lantern_official import official_folder, official_state

from arjet.cli import main


def test_convert_drafter_writes_the_folder(tmp_path, capsys):
    folder = official_folder(tmp_path / "lantern", official_state())
    assert main(["convert-drafter", str(folder), str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "diffusion_pytorch_model.safetensors").is_file()
    assert "wrote the drafter" in capsys.readouterr().out


def test_convert_drafter_names_a_folder_without_a_drafter(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["convert-drafter", str(tmp_path / "empty"), str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert "no config.json" in error and "Traceback" not in error
