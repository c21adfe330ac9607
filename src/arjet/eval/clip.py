"""CLIP models for evaluation, through open_clip and from local files only (nothing is downloaded).

A CLIP is named by a spec string, parsed here and nowhere else:

- `domain` — the built-in domain's CLIP: the folder `$ARJET_DOMAIN_CLIP`, else `arjet/assets/shapes-clip/`;
- `domain:<folder>` — a CLIP folder in the same layout;
- `open_clip:<model name>:<weights file>` — any open_clip architecture (`open_clip.list_models()`) with a
  local checkpoint, e.g. `open_clip:ViT-B-32:/models/vit-b-32-openai.bin`.

A CLIP folder is what open_clip itself reads with `local-dir:` (and what `save_open_clip_folder` writes):
`open_clip_config.json` = `{"model_cfg": {embed_dim, vision_cfg, text_cfg, ...}, "preprocess_cfg": {...}}`
and `open_clip_model.safetensors` (the state dict), plus tokenizer files when `text_cfg.hf_tokenizer_name`
is set (otherwise open_clip's bundled BPE tokenizer is used). A custom architecture needs no registration.

Weights are tensors only: a folder's `open_clip_model.safetensors` (no other file in it is read), an
open_clip weights file as safetensors or a torch state dict read with `weights_only=True` (a pickle holding
other objects is refused, never run). Architectures whose text tower or tokenizer comes from the Hugging
Face hub (`hf_model_name`, `hf_tokenizer_name`, SigLIP's tokenizers) are refused by name, since loading them
would go to the network; put such a model in a CLIP folder with its tokenizer files instead.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from .. import checks
from ..machine import check_fits_in_memory
from ..weights import load_tensors

DOMAIN_CLIP_VARIABLE = "ARJET_DOMAIN_CLIP"
DOMAIN_CLIP_FOLDER = "shapes-clip"
# what open_clip logs for a model built without weights; arjet loads them right after (`_load`)
RANDOM_INIT_NOTE = "No pretrained weights loaded for model"
CONFIG_FILE = "open_clip_config.json"
WEIGHTS_FILE = "open_clip_model.safetensors"
CLIP_SPECS = "domain, domain:<folder>, open_clip:<model name>:<weights file>"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
OPEN_CLIP_PROVIDE = "provide the model's weights as .safetensors or as a torch state dict of tensors"


@dataclass(frozen=True)
class ClipSource:
    """Where a CLIP comes from: a folder (`domain`) or an open_clip architecture name plus a weights file."""

    kind: str  # "folder" | "open_clip"
    path: Path
    name: str = ""

    @property
    def model_name(self) -> str:
        """What open_clip builds it from: a folder as `local-dir:<folder>`, else the architecture's name."""
        return f"local-dir:{self.path}" if self.kind == "folder" else self.name

    def check(self) -> None:
        """Raise FileNotFoundError naming what to put where, or ValueError for a file that cannot be read, a
        model too large for this machine's memory (built on the meta device first, before any weight is
        read), or weights that do not fit the architecture (loaded strictly into it on the meta device)."""
        if self.kind == "folder":
            self._check_folder()
        else:
            self._check_architecture()
        check_fits_in_memory(f"the CLIP {self.model_name}", lambda: _build(self.model_name, "meta"))
        if self.kind == "open_clip":  # read as tensors only: a pickle of other objects is refused, never run
            load_tensors(self.path, "open_clip weights", OPEN_CLIP_PROVIDE)
        with warnings.catch_warnings():  # on the meta device the copy is a no-op, as intended here
            warnings.filterwarnings("ignore", message=".*copying from a non-meta parameter")
            _load_weights(_build(self.model_name, "meta"), self)  # names and shapes, strictly; no copy

    def _check_folder(self) -> None:
        checks.check_checkpoint_files(
            "the CLIP folder", self.path
        )  # first: a FIFO or device is not "missing"
        missing = [f for f in (CONFIG_FILE, WEIGHTS_FILE) if not (self.path / f).is_file()]
        if missing:
            raise FileNotFoundError(
                f"CLIP folder {self.path} lacks {' and '.join(missing)}: a CLIP folder holds {CONFIG_FILE} "
                f"({{'model_cfg': ..., 'preprocess_cfg': ...}}) and {WEIGHTS_FILE} (see "
                f"arjet.eval.clip.save_open_clip_folder); the built-in domain CLIP is made by `arjet train clip`, "
                f"or point {DOMAIN_CLIP_VARIABLE} / domain:<folder> at one"
            )
        config = _folder_config(self.path)
        _refuse_hub_parts(config, f"the CLIP folder {self.path}")
        text = config.get("text_cfg")
        if (
            isinstance(text, dict)
            and text.get("hf_tokenizer_name") is not None
            and not any((self.path / name).is_file() for name in TOKENIZER_FILES)
        ):
            raise FileNotFoundError(
                f"CLIP folder {self.path} names a Hugging Face tokenizer but holds no tokenizer files "
                f"({', '.join(TOKENIZER_FILES)}); save the tokenizer into the folder (arjet never downloads)"
            )
        _check_safetensors(self.path / WEIGHTS_FILE)

    def _check_architecture(self) -> None:
        if not self.path.is_file():
            raise FileNotFoundError(
                f"open_clip weights file {self.path} for {self.name!r} not found: put the checkpoint of "
                f"{self.name} there (arjet never downloads) or pass another path in "
                "open_clip:<model name>:<weights file>"
            )
        _check_open_clip_name(self.name)

    @property
    def key(self) -> str:
        """Identity of the weights, for caches: the spec plus the files' sizes and modification times."""
        files = [self.path / CONFIG_FILE, self.path / WEIGHTS_FILE] if self.kind == "folder" else [self.path]
        stamps = [f"{f.resolve()}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in files]
        return f"{self.kind}:{self.name}:" + "|".join(stamps)


def domain_clip_dir() -> Path:
    """The built-in domain CLIP's folder: `$ARJET_DOMAIN_CLIP`, else `arjet/assets/shapes-clip`."""
    from ..builtin import assets_dir

    chosen = os.environ.get(DOMAIN_CLIP_VARIABLE)
    return Path(chosen).expanduser() if chosen else assets_dir() / DOMAIN_CLIP_FOLDER


def parse_clip_spec(spec: str) -> ClipSource:
    scheme, _, argument = spec.partition(":")
    if scheme == "domain":
        return ClipSource("folder", Path(argument).expanduser() if argument else domain_clip_dir(), "domain")
    if scheme == "open_clip":
        name, colon, weights = argument.partition(":")
        if name and colon and weights:
            return ClipSource("open_clip", Path(weights).expanduser(), name)
        raise ValueError(f"open_clip specs look like open_clip:<model name>:<weights file>, got {spec!r}")
    raise ValueError(f"unknown CLIP {spec!r}; use one of: {CLIP_SPECS}")


class OpenCLIP:
    """An open_clip model with its tokenizer: float images in [0, 1] and texts in, embeddings out."""

    def __init__(self, model: torch.nn.Module, tokenizer: Any, key: str):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.key = key
        config = model.visual.preprocess_cfg
        size = config["size"]
        self.image_size = (size, size) if isinstance(size, int) else tuple(size)
        self.mean = torch.tensor(config["mean"]).view(1, 3, 1, 1)
        self.std = torch.tensor(config["std"]).view(1, 3, 1, 1)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def to(self, device: torch.device | str) -> OpenCLIP:
        self.model.to(device)
        return self

    def model_input(self, images: torch.Tensor) -> torch.Tensor:
        """[N, 3, h, w] in [0, 1] -> the tower's input: centre crop to its aspect, bicubic resize, normalise."""
        height, width = images.shape[-2:]
        target_h, target_w = self.image_size
        scale = min(height / target_h, width / target_w)
        crop_h, crop_w = round(target_h * scale), round(target_w * scale)
        top, left = (height - crop_h) // 2, (width - crop_w) // 2
        images = images[..., top : top + crop_h, left : left + crop_w].float()
        if (crop_h, crop_w) != (target_h, target_w):
            images = F.interpolate(images, size=self.image_size, mode="bicubic", antialias=True).clamp(0, 1)
        return (images - self.mean.to(images.device)) / self.std.to(images.device)

    @torch.no_grad()
    def encode_images(self, images: torch.Tensor) -> torch.Tensor:
        """Image embeddings [N, d] (not normalised) of float images [N, 3, h, w] in [0, 1]."""
        return self.model.encode_image(self.model_input(images.to(self.device))).float()

    @torch.no_grad()
    def encode_texts(self, texts: list[str]) -> torch.Tensor:
        """Text embeddings [N, d] (not normalised)."""
        return self.model.encode_text(self.tokenizer(texts).to(self.device)).float()


_LOADED: dict[tuple[str, str], OpenCLIP] = {}


def load_clip(spec: str, device: torch.device | str = "cpu") -> OpenCLIP:
    """The CLIP named by `spec` (see the module docstring) on `device`; loaded once per process."""
    source = parse_clip_spec(spec)
    source.check()
    cache_key = (source.key, str(device))
    if cache_key not in _LOADED:
        _LOADED[cache_key] = _load(source).to(device)
    return _LOADED[cache_key]


def _load(source: ClipSource) -> OpenCLIP:
    """The model built from its config without weights, then given the checked weights file's tensors."""
    import open_clip

    model = _load_weights(_build(source.model_name), source)
    return OpenCLIP(model, open_clip.get_tokenizer(source.model_name), source.key)


def _load_weights(model: torch.nn.Module, source: ClipSource) -> torch.nn.Module:
    """`model` (built from `source`'s architecture) with the tensors of `source`'s weights file, strictly:
    ValueError naming the file for tensors that do not fit."""
    import open_clip

    weights = source.path / WEIGHTS_FILE if source.kind == "folder" else source.path
    try:
        open_clip.load_checkpoint(model, str(weights), weights_only=True)
    except Exception as error:  # pickle refusals, malformed files, tensors that do not fit the architecture
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ValueError(
            f"cannot load {weights} into {source.model_name} ({reason}); {OPEN_CLIP_PROVIDE}"
        ) from None
    return model


def _build(name: str, device: str = "cpu") -> torch.nn.Module:
    """The open_clip model `name` without weights, on `device` (`"meta"`: sizes only)."""
    import open_clip

    with _without_random_init_note():
        return open_clip.create_model(name, load_weights=False, pretrained_text=False, device=device)


@contextlib.contextmanager
def _without_random_init_note() -> Iterator[None]:
    """open_clip's "No pretrained weights loaded ... Model initialized randomly" (a root-logger warning) is
    untrue where arjet loads the weights itself, right after: drop that message only, any other shows."""

    def keep(record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(RANDOM_INIT_NOTE)

    root = logging.getLogger()
    root.addFilter(keep)
    try:
        yield
    finally:
        root.removeFilter(keep)


def _folder_config(folder: Path) -> dict[str, Any]:
    path = folder / CONFIG_FILE
    try:
        stored = checks.read_json(path)
    except OSError as error:
        raise ValueError(f"{path} cannot be read ({error.strerror or error})") from None
    config = stored.get("model_cfg") if isinstance(stored, dict) else None
    if not isinstance(config, dict):
        raise ValueError(f"{path} is not an open_clip config with a model_cfg object")
    return config


def _check_open_clip_name(name: str) -> None:
    import open_clip

    if name not in open_clip.list_models():
        raise ValueError(f"unknown open_clip model {name!r}; see open_clip.list_models()")
    if "siglip" in name.lower():
        raise ValueError(
            f"open_clip model {name!r} uses a SigLIP tokenizer that open_clip fetches from the Hugging Face hub; "
            "arjet does not go to the network: use a CLIP folder (domain:<folder>) with the tokenizer files in it"
        )
    _refuse_hub_parts(open_clip.get_model_config(name) or {}, f"open_clip model {name!r}")


def _refuse_hub_parts(config: dict[str, Any], what: str) -> None:
    text = config.get("text_cfg", {})
    if isinstance(text, dict) and text.get("hf_model_name"):
        raise ValueError(
            f"{what} builds its text tower from the Hugging Face hub model {text['hf_model_name']!r}, which would "
            "go to the network; arjet loads CLIP models from local files only"
        )
    if what.startswith("open_clip model") and isinstance(text, dict) and text.get("hf_tokenizer_name"):
        raise ValueError(
            f"{what} uses the Hugging Face tokenizer {text['hf_tokenizer_name']!r}, which open_clip would fetch "
            "from the hub; use a CLIP folder (domain:<folder>) with the tokenizer files in it instead"
        )


def _check_safetensors(path: Path) -> None:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            handle.keys()
    except Exception as error:  # SafetensorError for anything that is not a safetensors file
        raise ValueError(
            f"{path} is not a readable safetensors file ({error}); {OPEN_CLIP_PROVIDE}"
        ) from None


def save_open_clip_folder(
    model: torch.nn.Module,
    model_cfg: dict[str, Any],
    folder: str | os.PathLike,
    preprocess_cfg: dict[str, Any] | None = None,
) -> Path:
    """Write `model` (an open_clip CLIP built from `model_cfg`) as a CLIP folder that `domain:<folder>` and
    open_clip's `local-dir:<folder>` load: the layout the built-in domain CLIP ships in."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if preprocess_cfg is None:  # what the model was built with, when open_clip built it (else its defaults)
        built = getattr(getattr(model, "visual", None), "preprocess_cfg", {})
        preprocess_cfg = {k: list(v) if isinstance(v, tuple) else v for k, v in built.items() if k != "size"}
    preprocess = dict(preprocess_cfg)
    config = {"model_cfg": model_cfg, "preprocess_cfg": preprocess}
    (folder / CONFIG_FILE).write_text(json.dumps(config, indent=2))
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(state, str(folder / WEIGHTS_FILE))
    return folder
