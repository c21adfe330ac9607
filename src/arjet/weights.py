"""Reading weight files without running code: safetensors, or torch files restricted to tensors.

`torch.load(weights_only=False)` unpickles arbitrary Python objects, and a crafted file runs whatever it
names. Every weights file arjet reads from a user-given path goes through `load_tensors`: a `.safetensors`
file, or a torch file loaded with `weights_only=True`; anything else (a pickle holding other objects, an
empty or truncated file) is a `ValueError` naming the file and what to provide instead. A model whose
loaded weights hold NaN or infinities is refused by `check_finite`.
"""

from __future__ import annotations

import os
import pickle
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

import torch

from .quantize import is_quantized


def load_tensors(path: str | os.PathLike, what: str, provide: str) -> dict[str, torch.Tensor]:
    """The `{name: tensor}` state dict in `path` (a Lightning-style `{"state_dict": ...}` is unwrapped).
    `what` names the file in errors ("inception weights"), `provide` says what would work instead."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} file {path} not found: {provide}")
    if path.suffix == ".safetensors":
        data = _load_safetensors(path, what, provide)
    else:
        data = _load_torch(path, what, provide)
    state = data.get("state_dict", data) if isinstance(data, Mapping) else data
    if not isinstance(state, Mapping) or not state:
        raise ValueError(f"{path} holds no state dict of tensors (got {type(state).__name__}); {provide}")
    bad = [
        key for key, value in state.items() if not isinstance(key, str) or not isinstance(value, torch.Tensor)
    ]
    if bad:
        raise ValueError(f"{path}: the state dict has non-tensor entries, e.g. {bad[:5]}; {provide}")
    return dict(state)


def check_finite(what: str, module: torch.nn.Module) -> None:
    """Refuse a module with a NaN or infinite weight (a corrupt or diverged checkpoint, which would decode
    every code as 0): a ValueError naming `what` (whose weights: "the weights of component 'model' ... in
    FOLDER") and the first such tensor. One pass over the weights in place, a reduction per tensor: far
    cheaper than reading them from disk was."""
    for name, weight in _plain_tensors(module):
        if weight.is_floating_point() and weight.device.type != "meta" and not torch.isfinite(weight).all():
            bad = int((~torch.isfinite(weight)).sum())
            raise ValueError(
                f"{what} are not finite: {name} holds {bad:,} NaN or infinite value(s) of "
                f"{weight.numel():,}; the checkpoint is corrupt or its training diverged. Load a checkpoint "
                "with finite weights"
            )


def _plain_tensors(module: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """`module`'s parameters by name, a quantized one (a tensor subclass) as the plain tensors it holds
    (its integer data, scales: a NaN weight quantizes to a NaN scale)."""
    for name, weight in module.named_parameters():
        if is_quantized(weight):
            inner, _ = weight.__tensor_flatten__()
            yield from ((f"{name}.{part}", getattr(weight, part)) for part in inner)
        else:
            yield name, weight


def _load_safetensors(path: Path, what: str, provide: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except Exception as error:  # safetensors raises its own SafetensorError for any malformed file
        raise ValueError(f"{path} is not a readable safetensors file ({error}); {provide}") from None


def _load_torch(path: Path, what: str, provide: str):
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        match = re.search(r"WeightsUnpickler error:\s*(.+)", str(error))
        detail = match.group(1).strip().splitlines()[0] if match else "not loadable with weights_only=True"
        raise ValueError(
            f"{path} contains non-tensor Python objects (torch: {detail}) and arjet refuses to unpickle them, "
            f"since unpickling can run arbitrary code; {provide}"
        ) from None
    except Exception as error:  # bytes that are no pickle fail inside the unpickler any way (IndexError, ...)
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ValueError(f"{path} is not a torch weights file ({reason}); {provide}") from None
