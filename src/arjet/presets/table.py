"""Real-size architectures of the released checkpoints, as data: one `Preset` per name, no code per size.

Every number carries its source. "config" means the checkpoint's `config.json` on the Hugging Face hub;
where a key is absent there, the value is the default of the transformers config class that loads it
(transformers 5.23). Parameter counts of the released files are their sizes on the hub divided by the
bytes per parameter of their stored dtype (sizes are shown to 3 significant digits, so +-0.5%).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

FAMILIES = ("janus", "emu3", "lumina_mgpt", "glm_image")


@dataclass(frozen=True)
class DecoderDims:
    """The Llama-style decoder stack every forward runs."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int  # MLP (SwiGLU) inner width
    vocab: int  # rows of the token embedding and the LM head
    max_positions: int
    rope_theta: float
    rms_norm_eps: float
    qk_norm: bool = False  # per-head LayerNorm of queries and keys (Chameleon; built in to its attention)

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


@dataclass(frozen=True)
class Preset:
    """One released checkpoint's architecture. `vq` holds the keyword arguments of the family's VQ model
    (transformers' `JanusVQVAEConfig` / `Emu3VQVAEConfig`, arjet's `ChameleonVQGAN`); `vision` the Janus
    understanding tower (`JanusVisionConfig`), unused when generating but part of the model."""

    name: str
    family: str
    checkpoint: str
    decoder: DecoderDims
    codebook: int  # image codes
    downsample: int  # pixels per code side
    default_size: int  # square image side in pixels the checkpoint was trained for
    vq: Mapping[str, Any]
    vision: Mapping[str, Any] | None = None
    released_parameters: float = 0.0  # parameters in the released weight files
    released_without: tuple[str, ...] = ()  # module prefixes of the built model absent from those files
    notes: str = ""
    extra: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(
                f"preset {self.name!r}: unknown family {self.family!r}; choose one of {FAMILIES}"
            )

    @property
    def default_grid(self) -> tuple[int, int]:
        side = self.default_size // self.downsample
        return side, side


def _frozen(**kwargs: Any) -> Mapping[str, Any]:
    return MappingProxyType(kwargs)


# -- Janus-Pro ------------------------------------------------------------------------------------------
# The HF checkpoints (deepseek-community/Janus-Pro-*) are converted from deepseek-ai/Janus-Pro-* by
# transformers' convert_janus_weights_to_hf.py, which copies `language_config` into a LlamaConfig (absent
# keys: LlamaConfig defaults), the gen aligner / head widths into JanusVQVAEConfig and the SigLIP tower's
# image size into JanusVisionConfig.
_JANUS_VQ = dict(
    embed_dim=8,  # deepseek-ai/Janus-Pro-*/config.json gen_vision_config.params.n_embed
    num_embeddings=16384,  # ... gen_vision_config.params.image_token_size
    latent_channels=256,  # LlamaGen VQ-16 (JanusVQVAEConfig default; deepseek-ai/Janus's VQ_16: z_channels 256)
    base_channels=128,  # JanusVQVAEConfig default
    channel_multiplier=(1, 1, 2, 2, 4),  # VQ-16: 16x downsampling (JanusVQVAEConfig default; Janus's VQ_16)
    num_res_blocks=2,  # JanusVQVAEConfig default
    num_hidden_layers=2,  # gen_aligner_config.params.depth
)
_JANUS_VISION = dict(  # SigLIP-L understanding encoder: JanusVisionConfig defaults, image_size from config
    hidden_size=1024,
    num_hidden_layers=24,
    num_attention_heads=16,
    image_size=384,  # vision_config.params.image_size; 384 / 16 = 24x24 codes for generation as well
    patch_size=16,
    mlp_ratio=4.0,
    depth=2,  # aligner_config.params.depth
)

