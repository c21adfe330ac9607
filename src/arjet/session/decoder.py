"""The decoder stack behind a session: inputs at given cache slots in, last hidden states out.

A session writes every forward's keys and values at absolute slots of a static cache and tells the stack,
with a float additive mask, which slots each input may attend to. Two implementations:

- `LlamaStackDecoder` runs a transformers Llama-style stack (`LlamaModel`, `Emu3TextModel`,
  `ChameleonModel`, GLM-Image's `GlmImageTextModel`) over the stack's own weights, gpt-fast style: one
  static key / value buffer per layer,
  written by index, rotary tables computed once, `scaled_dot_product_attention` over the first `span` slots
  only. Nothing in it reads the device, allocates by data or branches on values, so a forward can be
  captured in a CUDA graph or compiled. Tested equal to transformers' own forward.
- `TransformersDecoder` calls the transformers module itself through a slot cache (`SlotCache`): the
  fallback for a family that offers no stack of its own. It always attends over the whole capacity.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from ..machine import available_bytes
from ..quantize import is_quantized
from .cache import SlotCache


class StaticDecoder(Protocol):
    """What a session needs from a decoder stack."""

    reads_span_only: bool  # attends to the first `span` slots of the cache only (else the whole capacity)

    @property
    def eager(self) -> StaticDecoder:
        """The same stack run without compiling (itself, unless it compiles): for the prefill, one per prompt
        length, which is not worth compiling."""

    def new_cache(self, rows: int, capacity: int) -> object:
        """A cache of `capacity` slots for `rows` sequences, filled by later forwards."""

    def rows(self, cache: object, rows: slice) -> object:
        """A view of `cache` holding rows `rows` only: forwards through it read and write just those rows."""

    def forward(
        self,
        cache: object,
        embeds: torch.Tensor,  # [rows, m, d]
        positions: torch.Tensor,  # [rows, m] long, or [rows, m, 3] (temporal, height, width: multimodal rotary)
        slots: torch.Tensor,  # [rows, m] long: where each input's keys and values are written
        mask: torch.Tensor,  # [rows, 1, m, span] float additive (0 = attend, dtype min = not)
    ) -> torch.Tensor:
        """Last hidden states `[rows, m, d]`."""


class TransformersDecoder:
    """The family's transformers module run through a `SlotCache` (see `ModelAdapter.hidden_states`)."""

    reads_span_only = False

    def __init__(self, hidden_states: Callable[..., torch.Tensor], num_layers: int):
        self._hidden_states = hidden_states
        self._num_layers = num_layers

    @property
    def eager(self) -> TransformersDecoder:
        return self

    def new_cache(self, rows: int, capacity: int) -> SlotCache:
        return SlotCache(self._num_layers, capacity)

    def rows(self, cache: SlotCache, rows: slice) -> SlotCache:
        return cache.rows(rows)

    def forward(self, cache, embeds, positions, slots, mask) -> torch.Tensor:
        cache.write_slots = slots
        return self._hidden_states(embeds, positions, mask, cache)


RECOMPILE_LIMIT = 64  # compiled shapes per function (dynamo's default is 8)


class CompiledDecoder:
    """A decoder stack whose forward runs through `torch.compile`. A Llama-style stack compiles the two parts
    of a layer around its attention (`LayerParts`), once for all its layers (they have the same shapes), per
    shape of its inputs (rows, query width); another stack compiles its whole forward per shape. `eager` is
    the stack itself, uncompiled. Keep one per pipeline: compiling is slow, running the compiled code is
    not."""

    def __init__(self, decoder: StaticDecoder, **options):
        self.decoder = decoder
        self.reads_span_only = decoder.reads_span_only
        # an engine's lane buckets and windows are shapes of their own, and every stack shares the compiled
        # parts' cache: room for them all before dynamo falls back to running eagerly
        config = torch._dynamo.config
        limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
        setattr(config, limit, max(getattr(config, limit), RECOMPILE_LIMIT))
        if isinstance(decoder, LlamaStackDecoder):
            decoder.unpack()  # inductor lays out weights itself; it cannot take packed copies as inputs
            self.forward = functools.partial(decoder.forward, parts=LayerParts().compiled(**options))
        else:
            self.forward = torch.compile(decoder.forward, dynamic=False, **options)

    @property
    def eager(self) -> StaticDecoder:
        return self.decoder

    def new_cache(self, rows: int, capacity: int) -> object:
        return self.decoder.new_cache(rows, capacity)

    def rows(self, cache: object, rows: slice) -> object:
        return self.decoder.rows(cache, rows)


