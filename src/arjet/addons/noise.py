"""Noise conditioning for SJD2: noisy code embeddings in, next clean code out.

A model fine-tuned with `arjet train sjd2` accepts, at any image-code position, a noisy embedding
`e_t = denorm(alpha_t * norm(e) + sigma_t * eps) + level_embedding(t)` instead of the clean code embedding
`e`, and still predicts the next clean code. `norm` standardises each dimension with the statistics of the
model's code embedding table (SJD2 reports that without it denoising fails). Levels `t` run from 0 (clean,
nothing added: plain AR inputs are untouched) to 1 (pure noise) on a cosine schedule. The level embedding
is a small MLP on a sinusoidal encoding of `t`; its output layer starts at zero, so an untrained module
changes nothing. The module is a pipeline component; its presence is what declares that a checkpoint
supports noisy embeddings.
"""

from __future__ import annotations

import math

import torch
from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.models.modeling_utils import ModelMixin
from torch import nn


class NoiseConditioning(ModelMixin, ConfigMixin):
    @register_to_config
    def __init__(self, hidden_size: int, frequencies: int = 64, levels: int = 16):
        super().__init__()
        self.register_buffer("embedding_mean", torch.zeros(hidden_size))
        self.register_buffer("embedding_std", torch.ones(hidden_size))
        self.level_mlp = nn.Sequential(
            nn.Linear(2 * frequencies, hidden_size), nn.SiLU(), nn.Linear(hidden_size, hidden_size)
        )
        nn.init.zeros_(self.level_mlp[-1].weight)
        nn.init.zeros_(self.level_mlp[-1].bias)

    @property
    def levels(self) -> int:
        """The denoising levels the model was trained with (`config.levels`)."""
        return self.config.levels

    @torch.no_grad()
    def set_statistics(self, code_embeddings: torch.Tensor) -> None:
        """Standardisation statistics from the model's code embedding table `[V, d]` (set once, then frozen)."""
        self.embedding_mean.copy_(code_embeddings.float().mean(0))
        self.embedding_std.copy_(code_embeddings.float().std(0).clamp(min=1e-6))

    @staticmethod
    def alpha(t: torch.Tensor) -> torch.Tensor:
        return torch.cos(0.5 * math.pi * t)

    @staticmethod
    def sigma(t: torch.Tensor) -> torch.Tensor:
        return torch.sin(0.5 * math.pi * t)

    def normalize(self, embeddings: torch.Tensor) -> torch.Tensor:
        return (embeddings.float() - self.embedding_mean) / self.embedding_std

    def denormalize(self, z: torch.Tensor) -> torch.Tensor:
        return z * self.embedding_std + self.embedding_mean

    def level_embedding(self, t: torch.Tensor) -> torch.Tensor:
        half = self.config.frequencies
        scales = torch.exp(-math.log(1000.0) * torch.arange(half, device=t.device) / half)
        angles = (t.float()[..., None] * 1000.0) * scales
        return self.level_mlp(torch.cat([angles.sin(), angles.cos()], -1).to(self.level_mlp[0].weight.dtype))

    def model_input(self, z: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """What the model is fed for normalised state `z` at level `t` (`[..., d]`, `t [...]`)."""
        embedding = self.denormalize(z)
        noisy = t > 0
        return torch.where(noisy[..., None], embedding + self.level_embedding(t).float(), embedding)

    def add_noise(self, clean: torch.Tensor, t: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """Normalised state at level `t` for clean embeddings `[..., d]`."""
        return self.alpha(t)[..., None] * self.normalize(clean) + self.sigma(t)[..., None] * noise

    def denoise_step(
        self, z: torch.Tensor, clean_estimate: torch.Tensor, t: torch.Tensor, t_next: torch.Tensor
    ):
        """Deterministic DDIM step from level `t` to `t_next < t` towards the clean embedding estimate."""
        z0 = self.normalize(clean_estimate)
        sigma, sigma_next = self.sigma(t)[..., None], self.sigma(t_next)[..., None]
        ratio = torch.where(sigma > 0, sigma_next / sigma.clamp(min=1e-12), torch.zeros_like(sigma))
        return ratio * z + (self.alpha(t_next)[..., None] - self.alpha(t)[..., None] * ratio) * z0
