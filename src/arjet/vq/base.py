"""The image tokenizer contract: codes <-> pixels, and optionally the codebook (a pipeline then offers
samplers the capability "codebook")."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class ImageTokenizer(Protocol):
    """A VQ image tokenizer. Pixels are `[B, 3, h, w]` floats in [-1, 1]; codes are `[B, H, W]` longs.

    Optionally it also has `codebook() -> Tensor [V, d]`: the vectors the decoder actually sees for each
    code (after any normalisation). Pipelines hand it to the decoding session for rules that compare codes;
    a tokenizer without one gives the session `None`, and a sampler that requires it is refused."""

    @property
    def downsample(self) -> int:
        """Pixels per code along each side (16 for Janus and Chameleon, 8 for Emu3)."""

    @property
    def vocab_size(self) -> int: ...

    def encode(self, pixels: torch.Tensor) -> torch.Tensor: ...

    def decode(self, codes: torch.Tensor) -> torch.Tensor: ...
