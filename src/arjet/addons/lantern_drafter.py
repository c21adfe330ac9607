"""LANTERN's released drafters (`jadohu/LANTERN`, e.g. `sihwanpark/LANTERN-Lumina-mGPT-7B-768`) as arjet
drafters.

The official folder holds `config.json` (the base model's config with `num_hidden_layers: 1`, optionally a
`bias` key for the fusion) and the head's weights in `pytorch_model.bin` or `model.safetensors` (a training
state folder also holds `model_1.safetensors`, the frozen code head, which is not read). Its keys:
`embed_tokens.weight` (a frozen copy of the target's embeddings: dropped, arjet reads the target's own),
`fc.weight` / `fc.bias` (the bias optional), and one block under `layers.0.`: `self_attn.{q,k,v,o}_proj`,
Chameleon's per-head `self_attn.{q,k}_norm.{weight,bias}` (`[1, head_dim]` in the Lumina-mGPT drafter, one
norm for every head, `[heads, head_dim]` in Anole's), `mlp.{gate,up,down}_proj`, `input_layernorm` (absent
from EAGLE-1's LlamaGen layout) and `post_attention_layernorm`. Prefixes `module.` and `_orig_mod.`
(distributed or compiled training) are stripped. Torch files are read as tensors only.

What differs at decode time (see the README): arjet's drafter cache holds the image's cells only, not the
prompt's pairs, and skips the row-end tokens the official code feeds through the drafter; LlamaGen's 2-D
rotary embedding is not reproduced (arjet has no LlamaGen family).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import torch

from .. import checks
from ..weights import check_finite, load_tensors
from .drafter import Drafter

WEIGHT_FILES = ("pytorch_model.bin", "model.safetensors")  # the official loader's order
DROPPED = ("embed_tokens.weight",)
PREFIXES = ("module.", "_orig_mod.")
PROVIDE = "pass the folder of a LANTERN drafter (config.json with pytorch_model.bin or model.safetensors)"


def read_lantern_drafter(folder: str | os.PathLike) -> Drafter:
    """The arjet `Drafter` holding the weights of the official drafter in `folder`."""
    folder = Path(folder)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(f"{folder} has no config.json; {PROVIDE}")
    config = checks.read_json(config_path)
    if not isinstance(config, dict):
        raise ValueError(f"{config_path} is not a JSON object of the model's sizes; {PROVIDE}")
    weights = next((folder / name for name in WEIGHT_FILES if (folder / name).is_file()), None)
    if weights is None:
        raise FileNotFoundError(f"{folder} has neither {' nor '.join(WEIGHT_FILES)}; {PROVIDE}")
    sizes = config_sizes(config)
    Drafter.check_fits(f"the LANTERN drafter config {config_path}", sizes)  # before the weights are read
    state = official_state(load_tensors(weights, "LANTERN drafter weights", PROVIDE))
    drafter = Drafter(**drafter_config(sizes, state))
    state = _expanded_norms(state, drafter.config.num_attention_heads)
    missing, unexpected = drafter.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(
            f"{weights} does not hold a LANTERN drafter of the layout its config describes: missing "
            f"{sorted(missing)[:4]}, unexpected {sorted(unexpected)[:4]}; {PROVIDE}"
        )
    check_finite(f"the weights in {weights}", drafter)
    return drafter.eval()


def convert_lantern_drafter(folder: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Write the official drafter in `folder` as an arjet drafter folder `out` (config.json and
    safetensors), which `Drafter.from_pretrained(out)` loads."""
    drafter = read_lantern_drafter(folder)
    drafter.save_pretrained(out)
    return Path(out)


def official_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The official state dict without wrapper prefixes and without the embedding copy."""
    cleaned = {}
    for key, value in state.items():
        for prefix in PREFIXES:
            key = key.removeprefix(prefix)
        if key not in DROPPED:
            cleaned[key] = value
    return cleaned


def config_sizes(config: dict[str, Any]) -> dict[str, Any]:
    """The `Drafter` arguments the official `config.json` gives (its sizes, norm and rotary settings); a
    ValueError naming the first key that is missing or not a number > 0, and its value."""
    sizes = {
        key: _positive(config, key, int)
        for key in ("hidden_size", "intermediate_size", "num_attention_heads")
    }
    return dict(
        sizes,
        num_key_value_heads=_positive(config, "num_key_value_heads", int, sizes["num_attention_heads"]),
        rms_norm_eps=_positive(config, "rms_norm_eps", float, 1e-6),
        rope_theta=_positive(config, "rope_theta", float, 10000.0),
        max_position_embeddings=_positive(config, "max_position_embeddings", int, 16384),
    )


def _positive(config: dict[str, Any], key: str, kind: type, default: float | None = None) -> Any:
    """`config[key]`, an integer (`kind=int`) or a finite number > 0; `default` where the key is absent or
    null, and a ValueError naming the key where there is no default."""
    value = config.get(key)
    if value is None:
        if default is None:
            raise ValueError(f"the drafter's config.json has no {key}; {PROVIDE}")
        return default
    usable = checks.is_integer(value) if kind is int else checks.is_number(value) and math.isfinite(value)
    if not usable or value <= 0:
        what = "an integer" if kind is int else "a finite number"
        raise ValueError(
            f"the drafter's config.json has {key}={checks.shown(value)}, which is not {what} > 0; {PROVIDE}"
        )
    return kind(value)


def drafter_config(sizes: dict[str, Any], state: dict[str, torch.Tensor]) -> dict[str, Any]:
    """`Drafter` arguments from the config's `sizes` (`config_sizes`) and what the weights show (the block:
    Chameleon's when there are query norms; the input norm and the fusion's bias when present)."""
    hidden = sizes["hidden_size"]
    fc = state.get("fc.weight")
    if fc is None or tuple(fc.shape) != (hidden, 2 * hidden):
        shape = None if fc is None else tuple(fc.shape)
        raise ValueError(
            f"fc.weight should be [{hidden}, {2 * hidden}] for hidden_size {hidden}, got {shape}"
        )
    return dict(
        sizes,
        block="chameleon" if "layers.0.self_attn.q_norm.weight" in state else "llama",
        fc_bias="fc.bias" in state,
        input_norm="layers.0.input_layernorm.weight" in state,
    )


def _expanded_norms(state: dict[str, torch.Tensor], heads: int) -> dict[str, torch.Tensor]:
    """Lumina-mGPT's query / key norms (`[1, head_dim]`, shared by every head) as one row per head."""
    return {
        key: value.expand(heads, -1).clone()
        if key.startswith(("layers.0.self_attn.q_norm.", "layers.0.self_attn.k_norm."))
        and value.shape[0] == 1
        else value
        for key, value in state.items()
    }
