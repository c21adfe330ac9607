"""Scaled-down versions of the real-size presets: the same families, builders and code path as
`arjet.random_pipeline("janus-pro-7b")`, with a few thousand parameters so they build and run on a CPU."""

from __future__ import annotations

import dataclasses

from arjet.presets import PRESETS, DecoderDims, Preset
from arjet.testing import TINY_GLM_IMAGE_STAGES, TINY_GLM_IMAGE_VISION

SMALL_DECODER = DecoderDims(
    layers=2,
    hidden=64,
    heads=4,
    kv_heads=2,
    ffn=128,
    vocab=512,
    max_positions=1024,
    rope_theta=10000.0,
    rms_norm_eps=1e-5,
)
SMALL_CODEBOOK = 64
SMALL_VQ = {
    "janus": dict(
        embed_dim=8,
        num_embeddings=SMALL_CODEBOOK,
        latent_channels=8,
        base_channels=32,
        channel_multiplier=(1, 1, 1, 1, 1),
        num_res_blocks=1,
        num_hidden_layers=2,
        projection_dim=64,
        image_token_embed_dim=64,
    ),
    "emu3": dict(
        codebook_size=SMALL_CODEBOOK,
        embed_dim=4,
        latent_channels=4,
        base_channels=32,
        channel_multiplier=(1, 1, 1, 1),
        num_res_blocks=1,
        attn_resolutions=(),
        temporal_downsample_factor=4,
        hidden_size=32,
        num_attention_heads=1,
    ),
    "glm_image": dict(embed_dim=8, num_embeddings=SMALL_CODEBOOK, latent_channels=16),
    "lumina_mgpt": dict(
        ch=32,
        ch_mult=(1, 1, 1, 1, 1),
        num_res_blocks=1,
        attn_resolutions=(),
        resolution=64,
        z_channels=8,
        embed_dim=8,
        n_embed=SMALL_CODEBOOK,
    ),
}
SMALL_VISION = dict(
    hidden_size=32,
    num_hidden_layers=1,
    num_attention_heads=4,
    patch_size=16,
    mlp_ratio=2.0,
    projection_dim=64,
)
SMALL_GLM_IMAGE = dict(  # GLM-Image's vision encoder and diffusion stage: the tiny pipeline's
    vision=TINY_GLM_IMAGE_VISION,
    extra=dict(
        vision_vocab_size=SMALL_CODEBOOK,
        partial_rotary_factor=0.5,
        mrope_section=(2, 1, 1),  # 16-wide heads, half rotated: 4 frequencies
        preview_side=2,
        **TINY_GLM_IMAGE_STAGES,
    ),
)
SMALL_SIZE = {"janus": 32, "emu3": 24, "lumina_mgpt": 64, "glm_image": 64}  # 2x2, 3x3, 4x4 and 2x2 codes


def small_preset(name: str) -> Preset:
    """Preset `name` with a 2-layer, 64-wide decoder, a 64-code VQ of 32 channels and a tiny default size."""
    preset = PRESETS[name]
    small = dataclasses.replace(
        preset,
        name=f"small-{name}",
        decoder=dataclasses.replace(SMALL_DECODER, qk_norm=preset.decoder.qk_norm),
        codebook=SMALL_CODEBOOK,
        vq=SMALL_VQ[preset.family],
        vision=SMALL_VISION if preset.vision is not None else None,
        default_size=SMALL_SIZE[preset.family],
    )
    if preset.family == "glm_image":
        small = dataclasses.replace(small, **SMALL_GLM_IMAGE)
    return small
