"""Janus / Janus-Pro text-to-image over transformers' `JanusForConditionalGeneration`.

Sequence: `<bos><|User|>: {prompt}\\n\\n<|Assistant|>:<begin_of_image>` then the image codes in raster
order, no row tokens. Codes are embedded by the generation embeddings + aligner and scored by the
generation head. CFG as in DeepSeek's code and transformers' `generate(generation_mode="image")`: the
unconditional row is the same prompt with every token but BOS and `<begin_of_image>` replaced by pad.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from transformers import JanusForConditionalGeneration, PreTrainedTokenizerBase

from ..addons.drafter import Drafter
from ..addons.noise import NoiseConditioning
from ..session import ImageLayout, Prefix
from ..session.adapter import ModelAdapter, run_decoder
from ..session.decoder import LlamaStackDecoder, fast_linear
from ..vq.janus import JanusVQTokenizer
from .base import BaseARPipeline
from .prompts import encode_with_prompt, left_pad_rows
from .text_tokenizer import build_word_tokenizer

BOS, EOS, PAD = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"
JANUS_SPECIAL_TOKENS = (BOS, EOS, PAD, "<|User|>", "<|Assistant|>", "<begin_of_image>", "<end_of_image>")


def build_janus_tokenizer(words) -> PreTrainedTokenizerBase:
    """A word-level tokenizer with DeepSeek's special tokens, for small Janus models with a closed vocabulary
    (arjet's built-in model and the tiny test models)."""
    return build_word_tokenizer(words, JANUS_SPECIAL_TOKENS, bos_token=BOS, eos_token=EOS, pad_token=PAD)


class JanusAdapter(ModelAdapter):
    def __init__(self, model: JanusForConditionalGeneration):
        self.model = model
        self.num_layers = model.config.text_config.num_hidden_layers
        self.code_vocab_size = model.config.vq_config.num_embeddings
        head = model.model.generation_head
        self._head = (fast_linear(head.proj_out), head.activation_fn, fast_linear(head.vision_head))

    def embed_tokens(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model.get_input_embeddings()(ids)

    def embed_codes(self, codes: torch.Tensor) -> torch.Tensor:
        return self.model.prepare_embeddings_for_image_generation(codes)

    def hidden_states(self, inputs_embeds, position_ids, attention_mask, cache) -> torch.Tensor:
        return run_decoder(
            self.model.model.language_model, inputs_embeds, position_ids, attention_mask, cache
        )

    def code_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The generation head (`JanusVQVAEHead`: projection, activation, vision head), over packed weights."""
        project, activation, vision_head = self._head
        return vision_head(activation(project(hidden)))

    def static_decoder(self) -> LlamaStackDecoder:
        return LlamaStackDecoder(self.model.model.language_model)

    def forward_weights(self) -> list[torch.Tensor]:
        """The weights one decoding forward reads (`arjet.bench.floor`): decoder layers, final norm, the code
        aligner MLP (dense, run on every fed code) and the generation head."""
        inner = self.model.model
        parts = (
            inner.language_model.layers,
            inner.language_model.norm,
            inner.generation_aligner,
            inner.generation_head,
        )
        return [p for part in parts for p in part.parameters()]


class JanusPipeline(BaseARPipeline):
    """Janus / Janus-Pro (and arjet's built-in model, a tiny Janus). Fixed size: 384 px = 24x24 codes for
    the released checkpoints."""

    model_type: ClassVar[str] = "janus"
    model_class: ClassVar[type] = JanusForConditionalGeneration
    quantized_modules: ClassVar[dict[str, tuple[str, ...]]] = {
        "model": (
            "model.language_model.layers",
            "model.generation_aligner",
            "model.generation_head",
        ),
    }
    model_cpu_offload_seq = "model"
    default_guidance_scale: ClassVar[float] = 5.0
    prompt_template: ClassVar[str] = "<|User|>: {prompt}\n\n<|Assistant|>:"
    image_start_token: ClassVar[str] = "<begin_of_image>"

    def __init__(
        self,
        model: JanusForConditionalGeneration,
        tokenizer: PreTrainedTokenizerBase,
        noise_conditioning: NoiseConditioning | None = None,
        drafter: Drafter | None = None,
        default_guidance_scale: float | None = None,
    ):
        super().__init__()
        self.register_modules(
            model=model, tokenizer=tokenizer, noise_conditioning=noise_conditioning, drafter=drafter
        )
        self.register_to_config(default_guidance_scale=default_guidance_scale)

    # -- hooks --------------------------------------------------------------------------------------
    @property
    def image_tokenizer(self) -> JanusVQTokenizer:
        return JanusVQTokenizer(self.model.model.vqmodel)

    def native_size(self) -> tuple[int, int]:
        side = self.image_tokenizer.grid[0] * self.image_tokenizer.downsample
        return side, side

    def grid_for(self, height: int, width: int) -> tuple[int, int]:
        size = self.native_size()
        if (height, width) != size:
            raise ValueError(
                f"this Janus model makes {size[0]}x{size[1]} images only, got height={height}, width={width}"
            )
        return self.image_tokenizer.grid

    def image_layout(self, grid: tuple[int, int]) -> ImageLayout:
        return ImageLayout(grid)

    def session_adapter(self) -> JanusAdapter:
        return JanusAdapter(self.model)

    def prompt_length(self, text: str, grid: tuple[int, int], *, negative: bool = False) -> int:
        return len(self._row(text))

    def encode_prompts(
        self, prompts: list[str], negative_prompts: list[str] | None, grid: tuple[int, int], guided: bool
    ) -> Prefix:
        tokenizer = self.tokenizer
        pad = tokenizer.pad_token_id
        if pad is None:
            raise ValueError("the Janus tokenizer has no pad token; CFG needs one (set tokenizer.pad_token)")
        rows = [self._row(p) for p in prompts]
        if guided:
            # the unconditional row keeps only BOS and <begin_of_image>, the rest becomes (attended) pad
            rows += [[row[0]] + [pad] * (len(row) - 2) + [row[-1]] for row in rows]
        return left_pad_rows(rows, pad, self._execution_device)

    def _row(self, prompt: str) -> list[int]:
        """BOS + the chat template around `prompt` + `<begin_of_image>`; control tokens written in the
        prompt are read as plain text."""
        before, after = self.prompt_template.split("{prompt}")
        ids = encode_with_prompt(self.tokenizer, before, prompt, after + self.image_start_token)
        return [self.tokenizer.bos_token_id, *ids]
