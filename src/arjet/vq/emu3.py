"""Emu3 vision tokenizer (images only): an adapter over transformers' `Emu3VQVAE`."""

from __future__ import annotations

import torch
from transformers import Emu3VQVAE

from .base import ImageTokenizer
from .checks import check_codes, check_pixels


class Emu3VQTokenizer(ImageTokenizer):
    def __init__(self, vqmodel: Emu3VQVAE):
        self.vqmodel = vqmodel

    @property
    def downsample(self) -> int:
        return self.vqmodel.spatial_scale_factor

    @property
    def vocab_size(self) -> int:
        return self.vqmodel.config.codebook_size

    def codebook(self) -> torch.Tensor:
        return self.vqmodel.quantize.embedding.weight

    @torch.no_grad()
    def encode(self, pixels: torch.Tensor) -> torch.Tensor:
        check_pixels(pixels, self.downsample)
        sizes = torch.tensor([pixels.shape[-2:]] * pixels.shape[0])
        tokens = self.vqmodel.encode(pixels.to(self.vqmodel.device), sizes).image_tokens
        return torch.stack(list(tokens))

    @torch.no_grad()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        check_codes(codes, self.vocab_size)
        return self.vqmodel.decode(codes.to(self.vqmodel.device)).clamp(-1, 1)
