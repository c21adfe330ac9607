"""Finding a checkpoint on disk: a local folder, or a hub id already in the Hugging Face cache."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from huggingface_hub import snapshot_download
from huggingface_hub.errors import HFValidationError


def resolve_checkpoint(name_or_path: str | os.PathLike, **hub_kwargs: Any) -> Path:
    """A local folder for `name_or_path`, or a `FileNotFoundError` that says what folder to provide.

    A hub id is looked up through `huggingface_hub` (which downloads it unless `HF_HUB_OFFLINE=1` or
    `local_files_only=True`); whatever fails, the error names the local folder to pass instead.
    """
    path = Path(os.path.expanduser(str(name_or_path)))
    if path.is_dir():
        return path
    text = str(name_or_path)
    if text.startswith((".", "/", "~")) or text.count("/") != 1 or path.exists():
        raise FileNotFoundError(
            f"no checkpoint folder at {text!r}: pass the path of a local folder holding the model "
            "(config.json and weights), or a Hugging Face hub id such as 'deepseek-community/Janus-Pro-1B'"
        )
    try:
        return Path(snapshot_download(text, **hub_kwargs))
    except (HFValidationError, OSError, ValueError) as error:
        local = "./" + text.split("/")[-1]
        raise FileNotFoundError(
            f"{text!r} is not a local folder and could not be loaded from the Hugging Face hub "
            f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else 'unavailable'}). "
            f"On a machine with network access run `hf download {text} --local-dir {local}`, copy the folder "
            f"here and pass its path, e.g. from_pretrained({local!r})."
        ) from error


def read_json(path: Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def checkpoint_kind(folder: Path) -> tuple[str, str]:
    """('pipeline', class name) for a saved arjet pipeline, ('transformers', model_type) for a bare model."""
    index = folder / "model_index.json"
    if index.is_file():
        return "pipeline", read_json(index).get("_class_name", "")
    config = folder / "config.json"
    if config.is_file():
        return "transformers", read_json(config).get("model_type", "")
    raise FileNotFoundError(
        f"{folder} holds neither model_index.json (a saved arjet pipeline) nor config.json (a transformers "
        "checkpoint); point from_pretrained at the folder that contains one of them"
    )
