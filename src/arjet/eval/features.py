"""Feature networks for FID, behind one interface and a registry of spec schemes (configs as data).

A feature network maps float images `[N, 3, h, w]` in `[0, 1]` (any size: it resizes itself) to features
`[N, num_features]`, and carries a `key` naming its weights, so cached reference statistics are never
reused across networks. Specs:

- `inception` / `inception:<weights file>` — the standard FID network: torch-fidelity's InceptionV3 (what
  torchmetrics uses), pool features (2048), from the local file `weights-inception-2015-12-05-6726825d.pth`
  (the path after the colon, else `$ARJET_INCEPTION_WEIGHTS`), or a `.safetensors` file of the same tensors.
  The file is read as tensors only (`arjet.weights`): a pickle holding other objects is refused, never run.
  Needs `pip install torch-fidelity`.
- `open_clip:<model name>:<weights file>` — the image tower of any open_clip model.
- `domain` / `domain:<folder>` — the image tower of the built-in domain CLIP (see `arjet.eval.clip`).

`register_feature_scheme` adds a scheme: a `check(argument)`, run before any image is generated, that raises
for anything that would fail the load later (a missing file, another network's weights) and a
`load(argument, device)`.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from ..weights import load_tensors
from .clip import OpenCLIP, load_clip, parse_clip_spec

INCEPTION_VARIABLE = "ARJET_INCEPTION_WEIGHTS"
INCEPTION_FILE = "weights-inception-2015-12-05-6726825d.pth"
INCEPTION_URL = f"https://github.com/toshas/torch-fidelity/releases/download/v0.2.0/{INCEPTION_FILE}"
INCEPTION_PROVIDE = (
    f"provide torch-fidelity's {INCEPTION_FILE} (from {INCEPTION_URL}) or a .safetensors file of its tensors"
)


class FeatureNetwork(torch.nn.Module):
    """Float images `[N, 3, h, w]` in `[0, 1]` -> features `[N, num_features]`."""

    num_features: int
    key: str


class ClipImageFeatures(FeatureNetwork):
    """The image embedding of an open_clip model (before normalisation)."""

    def __init__(self, clip: OpenCLIP):
        super().__init__()
        self.clip = clip
        self.tower = clip.model  # registered, so `.to()` moves it
        self.key = f"clip:{clip.key}"
        probe = torch.zeros(1, 3, *clip.image_size, device=clip.device)
        self.num_features = int(clip.encode_images(probe).shape[-1])

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.clip.encode_images(images)


class InceptionFeatures(FeatureNetwork):
    """torch-fidelity's InceptionV3 pool features, fed exactly as torchmetrics feeds it (uint8 pixels)."""

    def __init__(self, weights: Path):
        super().__init__()
        from torchmetrics.image.fid import NoTrainInceptionV3

        state = inception_state_dict(weights)
        # torch-fidelity reads its weights with torch.load(weights_only=False): hand it only a file of the
        # tensors just checked, written by this process into a private folder
        with tempfile.TemporaryDirectory(prefix="arjet-inception-") as folder:
            checked = Path(folder) / "inception.pth"
            torch.save(state, checked)
            try:
                self.net = NoTrainInceptionV3(
                    name="inception-v3-compat",
                    features_list=["2048"],
                    feature_extractor_weights_path=str(checked),
                )
            except RuntimeError as error:  # load_state_dict: missing / unexpected / mis-shaped tensors
                raise ValueError(
                    f"{weights} does not hold the FID Inception weights ({str(error).splitlines()[0]}); "
                    f"{INCEPTION_PROVIDE}"
                ) from None
        self.num_features = 2048
        stat = weights.stat()
        self.key = f"inception:{weights.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.net((images * 255).byte())


@dataclass(frozen=True)
class FeatureScheme:
    check: Callable[[str], None]
    load: Callable[[str, torch.device | str], FeatureNetwork]
    usage: str


_SCHEMES: dict[str, FeatureScheme] = {}


def register_feature_scheme(name: str, scheme: FeatureScheme) -> None:
    _SCHEMES[name] = scheme


def feature_specs() -> str:
    return ", ".join(scheme.usage for scheme in _SCHEMES.values())


def _split(spec: str) -> tuple[FeatureScheme, str]:
    name, _, argument = spec.partition(":")
    if name not in _SCHEMES:
        raise ValueError(f"unknown FID feature network {spec!r}; use one of: {feature_specs()}")
    return _SCHEMES[name], argument


def check_feature_spec(spec: str) -> None:
    """Raise (ValueError / FileNotFoundError naming what to put where) unless `spec` can be loaded."""
    scheme, argument = _split(spec)
    scheme.check(argument)


def load_feature_network(spec: str, device: torch.device | str = "cpu") -> FeatureNetwork:
    scheme, argument = _split(spec)
    scheme.check(argument)
    return scheme.load(argument, device).eval()


# -- the built-in schemes ---------------------------------------------------------------------------
def _inception_weights(argument: str) -> Path:
    chosen = argument or os.environ.get(INCEPTION_VARIABLE)
    if not chosen:
        raise FileNotFoundError(
            f"inception features need the local weights file {INCEPTION_FILE} (arjet never downloads): get it "
            f"from {INCEPTION_URL} and pass inception:<path> or set {INCEPTION_VARIABLE}=<path>"
        )
    return Path(chosen).expanduser()


def inception_state_dict(weights: Path) -> dict[str, torch.Tensor]:
    """The Inception tensors in `weights` (safetensors, or a torch file read with weights_only=True)."""
    return load_tensors(weights, "inception weights", INCEPTION_PROVIDE)


def _check_inception(argument: str) -> None:
    """Before any image is generated: torch-fidelity is there and the weights file holds the Inception
    network's tensors (built once and dropped, about a second: the file is tensors only, and they load
    strictly, so another network's weights are refused now, not after the run's decoding)."""
    if importlib.util.find_spec("torch_fidelity") is None:
        raise ValueError(
            "inception features need torch-fidelity (torchmetrics' InceptionV3): pip install torch-fidelity"
        )
    weights = _inception_weights(argument)
    if not weights.is_file():
        raise FileNotFoundError(
            f"inception weights file {weights} not found: put {INCEPTION_FILE} (from {INCEPTION_URL}) there, "
            f"or pass inception:<path> / set {INCEPTION_VARIABLE}"
        )
    InceptionFeatures(weights)


def _clip_scheme(scheme: str, usage: str) -> FeatureScheme:
    def spec(argument: str) -> str:
        return f"{scheme}:{argument}" if argument else scheme

    return FeatureScheme(
        check=lambda argument: parse_clip_spec(spec(argument)).check(),
        load=lambda argument, device: ClipImageFeatures(load_clip(spec(argument), device)),
        usage=usage,
    )


register_feature_scheme(
    "inception",
    FeatureScheme(
        _check_inception,
        lambda argument, device: InceptionFeatures(_inception_weights(argument)).to(device),
        "inception[:<weights file>]",
    ),
)
register_feature_scheme("open_clip", _clip_scheme("open_clip", "open_clip:<model name>:<weights file>"))
register_feature_scheme("domain", _clip_scheme("domain", "domain[:<folder>]"))
