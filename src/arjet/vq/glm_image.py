"""GLM-Image's image codes: the codebook its AR model writes in, and a quick false-colour view of a code grid.

GLM-Image has no pixel decoder for its codes: its diffusion stage (a DiT reading the codes as prior tokens,
then a VAE) paints the picture, which the pipeline runs once the codes are decoded. This tokenizer gives
what the decoding side needs from the codes themselves: the codebook (the vectors of transformers'
`GlmImageVQVAE` quantizer, L2-normalised as it compares them: LANTERN's neighbours) and `decode`, a canvas
that colours each code by a fixed projection of its codebook vector (similar codes, similar colours), for
live previews of a decode in progress. Encoding pixels goes through GLM-Image's vision encoder (editing),
which arjet does not run.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .base import ImageTokenizer

PIXELS_PER_CODE = 32  # GLM-Image's AR grid: one code per 32x32 pixels (the processor's factor)
PALETTE_SEED = 0


class GlmImageCodes(ImageTokenizer):
    def __init__(self, vqmodel: nn.Module):
        self.vqmodel = vqmodel

    @property
    def downsample(self) -> int:
        return PIXELS_PER_CODE

    @property
    def vocab_size(self) -> int:
        return self.vqmodel.quantize.num_embeddings

    def codebook(self) -> torch.Tensor:
        return F.normalize(self.vqmodel.quantize.embedding.weight.detach(), dim=-1)

    def encode(self, pixels: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError(
            "GLM-Image tokenizes images with its vision encoder (image editing), which arjet does not run; "
            "it generates codes from text only"
        )

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """A false-colour canvas `[B, 3, 32 H, 32 W]` in [-1, 1] for codes `[B, H, W]`: each code's codebook
        vector projected on three fixed directions (seeded), scaled to the codebook's spread."""
        book = self.codebook().float()
        directions = torch.randn(book.shape[1], 3, generator=torch.Generator().manual_seed(PALETTE_SEED))
        colours = book @ directions.to(book.device)
        colours = torch.tanh((colours - colours.mean(0)) / colours.std(0).clamp(min=1e-6))
        canvas = colours[codes].permute(0, 3, 1, 2)  # [B, 3, H, W]
        return canvas.repeat_interleave(PIXELS_PER_CODE, 2).repeat_interleave(PIXELS_PER_CODE, 3)
