"""Finding a checkpoint on disk (a local folder, a model shipped in the package, or a hub id already in the
Hugging Face cache), the dtypes and the device a pipeline loads onto. Light on purpose: the command line
checks `--model` and `--dtype` with these before torch is imported."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Any

from huggingface_hub import snapshot_download
from huggingface_hub.errors import HFValidationError

from .. import checks
from ..limits import MAX_LOGIT_SCALE

# the dtypes a pipeline loads in, by name (`torch_dtype` gives the torch object)
DTYPES = ("float32", "bfloat16", "float16")
# `from_pretrained`'s keywords for finding a checkpoint on the hub (passed to `resolve_checkpoint`)
HUB_OPTIONS = ("revision", "cache_dir", "local_files_only", "token")

# arjet modules that have moved since pipelines were first saved: a saved folder's model_index.json names the
# module of each component (`["arjet.tokenizers.chameleon_vqgan", "ChameleonVQGAN"]`), so the old names are
# read as the new ones and older folders keep loading
MOVED_MODULES = {
    "arjet.tokenizers": "arjet.vq",
    "arjet.text_tokenizer": "arjet.pipelines.text_tokenizer",
    "arjet.session.drafter": "arjet.addons.drafter",
    "arjet.session.noise": "arjet.addons.noise",
}


# the settings a saved pipeline's model_index.json may declare (the families' `register_to_config`): name ->
# (int, float or str; the least number; whether null stands for the family's default)
INDEX_SETTINGS: dict[
    str, tuple[type, float | None, float | None, bool]
] = {  # kind, minimum, maximum, optional
    "default_guidance_scale": (float, 0.0, MAX_LOGIT_SCALE, True),  # a call's guidance is bounded so too
    "default_height": (int, 1, None, True),
    "default_width": (int, 1, None, True),
    "image_area": (int, 1, None, False),
    "resolution": (int, 1, None, False),
    "preview_side": (int, 1, None, False),
    "num_inference_steps": (int, 1, None, False),
    "dit_guidance_scale": (float, 0.0, None, False),
    "prompt_suffix": (str, None, None, False),
    "default_negative_prompt": (str, None, None, False),
}


def assets_dir() -> Path:
    """Where the package keeps the models it ships (`arjet/assets`)."""
    return Path(str(resources.files("arjet") / "assets"))


def builtin_folder(name: str) -> Path | None:
    """The folder of the built-in pipeline `name` shipped in the package (`arjet.load(name)`), else None."""
    if not name or name != Path(name).name:  # a bare name, never a path into or out of the assets
        return None
    folder = assets_dir() / name
    return folder if (folder / "model_index.json").is_file() else None


def is_builtin(folder: str | os.PathLike) -> bool:
    """Whether `folder` is one of the pipelines shipped in the package."""
    return Path(folder).resolve().parent == assets_dir().resolve()


def is_packaged(path: str | os.PathLike) -> bool:
    """Whether `path` lies inside the package's own models (a built-in pipeline or one of its components)."""
    return Path(path).resolve().is_relative_to(assets_dir().resolve())


def resolve_checkpoint(
    name_or_path: str | os.PathLike, *, local_files_only: bool = True, **hub_kwargs: Any
) -> Path:
    """A local folder for `name_or_path`, or a `FileNotFoundError` that says what folder to provide.

    A local folder comes first; then a built-in model's name (`"shapes"`, see `arjet.available_models()`);
    then a hub id, looked up in the local Hugging Face cache only: nothing is downloaded unless the caller
    passes `local_files_only=False` (then `huggingface_hub` downloads it, unless `HF_HUB_OFFLINE=1`).
    Whatever fails, the error names the local folder to pass instead.
    """
    path = Path(os.path.expanduser(str(name_or_path)))
    if path.is_dir():
        return path
    text = str(name_or_path)
    shipped = builtin_folder(text)
    if shipped is not None:
        return shipped
    if text.startswith((".", "/", "~")) or text.count("/") != 1 or path.exists():
        raise FileNotFoundError(
            f"no checkpoint folder at {text!r}: pass the path of a local folder holding the model "
            "(config.json and weights), or a Hugging Face hub id such as 'deepseek-community/Janus-Pro-1B'"
        )
    try:
        return Path(snapshot_download(text, local_files_only=local_files_only, **hub_kwargs))
    except (HFValidationError, OSError, ValueError) as error:
        local = "./" + text.split("/")[-1]
        reason = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else 'unavailable'}"
        where = (
            "is not a local folder and is not in the local Hugging Face cache (arjet downloads nothing "
            "unless asked)"
            if local_files_only
            else f"is not a local folder and could not be downloaded from the Hugging Face hub ({reason})"
        )
        opt_in = (
            " To let arjet download it into the cache instead, pass local_files_only=False to from_pretrained."
            if local_files_only
            else ""
        )
        raise FileNotFoundError(
            f"{text!r} {where}. On a machine with network access run `hf download {text} --local-dir {local}`, "
            f"copy the folder here and pass its path, e.g. from_pretrained({local!r}).{opt_in}"
        ) from error