JANUS_PRO_7B = Preset(
    name="janus-pro-7b",
    family="janus",
    checkpoint="deepseek-community/Janus-Pro-7B",
    decoder=DecoderDims(
        layers=30,  # deepseek-ai/Janus-Pro-7B config.json language_config.num_hidden_layers
        hidden=4096,  # absent there -> LlamaConfig default (gen_head_config.params.n_embed = 4096 agrees)
        heads=32,  # LlamaConfig default
        kv_heads=32,  # LlamaConfig default (= heads)
        ffn=11008,  # LlamaConfig default
        vocab=102400,  # language_config.vocab_size
        max_positions=16384,  # language_config.max_position_embeddings
        rope_theta=10000.0,  # LlamaConfig default
        rms_norm_eps=1e-6,  # LlamaConfig default
    ),
    codebook=16384,  # gen_head_config.params.image_token_size
    downsample=16,
    default_size=384,  # 24x24 = 576 image tokens (deepseek-ai/Janus: 384 px images, 16x downsampling)
    vq=_frozen(
        **_JANUS_VQ, projection_dim=4096, image_token_embed_dim=4096
    ),  # gen_aligner / gen_head n_embed
    vision=_frozen(**_JANUS_VISION, projection_dim=4096),  # aligner_config.params.n_embed
    # deepseek-ai/Janus-Pro-7B: pytorch_model-00001/00002-of-00002.bin, 9.99 + 4.85 GB of bfloat16
    released_parameters=14.84e9 / 2,
    # the language model alone: 30 x 202.4 M + 2 x 419.4 M (embedding, LM head) = 6.91 B, which matches
    # the 13.82 GB (bf16) of a published extraction of it (k-l-lambda/Janus-Pro-7B-language)
    extra=_frozen(language_model_parameters=13.82e9 / 2, image_token_id=100581),
)

JANUS_PRO_1B = Preset(
    name="janus-pro-1b",
    family="janus",
    checkpoint="deepseek-community/Janus-Pro-1B",
    # hf-internal-testing/tiny-processor-janus config.json: the converted Janus-Pro-1B config transformers'
    # tests use (text_config below, image_token_id 100581); pruna-test/tiny_janus (1B, 1 layer) agrees
    decoder=DecoderDims(
        layers=24,
        hidden=2048,
        heads=16,
        kv_heads=16,
        ffn=5632,
        vocab=102400,
        max_positions=16384,
        rope_theta=10000.0,
        rms_norm_eps=1e-6,
    ),
    codebook=16384,
    downsample=16,
    default_size=384,
    vq=_frozen(**_JANUS_VQ, projection_dim=2048, image_token_embed_dim=2048),
    vision=_frozen(**_JANUS_VISION, projection_dim=2048),
    # deepseek-ai/Janus-Pro-1B: pytorch_model.bin, 4.18 GB of bfloat16
    released_parameters=4.18e9 / 2,
    extra=_frozen(image_token_id=100581),
)

# -- Emu3-Gen -------------------------------------------------------------------------------------------
EMU3_GEN = Preset(
    name="emu3-gen",
    family="emu3",
    checkpoint="BAAI/Emu3-Gen-hf",
    # BAAI/Emu3-Chat config.json (same 8B architecture; max_position_embeddings 131072 there) and
    # Emu3TextConfig's defaults (transformers' Emu3 port) for Gen: max_position_embeddings 9216, as in the
    # Emu3-Gen derivative lodrick-the-lafted/Emu3-Gen-12B config.json and baaivision/Emu3's LM config
    decoder=DecoderDims(
        layers=32,
        hidden=4096,
        heads=32,
        kv_heads=8,
        ffn=14336,
        vocab=184622,
        max_positions=9216,
        rope_theta=1e6,
        rms_norm_eps=1e-5,
    ),
    codebook=32768,
    downsample=8,
    default_size=720,  # image_area 518400 = 720 x 720 (the Emu3-Gen-12B derivative's config; baaivision/Emu3's default)
    # BAAI/Emu3-VisionTokenizer config.json: codebook_size 32768, embed_dim 4, z_channels 4, ch 256,
    # ch_mult [1, 2, 2, 4], num_res_blocks 2, attn_resolutions [3], temporal_downsample_factor 4
    vq=_frozen(
        codebook_size=32768,
        embed_dim=4,
        latent_channels=4,
        base_channels=256,
        channel_multiplier=(1, 2, 2, 4),
        num_res_blocks=2,
        attn_resolutions=(3,),
        temporal_downsample_factor=4,
        hidden_size=1024,  # the VQ's attention width, ch x ch_mult[-1] (Emu3VQVAEConfig default)
        num_attention_heads=1,  # Emu3VQVAEConfig default
    ),
    # BAAI/Emu3-Gen: model-0000{1..7}-of-00007.safetensors, 4.94 + 4.83 + 5 + 5 + 4.83 + 5 + 4.37 GB of
    # float32 (config torch_dtype); the VQ ships separately (Emu3-VisionTokenizer, 1.08 GB of float32)
    released_parameters=33.97e9 / 4,
    released_without=("model.vqmodel",),
)

