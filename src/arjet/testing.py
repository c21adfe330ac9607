"""Tiny random pipelines of every supported family, for users' tests and our own.

`tiny_pipeline("janus" | "emu3" | "lumina_mgpt" | "glm_image", grid=(h, w), vocab_size=V, seed=0)` builds
the real transformers model class (and VQ) with a few thousand random parameters, a word-level text
tokenizer with the family's special tokens, and wraps them in the family's pipeline: the diffusers
`get_dummy_components` idea, public. GLM-Image's comes with its whole diffusion stage (diffusers' DiT, VAE,
scheduler; a ByT5 tokenizer and a T5 glyph encoder), all tiny and random, and a processor with a chat
template of arjet's own. Everything is built in memory; nothing is downloaded. Its `limits` allow 100,000
images per call (statistical tests draw thousands of tiny images at once).
`tiny_drafter(pipe)` gives such a pipeline a random one-layer drafter (`pipe.drafter`, for `eagle`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from . import checks
from .addons.drafter import Drafter
from .limits import Limits
from .pipelines.text_tokenizer import build_word_tokenizer

FAMILIES = ("janus", "emu3", "lumina_mgpt", "glm_image")
# each family's grid when the caller gives none: Janus decodes square grids only, the others any shape
DEFAULT_GRIDS = {"janus": (2, 2), "emu3": (2, 3), "lumina_mgpt": (2, 3), "glm_image": (2, 3)}
# the tiny GLM-Image's preview grid is about 2 x 2 codes (the real model's about 16 x 16): a 1 x 2 preview
# before its default 2 x 3 target
TINY_PREVIEW_SIDE = 2
TINY_LIMITS = Limits(max_images_per_call=100_000)
WORDS = [
    "a",
    "an",
    "the",
    "of",
    "and",
    "on",
    "in",
    "with",
    "left",
    "right",
    "above",
    "below",
    "next",
    "to",
    "small",
    "large",
    "big",
    "red",
    "green",
    "blue",
    "yellow",
    "orange",
    "purple",
    "pink",
    "white",
    "black",
    "gray",
    "brown",
    "cyan",
    "circle",
    "square",
    "triangle",
    "star",
    "cat",
    "dog",
    "photo",
    "image",
    "picture",
    "background",
]


def tiny_pipeline(
    family: str,
    grid: tuple[int, int] | None = None,
    vocab_size: int = 8,
    seed: int = 0,
    *,
    logit_scale: float = 1.0,
    num_layers: int = 2,
    dtype: torch.dtype = torch.float32,
):
    """A pipeline over a tiny random model of `family` that decodes a `grid` of codes in `0..vocab_size-1`
    (default: `DEFAULT_GRIDS[family]`). The random weights come from `seed` alone, drawn from a forked
    random state: the caller's global torch RNG is left as it was.

    `logit_scale` multiplies the code head's weights: > 1 gives peakier next-code distributions (random
    tiny models are otherwise nearly uniform), which makes statistical sampler tests more discriminating.
    `num_layers` sets the transformer depth (1 makes every cached key depend on its own token only).
    """
    if family not in _BUILDERS:
        raise ValueError(f"unknown family {family!r}; choose one of {FAMILIES}")
    grid = DEFAULT_GRIDS[family] if grid is None else grid
    height, width = grid
    if not (isinstance(height, int) and isinstance(width, int) and height >= 1 and width >= 1):
        raise ValueError(f"grid must be two positive integers (rows, columns), got {grid!r}")
    if not checks.is_integer(vocab_size) or vocab_size < 2:
        raise ValueError(f"vocab_size must be an integer >= 2, got {vocab_size!r}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        pipe = _BUILDERS[family](grid, vocab_size, logit_scale, num_layers)
    pipe.limits = TINY_LIMITS  # a tiny model decodes thousands of images at once for statistical tests
    if dtype != torch.float32:
        pipe.to(dtype=dtype)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def tiny_drafter(pipe, seed: int = 0, *, block: str = "llama", fc_scale: float = 1.0):
    """Give `pipe` a random drafter sized for its model (4 heads, MLP twice the width), drawn from `seed`
    alone (the caller's torch RNG is left as it was), in the model's dtype; returns `pipe`. `fc_scale`
    multiplies the fusion's weights (larger: drafts further from uniform)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        drafter = Drafter.for_adapter(pipe.session_adapter(), block=block, device=pipe.device)
    _scale_(drafter.fc.weight, fc_scale)
    if pipe.dtype != torch.float32:
        drafter = drafter.to(pipe.dtype)
    pipe.register_modules(drafter=drafter.eval())
    return pipe


def _positions(grid: tuple[int, int]) -> int:
    """Model positions: 512, or room for a large grid (row tokens included) and a prompt."""
    return max(512, 2 * grid[0] * (grid[1] + 1) + 64)


def _text_model_config(vocab: int, layers: int, positions: int = 512, **extra) -> dict:
    return dict(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=positions,
        **extra,
    )


def _scale_(weight: torch.nn.Parameter, scale: float) -> None:
    with torch.no_grad():
        weight.mul_(scale)


def _janus(grid: tuple[int, int], vocab_size: int, logit_scale: float, layers: int):
    from transformers import JanusConfig, JanusForConditionalGeneration

    from .pipelines.janus import JanusPipeline, build_janus_tokenizer

    if grid[0] != grid[1]:
        raise ValueError(f"Janus decodes square grids only, got {grid}")
    tokenizer = build_janus_tokenizer(WORDS)
    side = grid[0]
    config = JanusConfig(
        text_config=dict(
            model_type="llama",
            **_text_model_config(
                len(tokenizer), layers, _positions(grid), pad_token_id=tokenizer.pad_token_id
            ),
        ),
        vision_config=dict(
            image_size=2 * side,
            patch_size=2,
            num_image_tokens=side * side,
            hidden_size=32,
            projection_dim=32,
            num_hidden_layers=1,
            num_attention_heads=4,
            mlp_ratio=2,
        ),
        vq_config=dict(
            embed_dim=8,
            num_embeddings=vocab_size,
            latent_channels=8,
            base_channels=32,
            channel_multiplier=[1, 2],
            num_res_blocks=1,
            projection_dim=32,
            image_token_embed_dim=32,
        ),
        image_token_id=tokenizer.unk_token_id,
    )
    model = JanusForConditionalGeneration(config).eval()
    # Janus scores codes through a two-layer head, so both layers are scaled to reach a comparable peakiness
    _scale_(model.model.generation_head.proj_out.weight, logit_scale)
    _scale_(model.model.generation_head.vision_head.weight, 2 * logit_scale**2)
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.generation_kwargs = {
        "boi_token_id": tokenizer.convert_tokens_to_ids("<begin_of_image>")
    }
    return JanusPipeline(model=model, tokenizer=tokenizer)


def _emu3(grid: tuple[int, int], vocab_size: int, logit_scale: float, layers: int):
    from transformers import Emu3Config, Emu3ForConditionalGeneration

    from .pipelines.emu3 import Emu3Pipeline

    visual = [f"<|visual token {code:06d}|>" for code in range(vocab_size)]
    tokenizer = build_word_tokenizer(
        [*WORDS, *"0123456789", "*"],
        [
            "<|endoftext|>",
            "<|extra_203|>",
            "<|extra_204|>",
            "<|extra_200|>",
            "<|extra_201|>",
            "<|image start|>",
            "<|image end|>",
            "<|image token|>",
            "<image>",
            *visual,
        ],
        bos_token="<|extra_203|>",
        eos_token="<|extra_204|>",
        pad_token="<|endoftext|>",
    )
    vocab = tokenizer.get_vocab()
    config = Emu3Config(
        text_config=_text_model_config(
            len(tokenizer),
            layers,
            _positions(grid),
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
        ),
        vq_config=dict(
            codebook_size=vocab_size,
            embed_dim=4,
            latent_channels=4,
            base_channels=32,
            channel_multiplier=[1, 1],
            num_res_blocks=1,
            attn_resolutions=[],
            hidden_size=32,
            num_attention_heads=1,
            temporal_downsample_factor=4,
        ),
        vocabulary_map=vocab,
    )
    model = Emu3ForConditionalGeneration(config).eval()
    _scale_(model.lm_head.weight, logit_scale)
    factor = model.model.vqmodel.spatial_scale_factor
    return Emu3Pipeline(
        prompt_suffix="",
        default_negative_prompt="blurry",
        model=model,
        tokenizer=tokenizer,
        image_area=grid[0] * grid[1] * factor**2,
        default_height=grid[0] * factor,
        default_width=grid[1] * factor,
    )


def _lumina_mgpt(grid: tuple[int, int], vocab_size: int, logit_scale: float, layers: int):
    from transformers import ChameleonConfig, ChameleonForConditionalGeneration

    from .pipelines.lumina_mgpt import LuminaMGPTPipeline, image_token_name
    from .vq.chameleon_vqgan import ChameleonVQGAN

    # the tiny VQGAN downsamples 32x, so one code is one 32-px Lumina grid unit and any grid is allowed
    size_tokens = [f"<reserved{8800 + n:05d}>" for n in range(1, max(grid) + 1)]
    tokenizer = build_word_tokenizer(
        [*WORDS, *"0123456789", "x", ":", "generate", "according", "to", "following", "prompt"],
        [
            "<pad>",
            "<s>",
            "</s>",
            "<image>",
            "<racm3:break>",
            "<eoss>",
            "<reserved08706>",
            "<reserved08799>",
            *size_tokens,
            *[image_token_name(code) for code in range(vocab_size)],
        ],
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
    )
    config = ChameleonConfig(
        **_text_model_config(
            len(tokenizer),
            layers,
            _positions(grid),
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
        ),
        vocabulary_map=tokenizer.get_vocab(),
        vq_config=dict(
            embed_dim=8,
            num_embeddings=vocab_size,
            latent_channels=8,
            base_channels=32,
            channel_multiplier=[1, 1],
            num_res_blocks=1,
            resolution=16,
            attn_resolutions=[],
        ),
    )
    model = ChameleonForConditionalGeneration(config).eval()
    _scale_(model.lm_head.weight, logit_scale)
    vqgan = ChameleonVQGAN(
        embed_dim=8,
        n_embed=vocab_size,
        z_channels=8,
        ch=32,
        ch_mult=(1, 1, 1, 1, 1, 1),
        num_res_blocks=1,
        attn_resolutions=(),
        resolution=32 * max(grid),
    ).eval()
    return LuminaMGPTPipeline(
        model=model,
        tokenizer=tokenizer,
        vqgan=vqgan,
        resolution=32 * max(grid),
        default_height=32 * grid[0],
        default_width=32 * grid[1],
    )


def glm_image_tokenizer(vocab_size: int, words: list[str]):
    """A word-level tokenizer laid out as GLM-Image's: the image codes take ids `0..V-1`, image start and end
    the next two (the processor's BOS and the EOS), then the grid-size delimiters `<sop>` / `<eop>`, chat
    markers and words; a `[gMASK]` token goes before every text encoded with special tokens."""
    return build_word_tokenizer(
        [*words, *"0123456789"],
        ["<pad>", "[gMASK]", "<sop>", "<eop>", "<|image|>", "<|user|>", "<|assistant|>"],
        leading_tokens=[
            *(f"<|image_{code}|>" for code in range(vocab_size)),
            "<|image_start|>",
            "<|image_end|>",
        ],
        bos_token="<|image_start|>",
        eos_token="<|image_end|>",
        pad_token="<pad>",
        named_tokens={"image_token": "<|image|>", "grid_bos_token": "<sop>", "grid_eos_token": "<eop>"},
        prepend="[gMASK]",
        padding_side="left",  # diffusers' GLM-Image pipeline pads a batch of prompts on the left
    )


# arjet's own chat template for the tiny processor: a user turn of text (and image placeholders)
GLM_IMAGE_CHAT_TEMPLATE = (
    "{% for message in messages %}<|user|>{% for item in message.content %}"
    "{% if item.type == 'image' %}<|image_start|><|image|><|image_end|>"
    "{% elif item.type == 'text' %}{{ item.text }}{% endif %}{% endfor %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


# the tiny GLM-Image's vision encoder (editing only: built, never run here) and diffusion stage: the real
# pipeline's shapes (a VAE downsampling 8x and 2x2 DiT patches, so one AR code of 32 px is 2x2 DiT tokens), a
# ByT5 glyph encoder of one layer
TINY_GLM_IMAGE_VISION = dict(
    depth=1, hidden_size=16, num_heads=2, intermediate_size=32, image_size=32, patch_size=16
)
TINY_GLM_IMAGE_STAGES = {
    "dit": dict(
        patch_size=2,
        in_channels=4,
        out_channels=4,
        num_layers=1,
        attention_head_dim=8,
        num_attention_heads=2,
        text_embed_dim=16,
        time_embed_dim=16,
        condition_dim=8,
    ),
    "glyph_encoder": dict(vocab_size=384, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2),
    "vae": dict(
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        block_out_channels=(8,) * 4,
        layers_per_block=1,
        latent_channels=4,
        norm_num_groups=4,
    ),
}


def glm_image_pipeline(tokenizer, model, stages: dict, **options):
    """A `GlmImagePipeline` around the AR `model` (a `GlmImageForConditionalGeneration`): a processor over the
    text `tokenizer` with arjet's chat template, a ByT5 tokenizer, and the glyph encoder, VAE and DiT that
    `stages` describes (`"glyph_encoder"`: a `T5Config`'s arguments, `"vae"`: `AutoencoderKL`'s, `"dit"`:
    `GlmImageTransformer2DModel`'s, whose codebook is the model's); `options` go to the pipeline."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, GlmImageTransformer2DModel
    from transformers import ByT5Tokenizer, GlmImageProcessor, T5Config, T5EncoderModel
    from transformers.models.glm_image.image_processing_pil_glm_image import GlmImageImageProcessorPil

    from .pipelines.glm_image import GlmImagePipeline

    vae = dict(stages["vae"])
    channels = vae["latent_channels"]
    codebook = model.config.vq_config.num_embeddings
    return GlmImagePipeline(
        tokenizer=ByT5Tokenizer(),
        processor=GlmImageProcessor(
            image_processor=GlmImageImageProcessorPil(),
            tokenizer=tokenizer,
            chat_template=GLM_IMAGE_CHAT_TEMPLATE,
        ),
        text_encoder=T5EncoderModel(T5Config(**stages["glyph_encoder"])).eval(),
        vision_language_encoder=model.eval(),
        vae=AutoencoderKL(**vae, latents_mean=[0.0] * channels, latents_std=[1.0] * channels).eval(),
        transformer=GlmImageTransformer2DModel(
            **stages["dit"], prior_vq_quantizer_codebook_size=codebook
        ).eval(),
        scheduler=FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True),
        **options,
    )


def _glm_image(grid: tuple[int, int], vocab_size: int, logit_scale: float, layers: int):
    from transformers import GlmImageConfig, GlmImageForConditionalGeneration

    tokenizer = glm_image_tokenizer(vocab_size, WORDS)
    text = _text_model_config(len(tokenizer), layers, _positions(grid), pad_token_id=tokenizer.pad_token_id)
    text.update(
        num_attention_heads=2,  # 16-wide heads: a half-width rotary table of 4 frequencies, as GLM's 64 of 128
        num_key_value_heads=1,
        vision_vocab_size=vocab_size,
        eos_token_id=tokenizer.eos_token_id,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.5,
            "mrope_section": [2, 1, 1],
        },
    )
    config = GlmImageConfig(
        text_config=text,
        vision_config=TINY_GLM_IMAGE_VISION,
        vq_config=dict(embed_dim=8, num_embeddings=vocab_size, latent_channels=16),
        image_token_id=tokenizer.convert_tokens_to_ids("<|image|>"),
        image_start_token_id=tokenizer.bos_token_id,
        image_end_token_id=tokenizer.eos_token_id,
    )
    model = GlmImageForConditionalGeneration(config)
    # GLM's norms after each block bring its output to unit scale: token embeddings at the usual 0.02 would
    # vanish beside it (next-code distributions would hardly depend on the codes before), so they get unit scale
    _scale_(model.model.language_model.embed_tokens.weight, 1 / config.text_config.initializer_range)
    _scale_(model.lm_head.weight, logit_scale)
    model.generation_config.do_sample = True
    return glm_image_pipeline(
        tokenizer,
        model,
        TINY_GLM_IMAGE_STAGES,
        preview_side=TINY_PREVIEW_SIDE,
        default_height=32 * grid[0],
        default_width=32 * grid[1],
        num_inference_steps=2,
    )


_BUILDERS: dict[str, Callable] = {
    "janus": _janus,
    "emu3": _emu3,
    "lumina_mgpt": _lumina_mgpt,
    "glm_image": _glm_image,
}
