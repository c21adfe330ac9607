"""Loading a CLIP says nothing untrue: open_clip's note that the model was initialised randomly is dropped
where arjet loads the weights right after, and only that note."""

import logging

import pytest
import torch

from arjet.eval import clip


def test_loading_a_clip_folder_does_not_claim_random_weights(tiny_clip_dir, caplog):
    with caplog.at_level(logging.INFO):
        model = clip._load(clip.parse_clip_spec(f"domain:{tiny_clip_dir}"))
    assert "No pretrained weights loaded" not in caplog.text and "initialized randomly" not in caplog.text
    weights = clip.load_tensors(tiny_clip_dir / clip.WEIGHTS_FILE, "CLIP", "")
    name, tensor = next(iter(weights.items()))
    assert torch.equal(model.model.state_dict()[name], tensor)  # and the weights are the folder's


def test_only_that_note_is_dropped(caplog):
    with caplog.at_level(logging.WARNING), clip._without_random_init_note():
        logging.warning(f"{clip.RANDOM_INIT_NOTE} 'x'. Model initialized randomly.")
        logging.warning("Model x initialized partially.")
        logging.getLogger("open_clip").error("a real failure")
    assert clip.RANDOM_INIT_NOTE not in caplog.text
    assert "initialized partially" in caplog.text and "a real failure" in caplog.text
    logging.warning(f"{clip.RANDOM_INIT_NOTE} 'y'.")  # the filter is gone afterwards
    assert f"{clip.RANDOM_INIT_NOTE} 'y'" in caplog.text


def test_a_weights_file_that_does_not_fit_still_fails(tiny_clip_dir, tmp_path):
    broken = tmp_path / "clip"
    broken.mkdir()
    (broken / clip.CONFIG_FILE).write_bytes((tiny_clip_dir / clip.CONFIG_FILE).read_bytes())
    from safetensors.torch import save_file

    save_file({"nope": torch.zeros(1)}, broken / clip.WEIGHTS_FILE)
    with pytest.raises(ValueError, match="cannot load"):
        clip._load(clip.parse_clip_spec(f"domain:{broken}"))
