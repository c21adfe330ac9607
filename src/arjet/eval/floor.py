"""The bandwidth floor of one decoding forward: the bytes it must read over the device's copy bandwidth.

A decoding forward must read every weight of the decoder layers, the final norm and the code-head rows it
scores (embedding tables are read one row per token and the VQ runs once per image, so neither counts),
plus the KV cache of every row of the batch, both CFG halves, up to the filled length. No implementation
runs a forward faster than those bytes over the memory bandwidth, measured here as a large device-to-device
copy with the read and the write both counted (as `../shared/perf/graph_floor.py` does). The KV part grows
during a decode; the floor uses its average, at half the image body past the prompt.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from .. import checks

CUDA_COPY_BYTES = 1 << 30  # 1 GiB per buffer: far past every cache, so the copy runs at memory speed
CPU_COPY_BYTES = 256 << 20


def measure_copy_bandwidth(device: torch.device | str, nbytes: int | None = None, repeats: int = 5) -> float:
    """Bytes per second of a `nbytes` device-to-device copy on `device`, read + write counted."""
    device = torch.device(device)
    if nbytes is None:
        nbytes = CUDA_COPY_BYTES if device.type == "cuda" else CPU_COPY_BYTES
    if not checks.is_integer(nbytes) or nbytes < 2:
        raise ValueError(f"nbytes must be an integer >= 2, got {nbytes!r}")
    source = torch.ones(nbytes // 2, dtype=torch.bfloat16, device=device)  # touched, so pages are real
    target = torch.empty_like(source)
    for _ in range(2):
        target.copy_(source)
    _synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        target.copy_(source)
    _synchronize(device)
    seconds = time.perf_counter() - start
    del source, target
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return 2 * (nbytes // 2) * 2 * repeats / seconds


def forward_weight_bytes(pipe) -> int | None:
    """Bytes of the weights one decoding forward reads, from the family's session adapter
    (`forward_weights()`: decoder layers, final norm, code head); None when the adapter does not say."""
    weights = pipe.session_adapter().forward_weights()
    if weights is None:
        return None
    return sum(t.numel() * t.element_size() for t in weights)


def kv_bytes_per_token(pipe) -> int | None:
    """KV-cache bytes one token adds to one row: layers x (K, V) x KV heads x head width x element size."""
    model = getattr(pipe, "model", None)
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "get_text_config"):
        return None
    text = config.get_text_config()
    heads = text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    element = torch.empty((), dtype=model.dtype).element_size()
    return text.num_hidden_layers * 2 * kv_heads * head_dim * element


def average_kv_tokens(pipe, prompt: str, call_kwargs: dict[str, Any]) -> float:
    """Tokens in the KV cache, summed over the rows of one image's batch (both CFG halves), averaged over
    its decode: every visible prompt token plus half the image body (codes and row-end tokens)."""
    call = pipe.check_inputs(prompt, **call_kwargs)
    prefix = pipe.encode_prompts(call.prompts, call.negative_prompts, call.grid, call.guidance_scale != 1)
    rows = prefix.ids.shape[0]
    return float(prefix.visible.sum()) + rows * pipe.image_layout(call.grid).body_length / 2


@dataclass(frozen=True)
class ForwardFloor:
    """What one forward must read, and the device's copy bandwidth (bytes / s)."""

    weight_bytes: int
    kv_bytes: float
    bandwidth: float

    @property
    def bytes(self) -> float:
        return self.weight_bytes + self.kv_bytes

    @property
    def ms(self) -> float:
        return self.bytes / self.bandwidth * 1e3


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
