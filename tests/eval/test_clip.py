"""Loading a CLIP says nothing untrue: open_clip's note that the model was initialised randomly is dropped
where arjet loads the weights right after, and only that note."""

import json
import logging
import os
import re
import shutil

import pytest
import torch

from arjet import machine
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


def _clip_folder(tiny_clip_dir, tmp_path, config_text: str):
    folder = tmp_path / "clip"
    shutil.copytree(tiny_clip_dir, folder)
    (folder / clip.CONFIG_FILE).write_text(config_text)
    return folder


def test_a_clip_folder_too_large_for_memory_is_refused_before_its_weights_are_read(
    tiny_clip_dir, tmp_path, monkeypatch
):
    """Issue 33: a CLIP folder whose config needs 51 GB was built without a check. Its model is built on the
    meta device first, as every loader of weights does."""
    config = json.loads((tiny_clip_dir / clip.CONFIG_FILE).read_text())
    config["model_cfg"]["vision_cfg"].update(width=20_000, head_width=20_000)  # 4.8 billion parameters
    folder = _clip_folder(tiny_clip_dir, tmp_path, json.dumps(config))
    monkeypatch.setattr(clip, "load_tensors", lambda *a: pytest.fail("read the weights"))
    monkeypatch.setattr(machine, "available_bytes", lambda device: 10**9)  # any machine: 1 GB free
    with pytest.raises(
        ValueError, match=r"^the CLIP local-dir:.* describes a model of [0-9,]+ parameters that"
    ):
        clip.load_clip(f"domain:{folder}")
    with pytest.raises(ValueError, match="GB, more than the 1 GB of memory free on cpu"):
        parse_clip_spec_check(f"domain:{folder}")


@pytest.mark.parametrize("name", ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja"])
def test_a_clip_folders_tokenizer_file_that_is_huge_or_a_fifo_is_refused_by_name(
    tiny_clip_dir, tmp_path, name
):
    """The sixth re-probe's X7: the tokenizer's files were read whole by open_clip, after the images."""
    folder = _clip_folder(tiny_clip_dir, tmp_path, (tiny_clip_dir / clip.CONFIG_FILE).read_text())
    (folder / name).touch()
    os.truncate(folder / name, 2**40)
    with pytest.raises(ValueError, match=re.escape(f"{name} holds more than 268,435,456 bytes")):
        parse_clip_spec_check(f"domain:{folder}")
    (folder / name).unlink()
    os.mkfifo(folder / name)
    with pytest.raises(ValueError, match=re.escape(f"{name} is not a regular file")):
        parse_clip_spec_check(f"domain:{folder}")


@pytest.mark.parametrize(
    "make", [os.mkfifo, lambda p: p.symlink_to("/dev/zero"), os.mkdir], ids=["fifo", "device", "dir"]
)
def test_a_clip_folders_config_that_is_not_a_regular_file_is_named_so(tiny_clip_dir, tmp_path, make):
    """The seventh re-probe's (j): it was reported as missing ("lacks open_clip_config.json")."""
    folder = _clip_folder(tiny_clip_dir, tmp_path, "{}")
    (folder / clip.CONFIG_FILE).unlink()
    make(folder / clip.CONFIG_FILE)
    with pytest.raises(ValueError, match=re.escape(f"{clip.CONFIG_FILE} is not a regular file")):
        parse_clip_spec_check(f"domain:{folder}")


def parse_clip_spec_check(spec: str) -> None:
    clip.parse_clip_spec(spec).check()


@pytest.mark.parametrize(
    ("config_text", "message"),
    [
        ('{"model_cfg": ' + "[" * 100_000, "holds JSON nested deeper than 64 levels"),
        ('{"model_cfg": {"embed_dim": 8,', "is not valid JSON (Expecting property name"),
        ('{"model_cfg": [1]}', "is not an open_clip config with a model_cfg object"),
        (
            '{"model_cfg": {"embed_dim": 8, "text_cfg": 5, "vision_cfg": 6}}',
            "does not describe a model that can",
        ),
    ],
    ids=["deep", "cut-short", "not-an-object", "not-a-model"],
)
def test_a_clip_folder_with_a_bad_config_is_refused_by_name(tiny_clip_dir, tmp_path, config_text, message):
    folder = _clip_folder(tiny_clip_dir, tmp_path, config_text)
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_clip_spec_check(f"domain:{folder}")