# -- Lumina-mGPT 1.x (Chameleon) ------------------------------------------------------------------------
LUMINA_MGPT_7B_768 = Preset(
    name="lumina-mgpt-7b-768",
    family="lumina_mgpt",
    checkpoint="Alpha-VLLM/Lumina-mGPT-7B-768",
    # sihwanpark/LANTERN-Lumina-mGPT-7B-768 config.json (the LANTERN authors' copy of this checkpoint's
    # config): hidden 4096, intermediate 11008, 32 heads, 32 KV heads, vocab 65536, max_position_embeddings
    # 4096 (Lumina's fine-tune used --max_seq_len 4096, lumina_mgpt/exps/7B.sh), rope_theta 1e4, rms 1e-5,
    # swin_norm false (that copy has 1 layer: a draft head); 32 layers as facebook/chameleon-7b (ChameleonConfig
    # defaults), which the released 14.03 GB below confirms
    decoder=DecoderDims(
        layers=32,
        hidden=4096,
        heads=32,
        kv_heads=32,
        ffn=11008,
        vocab=65536,
        max_positions=4096,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        qk_norm=True,
    ),
    codebook=8192,
    downsample=16,
    default_size=768,  # 48x48 codes, 48 rows x 49 tokens = 2352 (Lumina-mGPT's item_processor.py layout)
    # Meta's vqgan.yaml as mirrored by leloy/Anole-7b-v0.1-vqvae-hf config.json (ch 128, ch_mult
    # [1, 1, 2, 2, 4], num_res_blocks 2, attn_resolutions [], z_channels 256, embed_dim 256, n_embed 8192,
    # resolution 512): the arguments of arjet's ChameleonVQGAN
    vq=_frozen(
        ch=128,
        ch_mult=(1, 1, 2, 2, 4),
        num_res_blocks=2,
        attn_resolutions=(),
        resolution=512,
        z_channels=256,
        embed_dim=256,
        n_embed=8192,
    ),
    # Alpha-VLLM/Lumina-mGPT-7B-768: model-00001/00002-of-00002.safetensors, 9.98 + 4.05 GB of bfloat16;
    # Lumina drops transformers' VQ encoder before saving (finetune_solver.py) and decodes with Meta's VQGAN
    released_parameters=14.03e9 / 2,
    released_without=("model.vqmodel",),
)

