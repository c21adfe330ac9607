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
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from .. import checks, machine

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
    """The achievable cost of one decoding forward at these shapes on this GPU: a minimal Llama-style decoder
    (fused q/k/v and gate/up products, a static KV cache of `cache` slots written by index, an additive mask
    over all of them with `filled` slots visible, a code head of `head_rows` rows) with random weights, run
    eagerly and captured in one CUDA graph, for each query width. `batch` 2 is one image with CFG. What
    arjet's decode step costs beyond the graph figure is its own overhead (`../shared/perf/graph_floor.py`
    measures the same decoder for hand-picked shapes)."""
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"the graph floor captures CUDA graphs: it needs a CUDA device, got {device}")
    if filled + max(queries) > cache:
        raise ValueError(
            f"filled ({filled}) + the widest query ({max(queries)}) must fit the cache ({cache})"
        )
    head_dim = hidden // heads
    generator = torch.Generator(device=device).manual_seed(0)

    def weight(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device=device, dtype=dtype, generator=generator) * 0.02

    kv_width = kv_heads * head_dim
    stack = [
        (
            weight(hidden + 2 * kv_width, hidden),
            weight(hidden, hidden),
            weight(2 * ffn, hidden),
            weight(hidden, ffn),
        )
        for _ in range(layers)
    ]
    head = weight(head_rows, hidden)

    def forward(x, keys, values, mask, slots):
        rows, q, _ = x.shape
        for (qkv, out, gate_up, down), k_cache, v_cache in zip(stack, keys, values, strict=True):
            h = F.rms_norm(x, (hidden,))
            qq, kk, vv = F.linear(h, qkv).split([hidden, kv_width, kv_width], -1)
            k_cache.index_copy_(2, slots, kk.view(rows, q, kv_heads, head_dim).transpose(1, 2))
            v_cache.index_copy_(2, slots, vv.view(rows, q, kv_heads, head_dim).transpose(1, 2))
            attended = F.scaled_dot_product_attention(
                qq.view(rows, q, heads, head_dim).transpose(1, 2),
                k_cache,
                v_cache,
                attn_mask=mask,
                enable_gqa=kv_heads != heads,
            )
            x = x + F.linear(attended.transpose(1, 2).reshape(rows, q, hidden), out)
            gate, up = F.linear(F.rms_norm(x, (hidden,)), gate_up).chunk(2, -1)
            x = x + F.linear(F.silu(gate) * up, down)
        return F.linear(F.rms_norm(x, (hidden,)), head)

    def timed(fn, reps: int) -> float:
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        torch.cuda.synchronize(device)
        return (time.perf_counter() - start) / reps * 1e3

    def measure(width: int) -> GraphFloor:
        keys = [
            torch.zeros(batch, kv_heads, cache, head_dim, device=device, dtype=dtype) for _ in range(layers)
        ]
        values = [torch.zeros_like(k) for k in keys]
        x = weight(batch, width, hidden)
        slots = torch.arange(filled, filled + width, device=device)
        mask = torch.zeros(batch, 1, width, cache, device=device, dtype=dtype)
        mask[..., filled + width :] = torch.finfo(dtype).min
        run = functools.partial(forward, x, keys, values, mask, slots)
        with torch.inference_mode():
            for _ in range(3):
                run()
            eager = timed(run, max(1, repeats // 5))
            side = torch.cuda.Stream(device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                for _ in range(2):
                    run()
            torch.cuda.current_stream(device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                run()
            return GraphFloor(width, eager, timed(graph.replay, repeats))

    results = []
    for width in queries:
        results.append(measure(width))
        torch.cuda.empty_cache()
    return results
