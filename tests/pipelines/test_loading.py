import json

import pytest

import arjet
from arjet.testing import tiny_pipeline


def test_missing_local_folder_says_what_to_provide(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint folder at"):
        arjet.ARPipeline.from_pretrained(str(tmp_path / "nothing-here"))


def test_unavailable_hub_id_names_the_local_folder_to_provide(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(
        FileNotFoundError, match=r"hf download deepseek-community/Janus-Pro-1B --local-dir ./Janus-Pro-1B"
    ):
        arjet.ARPipeline.from_pretrained("deepseek-community/Janus-Pro-1B", local_files_only=True)


def test_folder_without_config_is_explained(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither model_index.json"):
        arjet.ARPipeline.from_pretrained(str(tmp_path))


def test_unsupported_model_type_lists_the_supported_ones(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ValueError, match="does not support; supported: JanusPipeline"):
        arjet.ARPipeline.from_pretrained(str(tmp_path))


@pytest.mark.parametrize("family", ["janus", "emu3"])
def test_bare_transformers_checkpoint_loads_through_the_auto_class(family, tmp_path):
    pipe = tiny_pipeline(family, grid=(2, 2), vocab_size=6)
    pipe.model.save_pretrained(tmp_path)
    pipe.tokenizer.save_pretrained(tmp_path)
    loaded = arjet.ARPipeline.from_pretrained(str(tmp_path))
    assert type(loaded) is type(pipe)
    loaded.set_progress_bar_config(disable=True)
    size = pipe.default_size()
    out = loaded("a red circle", seed=0, height=size[0], width=size[1])
    assert out.codes.shape == (1, 2, 2)
