"""Chameleon's VQGAN, the image tokenizer of Lumina-mGPT 1.x: encoder, codebook and decoder.

transformers ships only the encoder half (`ChameleonVQVAE`), so arjet has its own module. The architecture
is the taming-transformers VQGAN (GroupNorm(32, eps=1e-6) + swish resnet blocks, a single-head attention
block in the middle, 2x down/up sampling between levels) and the parameter names are the keys of Meta's
`vqgan.ckpt`, so that checkpoint loads unchanged (see `arjet.vq.convert`).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import torch
import torch.nn.functional as F
from diffusers import ConfigMixin, ModelMixin
from diffusers.configuration_utils import register_to_config
from diffusers.utils.accelerate_utils import apply_forward_hook
from torch import nn

from .base import ImageTokenizer
from .checks import check_codes, check_pixels

GROUPS = 32


def _norm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(GROUPS, channels, eps=1e-6, affine=True)


def _conv3(in_channels: int, out_channels: int) -> nn.Conv2d:
    return nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)


class ResnetBlock(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, dropout: float = 0.0):
        super().__init__()
        self.norm1 = _norm(in_channels)
        self.conv1 = _conv3(in_channels, out_channels)
        self.norm2 = _norm(out_channels)
        self.dropout = nn.Dropout(dropout)
        self.conv2 = _conv3(out_channels, out_channels)
        # a parameter-free Identity keeps the state-dict keys those of the checkpoint
        self.nin_shortcut = (
            nn.Conv2d(in_channels, out_channels, kernel_size=1)
            if in_channels != out_channels
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(self.dropout(F.silu(self.norm2(h))))
        return self.nin_shortcut(x) + h


class AttnBlock(nn.Module):
    """Single-head self-attention over all positions, projections as 1x1 convolutions."""

    def __init__(self, channels: int):
        super().__init__()
        self.norm = _norm(channels)
        self.q = nn.Conv2d(channels, channels, kernel_size=1)
        self.k = nn.Conv2d(channels, channels, kernel_size=1)
        self.v = nn.Conv2d(channels, channels, kernel_size=1)
        self.proj_out = nn.Conv2d(channels, channels, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, channels, height, width = x.shape
        h = self.norm(x)
        # [B, C, H, W] -> [B, 1, HW, C]: one head of width C, default scale C**-0.5
        q, k, v = (proj(h).flatten(2).transpose(1, 2).unsqueeze(1) for proj in (self.q, self.k, self.v))
        h = F.scaled_dot_product_attention(q, k, v)
        h = h.squeeze(1).transpose(1, 2).reshape(batch, channels, height, width)
        return x + self.proj_out(h)


class Downsample(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size=3, stride=2, padding=0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # the checkpoint was trained with zero padding on the right and bottom only
        return self.conv(F.pad(x, (0, 1, 0, 1)))


class Upsample(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv = _conv3(channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class Level(nn.Module):
    """One resolution: resnet blocks (each followed by attention at the attention resolutions). The
    encoder sets a `downsample` and the decoder an `upsample` on every level but one, applied after the
    blocks (the checkpoints' weight names)."""

    def __init__(self, in_channels: int, out_channels: int, num_blocks: int, attention: bool, dropout: float):
        super().__init__()
        channels = [in_channels] + [out_channels] * num_blocks
        self.block = nn.ModuleList(ResnetBlock(a, b, dropout) for a, b in pairwise(channels))
        self.attn = nn.ModuleList(AttnBlock(out_channels) for _ in range(num_blocks) if attention)
        self.downsample: nn.Module | None = None
        self.upsample: nn.Module | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, block in enumerate(self.block):
            x = block(x)
            if self.attn:
                x = self.attn[i](x)
        return x


class MidBlock(nn.Module):
    def __init__(self, channels: int, dropout: float):
        super().__init__()
        self.block_1 = ResnetBlock(channels, channels, dropout)
        self.attn_1 = AttnBlock(channels)
        self.block_2 = ResnetBlock(channels, channels, dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block_2(self.attn_1(self.block_1(x)))


class Encoder(nn.Module):
    def __init__(
        self,
        in_channels: int,
        ch: int,
        ch_mult: Sequence[int],
        num_res_blocks: int,
        attn_resolutions: Sequence[int],
        resolution: int,
        z_channels: int,
        dropout: float,
    ):
        super().__init__()
        self.conv_in = _conv3(in_channels, ch)
        self.down = nn.ModuleList()
        channels, size = ch, resolution
        for i, mult in enumerate(ch_mult):
            level = Level(channels, ch * mult, num_res_blocks, size in attn_resolutions, dropout)
            channels = ch * mult
            if i != len(ch_mult) - 1:
                level.downsample = Downsample(channels)
                size //= 2
            self.down.append(level)
        self.mid = MidBlock(channels, dropout)
        self.norm_out = _norm(channels)
        self.conv_out = _conv3(channels, z_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv_in(x)
        for level in self.down:
            h = level(h)
            if level.downsample is not None:
                h = level.downsample(h)
        h = self.mid(h)
        return self.conv_out(F.silu(self.norm_out(h)))


class Decoder(nn.Module):
    """Mirror of the encoder with one more resnet block per level. `up[i]` is level i (the same
    resolution as `encoder.down[i]`), so the forward pass walks `up` backwards."""

    def __init__(
        self,
        out_ch: int,
        ch: int,
        ch_mult: Sequence[int],
        num_res_blocks: int,
        attn_resolutions: Sequence[int],
        resolution: int,
        z_channels: int,
        dropout: float,
    ):
        super().__init__()
        channels = ch * ch_mult[-1]
        size = resolution // 2 ** (len(ch_mult) - 1)
        self.conv_in = _conv3(z_channels, channels)
        self.mid = MidBlock(channels, dropout)
        levels: list[Level] = []
        for i in reversed(range(len(ch_mult))):
            level = Level(channels, ch * ch_mult[i], num_res_blocks + 1, size in attn_resolutions, dropout)
            channels = ch * ch_mult[i]
            if i != 0:
                level.upsample = Upsample(channels)
                size *= 2
            levels.insert(0, level)
        self.up = nn.ModuleList(levels)
        self.norm_out = _norm(channels)
        self.conv_out = _conv3(channels, out_ch)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        h = self.mid(self.conv_in(z))
        for level in reversed(self.up):
            h = level(h)
            if level.upsample is not None:
                h = level.upsample(h)
        return self.conv_out(F.silu(self.norm_out(h)))


class VectorQuantizer(nn.Module):
    def __init__(self, n_embed: int, embed_dim: int):
        super().__init__()
        self.embedding = nn.Embedding(n_embed, embed_dim)
        nn.init.uniform_(self.embedding.weight, -1.0 / n_embed, 1.0 / n_embed)

    def nearest(self, latents: torch.Tensor) -> torch.Tensor:
        """`[B, d, H, W]` latents -> `[B, H, W]` index of the nearest code (Euclidean, ties to the lowest)."""
        z = latents.permute(0, 2, 3, 1).float()
        book = self.embedding.weight.float()
        # |z|^2 + |e|^2 - 2 z.e in this order, as Chameleon computes it, so near-ties resolve the same way
        distances = z.pow(2).sum(-1, keepdim=True) + book.pow(2).sum(-1) - 2 * (z @ book.T)
        return distances.argmin(-1)


class ChameleonVQGAN(ModelMixin, ConfigMixin, ImageTokenizer):
    """Chameleon / Lumina-mGPT 1.x VQGAN implementing `arjet.vq.ImageTokenizer`.

    The arguments are those of Meta's `vqgan.yaml` (`model.params.ddconfig` plus `n_embed` and
    `embed_dim`); the defaults are the released tokenizer's: 8192 codes of width 256, 16x downsampling.
    Pixels are `[B, 3, h, w]` in [-1, 1], codes `[B, h/16, w/16]`.
    """

    @register_to_config
    def __init__(
        self,
        in_channels: int = 3,
        out_ch: int = 3,
        ch: int = 128,
        ch_mult: Sequence[int] = (1, 1, 2, 2, 4),
        num_res_blocks: int = 2,
        attn_resolutions: Sequence[int] = (),
        resolution: int = 512,
        z_channels: int = 256,
        embed_dim: int = 256,
        n_embed: int = 8192,
        dropout: float = 0.0,
    ):
        super().__init__()
        ch_mult, attn_resolutions = tuple(ch_mult), tuple(attn_resolutions or ())
        if not ch_mult:
            raise ValueError("ch_mult must list at least one channel multiplier, got an empty list")
        widths = sorted({ch * mult for mult in ch_mult} | {ch})
        if any(width <= 0 or width % GROUPS for width in widths):
            raise ValueError(
                f"every width ch * ch_mult[i] must be a positive multiple of {GROUPS} (GroupNorm groups), "
                f"got ch={ch}, ch_mult={ch_mult} -> {widths}"
            )
        if n_embed < 1 or embed_dim < 1 or z_channels < 1:
            raise ValueError(
                f"n_embed, embed_dim and z_channels must be >= 1, got {n_embed}, {embed_dim}, {z_channels}"
            )
        shared = dict(
            ch=ch,
            ch_mult=ch_mult,
            num_res_blocks=num_res_blocks,
            attn_resolutions=attn_resolutions,
            resolution=resolution,
            z_channels=z_channels,
            dropout=dropout,
        )
        self.encoder = Encoder(in_channels=in_channels, **shared)
        self.quant_conv = nn.Conv2d(z_channels, embed_dim, kernel_size=1)
        self.quantize = VectorQuantizer(n_embed, embed_dim)
        self.post_quant_conv = nn.Conv2d(embed_dim, z_channels, kernel_size=1)
        self.decoder = Decoder(out_ch=out_ch, **shared)

    # -- ImageTokenizer ------------------------------------------------------------------------------
    @property
    def downsample(self) -> int:
        return 2 ** (len(self.config.ch_mult) - 1)

    @property
    def vocab_size(self) -> int:
        return self.config.n_embed

    def codebook(self) -> torch.Tensor:
        return self.quantize.embedding.weight

    @apply_forward_hook
    @torch.no_grad()
    def encode(self, pixels: torch.Tensor) -> torch.Tensor:
        """`[B, 3, h, w]` pixels in [-1, 1] -> `[B, h/f, w/f]` codes (nearest codebook entry)."""
        check_pixels(pixels, self.downsample)
        latents = self.quant_conv(self.encoder(pixels.to(device=self.device, dtype=self.dtype)))
        return self.quantize.nearest(latents)

    @apply_forward_hook
    @torch.no_grad()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """`[B, H, W]` codes -> `[B, 3, H*f, W*f]` pixels clamped to [-1, 1]."""
        check_codes(codes, self.vocab_size)
        # contiguous NCHW as in the reference: a channels-last view picks other conv kernels (and roundings)
        latents = self.quantize.embedding(codes.to(self.device)).permute(0, 3, 1, 2).contiguous()
        return self.decoder(self.post_quant_conv(latents)).clamp(-1, 1)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        """Reconstruction through the codebook: `decode(encode(pixels))`."""
        return self.decode(self.encode(pixels))
