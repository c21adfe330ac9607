"""The image tokenizer contract: codes <-> pixels, and optionally the codebook (a pipeline then offers
samplers the capability "codebook")."""

from __future__ import annotations

import torch


class ImageTokenizer:
    """A VQ image tokenizer. Pixels are `[B, 3, h, w]` floats in [-1, 1]; codes are `[B, H, W]` longs.

    `codebook()` gives the vectors the decoder actually sees for each code (after any normalisation), `[V, d]`,
    or None (the default) for a tokenizer without one: pipelines hand it to the decoding session for rules
    that compare codes, and a sampler that requires it is refused when it is None."""

    @property
    def downsample(self) -> int:
        """Pixels per code along each side (16 for Janus and Chameleon, 8 for Emu3)."""
        raise NotImplementedError

    @property
    def vocab_size(self) -> int:
        raise NotImplementedError

    def encode(self, pixels: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def codebook(self) -> torch.Tensor | None:
        return None
