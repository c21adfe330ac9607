"""`arjet convert-drafter`: LANTERN's folder in, an arjet drafter folder out, errors as one line."""

import json

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


def test_convert_drafter_refuses_a_config_too_large_in_one_line(tmp_path, capsys):
    folder = official_folder(tmp_path / "lantern", official_state())
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "intermediate_size": 2 * 10**12}))  # ~8 TB
    error = _refused_in_one_line(folder, tmp_path / "out", capsys)
    assert error.startswith("arjet convert-drafter: error: the LANTERN drafter config ")
    assert "describes a model of" in error


def _refused_in_one_line(folder, out, capsys) -> str:
    """The error `arjet convert-drafter FOLDER OUT` prints: one line, and no `OUT` made."""
    assert main(["convert-drafter", str(folder), str(out)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("arjet convert-drafter: error: ") and error.count("\n") == 1
    assert not out.exists()
    return error


def test_convert_drafter_refuses_weights_that_are_not_finite(tmp_path, capsys):
    state = official_state()
    state["module.layers.0.mlp.up_proj.weight"][:] = float("nan")
    error = _refused_in_one_line(official_folder(tmp_path / "lantern", state), tmp_path / "out", capsys)
    assert "layers.0.mlp.up_proj.weight holds 1,536 NaN or infinite value(s) of 1,536" in error


def test_convert_drafter_names_a_size_that_is_not_a_number(tmp_path, capsys):
    folder = official_folder(tmp_path / "lantern", official_state())
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "hidden_size": "abc"}))
    error = _refused_in_one_line(folder, tmp_path / "out", capsys)
    assert "config.json has hidden_size='abc', which is not an integer > 0" in error
