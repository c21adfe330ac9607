"""Janus / LlamaGen VQ tokenizer: an adapter over transformers' `JanusVQVAE`."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import JanusVQVAE

from .base import ImageTokenizer
from .checks import check_codes, check_pixels


class JanusVQTokenizer(ImageTokenizer):
    """Codes are looked up in an L2-normalised codebook (as `JanusVQVAE.decode` does), so encoding picks
    the nearest normalised code vector to the normalised latent, like LlamaGen's VQ-16."""

    def __init__(self, vqmodel: JanusVQVAE):
        self.vqmodel = vqmodel

    @property
    def downsample(self) -> int:
        return 2 ** (len(self.vqmodel.config.channel_multiplier) - 1)

    @property
    def vocab_size(self) -> int:
        return self.vqmodel.config.num_embeddings

    @property
    def grid(self) -> tuple[int, int]:
        side = self.vqmodel.quantize.quant_state_dims[0]
        return side, side

    def codebook(self) -> torch.Tensor:
        return F.normalize(self.vqmodel.quantize.embedding.weight, dim=-1)

    @torch.no_grad()
    def encode(self, pixels: torch.Tensor) -> torch.Tensor:
        check_pixels(pixels, self.downsample)
        latents = self.vqmodel.quant_conv(self.vqmodel.encoder(pixels.to(self.vqmodel.dtype)))
        latents = F.normalize(latents.permute(0, 2, 3, 1), dim=-1)
        return (latents @ self.codebook().T).argmax(-1)

    @torch.no_grad()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        check_codes(codes, self.vocab_size)
        if tuple(codes.shape[1:]) != self.grid:
            raise ValueError(
                f"this Janus VQ decodes a {self.grid} grid only, got codes of shape {tuple(codes.shape)}"
            )
        return self.vqmodel.decode(codes.flatten(1).to(self.vqmodel.device)).clamp(-1, 1)
