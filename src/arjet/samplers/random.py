"""Randomness for samplers: counter-based per-image streams on the device, and categorical draws by inverse CDF.

Every random decision of a sampler is a uniform drawn here. Image `i` owns a 63-bit key (from its seed or
its `torch.Generator`); the `t`-th draw of a decode is a hash of (key, t, element index), computed with
integer tensor ops on the sampler's device. So

- an image's draws depend only on its key and on how many draws the decode made before, never on the other
  images of the batch (what lets a sharded evaluation reproduce a one-process run);
- drawing needs no generator object, no host round trip and no per-image Python loop: each image's draw
  counter is a device tensor advanced in place, so a captured CUDA graph replays fresh numbers at every step;
- a view of some images (`lanes`) draws for them alone, and `reset` gives them new keys with their counters
  at zero, so an image started in the middle of others' decodes draws exactly what it would alone.

The hash is a 32-bit integer mixer (xor-shift / multiply rounds, multipliers below 2**31 so every product
stays inside int64 without overflow), applied to the image's mixed key, the mixed counter and the element
index in turn; uniforms carry 32 random bits.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..limits import KEY_LIMIT  # re-exported: image keys (and seeds) are integers in [0, KEY_LIMIT)

_MASK32 = 0xFFFFFFFF


def _mix(x: torch.Tensor) -> torch.Tensor:
    """A bijective 32-bit integer hash of `x` (int64 holding values in [0, 2**32))."""
    x = x ^ (x >> 16)
    x = (x * 0x21F0AAAD) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x735A2D97) & _MASK32
    return x ^ (x >> 15)


def image_keys(
    generator: torch.Generator | Sequence[torch.Generator] | None, batch_size: int
) -> torch.Tensor:
    """`[B]` int64 keys: one draw from each image's generator (a list: one per image), or `B` draws from a
    single generator (or torch's global one), taken once before decoding."""
    if isinstance(generator, Sequence):
        if len(generator) != batch_size:
            raise ValueError(f"got {len(generator)} generators for {batch_size} images; pass one per image")
        return torch.cat([_draw_keys(g, 1) for g in generator])
    return _draw_keys(generator, batch_size)


def seed_keys(seeds: Sequence[int]) -> torch.Tensor:
    """`[B]` keys for integer seeds: the same keys `torch.Generator().manual_seed(seed)` would give."""
    return image_keys([torch.Generator().manual_seed(seed) for seed in seeds], len(seeds))


def _draw_keys(generator: torch.Generator | None, count: int) -> torch.Tensor:
    device = generator.device if generator is not None else "cpu"
    return torch.randint(0, KEY_LIMIT - 1, (count,), generator=generator, device=device).cpu()


class ImageRandom:
    """Per-image uniform and normal streams on `device`.

    `ImageRandom(generator, batch_size, device)` takes one `torch.Generator` per image (a list), a single
    generator, or None (torch's global generator); `ImageRandom.from_keys(keys, device)` takes the keys."""

    def __init__(
        self,
        generator: torch.Generator | Sequence[torch.Generator] | None,
        batch_size: int,
        device: torch.device | str = "cpu",
    ):
        self._setup(image_keys(generator, batch_size), device)

    @classmethod
    def from_keys(cls, keys: torch.Tensor, device: torch.device | str = "cpu") -> ImageRandom:
        rng = cls.__new__(cls)
        rng._setup(keys, device)
        return rng

    def _setup(self, keys: torch.Tensor, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self.batch_size = len(keys)
        self._key = _mixed_keys(keys.to(device=self.device, dtype=torch.long))  # [B, 1]
        # draws so far per image, advanced in place
        self.counter = torch.zeros(self.batch_size, 1, dtype=torch.long, device=self.device)

    def lanes(self, start: int, stop: int) -> ImageRandom:
        """The streams of images `start:stop`, sharing their keys and counters with this object."""
        view = ImageRandom.__new__(ImageRandom)
        view.device, view.batch_size = self.device, stop - start
        view._key, view.counter = self._key[start:stop], self.counter[start:stop]
        return view

    def reset(self, keys: torch.Tensor) -> None:
        """New keys `[B]` for these images, their counters back at zero (as a fresh object would have)."""
        self._key.copy_(_mixed_keys(keys.to(device=self.device, dtype=torch.long)))
        self.counter.zero_()

    def bits(self, *shape: int) -> torch.Tensor:
        """`[B, *shape]` int64 holding 32 random bits each; advances every image's draw counter by one."""
        count = 1
        for size in shape:
            count *= size
        self.counter.add_(1)
        stream = _mix(self._key ^ _mix(self.counter & _MASK32))  # [B, 1]
        index = torch.arange(count, device=self.device)
        return _mix(stream ^ index).view(self.batch_size, *shape)

    def uniform(self, *shape: int) -> torch.Tensor:
        """Uniforms in (0, 1) of shape `[B, *shape]` (float64), image `i` from its own stream."""
        return (self.bits(*shape).double() + 0.5) * 2.0**-32

    def normal(self, *shape: int) -> torch.Tensor:
        """Standard normal draws of shape `[B, *shape]` (float32), by Box-Muller from two uniforms each."""
        u = self.uniform(2, *shape)
        radius = torch.sqrt(-2.0 * torch.log(u[:, 0]))
        return (radius * torch.cos(2.0 * torch.pi * u[:, 1])).float()


def _mixed_keys(keys: torch.Tensor) -> torch.Tensor:
    return _mix(_mix(keys >> 32) ^ (keys & _MASK32))[:, None]


def sample(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Draw from `probs [..., V]` with uniforms `u [...]` by inverse CDF; zero-probability ids are never drawn."""
    cdf = probs.double().cumsum(-1)
    target = (u.to(cdf.dtype) * cdf[..., -1])[..., None]
    index = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    # rounding can push the target past the last non-zero entry: fall back to the largest-probability id there
    return torch.where(index < probs.shape[-1], index, probs.argmax(-1)).clamp_(max=probs.shape[-1] - 1)
