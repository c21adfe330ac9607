"""Randomness for samplers: per-image uniform streams and categorical draws by inverse CDF.

Every random decision of a sampler is a uniform drawn here. With one generator per image, image `i`
draws only from generator `i`, so its codes do not depend on what else shares the batch (the property
that lets an evaluation sharded over processes reproduce a one-process run).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


class ImageRandom:
    def __init__(
        self,
        generator: torch.Generator | Sequence[torch.Generator] | None,
        batch_size: int,
        device: torch.device | str = "cpu",
    ):
        if isinstance(generator, Sequence):
            if len(generator) != batch_size:
                raise ValueError(
                    f"got {len(generator)} generators for {batch_size} images; pass one per image"
                )
            self.generators: list[torch.Generator | None] = list(generator)
            self.per_image = True
        else:
            self.generators = [generator]
            self.per_image = False
        self.batch_size = batch_size
        self.device = torch.device(device)

    def uniform(self, *shape: int) -> torch.Tensor:
        """Uniforms in [0, 1) of shape `[B, *shape]`, image `i` from its own stream."""
        if self.per_image:
            draws = [self._rand(g, shape) for g in self.generators]
            return torch.stack(draws).to(self.device)
        return self._rand(self.generators[0], (self.batch_size, *shape)).to(self.device)

    def normal(self, *shape: int) -> torch.Tensor:
        """Standard normal draws of shape `[B, *shape]` (float32), image `i` from its own stream."""
        if self.per_image:
            draws = [self._randn(g, shape) for g in self.generators]
            return torch.stack(draws).to(self.device)
        return self._randn(self.generators[0], (self.batch_size, *shape)).to(self.device)

    @staticmethod
    def _randn(generator: torch.Generator | None, shape: tuple[int, ...]) -> torch.Tensor:
        device = generator.device if generator is not None else "cpu"
        return torch.randn(shape, generator=generator, device=device)

    @staticmethod
    def _rand(generator: torch.Generator | None, shape: tuple[int, ...]) -> torch.Tensor:
        device = generator.device if generator is not None else "cpu"
        return torch.rand(shape, generator=generator, device=device, dtype=torch.float64)


def sample(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Draw from `probs [..., V]` with uniforms `u [...]` by inverse CDF; zero-probability ids are never drawn."""
    cdf = probs.double().cumsum(-1)
    target = (u.to(cdf.dtype) * cdf[..., -1])[..., None]
    index = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    # rounding can push the target past the last non-zero entry: fall back to the largest-probability id there
    return torch.where(index < probs.shape[-1], index, probs.argmax(-1)).clamp_(max=probs.shape[-1] - 1)
