"""Emu3-Gen text-to-image over transformers' `Emu3ForConditionalGeneration`.

Sequence: `<bos>{prompt}{suffix}<|image start|>{H}*{W}<|image token|>` then H rows of W visual tokens,
each row closed by an end-of-line token (`<|extra_200|>`); EOF / EOI / EOS follow the last row. CFG uses
an explicit negative prompt with the same image prefix (Emu3's recipe), batched as `[cond; uncond]`.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from transformers import Emu3ForConditionalGeneration, PreTrainedTokenizerBase

from .. import checks
from ..addons.drafter import Drafter
from ..addons.noise import NoiseConditioning
from ..session import ImageLayout, Prefix
from ..session.decoder import LlamaStackDecoder
from ..vq.emu3 import Emu3VQTokenizer
from .base import BaseARPipeline
from .prompts import encode_with_prompt, left_pad_rows
from .vocab_adapter import VocabularyCodeAdapter

EMU3_NEGATIVE_PROMPT = (
    "lowres, bad anatomy, bad hands, text, error, missing fingers, extra digit, fewer digits, cropped, worst "
    "quality, low quality, normal quality, jpeg artifacts, signature, watermark, username, blurry."
)
EMU3_PROMPT_SUFFIX = " masterpiece, film grained, best quality."


def size_from_aspect_ratio(aspect_ratio: str, image_area: int, downsample: int) -> tuple[int, int]:
    """(height, width) in pixels for `aspect_ratio` "W:H" at about `image_area` pixels, on the code grid."""
    parts = aspect_ratio.split(":") if isinstance(aspect_ratio, str) else []
    numbers = [checks.integer_from_text(part) for part in parts]  # ASCII digits only, as every number
    if len(numbers) != 2 or any(number is None or number <= 0 for number in numbers):
        raise ValueError(
            f"aspect_ratio must look like '16:9' (two positive integers in ASCII digits), got {aspect_ratio!r}"
        )
    ratio_w, ratio_h = numbers
    scale = (image_area / (ratio_w * ratio_h)) ** 0.5
    rows = max(1, round(ratio_h * scale / downsample))
    columns = max(1, round(ratio_w * scale / downsample))
    return rows * downsample, columns * downsample


class Emu3Pipeline(BaseARPipeline):
    """Emu3-Gen. Any `height x width` on the 8-px code grid that fits the model's positions, or
    `aspect_ratio="W:H"` at `image_area` pixels. Without a negative prompt, Emu3's default one (the
    config's `default_negative_prompt`) forms the unconditional row."""

    model_type: ClassVar[str] = "emu3"
    model_class: ClassVar[type] = Emu3ForConditionalGeneration
    quantized_modules: ClassVar[dict[str, tuple[str, ...]]] = {
        "model": ("model.text_model.layers", "lm_head"),
    }
    model_cpu_offload_seq = "model"
    default_guidance_scale: ClassVar[float] = 3.0
    default_top_k: ClassVar[int | None] = 2048
    supports_negative_prompt: ClassVar[bool] = True

    def __init__(
        self,
        model: Emu3ForConditionalGeneration,
        tokenizer: PreTrainedTokenizerBase,
        image_area: int = 720 * 720,
        prompt_suffix: str = EMU3_PROMPT_SUFFIX,
        default_negative_prompt: str = EMU3_NEGATIVE_PROMPT,
        default_height: int | None = None,
        default_width: int | None = None,
        noise_conditioning: NoiseConditioning | None = None,
        drafter: Drafter | None = None,
    ):
        super().__init__()
        self.register_modules(
            model=model, tokenizer=tokenizer, noise_conditioning=noise_conditioning, drafter=drafter
        )
        self.register_to_config(
            image_area=image_area,
            prompt_suffix=prompt_suffix,
            default_negative_prompt=default_negative_prompt,
            default_height=default_height,
            default_width=default_width,
        )

    # -- hooks --------------------------------------------------------------------------------------
    @property
    def image_tokenizer(self) -> Emu3VQTokenizer:
        return Emu3VQTokenizer(self.model.model.vqmodel)

    def native_size(self) -> tuple[int, int]:
        return size_from_aspect_ratio("1:1", self.config.image_area, self.image_tokenizer.downsample)

    def size_for_aspect_ratio(self, aspect_ratio: str) -> tuple[int, int]:
        """`aspect_ratio="W:H"` at about the pipeline's `image_area` pixels, on the code grid (Emu3's
        `calculate_generate_size`)."""
        return size_from_aspect_ratio(aspect_ratio, self.config.image_area, self.image_tokenizer.downsample)

    def grid_for(self, height: int, width: int) -> tuple[int, int]:
        factor = self.image_tokenizer.downsample
        for name, value in (("height", height), ("width", width)):
            if not checks.is_integer(value) or value < factor or value % factor:
                raise ValueError(
                    f"{name} must be a positive multiple of {factor} pixels, got {checks.shown(value)}"
                )
        grid = (height // factor, width // factor)
        limit = self.model.config.text_config.max_position_embeddings
        if grid[0] * (grid[1] + 1) >= limit:
            raise ValueError(
                f"height={height}, width={width} needs {grid[0] * (grid[1] + 1)} image tokens (rows x (columns "
                f"+ 1)), but this model has {limit} positions; choose a size with fewer than {limit} image tokens"
            )
        return grid

    def image_layout(self, grid: tuple[int, int]) -> ImageLayout:
        return ImageLayout(grid, row_end_ids=(self._token_id("<|extra_200|>"),))

    def session_adapter(self) -> VocabularyCodeAdapter:
        mapping = self.model.vocabulary_mapping.img2bpe
        code_ids = torch.tensor([mapping[code] for code in range(len(mapping))])
        return VocabularyCodeAdapter(
            self.model.model.text_model,
            self.model.get_input_embeddings(),
            self.model.lm_head,
            code_ids,
            self.model.config.text_config.num_hidden_layers,
            LlamaStackDecoder(self.model.model.text_model),
        )

    def prompt_length(self, text: str, grid: tuple[int, int], *, negative: bool = False) -> int:
        return len(self._row(text, grid, negative))

    def encode_prompts(
        self, prompts: list[str], negative_prompts: list[str] | None, grid: tuple[int, int], guided: bool
    ) -> Prefix:
        rows = [self._row(p, grid, negative=False) for p in prompts]
        if guided:
            negatives = negative_prompts or [self.config.default_negative_prompt] * len(prompts)
            rows += [self._row(p, grid, negative=True) for p in negatives]
        return left_pad_rows(rows, self.tokenizer.pad_token_id, self._execution_device)

    def _row(self, text: str, grid: tuple[int, int], negative: bool) -> list[int]:
        """BOS + the prompt (+ Emu3's quality suffix, not for a negative prompt) + the image prefix
        `<|image start|>H*W<|image token|>`; control tokens written in the prompt are read as plain text."""
        suffix = "" if negative else self.config.prompt_suffix
        image_prefix = f"<|image start|>{grid[0]}*{grid[1]}<|image token|>"
        ids = encode_with_prompt(self.tokenizer, "", text, suffix + image_prefix)
        return [self.tokenizer.bos_token_id, *ids]

    def _token_id(self, token: str) -> int:
        token_id = self.model.config.vocabulary_map.get(token)
        if token_id is None:
            raise ValueError(f"this Emu3 checkpoint's vocabulary has no {token!r} token")
        return token_id
