"""Meta's Chameleon `vqgan.ckpt` (+ `vqgan.yaml`) -> a `ChameleonVQGAN` folder (`arjet convert-vqgan`).

The checkpoint is read with `torch.load(weights_only=True)`, so a file holding arbitrary pickled Python
objects is refused instead of executed; the output is `config.json` + safetensors weights.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from .. import checks
from ..machine import check_fits_in_memory
from ..weights import load_tensors
from .chameleon_vqgan import ChameleonVQGAN

# `model.params.ddconfig` keys that are arguments of ChameleonVQGAN
_DDCONFIG_ARGS = (
    "in_channels",
    "out_ch",
    "ch",
    "ch_mult",
    "num_res_blocks",
    "attn_resolutions",
    "resolution",
    "z_channels",
    "dropout",
)
# ddconfig options of the taming VQGAN that ChameleonVQGAN supports only at these values
_DDCONFIG_FIXED = {
    "double_z": False,
    "resamp_with_conv": True,
    "give_pre_end": False,
    "tanh_out": False,
    "use_linear_attn": False,
    "attn_type": "vanilla",
}
# state-dict prefixes used only in training (the GAN discriminator and the perceptual loss)
TRAINING_ONLY_PREFIXES = ("loss.",)


def read_vqgan_config(path: str | Path) -> dict[str, Any]:
    """`ChameleonVQGAN` arguments from a taming-style `vqgan.yaml` (`model.params.{ddconfig, n_embed,
    embed_dim}`)."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"VQGAN config not found: {path}")
    try:
        with path.open(encoding="utf-8") as file:
            data = yaml.safe_load(file)
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} is not a YAML file ({str(error).splitlines()[0]})") from None
    except RecursionError:  # PyYAML reads nested blocks recursively
        raise ValueError(
            f"{path} nests deeper than a YAML reader can follow, which no VQGAN config does; pass the "
            "checkpoint's vqgan.yaml"
        ) from None
    try:
        params = data["model"]["params"]
        ddconfig = params["ddconfig"]
    except (KeyError, TypeError) as error:
        raise ValueError(
            f"{path} is not a taming-style VQGAN config: expected keys model.params.ddconfig "
            f"(with n_embed and embed_dim next to ddconfig), missing {error}"
        ) from None
    for key, allowed in _DDCONFIG_FIXED.items():
        if key in ddconfig and ddconfig[key] != allowed:
            raise ValueError(f"{path}: ddconfig.{key}={ddconfig[key]!r} is not supported, only {allowed!r}")
    if params.get("remap") is not None:
        raise ValueError(f"{path}: codebook index remapping (params.remap) is not supported")
    unknown = sorted(set(ddconfig) - set(_DDCONFIG_ARGS) - set(_DDCONFIG_FIXED))
    if unknown:
        warnings.warn(f"{path}: ignoring unknown ddconfig keys {unknown}", stacklevel=2)
    config = {key: ddconfig[key] for key in _DDCONFIG_ARGS if key in ddconfig}
    for key in ("n_embed", "embed_dim"):
        if key not in params:
            raise ValueError(f"{path}: model.params has no {key!r}")
        config[key] = params[key]
    if config.get("attn_resolutions") is None:
        config.pop("attn_resolutions", None)
    return config


def load_vqgan_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of a Lightning checkpoint (`{"state_dict": ...}`) or of a bare state dict, loaded
    without unpickling anything but tensors and plain containers (`arjet.weights.load_tensors`)."""
    return load_tensors(
        path,
        "VQGAN checkpoint",
        "pass Meta's Chameleon vqgan.ckpt; if you trust a file that holds other objects, extract its tensors "
        "with trusted code, e.g. torch.save(torch.load(path, weights_only=False)['state_dict'], "
        "'vqgan_state_dict.pt'), and convert that file instead",
    )


def load_taming_state_dict(model: ChameleonVQGAN, state: Mapping[str, torch.Tensor]) -> None:
    """Load taming-named weights into `model`: training-only keys are dropped, other unknown keys are
    ignored with a warning, and a missing key or a shape that does not fit the config is an error."""
    state = {key: value for key, value in state.items() if not key.startswith(TRAINING_ONLY_PREFIXES)}
    expected = model.state_dict()
    missing = [key for key in expected if key not in state]
    if missing:
        raise ValueError(
            f"the checkpoint lacks {len(missing)} of the {len(expected)} VQGAN weights, e.g. {missing[:5]}; "
            "is it a Chameleon VQGAN checkpoint, and does the config match it (pass its vqgan.yaml)?"
        )
    mismatched = [
        f"{key}: {tuple(state[key].shape)} in the checkpoint, {tuple(value.shape)} for the config"
        for key, value in expected.items()
        if state[key].shape != value.shape
    ]
    if mismatched:
        raise ValueError(
            f"{len(mismatched)} weights do not fit the config (pass the checkpoint's vqgan.yaml), e.g. "
            + "; ".join(mismatched[:3])
        )
    unexpected = sorted(set(state) - set(expected))
    if unexpected:
        warnings.warn(
            f"ignoring {len(unexpected)} checkpoint entries that are not VQGAN weights, e.g. {unexpected[:5]}",
            stacklevel=2,
        )
    model.load_state_dict({key: state[key] for key in expected}, strict=True)


def convert_chameleon_vqgan(
    ckpt_path: str | Path, out_dir: str | Path, config_path: str | Path | None = None
) -> Path:
    """Convert Meta's Chameleon `vqgan.ckpt` into a `ChameleonVQGAN.from_pretrained` folder at `out_dir` (a
    new or empty folder). `config_path` is the matching `vqgan.yaml`; without it the released tokenizer's
    defaults are used. The config's sizes are checked against free memory before anything is allocated or
    the checkpoint is read."""
    out_dir = checks.output_dir("out", out_dir, empty=True)
    config = read_vqgan_config(config_path) if config_path is not None else {}
    described = "the default VQGAN config" if config_path is None else f"the VQGAN config {config_path}"
    check_fits_in_memory(described, lambda: ChameleonVQGAN(**config))
    state = load_vqgan_state_dict(ckpt_path)
    model = ChameleonVQGAN(**config)
    load_taming_state_dict(model, state)
    model.save_pretrained(out_dir, safe_serialization=True)
    return out_dir
