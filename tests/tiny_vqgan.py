"""A tiny Chameleon VQGAN config, its taming-style YAML, and seeded non-trivial weights (VQGAN and converter tests)."""

import torch

from arjet.vq import ChameleonVQGAN

TINY = dict(
    ch=32,
    ch_mult=(1, 2),
    num_res_blocks=1,
    attn_resolutions=(8,),
    resolution=16,
    z_channels=8,
    embed_dim=8,
    n_embed=16,
)
YAML = """\
model:
  base_learning_rate: 4.5e-06
  target: taming.models.vqgan.VQModel
  params:
    embed_dim: 8
    n_embed: 16
    ddconfig:
      double_z: false
      z_channels: 8
      resolution: 16
      in_channels: 3
      out_ch: 3
      ch: 32
      ch_mult: [1, 2]
      num_res_blocks: 1
      attn_resolutions: [8]
      dropout: 0.0
    lossconfig:
      target: taming.modules.losses.vqperceptual.VQLPIPSWithDiscriminator
"""


def randomize_(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """The same kind of non-trivial weights whatever the module's own init (GroupNorm starts as the identity,
    the codebook near zero, transformers' convolutions small)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in module.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            if "norm" in name and name.endswith("weight"):
                param.copy_(1 + 0.1 * noise)
            elif name.endswith("bias"):
                param.copy_(0.05 * noise)
            elif "embedding" in name:
                param.copy_(noise)
            else:  # convolutions, fan-in scaled
                param.copy_(noise / param[0].numel() ** 0.5)
    return module.eval()


def tiny_vqgan(seed: int = 0) -> ChameleonVQGAN:
    return randomize_(ChameleonVQGAN(**TINY), seed)
