"""No weights file is unpickled: a crafted pickle on every route that takes one is refused, never run.

The payload's `__reduce__` writes a marker file when unpickled with `weights_only=False`; every route must
refuse the file with a clean error (a ValueError, or `arjet CMD: error:` and exit status 2) and leave no
marker. Routes: `inception:<file>` and `$ARJET_INCEPTION_WEIGHTS`, `open_clip:<name>:<file>`, a CLIP folder
(`domain:<folder>`), `arjet train clip --init`, `arjet convert-vqgan`. Hub-only parts are refused by name.
"""

import shutil

import pytest
import torch
from pickles import Payload

from arjet.cli import main
from arjet.eval.clip import WEIGHTS_FILE, load_clip, parse_clip_spec
from arjet.eval.features import INCEPTION_VARIABLE, InceptionFeatures, check_feature_spec


@pytest.fixture
def crafted(tmp_path):
    """A torch file holding real tensors and a payload, and the marker its unpickling would write."""
    marker = tmp_path / "marker"
    path = tmp_path / "weights.pth"
    torch.save({"state_dict": {"w": torch.zeros(2)}, "callbacks": Payload(marker)}, path)
    return path, marker


REFUSED = "non-tensor Python objects .* arjet refuses to unpickle them"


def test_inception_weights_file_is_refused(crafted):
    path, marker = crafted
    with pytest.raises(ValueError, match=REFUSED):
        check_feature_spec(f"inception:{path}")
    with pytest.raises(ValueError, match=REFUSED):
        InceptionFeatures(path)
    assert not marker.exists()


def test_inception_weights_from_the_environment_are_refused(crafted, monkeypatch):
    path, marker = crafted
    monkeypatch.setenv(INCEPTION_VARIABLE, str(path))
    with pytest.raises(ValueError, match=REFUSED):
        check_feature_spec("inception")
    assert not marker.exists()


def test_open_clip_weights_file_is_refused(crafted):
    path, marker = crafted
    with pytest.raises(ValueError, match=REFUSED):
        check_feature_spec(f"open_clip:RN50:{path}")
    with pytest.raises(ValueError, match=REFUSED):
        load_clip(f"open_clip:RN50:{path}")
    assert not marker.exists()


def test_a_clip_folder_with_a_pickle_for_weights_is_refused(crafted, tiny_clip_dir, tmp_path):
    path, marker = crafted
    folder = tmp_path / "clip"
    shutil.copytree(tiny_clip_dir, folder)
    shutil.copy(path, folder / WEIGHTS_FILE)  # a pickle under the safetensors name
    with pytest.raises(ValueError, match="is not a readable safetensors file"):
        check_feature_spec(f"domain:{folder}")
    with pytest.raises(ValueError, match="is not a readable safetensors file"):
        load_clip(f"domain:{folder}")
    shutil.copy(path, folder / "open_clip_pytorch_model.bin")  # a file open_clip alone would pick up
    shutil.copy(tiny_clip_dir / WEIGHTS_FILE, folder / WEIGHTS_FILE)
    assert load_clip(f"domain:{folder}").encode_texts(["a red square"]).shape[0] == 1
    assert not marker.exists()


def test_the_eval_command_refuses_them_cleanly_before_any_work(crafted, tmp_path, capsys):
    path, marker = crafted
    base = ["eval", "--prompts", "shapes", "--n", "2", "--samplers", "ar"]
    for option in (["--fid-features", f"inception:{path}"], ["--clip-model", f"open_clip:RN50:{path}"]):
        code = main([*base, *option, "--out", str(tmp_path / "run")])
        error = capsys.readouterr().err
        assert code == 2 and error.startswith("arjet eval: error: ") and "Traceback" not in error, error
        assert "refuses to unpickle" in error
    assert not marker.exists() and not (tmp_path / "run").exists()


def test_train_clip_init_refuses_a_pickle(crafted, tmp_path, capsys):
    path, marker = crafted
    (tmp_path / "init").mkdir()
    shutil.copy(path, tmp_path / "init" / WEIGHTS_FILE)
    args = ["train", "clip", "--init", str(tmp_path / "init"), "--out", str(tmp_path / "out")]
    args += ["--images", "8", "--max-steps", "1", "--eval-every", "0", "--eval-scenes", "0", "--workers", "0"]
    args += ["--log", str(tmp_path / "log.jsonl")]
    assert main(args) == 2
    error = capsys.readouterr().err
    assert error.startswith("arjet train clip: error: ") and "is not a readable safetensors file" in error
    assert not marker.exists()


def test_convert_vqgan_command_refuses_a_pickle_and_an_empty_file(crafted, tmp_path, capsys):
    path, marker = crafted
    assert main(["convert-vqgan", str(path), str(tmp_path / "out")]) == 2
    assert "refuses to unpickle" in capsys.readouterr().err
    (tmp_path / "empty.ckpt").write_bytes(b"")
    assert main(["convert-vqgan", str(tmp_path / "empty.ckpt"), str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert error.startswith("arjet convert-vqgan: error: ") and "is not a torch weights file" in error
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_inception_weights_as_safetensors_load(tmp_path):
    """The safe path works: torch-fidelity's Inception from a .safetensors file of its tensors."""
    from safetensors.torch import save_file
    from torch_fidelity.feature_extractor_inceptionv3 import FeatureExtractorInceptionV3

    class Shapes(FeatureExtractorInceptionV3):  # the architecture with random tensors, nothing loaded
        def load_state_dict(self, state_dict, strict=True, assign=False):
            return None

    torch.save({}, tmp_path / "empty.pth")
    state = Shapes(
        "inception-v3-compat", ["2048"], feature_extractor_weights_path=str(tmp_path / "empty.pth")
    )
    save_file({k: v.contiguous() for k, v in state.state_dict().items()}, tmp_path / "inception.safetensors")
    features = InceptionFeatures(tmp_path / "inception.safetensors")
    assert features(torch.rand(2, 3, 32, 32)).shape == (2, 2048)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("open_clip:mt5-base-ViT-B-32:{weights}", "text tower from the Hugging Face hub model"),
        ("open_clip:coca_roberta-ViT-B-32:{weights}", "text tower from the Hugging Face hub model"),
        (
            "open_clip:ViT-B-16-SigLIP:{weights}",
            "SigLIP tokenizer that open_clip fetches from the Hugging Face hub",
        ),
    ],
)
def test_hub_only_parts_are_refused_by_name_not_downloaded(spec, message, tmp_path):
    weights = tmp_path / "w.safetensors"
    weights.write_bytes(b"")
    with pytest.raises(ValueError, match=message):
        parse_clip_spec(spec.format(weights=weights)).check()
