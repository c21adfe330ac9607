"""Input checks shared by the image tokenizers: clear errors instead of tracebacks from inside torch."""

from __future__ import annotations

import torch


def check_codes(codes: torch.Tensor, vocab_size: int) -> None:
    if not isinstance(codes, torch.Tensor) or codes.dim() != 3 or codes.dtype not in (torch.long, torch.int):
        shape = tuple(codes.shape) if isinstance(codes, torch.Tensor) else type(codes).__name__
        raise ValueError(f"codes must be an integer tensor [B, H, W], got {shape}")
    if codes.numel() and (int(codes.min()) < 0 or int(codes.max()) >= vocab_size):
        raise ValueError(
            f"codes must lie in 0..{vocab_size - 1}, got values in {int(codes.min())}..{int(codes.max())}"
        )


def check_pixels(pixels: torch.Tensor, downsample: int) -> None:
    if not isinstance(pixels, torch.Tensor) or pixels.dim() != 4 or pixels.shape[1] != 3:
        shape = tuple(pixels.shape) if isinstance(pixels, torch.Tensor) else type(pixels).__name__
        raise ValueError(f"pixels must be a float tensor [B, 3, h, w] in [-1, 1], got {shape}")
    height, width = pixels.shape[-2:]
    if height % downsample or width % downsample:
        raise ValueError(
            f"image size {height}x{width} must be divisible by the tokenizer's factor {downsample}"
        )