def checkpoint_kind(folder: Path) -> tuple[str, str]:
    """('pipeline', class name) for a saved arjet pipeline, ('transformers', model_type) for a bare model. A
    saved pipeline's settings are checked here, when its folder is first read (`check_index_settings`)."""
    index = folder / "model_index.json"
    if index.is_file():
        settings = _json_object(index)
        check_index_settings(index, settings)
        return "pipeline", settings.get("_class_name", "")
    config = folder / "config.json"
    if config.is_file():
        model_type = _json_object(config).get("model_type", "")
        if not isinstance(model_type, str):
            raise ValueError(
                f"{config}: model_type must be a string such as 'janus', got {checks.shown(model_type)}"
            )
        return "transformers", model_type
    raise FileNotFoundError(
        f"{folder} holds neither model_index.json (a saved arjet pipeline) nor config.json (a transformers "
        "checkpoint); point from_pretrained at the folder that contains one of them"
    )


def check_index_settings(path: Path, settings: dict[str, Any]) -> None:
    """Refuse a setting of `INDEX_SETTINGS` in the model_index.json at `path` that is not what its family
    takes (`default_guidance_scale: NaN` or `"3"`): a ValueError naming the file and the field, at load, not
    at the first call (whose message would blame an option the caller never gave). Ranges that depend on
    the model (a size on its grid, the scheduler's steps) are still checked by each call."""
    for name, (kind, minimum, maximum, optional) in INDEX_SETTINGS.items():
        value = settings.get(name)
        if name not in settings or (optional and value is None):
            continue
        field = f"{path}: {name}"
        if kind is str:
            if not isinstance(value, str):
                raise ValueError(f"{field} must be text, got {checks.shown(value)}")
        elif kind is int:
            checks.integer(field, value, minimum)
        else:
            checks.number(field, value, minimum, maximum)
    for name, value in settings.items():  # the rest name components: [library, class], or [null, null]
        if name.startswith("_") or name in INDEX_SETTINGS:
            continue
        pair = isinstance(value, list) and len(value) == 2
        if not pair or not all(part is None or isinstance(part, str) for part in value):
            raise ValueError(
                f'{path}: {name} must name a component as [library, class] (e.g. ["transformers", '
                f'"JanusForConditionalGeneration"]) or [null, null], got {checks.shown(value)}'
            )


def _json_object(path: Path) -> dict[str, Any]:
    """The JSON object in the file `path` (`checks.read_json`); ValueError naming it for any other value."""
    value = checks.read_json(path)
    if not isinstance(value, dict):
        raise ValueError(
            f"{path} is not a JSON object; a checkpoint's {path.name} holds its settings by name"
        )
    return value


def current_module(path: str) -> str:
    """`path` (a module named in a saved model_index.json) at its place today (`MOVED_MODULES`)."""
    for old, new in MOVED_MODULES.items():
        if path == old or path.startswith(old + "."):
            return new + path[len(old) :]
    return path


def update_module_paths(config: dict[str, Any]) -> dict[str, Any]:
    """A pipeline config (model_index.json) with every component's `[module, class]` at today's module."""
    for value in config.values():
        if isinstance(value, list) and len(value) == 2 and isinstance(value[0], str):
            value[0] = current_module(value[0])
    return config


def torch_dtype(dtype: Any) -> Any:
    """`dtype` as a torch dtype: a name from `DTYPES` or a torch dtype (None stays None: the checkpoint's)."""
    import torch

    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)} (or a torch.dtype), got {dtype!r}")
    return getattr(torch, dtype)


def default_device() -> str:
    """`cuda` when a CUDA GPU is present, else `cpu`."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
