"""The bandwidth floor of one decoding forward: the bytes it must read over the device's copy bandwidth.

A decoding forward must read every weight of the decoder layers, the final norm and the code-head rows it
scores (embedding tables are read one row per token and the VQ runs once per image, so neither counts),
plus the KV cache of every row of the batch, both CFG halves, up to the filled length. No implementation
runs a forward faster than those bytes over the memory bandwidth, measured here as a large device-to-device
copy with the read and the write both counted (as `../shared/perf/graph_floor.py` does). The KV part grows
during a decode; the floor uses its average, at half the image body past the prompt.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaModel

from .. import checks, machine
from ..presets.meta import materialize_random_, parameters_on_meta
from ..quantize import tensor_bytes
from ..session.capture import capture_graph, warm_on_a_side_stream
from ..session.decoder import LlamaStackDecoder

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
    return sum(map(tensor_bytes, weights))  # a quantized weight: its integer data and scales


def kv_bytes_per_token(pipe) -> int | None:
    """KV-cache bytes one token adds to one row of the pipeline's AR model (`machine.kv_bytes_per_token`)."""
    model = pipe.components[pipe.ar_component]
    return machine.kv_bytes_per_token(model.config, model.dtype)


def average_kv_tokens(pipe, prompt: str, call_kwargs: dict[str, Any]) -> float:
    """Tokens in the KV cache, summed over the rows of one image's batch (both CFG halves), averaged over
    its decode: every visible prompt token plus half the image body (codes and row-end tokens; a preview
    grid decoded first counts in the body)."""
    call = pipe.check_inputs(prompt, **call_kwargs)
    prefix = pipe.encode_prompts(
        call.prompts, call.negative_prompts, call.grid, call.sampling.guidance_scale != 1
    )
    rows = prefix.ids.shape[0]
    preview = pipe.preview_grid(call.grid)
    grids = [call.grid] if preview is None else [preview, call.grid]
    body = sum(pipe.image_layout(grid).body_length for grid in grids)
    return float(prefix.visible.sum()) + rows * body / 2


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


@dataclass(frozen=True)
class GraphFloor:
    """What a minimal decoder of the model's shapes costs per forward of `queries` query tokens."""

    queries: int
    eager_ms: float
    graph_ms: float  # the same forward captured in one CUDA graph and replayed


def random_decoder(
    *, layers: int, hidden: int, ffn: int, heads: int, kv_heads: int, dtype: torch.dtype, device: torch.device
) -> LlamaStackDecoder:
    """arjet's own Llama decoder stack (the one every step runs: stacked products, a static cache written by
    slot) over a transformers `LlamaModel` of these shapes with seeded random weights, made on `device`."""
    config = LlamaConfig(
        hidden_size=hidden,
        intermediate_size=ffn,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        vocab_size=1,  # its embedding table is never read: the floor feeds embeddings
    )
    with parameters_on_meta():
        backbone = LlamaModel(config)
    return LlamaStackDecoder(materialize_random_(backbone, device, dtype))


def decoder_graph_floor(
    *,
    layers: int,
    hidden: int,
    ffn: int,
    heads: int,
    kv_heads: int,
    head_rows: int,
    cache: int,
    filled: int,
    batch: int = 2,
    queries: tuple[int, ...] = (1, 16, 64),
    dtype: torch.dtype = torch.bfloat16,
    device: torch.device | str = "cuda",
    repeats: int = 50,
) -> list[GraphFloor]:
    """The achievable cost of one decoding forward at these shapes on this GPU: arjet's decoder stack
    (`random_decoder`) over a static cache of `cache` slots with `filled` of them visible, and a code head of
    `head_rows` rows, run eagerly and captured in one CUDA graph as decode steps are (`session.capture`), for
    each query width. `batch` 2 is one image
    with CFG. What a decode step costs beyond the graph figure is the sampler's own work around the forward
    (`../shared/perf/graph_floor.py` measures a hand-written decoder of hand-picked shapes)."""
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"the graph floor captures CUDA graphs: it needs a CUDA device, got {device}")
    if filled + max(queries) > cache:
        raise ValueError(
            f"filled ({filled}) + the widest query ({max(queries)}) must fit the cache ({cache})"
        )
    decoder = random_decoder(
        layers=layers, hidden=hidden, ffn=ffn, heads=heads, kv_heads=kv_heads, dtype=dtype, device=device
    )
    generator = torch.Generator(device=device).manual_seed(1)
    head = torch.randn(head_rows, hidden, device=device, dtype=dtype, generator=generator) * 0.02

    def timed(fn, reps: int) -> float:
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        torch.cuda.synchronize(device)
        return (time.perf_counter() - start) / reps * 1e3

    def measure(width: int) -> GraphFloor:
        run = floor_forward(decoder, head, batch=batch, width=width, cache=cache, filled=filled)
        with torch.inference_mode():
            for _ in range(3):
                run()
            eager = timed(run, max(1, repeats // 5))
            warm_on_a_side_stream(run)
            graph = capture_graph(run)  # the capture every captured decode step goes through
            return GraphFloor(width, eager, timed(graph.replay, repeats))

    results = []
    for width in queries:
        results.append(measure(width))
        torch.cuda.empty_cache()
    return results


def floor_forward(
    decoder: LlamaStackDecoder, head: torch.Tensor, *, batch: int, width: int, cache: int, filled: int
) -> Callable[[], torch.Tensor]:
    """One decoding forward of `width` query tokens per row over a fresh static cache of `cache` slots whose
    first `filled` are visible (slots `filled ..` written by the queries, causally among themselves), then the
    code head: a closure returning the logits `[batch, width, head_rows]`, the same work at every call."""
    device, dtype = head.device, head.dtype
    generator = torch.Generator(device=device).manual_seed(2)
    embeds = torch.randn(batch, width, head.shape[1], device=device, dtype=dtype, generator=generator)
    slots = torch.arange(filled, filled + width, device=device).expand(batch, width)
    positions = slots.clone()
    visible = torch.arange(cache, device=device) <= slots[..., None]  # [batch, width, cache]
    mask = torch.zeros(visible.shape, device=device, dtype=dtype)
    mask = mask.masked_fill_(~visible, torch.finfo(dtype).min)[:, None]
    kv = decoder.new_cache(batch, cache)
    return functools.partial(_forward_and_head, decoder, kv, embeds, positions, slots, mask, head)


def _forward_and_head(decoder, kv, embeds, positions, slots, mask, head) -> torch.Tensor:
    return F.linear(decoder.forward(kv, embeds, positions, slots, mask), head)
