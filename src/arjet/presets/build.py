"""`random_pipeline`: a real-size architecture with random weights, built directly on a device.

The model is the real transformers class (and, for Lumina-mGPT, arjet's Chameleon VQGAN), constructed with
its parameters on the meta device and then allocated and filled with seeded random values on the target
device in the target dtype, so a 7B model costs only its device memory and a few seconds. The cost of a
forward does not depend on the weights' values, so these pipelines time the real per-step cost; their
images are noise. The text tokenizer is word-level with the family's special tokens; its vocabulary covers
the built-in `shapes` prompts and the family's prompt template (other words read as one unknown token each,
with a warning).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache
from typing import Any

import torch

from .. import checks
from ..machine import available_bytes
from ..pipelines.base import BaseARPipeline
from ..pipelines.text_tokenizer import build_word_tokenizer
from ..quantize import Quantization, linear_names
from .meta import materialize_random_, parameters_on_meta, required_bytes
from .table import DecoderDims, Preset, get_preset


def random_pipeline(
    arch: str | Preset,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
    height: int | None = None,
    width: int | None = None,
    seed: int = 0,
    quantization: str | Quantization | None = None,
) -> BaseARPipeline:
    """The family's arjet pipeline over architecture `arch` (a name from `available_presets()`, or a
    `Preset`, e.g. a scaled-down `dataclasses.replace` of one) with seeded random weights.

    `device`: default `cuda` when available, else `cpu`; `"meta"` builds without allocating any weights
    (for inspecting shapes and parameter counts; such a pipeline cannot run). `dtype`: default bfloat16 on
    CUDA, float32 elsewhere. `seed` seeds the weights. `height` / `width` (pixels) set the pipeline's
    default image size (default: the checkpoint's). Janus's code grid is part of its VQ config, so a Janus
    preset is built for the requested size (square, a multiple of 16 px); Emu3 and Lumina-mGPT keep the
    checkpoint's sizing rules and only change the default size. `quantization` (`"int8"`, `"int4"`, `"fp8"`):
    the AR decoder's linear layers and code head quantized one at a time as they are filled (`pipe.quantize`),
    so the float model never exists whole; refused before anything is allocated where it cannot run.
    """
    preset = arch if isinstance(arch, Preset) else get_preset(arch)
    try:
        device = torch.device(
            device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu")
        )
    except (RuntimeError, TypeError):
        raise ValueError(
            f"device must be a torch device such as 'cpu', 'cuda' or 'meta', got {device!r}"
        ) from None
    if dtype is None:
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    if not checks.is_integer(seed):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    size = _size(preset, height, width)
    quantization = Quantization.parse(quantization)
    if quantization is not None and device.type != "meta":
        quantization.check(device, dtype)
    with parameters_on_meta():
        pipe = _BUILDERS[preset.family](preset, size)
    pipe.grid_for(*size)  # the family's own size rules, before any memory is allocated
    quantized = _quantized_linears(pipe, quantization)
    if device.type != "meta":
        saved = _saved_bytes(pipe, quantization, dtype)
        _check_memory(preset, _modules(pipe), device, dtype, saved)
        for offset, module in enumerate(_modules(pipe)):
            each = _quantizer(quantization, quantized.get(id(module), set()))
            materialize_random_(module, device, dtype, seed=seed + offset, each=each)
    pipe.quantization = quantization
    return pipe


def _quantized_linears(pipe: BaseARPipeline, quantization: Quantization | None) -> dict[int, set[str]]:
    """The paths of the linear layers `quantization` quantizes, by the id of the component holding them."""
    if quantization is None:
        return {}
    return {
        id(pipe.components[name]): linear_names(pipe.components[name], paths)
        for name, paths in pipe.quantized_modules.items()
    }


def _quantizer(quantization: Quantization | None, names: set[str]):
    """`materialize_random_`'s `each`: quantize the linear layers `names` as soon as they are filled."""
    if quantization is None:
        return None

    def quantize(path: str, layer: torch.nn.Module) -> None:
        if path in names:
            quantization.apply(layer, ("",))

    return quantize


def _saved_bytes(pipe: BaseARPipeline, quantization: Quantization | None, dtype: torch.dtype) -> int:
    """Bytes the linear layers `quantization` quantizes take less than their float weights would."""
    if quantization is None:
        return 0
    components = pipe.quantized_modules.items()
    return sum(quantization.saved_bytes(pipe.components[name], paths, dtype) for name, paths in components)


def _size(preset: Preset, height: Any, width: Any) -> tuple[int, int]:
    for name, value in (("height", height), ("width", width)):
        if value is not None and (not checks.is_integer(value) or value <= 0):
            raise ValueError(f"{name} must be a positive integer (pixels) or None, got {checks.shown(value)}")
    height = preset.default_size if height is None else height
    width = preset.default_size if width is None else width
    if preset.family == "janus" and (height != width or height % preset.downsample):
        raise ValueError(
            f"{preset.name} makes square images on a {preset.downsample}-px code grid (its VQ fixes the grid); "
            f"got height={height}, width={width}"
        )
    return height, width


def _check_memory(
    preset: Preset, modules: list[torch.nn.Module], device: torch.device, dtype: torch.dtype, saved: int = 0
) -> None:
    """Refuse weights that would not fit on `device` (`saved`: bytes quantization takes off)."""
    needed = sum(required_bytes(module, dtype) for module in modules) - saved
    free = available_bytes(device)
    if free is not None and needed > free:
        raise ValueError(
            f"{preset.name} needs {needed / 1e9:.1f} GB for its weights in {dtype} and {device} has "
            f"{free / 1e9:.1f} GB free: use a smaller dtype (--dtype bfloat16), a GPU, or a smaller architecture"
        )


def _modules(pipe: BaseARPipeline) -> list[torch.nn.Module]:
    return [c for c in pipe.components.values() if isinstance(c, torch.nn.Module)]


# -- vocabulary ----------------------------------------------------------------------------------------
def _words_of(*texts: str) -> list[str]:
    """The words and punctuation of `texts`, special tokens (`<|User|>`, ...) left out."""
    plain = (re.sub(r"<[^<>]*>", " ", text).lower() for text in texts)
    return [word for text in plain for word in re.findall(r"[a-z]+|[^a-z\s\d]", text)]


@cache
def _prompt_words() -> tuple[str, ...]:
    """The test words plus the built-in domain's vocabulary (read from the built-in model's tokenizer, so it
    covers the held-out `shapes` prompts `arjet bench` uses by default), digits one by one."""
    from ..testing import WORDS

    words = [*WORDS, *"0123456789"]
    try:
        from transformers import AutoTokenizer

        from ..builtin import model_path

        builtin = AutoTokenizer.from_pretrained(str(model_path() / "tokenizer"))
        words += [w for w in builtin.get_vocab() if w not in builtin.all_special_tokens]
    except (ValueError, OSError):  # no built-in model installed: the test words only
        pass
    return tuple(dict.fromkeys(words))


def _code_tokens(tokenizer, names: list[str]) -> dict[str, int]:
    """The tokenizer's vocabulary plus the image-code token names at the ids after it, in code order (one
    contiguous block of the LM head, as in the released vocabularies)."""
    vocab = dict(tokenizer.get_vocab())
    first = len(tokenizer)
    vocab.update({name: first + code for code, name in enumerate(names)})
    return vocab


def _llama(d: DecoderDims) -> dict[str, Any]:
    return dict(
        vocab_size=d.vocab,
        hidden_size=d.hidden,
        intermediate_size=d.ffn,
        num_hidden_layers=d.layers,
        num_attention_heads=d.heads,
        num_key_value_heads=d.kv_heads,
        max_position_embeddings=d.max_positions,
        rms_norm_eps=d.rms_norm_eps,
        rope_parameters={"rope_theta": d.rope_theta, "rope_type": "default"},
    )


def _check_ids(preset: Preset, vocab: dict[str, int]) -> None:
    if max(vocab.values()) >= preset.decoder.vocab:
        raise ValueError(
            f"{preset.name}: the tokenizer and image codes need {max(vocab.values()) + 1} token ids but the "
            f"decoder's vocabulary has {preset.decoder.vocab}; raise DecoderDims.vocab"
        )


# -- families ------------------------------------------------------------------------------------------
def _janus(preset: Preset, size: tuple[int, int]):
    from transformers import JanusConfig, JanusForConditionalGeneration

    from ..pipelines.janus import JanusPipeline, build_janus_tokenizer

    tokenizer = build_janus_tokenizer([*_prompt_words(), *_words_of(JanusPipeline.prompt_template)])
    vision = dict(preset.vision or {})
    patch = vision.get("patch_size", preset.downsample)
    vision.update(image_size=size[0], num_image_tokens=(size[0] // patch) ** 2)
    ids = dict(
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    config = JanusConfig(
        text_config=dict(model_type="llama", **_llama(preset.decoder), **ids),
        vision_config=vision,
        vq_config=dict(preset.vq),
        image_token_id=preset.extra.get("image_token_id", tokenizer.unk_token_id),
        tie_word_embeddings=False,  # the released weights hold a separate text LM head (language_model.lm_head)
    )
    model = JanusForConditionalGeneration(config).eval()
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.generation_kwargs = {
        "boi_token_id": tokenizer.convert_tokens_to_ids("<begin_of_image>")
    }
    return JanusPipeline(model=model, tokenizer=tokenizer)


def _emu3(preset: Preset, size: tuple[int, int]):
    from transformers import Emu3Config, Emu3ForConditionalGeneration

    from ..pipelines.emu3 import EMU3_NEGATIVE_PROMPT, EMU3_PROMPT_SUFFIX, Emu3Pipeline

    tokenizer = build_word_tokenizer(
        [*_prompt_words(), *_words_of(EMU3_PROMPT_SUFFIX, EMU3_NEGATIVE_PROMPT), "*"],
        [
            "<|endoftext|>",  # pad
            "<|extra_203|>",  # BOS
            "<|extra_204|>",  # EOS
            "<|extra_200|>",  # end of row
            "<|extra_201|>",  # end of frame
            "<|image start|>",
            "<|image end|>",
            "<|image token|>",
        ],
        bos_token="<|extra_203|>",
        eos_token="<|extra_204|>",
        pad_token="<|endoftext|>",
    )
    vocab = _code_tokens(tokenizer, [f"<|visual token {code:06d}|>" for code in range(preset.codebook)])
    _check_ids(preset, vocab)
    ids = dict(
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    config = Emu3Config(
        text_config=dict(**_llama(preset.decoder), **ids),
        vq_config=dict(preset.vq),
        vocabulary_map=vocab,
    )
    model = Emu3ForConditionalGeneration(config).eval()
    return Emu3Pipeline(
        model=model,
        tokenizer=tokenizer,
        image_area=preset.default_size**2,
        default_height=size[0],
        default_width=size[1],
    )


def _lumina_mgpt(preset: Preset, size: tuple[int, int]):
    from transformers import ChameleonConfig, ChameleonForConditionalGeneration

    from ..pipelines.lumina_mgpt import (
        GRID_UNIT,
        IMAGE_START,
        PROMPT_TEMPLATE,
        ROW_END,
        TURN_END,
        LuminaMGPTPipeline,
        image_token_name,
        size_token_name,
    )
    from ..vq.chameleon_vqgan import ChameleonVQGAN

    # one size token per 32-px unit up to the longest side the pipeline allows (aspect ratio 4 at full area)
    longest = 2 * preset.default_size // GRID_UNIT
    tokenizer = build_word_tokenizer(
        [*_prompt_words(), *_words_of(PROMPT_TEMPLATE.format(width="", height="", prompt=""))],
        [
            "<pad>",
            "<s>",
            "</s>",
            "<image>",
            IMAGE_START,
            "<eoss>",  # image end
            TURN_END,
            ROW_END,
            *[size_token_name(units) for units in range(1, longest + 1)],
        ],
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
    )
    vocab = _code_tokens(tokenizer, [image_token_name(code) for code in range(preset.codebook)])
    _check_ids(preset, vocab)
    vq = preset.vq
    config = ChameleonConfig(
        **_llama(preset.decoder),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        vocabulary_map=vocab,
        # transformers' encoder-only Chameleon VQ, built by the model class; decoding uses arjet's VQGAN below
        vq_config=dict(
            embed_dim=vq["embed_dim"],
            num_embeddings=vq["n_embed"],
            latent_channels=vq["z_channels"],
            base_channels=vq["ch"],
            channel_multiplier=list(vq["ch_mult"]),
            num_res_blocks=vq["num_res_blocks"],
            resolution=vq["resolution"],
            attn_resolutions=list(vq["attn_resolutions"]) or None,
        ),
    )
    model = ChameleonForConditionalGeneration(config).eval()
    vqgan = ChameleonVQGAN(**vq).eval()
    return LuminaMGPTPipeline(
        model=model,
        tokenizer=tokenizer,
        vqgan=vqgan,
        resolution=preset.default_size,
        default_height=size[0],
        default_width=size[1],
    )


def _glm_image(preset: Preset, size: tuple[int, int]):
    from transformers import GlmImageConfig, GlmImageForConditionalGeneration

    from ..testing import glm_image_pipeline, glm_image_tokenizer

    tokenizer = glm_image_tokenizer(preset.codebook, list(_prompt_words()))
    _check_ids(preset, tokenizer.get_vocab())
    extra, d = preset.extra, preset.decoder
    text = {key: value for key, value in _llama(d).items() if key != "rope_parameters"}
    rope = dict(_llama(d)["rope_parameters"], partial_rotary_factor=extra["partial_rotary_factor"])
    config = GlmImageConfig(
        text_config=dict(
            **text,
            rope_parameters=dict(rope, mrope_section=list(extra["mrope_section"])),
            vision_vocab_size=extra["vision_vocab_size"],
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        ),
        vision_config=dict(preset.vision or {}),
        vq_config=dict(preset.vq),
        image_token_id=tokenizer.convert_tokens_to_ids("<|image|>"),
        image_start_token_id=tokenizer.bos_token_id,
        image_end_token_id=tokenizer.eos_token_id,
    )
    return glm_image_pipeline(
        tokenizer,
        GlmImageForConditionalGeneration(config),
        extra,
        preview_side=extra["preview_side"],
        default_height=size[0],
        default_width=size[1],
    )


_BUILDERS: dict[str, Callable[[Preset, tuple[int, int]], BaseARPipeline]] = {
    "janus": _janus,
    "emu3": _emu3,
    "lumina_mgpt": _lumina_mgpt,
    "glm_image": _glm_image,
}