PACK_LIMIT_BYTES = 1 << 30  # CPU: repack a stack's weights for oneDNN when they take at most this much
# CUDA: stack q/k/v and gate/up into one weight each when the copies take at most this share of the free
# device memory (one matrix product instead of three and two: fewer, larger kernels per layer)
STACK_LIMIT_SHARE = 0.25
# `_packed`'s copies by the id of their first weight: (that weight, weakly; what was packed: oneDNN or a
# plain stack, the device, dtype, ids and versions of the weights; the copy). An entry goes when its first
# weight is freed.
_PACKED: dict[int, tuple[weakref.ref, tuple, torch.Tensor]] = {}


@dataclass
class _Projection:
    """A linear layer's weight and bias, and on the CPU its weight repacked for oneDNN: the matrix-vector
    products of decoding read a packed weight about twice as fast as the plain row-major one. The packed
    copy is for inference only (it has no gradient): with gradients on, the layer's own weight is used."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    packed: torch.Tensor | None = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is not None and not torch.is_grad_enabled():
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)


@dataclass
class _FusedProjection:
    """Linear layers that read the same input (q, k, v; gate, up) as one matrix product over their stacked
    weights: oneDNN-packed on the CPU (`packed`: on a small model the calls, not the arithmetic, are the
    cost), a plain stacked copy on CUDA (`stacked`: one kernel instead of several, each reading more at
    once); without either, or with gradients on, each part runs on its own."""

    parts: tuple[_Projection, ...]
    sizes: tuple[int, ...]
    bias: torch.Tensor | None = None
    packed: torch.Tensor | None = None
    stacked: torch.Tensor | None = None

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.packed is not None and not torch.is_grad_enabled():
            out = torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
            return out.split(self.sizes, -1)
        if self.stacked is not None and not torch.is_grad_enabled():
            return F.linear(x, self.stacked, self.bias).split(self.sizes, -1)
        if len(self.parts) == 1:  # one layer holding the parts already (GLM's `gate_up_proj`)
            return self.parts[0](x).split(self.sizes, -1)
        return tuple(part(x) for part in self.parts)


def _packed(*weights: torch.Tensor, onednn: bool = True) -> torch.Tensor:
    """The copy of `weights` stacked along the output dimension (`onednn`: reordered for oneDNN, on the CPU),
    kept in `_PACKED` under the first weight until that weight is freed, and made again when any of the
    weights has changed since (or moved to another device or dtype)."""
    first = weights[0]
    key = (onednn, first.device, first.dtype, tuple((id(w), w._version) for w in weights))
    hit = _PACKED.get(id(first))
    if hit is not None and hit[0]() is first and hit[1] == key:
        return hit[2]
    with torch.no_grad():
        stacked = torch.cat([w.detach() for w in weights]) if len(weights) > 1 else first.detach()
        packed = torch.ops.mkldnn._reorder_linear_weight(stacked, 2) if onednn else stacked
    _PACKED[id(first)] = (weakref.ref(first, functools.partial(_forget_packed, id(first))), key, packed)
    return packed


def _forget_packed(slot: int, _: weakref.ref) -> None:
    _PACKED.pop(slot, None)


def _can_pack(weights: list[torch.Tensor]) -> bool:
    """Whether oneDNN copies of `weights` are worth making. Never of quantized weights: a copy would be a
    float one, and `F.linear` on the quantized weight runs its own kernel."""
    first = weights[0]
    return (
        not _any_quantized(weights)
        and first.device.type == "cpu"
        and first.dtype in (torch.float32, torch.bfloat16)
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
        and sum(w.numel() * w.element_size() for w in weights) <= PACK_LIMIT_BYTES
    )


def _any_quantized(weights: list[torch.Tensor]) -> bool:
    return any(is_quantized(w) for w in weights)


def _can_stack(weights: list[torch.Tensor]) -> bool:
    """Whether stacked copies of `weights` (CUDA) fit in `STACK_LIMIT_SHARE` of the free device memory (never
    of quantized weights, as `_can_pack`)."""
    first = weights[0]
    if first.device.type != "cuda" or _any_quantized(weights):
        return False
    free = available_bytes(first.device)
    copies = sum(w.numel() * w.element_size() for w in weights)
    return free is not None and copies <= STACK_LIMIT_SHARE * free


@dataclass
class _Layer:
    """One decoder layer's weights. Each block (attention, MLP) is `x + post(block(pre(x)))` where a norm
    that is None is skipped: pre-norm (Llama), post-norm (Chameleon's swin norm) or both (GLM)."""

    attention_norm: nn.Module | None
    qkv: _FusedProjection
    o: _Projection
    q_norm: nn.Module | None
    k_norm: nn.Module | None
    attention_post_norm: nn.Module | None
    mlp_norm: nn.Module | None
    gate_up: _FusedProjection
    down: _Projection
    act: Callable[[torch.Tensor], torch.Tensor]
    mlp_post_norm: nn.Module | None


@dataclass
class KVCache:
    keys: torch.Tensor  # [layers, rows, kv_heads, capacity, head_dim]
    values: torch.Tensor
    cos: torch.Tensor  # [capacity, rotary dims] rotary tables by position
    sin: torch.Tensor  # with rotate_half's sign folded in: rotate_half(x) * sin == x.roll(half) * this
    axis: torch.Tensor | None = None  # [rotary dims]: the position axis each dimension reads (multimodal)

    def rotary(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin `[rows, 1, m, rotary dims]` for positions `[rows, m]` or, per axis, `[rows, m, 3]`."""
        positions = positions.clamp(0, self.cos.shape[0] - 1)
        if positions.dim() == 2:
            return self.cos[positions][:, None], self.sin[positions][:, None]
        if self.axis is None:
            raise ValueError("positions per axis need a decoder with an mrope_section")
        rows, m, _ = positions.shape
        axis = self.axis.expand(rows, m, 1, -1)
        cos = self.cos[positions].gather(2, axis)[:, :, 0]
        sin = self.sin[positions].gather(2, axis)[:, :, 0]
        return cos[:, None], sin[:, None]


class LlamaStackDecoder:
    """A transformers Llama-style decoder stack (`backbone.layers`, `.norm`, `.rotary_emb`) run over its own
    weights. `qk_norm`: Chameleon's per-head layer norm of queries and keys; `swin_norm`: Chameleon's
    post-norm layer order (`x + norm(attn(x))`); `sandwich_norm`: GLM's norms both before and after each
    block (`post_self_attn_layernorm`, `post_mlp_layernorm`); `fused_mlp`: the MLP's gate and up projections
    are one layer (`gate_up_proj`, gate first). `mrope_section`: the multimodal rotary embedding's frequency
    sections (GLM-Image: temporal, height, width in turn), read with `[rows, m, 3]` positions. A rotary
    table narrower than the heads (`partial_rotary_factor`) rotates the leading dimensions only.
    `final_norm`: normalise the last layer's output (False for a drafter's block, whose output estimates the
    target's normalised hidden state); a layer whose `input_layernorm` is `nn.Identity` has no input norm
    (an EAGLE drafter's block as in LANTERN's LlamaGen drafters)."""

    reads_span_only = True

    def __init__(
        self,
        backbone: nn.Module,
        qk_norm: bool = False,
        swin_norm: bool = False,
        *,
        sandwich_norm: bool = False,
        fused_mlp: bool = False,
        mrope_section: Sequence[int] | None = None,
        final_norm: bool = True,
    ):
        if swin_norm and sandwich_norm:
            raise ValueError("a layer has either swin_norm (post-norm) or sandwich_norm (pre- and post-norm)")
        self.backbone = backbone
        self.swin_norm = swin_norm
        self.sandwich_norm = sandwich_norm
        self.mrope_section = None if mrope_section is None else tuple(mrope_section)
        config = backbone.config
        first = backbone.layers[0].self_attn
        self.heads = _Heads(
            config.num_attention_heads, config.num_key_value_heads, first.head_dim, first.scaling
        )
        linears = [
            (
                layer.self_attn.q_proj,
                layer.self_attn.k_proj,
                layer.self_attn.v_proj,
                layer.self_attn.o_proj,
                *((layer.mlp.gate_up_proj,) if fused_mlp else (layer.mlp.gate_proj, layer.mlp.up_proj)),
                layer.mlp.down_proj,
            )
            for layer in backbone.layers
        ]
        pack = _can_pack([linear.weight for group in linears for linear in group])
        # the weights a stack copies: q, k, v and the MLP's gate and up (GLM holds those two as one already)
        fused = [w.weight for group in linears for w in (*group[:3], *(() if fused_mlp else group[4:-1]))]
        stack = not pack and _can_stack(fused)
        self.layers = [
            self._layer(layer, group, pack, qk_norm, stack)
            for layer, group in zip(backbone.layers, linears, strict=True)
        ]
        self.norm = backbone.norm if final_norm else None

    def _layer(
        self, layer: nn.Module, linears: tuple[nn.Linear, ...], pack: bool, qk_norm: bool, stack: bool
    ) -> _Layer:
        """`pack`: oneDNN copies of the weights (CPU); `stack`: stacked copies of q/k/v and gate/up (CUDA)."""
        attention = layer.self_attn
        (q, k, v, o, *gate_up, down) = linears
        if len(gate_up) == 1:
            half = gate_up[0].out_features // 2
            gate_up_projection = _fused(tuple(gate_up), pack, sizes=(half, half))
        else:
            gate_up_projection = _fused(tuple(gate_up), pack, stack=stack)
        unnormed = self.swin_norm or isinstance(layer.input_layernorm, nn.Identity)
        pre_attention = None if unnormed else layer.input_layernorm
        pre_mlp = None if self.swin_norm else layer.post_attention_layernorm
        if self.swin_norm:
            post_attention, post_mlp = layer.input_layernorm, layer.post_attention_layernorm
        elif self.sandwich_norm:
            post_attention, post_mlp = layer.post_self_attn_layernorm, layer.post_mlp_layernorm
        else:
            post_attention = post_mlp = None
        return _Layer(
            attention_norm=pre_attention,
            qkv=_fused((q, k, v), pack, stack=stack),
            o=_projection(o, pack),
            q_norm=attention.q_norm if qk_norm else None,
            k_norm=attention.k_norm if qk_norm else None,
            attention_post_norm=post_attention,
            mlp_norm=pre_mlp,
            gate_up=gate_up_projection,
            down=_projection(down, pack),
            act=layer.mlp.activation_fn if len(gate_up) == 1 else layer.mlp.act_fn,
            mlp_post_norm=post_mlp,
        )

    def unpack(self) -> None:
        """Use the layers' own weights (no oneDNN copies) from now on."""
        for layer in self.layers:
            for projection in (layer.qkv, layer.o, layer.gate_up, layer.down):
                projection.packed = None

    def new_cache(self, rows: int, capacity: int) -> KVCache:
        weight = self.layers[0].o.weight
        shape = (len(self.layers), rows, self.heads.kv_heads, capacity, self.heads.head_dim)
        keys = torch.zeros(shape, dtype=weight.dtype, device=weight.device)
        positions = torch.arange(capacity, device=weight.device)[None]
        with torch.no_grad():
            # one position on every axis: the multimodal embedding's table is the plain one
            cos, sin = self.backbone.rotary_emb(keys[0, :1, 0], positions)
        half = cos.shape[-1] // 2
        signed_sin = torch.cat([-sin[0, :, :half], sin[0, :, half:]], -1)
        return KVCache(
            keys, torch.zeros_like(keys), cos[0], signed_sin, self._axis_of_dims(half, weight.device)
        )

    def _axis_of_dims(self, half: int, device: torch.device) -> torch.Tensor | None:
        """`[2 * half]` long: which position axis (temporal, height, width) each rotary dimension reads,
        section `i` of the frequencies reading axis `i % 3` (transformers' `recomposition_frequencies`)."""
        if self.mrope_section is None:
            return None
        if sum(self.mrope_section) != half:
            raise ValueError(f"mrope_section {self.mrope_section} must add up to {half} rotary frequencies")
        axis = torch.cat([torch.full((size,), i % 3) for i, size in enumerate(self.mrope_section)])
        return torch.cat([axis, axis]).to(device)

    def rows(self, cache: KVCache, rows: slice) -> KVCache:
        return KVCache(cache.keys[:, rows], cache.values[:, rows], cache.cos, cache.sin)

    @property
    def eager(self) -> LlamaStackDecoder:
        return self

    def forward(
        self, cache: KVCache, embeds, positions, slots, mask, parts: LayerParts | None = None
    ) -> torch.Tensor:
        """`parts`: the layer's two parts around its attention (`CompiledDecoder` passes compiled ones)."""
        rows, m, _ = embeds.shape
        cos, sin = cache.rotary(positions)  # [rows, 1, m, rotary dims]
        heads, parts = self.heads, parts or EAGER_PARTS
        index = slots[:, None, :, None].expand(rows, heads.kv_heads, m, heads.head_dim)
        x = embeds
        for i, layer in enumerate(self.layers):
            q, k, v = parts.attention_inputs(heads, layer, x, cos, sin)
            attended = _attend(heads, cache.keys[i], cache.values[i], index, q, k, v, mask)
            x = parts.block_outputs(layer, x, attended)
        return _rms_norm(self.norm, x)


@dataclass(frozen=True)
class _Heads:
    """The attention's head counts, head size and score scale: the same for every layer."""

    heads: int
    kv_heads: int
    head_dim: int
    scaling: float


def _attention_inputs(
    heads: _Heads, layer: _Layer, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A layer's queries, keys and values `[rows, heads, m, head_dim]` for its input `x` `[rows, m, d]`: the
    norm, the projections, the head norms and the rotary embedding (`cos`, `sin`: `[rows, 1, m, dims]`)."""
    rows, m, _ = x.shape
    q, k, v = layer.qkv(_rms_norm(layer.attention_norm, x))
    q = q.view(rows, m, heads.heads, heads.head_dim)
    k = k.view(rows, m, heads.kv_heads, heads.head_dim)
    v = v.view(rows, m, heads.kv_heads, heads.head_dim)
    if layer.q_norm is not None:
        q, k = _head_norm(layer.q_norm, q), _head_norm(layer.k_norm, k)
    return _rotate(q.transpose(1, 2), cos, sin), _rotate(k.transpose(1, 2), cos, sin), v.transpose(1, 2)


def _attend(
    heads: _Heads,
    keys: torch.Tensor,  # [rows, kv_heads, capacity, head_dim]: the layer's cache, written in place
    values: torch.Tensor,
    index: torch.Tensor,  # [rows, kv_heads, m, head_dim] long: each input's slot
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor,  # [rows, 1, m, span] float additive
) -> torch.Tensor:
    """Write the inputs' keys and values at their slots, then attend over the first `span` slots. Never
    compiled: inductor would write a copy of the whole cache and copy it back."""
    span = mask.shape[-1]
    keys.scatter_(2, index, k)
    values.scatter_(2, index, v)
    return F.scaled_dot_product_attention(
        q,
        keys[:, :, :span],
        values[:, :, :span],
        attn_mask=mask,
        scale=heads.scaling,
        enable_gqa=heads.kv_heads != heads.heads,
    )


def _block_outputs(layer: _Layer, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
    """The rest of a layer after attention (`attended` `[rows, heads, m, head_dim]`): the output projection
    and the residual, then the MLP block."""
    rows, m, _ = x.shape
    h = layer.o(attended.transpose(1, 2).reshape(rows, m, -1))
    x = x + _rms_norm(layer.attention_post_norm, h)
    gate, up = layer.gate_up(_rms_norm(layer.mlp_norm, x))
    return x + _rms_norm(layer.mlp_post_norm, layer.down(layer.act(gate) * up))


@dataclass(frozen=True)
class LayerParts:
    """The two pieces of a layer around its attention, as functions of their inputs alone: one compiled
    graph of each serves every layer of a stack (`CompiledDecoder`)."""

    attention_inputs: Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = _attention_inputs
    block_outputs: Callable[..., torch.Tensor] = _block_outputs

    def compiled(self, **options) -> LayerParts:
        compile = functools.partial(torch.compile, dynamic=False, **options)
        return LayerParts(compile(self.attention_inputs), compile(self.block_outputs))


EAGER_PARTS = LayerParts()


def _projection(linear: nn.Linear, pack: bool) -> _Projection:
    return _Projection(linear.weight, linear.bias, _packed(linear.weight) if pack else None)


def _fused(
    linears: tuple[nn.Linear, ...],
    pack: bool,
    sizes: tuple[int, ...] | None = None,
    *,
    stack: bool = False,
) -> _FusedProjection:
    """`linears` as one projection over a oneDNN copy of their weights (`pack`) or a plain stacked one
    (`stack`); `sizes` splits the output of a single layer that holds several parts."""
    parts = tuple(_projection(linear, pack=False) for linear in linears)
    sizes = sizes or tuple(linear.out_features for linear in linears)
    biases = [linear.bias for linear in linears]
    if not (pack or stack) or any((b is None) != (biases[0] is None) for b in biases):
        return _FusedProjection(parts, sizes)
    bias = None if biases[0] is None else torch.cat([b.detach() for b in biases])
    weights = _packed(*(linear.weight for linear in linears), onednn=pack)
    if pack:
        return _FusedProjection(parts, sizes, bias, packed=weights)
    return _FusedProjection(parts, sizes, bias, stacked=weights)


def fast_linear(linear: nn.Linear) -> Callable[[torch.Tensor], torch.Tensor]:
    """`linear` as a function, over a oneDNN-packed weight where that is faster (a small model on the CPU)."""
    return _projection(linear, _can_pack([linear.weight]))


def _rms_norm(norm: nn.Module | None, x: torch.Tensor) -> torch.Tensor:
    """transformers' RMSNorm (statistics in float32, scaled in the input dtype), without the module call;
    no norm (None) leaves `x` as it is."""
    if norm is None:
        return x
    x32 = x.float()
    scale = torch.rsqrt((x32 * x32).mean(-1, keepdim=True) + norm.variance_epsilon)
    return norm.weight * (x32 * scale).to(x.dtype)


def _head_norm(norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Chameleon's query / key norm: layer statistics over each head, then that head's own weight and bias."""
    return F.layer_norm(x, x.shape[-1:], None, None, eps=1e-5) * norm.weight + norm.bias


def _rotate(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding, transformers' `x * cos + rotate_half(x) * sin`, with rotate_half's sign in the table;
    a table narrower than `x` rotates its leading dimensions and passes the rest through."""
    width = cos.shape[-1]
    if width == x.shape[-1]:
        return torch.addcmul(x * cos, x.roll(width // 2, -1), signed_sin)
    rotated = x[..., :width]
    rotated = torch.addcmul(rotated * cos, rotated.roll(width // 2, -1), signed_sin)
    return torch.cat([rotated, x[..., width:]], -1)