# -- GLM-Image ------------------------------------------------------------------------------------------
# The released config.json files (zai-org/GLM-Image on the hub: vision_language_encoder/, transformer/, vae/,
# text_encoder/) could not be read with the tools at hand. The AR model's numbers are the defaults of
# transformers 5.24's GlmImage*Config classes, which document themselves as zai-org/GLM-Image's
# (`auto_docstring(checkpoint="zai-org/GLM-Image")`) and agree with the model card: "a 9B-parameter model
# initialized from GLM-4-9B-0414" (40 layers x 4096, 32 query / 2 key-value heads, FFN 13696: 8.9 B with its
# embeddings). The DiT's are SGLang's and FastVideo's GlmImage DiT configs (sglang multimodal_gen
# GlmImageArchConfig, FastVideo configs/models/dits/glm_image.py: 30 layers of 32 x 128 heads, the card's
# "7B-parameter" decoder), not diffusers' class defaults (64 x 40 heads, 2.5 B).
GLM_IMAGE = Preset(
    name="glm-image",
    family="glm_image",
    checkpoint="zai-org/GLM-Image",
    decoder=DecoderDims(
        layers=40,  # GlmImageTextConfig.num_hidden_layers
        hidden=4096,  # .hidden_size
        heads=32,  # .num_attention_heads
        kv_heads=2,  # .num_key_value_heads (GQA)
        ffn=13696,  # .intermediate_size (gate_up_proj holds 2 x 13696 rows)
        vocab=168064,  # .vocab_size: 16512 vision tokens, then GLM-4's 151552 text tokens
        max_positions=131072,  # .max_position_embeddings
        rope_theta=10000.0,  # rope_parameters default
        rms_norm_eps=1e-5,  # .rms_norm_eps
    ),
    codebook=16384,  # GlmImageVQVAEConfig.num_embeddings; the DiT's prior_vq_quantizer_codebook_size
    downsample=32,  # one AR code per 32 x 32 px (the processor's factor 32)
    default_size=1024,  # diffusers' GlmImagePipeline: sample_size 128 x VAE factor 8; 32 x 32 codes
    vq=_frozen(embed_dim=2048, num_embeddings=16384, latent_channels=1536),  # GlmImageVQVAEConfig defaults
    # the vision encoder (editing only): GlmImageVisionConfig defaults
    vision=_frozen(
        depth=40, hidden_size=1536, num_heads=16, intermediate_size=6144, image_size=2048, patch_size=16
    ),
    notes="AR stage 9B (card), DiT 7B (card); the diffusion stage is built but `bench` times the AR stage",
    extra=_frozen(
        vision_vocab_size=16512,  # GlmImageTextConfig.vision_vocab_size: the LM head's rows
        # half of each 128-wide head rotates (GLM-4's partial_rotary_factor 0.5): 32 frequencies, split
        # temporal / height / width as the rotary embedding's default mrope_section [8, 12, 12]
        partial_rotary_factor=0.5,
        mrope_section=(8, 12, 12),
        preview_side=16,  # the processor's preview grid: about 16 x 16 codes
        language_model_parameters=9e9,  # the card's "9B-parameter" AR generator
        dit_parameters=7e9,  # the card's "7B-parameter" decoder
        dit=_frozen(
            patch_size=2,
            in_channels=16,
            out_channels=16,
            num_layers=30,
            attention_head_dim=128,
            num_attention_heads=32,
            text_embed_dim=1472,  # ByT5-small's width: the glyph encoder's output
            time_embed_dim=512,
            condition_dim=256,  # (its prior-token codebook is the VQ's: the 16384 codes above)
        ),
        # google/byt5-small config.json (Glyph-ByT5 is its encoder; text_embed_dim 1472 above)
        glyph_encoder=_frozen(vocab_size=384, d_model=1472, d_kv=64, d_ff=3584, num_layers=12, num_heads=6),
        # a 16-channel latent (the DiT's in_channels) at 8x (a 2 x 2 patch of latents per 16 px, a quarter of
        # an AR code); the block widths are an assumption, the common 16-channel AutoencoderKL's (SD3's and
        # FLUX.1's vae/config.json: 128, 256, 512, 512 with 2 layers per block): vae/config.json was not read
        vae=_frozen(
            down_block_types=("DownEncoderBlock2D",) * 4,
            up_block_types=("UpDecoderBlock2D",) * 4,
            block_out_channels=(128, 256, 512, 512),
            layers_per_block=2,
            latent_channels=16,
        ),
    ),
)

PRESETS: dict[str, Preset] = {
    p.name: p for p in (LUMINA_MGPT_7B_768, JANUS_PRO_7B, JANUS_PRO_1B, EMU3_GEN, GLM_IMAGE)
}


def available_presets() -> list[str]:
    """Names of the real-size architectures `random_pipeline` builds."""
    return sorted(PRESETS)


def get_preset(name: str) -> Preset:
    if not isinstance(name, str) or name not in PRESETS:
        raise ValueError(f"unknown architecture {name!r}; choose one of {', '.join(available_presets())}")
    return PRESETS[name]
