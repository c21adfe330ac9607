"""The models shipped inside the package (trained by `arjet train` on the procedural shapes domain)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import checks
from .pipelines.loading import assets_dir

DEFAULT_MODEL = "shapes"


def available_models() -> list[str]:
    """Names of the built-in pipelines shipped with this installation."""
    root = assets_dir()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "model_index.json").is_file())


def model_path(name: str = DEFAULT_MODEL) -> Path:
    names = available_models()
    if name not in names:
        raise ValueError(
            f"unknown built-in model {name!r}; available: {', '.join(names) or 'none installed'}"
        )
    return assets_dir() / name


def load(name: str = DEFAULT_MODEL, **kwargs: Any):
    """The ready pipeline of built-in model `name` (default: the shapes model), e.g. `arjet.load()("a red circle")`.

    The weights are stored in bfloat16 to keep the package small; they are loaded as float32 unless
    `dtype=` says otherwise (float32 is faster on CPU and exact for the statistical tests). `device=` moves
    the pipeline there (a ValueError says what this machine has when it has no such device); any other
    keyword is `from_pretrained`'s (`strict=`, a component such as `drafter=`), and one it does not take is a
    ValueError naming it."""
    return load_model(str(model_path(name)), **kwargs)


def load_model(name_or_path: str | None, *, device: str | None = None, dtype: Any = None, **kwargs: Any):
    """A pipeline for a CLI-style `--model`: a built-in name (the default model when None), a checkpoint
    folder or a hub id, moved to `device` when given. `dtype`: a torch dtype or its name (`float32`,
    `bfloat16`, `float16`); default the checkpoint's, float32 for built-in weights."""
    from .pipelines import ARPipeline
    from .pipelines.loading import torch_dtype

    if device is not None:
        checks.check_device(device)  # before loading: torch's own error comes only at `.to(device)`
    path = resolve_model(name_or_path)
    if dtype is not None:
        kwargs["dtype"] = torch_dtype(dtype)
    pipe = ARPipeline.from_pretrained(path, **kwargs)
    return pipe if device is None else pipe.to(device)


def resolve_model(name_or_path: str | None) -> str:
    """A CLI `--model` value: a built-in name (default when None) or a path / hub id passed through."""
    if name_or_path is None:
        return str(model_path(DEFAULT_MODEL))
    if name_or_path in available_models():
        return str(model_path(name_or_path))
    return name_or_path


def model_name(name_or_path: str) -> str:
    """How reports name a model: a built-in name or hub id as it is, a local folder by its name (no path of
    the machine it ran on); a built-in model's folder by the built-in name."""
    path = Path(name_or_path).expanduser()
    if name_or_path in available_models() or not path.exists():
        return name_or_path
    return path.resolve().name
