"""FID feature networks are checked in full before a run does any work: a weights file that holds another
network's tensors is refused by `check_feature_spec` (what `arjet eval` runs first), not after the run has
decoded and written its images."""

import shutil

import pytest
import torch
from safetensors.torch import save_file

from arjet.cli import main
from arjet.eval import runner
from arjet.eval.clip import WEIGHTS_FILE
from arjet.eval.features import check_feature_spec


@pytest.fixture
def other_weights(tmp_path):
    """A readable .safetensors file of tensors that belong to no FID network."""
    path = tmp_path / "other.safetensors"
    save_file({"fc.weight": torch.zeros(4, 4), "embedding": torch.ones(3)}, path)
    return path


@pytest.fixture
def no_model_load(monkeypatch):
    monkeypatch.setattr(runner, "_load_pipeline", lambda *_: pytest.fail("the model was loaded"))


def _eval(out, *options: str) -> int:
    return main(["eval", "--prompts", "shapes", "--n", "1", "--samplers", "ar", *options, "--out", str(out)])


def test_inception_weights_of_another_network_are_refused_before_the_run_starts(
    other_weights, tmp_path, capsys, no_model_load
):
    pytest.importorskip("torch_fidelity")
    with pytest.raises(ValueError, match=f"{other_weights} does not hold the FID Inception weights"):
        check_feature_spec(f"inception:{other_weights}")
    out = tmp_path / "run"
    assert _eval(out, "--fid-features", f"inception:{other_weights}", "--clip-model", "none") == 2
    error = capsys.readouterr().err
    (line,) = [line for line in error.splitlines() if line.startswith("arjet eval: error: ")]
    assert line.startswith(f"arjet eval: error: FID features 'inception:{other_weights}': {other_weights} ")
    assert "does not hold the FID Inception weights (Error(s) in loading state_dict" in line
    assert "Traceback" not in error and not out.exists()


@pytest.mark.parametrize("option", ["--fid-features", "--clip-model"])
def test_open_clip_weights_of_another_network_are_refused_before_the_run_starts(
    option, other_weights, tmp_path, capsys, no_model_load
):
    """An open_clip architecture with a file of other tensors, as FID features or as the CLIP score's model:
    loaded strictly into the architecture on the meta device (names and shapes, nothing copied)."""
    out = tmp_path / "run"
    other = "--clip-model" if option == "--fid-features" else "--fid-features"
    assert _eval(out, option, f"open_clip:RN50:{other_weights}", other, "none") == 2
    error = capsys.readouterr().err
    (line,) = [line for line in error.splitlines() if line.startswith("arjet eval: error: ")]
    assert f"cannot load {other_weights} into RN50 (Error(s) in loading state_dict for" in line, line
    assert "Traceback" not in error and not out.exists()


def test_a_clip_folder_whose_weights_do_not_fit_its_config_is_refused(tiny_clip_dir, other_weights, tmp_path):
    assert check_feature_spec(f"domain:{tiny_clip_dir}") is None  # the control: its own weights fit
    folder = tmp_path / "clip"
    shutil.copytree(tiny_clip_dir, folder)
    shutil.copy(other_weights, folder / WEIGHTS_FILE)
    with pytest.raises(ValueError, match=f"cannot load {folder / WEIGHTS_FILE} into local-dir:{folder}"):
        check_feature_spec(f"domain:{folder}")
