"""GLM-Image text-to-image: its AR stage decoded by arjet's samplers, its diffusion stage by diffusers' own code.

A folder laid out as the hub repository `zai-org/GLM-Image` (diffusers' `GlmImagePipeline`: `processor/`,
`vision_language_encoder/` the AR model, `tokenizer/` + `text_encoder/` the ByT5 glyph encoder, `transformer/`
the DiT, `vae/`, `scheduler/`) loads as this pipeline, and `save_pretrained` writes the same layout.

AR stage (transformers' `GlmImageForConditionalGeneration`): the processor's chat template around the prompt,
then `<sop>H W<eop><sop>h w<eop>` (the target grid, in 32-px codes, and a preview grid of about 16 x 16 codes
at the same aspect ratio) and the image-start token. The model writes the preview grid's codes, then the
target grid's, with no token between them; code `c` is token `c`. Positions are multimodal rotary ones:
after a prompt of `P` tokens (positions `0..P-1` on every axis) preview cell `(r, c)` sits at
`(P, P + r, P + c)` and target cell `(r, c)` at `(Q, Q + r, Q + c)` with `Q = P + max(h, w)`, as
transformers' `get_rope_index` places generated image tokens. arjet decodes the preview grid through one
session, then the target grid through a second one whose prefix holds the prompt and the preview's codes.
There is no classifier-free guidance in the AR stage (the model defines no unconditional branch); the
sampling defaults are the checkpoint's generation config, read as transformers' `generate` reads it.

Diffusion stage: the target codes, upsampled 2x, are the DiT's prior tokens; diffusers' `GlmImagePipeline`
runs the rest (glyph embeddings of the prompt's quoted text, the flow-matching loop with its own CFG,
`dit_guidance_scale`, the VAE) over this pipeline's modules.

The diffusion stage alone: `from_pretrained(folder, vision_language_encoder=None)` (diffusers' way to leave a
component out) reads no AR model weights and holds the DiT, the VAE, the glyph encoder with its tokenizer,
the processor and the scheduler; such a pipeline paints codes decoded elsewhere (`paint`), and refuses the
AR stage (a call, an engine) in one line. `arjet serve --ray` loads its painters so.
"""

from __future__ import annotations

import inspect
import math
from typing import Any, ClassVar

import torch
from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, GlmImageTransformer2DModel
from diffusers import GlmImagePipeline as DiffusersGlmImagePipeline
from transformers import (
    GlmImageForConditionalGeneration,
    GlmImageProcessor,
    PreTrainedTokenizerBase,
    T5EncoderModel,
)

from .. import checks
from ..addons.drafter import Drafter
from ..addons.noise import NoiseConditioning
from ..limits import MAX_THREADS
from ..samplers import SamplingOptions
from ..samplers.decode import image_keys
from ..session import ImageLayout, Prefix
from ..session.adapter import run_decoder
from ..session.decoder import LlamaStackDecoder
from ..vq.glm_image import PIXELS_PER_CODE, GlmImageCodes
from .base import BaseARPipeline
from .inputs import OUTPUT_TYPES, CheckedInputs, call_signature, image_generators, prompt_list
from .prompts import encode_with_prompt, left_pad_rows
from .threads import PROCESS_THREADS
from .vocab_adapter import VocabularyCodeAdapter

PREVIEW_SIDE = 16  # the processor's preview grid: about 16 x 16 codes (its `factor // 2`)
PROMPT_MARK = "\x00prompt\x00"  # where the prompt goes in the rendered chat template
# what transformers' `generate` samples with where a generation config leaves a number unset
GENERATE_DEFAULTS = {"temperature": 1.0, "top_k": 50, "top_p": 1.0}
# the diffusion stage's CFG extrapolates the DiT's velocity by this factor, and its latents grow with it:
# 1e30 gives NaN latents (a black image), and in float16 the guided velocity overflows from about 1e5 on.
# 1e4 is far past any useful scale (diffusers' pipelines use about 1.5 to 10) and finite in every dtype
MAX_DIT_GUIDANCE_SCALE = 1e4
DIT_OPTIONS = (
    inspect.Parameter(
        "num_inference_steps", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=int | None
    ),
    inspect.Parameter(
        "dit_guidance_scale", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=float | None
    ),
)


def preview_grid(grid: tuple[int, int], side: int = PREVIEW_SIDE) -> tuple[int, int]:
    """The preview grid GLM-Image decodes before a target `grid` (rows, columns): about `side x side` codes
    at the target's aspect ratio (the processor's rule)."""
    ratio = grid[0] / grid[1]
    return int(math.sqrt(ratio) * side), int(math.sqrt(1 / ratio) * side)


def upsample_codes(codes: torch.Tensor) -> torch.Tensor:
    """`[N, H, W]` codes -> the DiT's prior tokens `[N, 4 H W]`: each code repeated over 2 x 2 (nearest)."""
    return codes.repeat_interleave(2, 1).repeat_interleave(2, 2).flatten(1)


class GlmImageAdapter(VocabularyCodeAdapter):
    """Codes are the first `V` tokens of the vocabulary and the first rows of the LM head; positions may come
    per axis (`[N, m, 3]`), which transformers' text model takes as `[3, N, m]`."""

    def hidden_states(self, inputs_embeds, position_ids, attention_mask, cache) -> torch.Tensor:
        if position_ids.dim() == 3:
            position_ids = position_ids.permute(2, 0, 1)
        return run_decoder(self.backbone, inputs_embeds, position_ids, attention_mask, cache)


class GlmImagePipeline(BaseARPipeline):
    """GLM-Image (`zai-org/GLM-Image`): any `height x width` in multiples of 32 px whose preview grid is not
    empty; default 1024 x 1024 (32 x 32 codes after a 16 x 16 preview). `num_inference_steps` and
    `dit_guidance_scale` (per call, or the pipeline's config) drive the diffusion stage."""

    model_type: ClassVar[str] = "glm_image"
    model_class: ClassVar[type] = GlmImageForConditionalGeneration
    quantized_modules: ClassVar[dict[str, tuple[str, ...]]] = {
        "vision_language_encoder": ("model.language_model.layers", "lm_head"),
        "transformer": ("",),  # the diffusion stage (DiT): every linear layer
    }
    model_cpu_offload_seq = "vision_language_encoder->text_encoder->transformer->vae"
    ar_component: ClassVar[str] = "vision_language_encoder"
    later_stage_components: ClassVar[tuple[str, ...]] = ("text_encoder", "transformer", "vae")
    classifier_free_guidance: ClassVar[bool] = False
    guidance_hint: ClassVar[str] = " (dit_guidance_scale= sets the diffusion stage's guidance)"

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        processor: GlmImageProcessor,
        text_encoder: T5EncoderModel,
        vision_language_encoder: GlmImageForConditionalGeneration | None,
        vae: AutoencoderKL,
        transformer: GlmImageTransformer2DModel,
        scheduler: FlowMatchEulerDiscreteScheduler,
        noise_conditioning: NoiseConditioning | None = None,
        drafter: Drafter | None = None,
        preview_side: int = PREVIEW_SIDE,
        default_height: int | None = None,
        default_width: int | None = None,
        num_inference_steps: int = 50,
        dit_guidance_scale: float = 1.5,
    ):
        super().__init__()
        self.register_modules(
            tokenizer=tokenizer,
            processor=processor,
            text_encoder=text_encoder,
            vision_language_encoder=vision_language_encoder,
            vae=vae,
            transformer=transformer,
            scheduler=scheduler,
            noise_conditioning=noise_conditioning,
            drafter=drafter,
        )
        self.register_to_config(
            preview_side=preview_side,
            default_height=default_height,
            default_width=default_width,
            num_inference_steps=num_inference_steps,
            dit_guidance_scale=dit_guidance_scale,
        )

    @classmethod
    def components_from_transformers(cls, folder, *args: Any, **kwargs: Any) -> dict[str, Any]:
        raise ValueError(
            f"{folder} holds GLM-Image's AR model only; GLM-Image also needs its processor and its diffusion "
            "stage: pass the folder laid out as the hub repository zai-org/GLM-Image (model_index.json, "
            "processor/, vision_language_encoder/, tokenizer/, text_encoder/, transformer/, vae/, scheduler/)"
        )

    @property
    def renders_only(self) -> bool:
        """Whether this pipeline holds the diffusion stage alone (loaded with `vision_language_encoder=None`)."""
        return self.vision_language_encoder is None

    @property
    def decodes_only(self) -> bool:
        """Whether this pipeline holds the AR stage alone (loaded with `transformer=None`): it decodes codes
        (`output_type="latent"`) but paints nothing."""
        return self.transformer is None

    def _check_paints(self) -> None:
        if self.decodes_only:
            raise ValueError(
                "this GlmImagePipeline was loaded with transformer=None: it has no diffusion stage, so it only "
                "decodes codes (output_type='latent'); load it without transformer=None to paint images"
            )

    @property
    def model(self) -> GlmImageForConditionalGeneration:
        """The AR model (what the other families call `model`); a ValueError on a pipeline loaded without it."""
        if self.renders_only:
            raise ValueError(
                "this GlmImagePipeline was loaded with vision_language_encoder=None: it has no AR model, so it "
                "only paints decoded codes (pipe.paint); load it without vision_language_encoder=None to decode"
            )
        return self.vision_language_encoder

    @property
    def text_tokenizer(self) -> PreTrainedTokenizerBase:
        return self.processor.tokenizer

    # -- the call -----------------------------------------------------------------------------------
    call_frames: ClassVar[int] = 1

    def __call__(
        self, prompt: str | list[str], negative_prompt: str | list[str] | None = None, **options: Any
    ):
        """`BaseARPipeline.__call__`, plus the diffusion stage's `num_inference_steps` and `dit_guidance_scale`
        (None: the pipeline's config, 50 and 1.5 as diffusers'). `output_type="latent"` returns the target
        codes without running the diffusion stage. `callback_on_step_end` first sees the preview grid's codes,
        then the target's."""
        return super().__call__(prompt, negative_prompt, **options)

    __call__.__signature__ = call_signature(DIT_OPTIONS)

    def check_inputs(
        self,
        prompt: str | list[str],
        negative_prompt: str | list[str] | None = None,
        *,
        num_inference_steps: Any = None,
        dit_guidance_scale: Any = None,
        **options: Any,
    ) -> CheckedInputs:
        """The checks of every family, then the diffusion stage's options."""
        if options.get("output_type", "pil") != "latent":
            self._check_paints()
        stage_options = self.diffusion_options(num_inference_steps, dit_guidance_scale)
        call = super().check_inputs(prompt, negative_prompt, **options)
        call.stage_options = stage_options
        return call

    def diffusion_options(
        self, num_inference_steps: Any = None, dit_guidance_scale: Any = None
    ) -> dict[str, Any]:
        """The diffusion stage's checked options, as diffusers' pipeline names them (None: the config's)."""
        steps = self.config.num_inference_steps if num_inference_steps is None else num_inference_steps
        most = self.scheduler.config.num_train_timesteps
        steps = checks.integer("num_inference_steps", steps, 1, most)
        scale = self.config.dit_guidance_scale if dit_guidance_scale is None else dit_guidance_scale
        scale = checks.number(
            "dit_guidance_scale",
            scale,
            0.0,
            MAX_DIT_GUIDANCE_SCALE,
            note="the diffusion stage's CFG; at most 1 disables it, and far larger values overflow its latents",
        )
        return {"num_inference_steps": steps, "guidance_scale": scale}

    def sampling_defaults(self) -> SamplingOptions:
        """The AR model's generation config, unset numbers filled as transformers' `generate` fills them (the
        guidance scale: the checkpoint's, as every family's)."""
        config = self.model.generation_config
        values = {name: getattr(config, name, None) for name in GENERATE_DEFAULTS}
        values = {name: GENERATE_DEFAULTS[name] if value is None else value for name, value in values.items()}
        top_k = values["top_k"] or None  # 0: no top-k
        top_p = values["top_p"] if values["top_p"] < 1 else None
        return SamplingOptions(self.checkpoint_guidance_scale(), float(values["temperature"]), top_k, top_p)

    # -- hooks --------------------------------------------------------------------------------------
    @property
    def image_tokenizer(self) -> GlmImageCodes:
        return GlmImageCodes(self.model.model.vqmodel)

    def native_size(self) -> tuple[int, int]:
        return 32 * PIXELS_PER_CODE, 32 * PIXELS_PER_CODE

    def grid_for(self, height: int, width: int) -> tuple[int, int]:
        for name, value in (("height", height), ("width", width)):
            if not checks.is_integer(value) or value < PIXELS_PER_CODE or value % PIXELS_PER_CODE:
                raise ValueError(
                    f"{name} must be a positive multiple of {PIXELS_PER_CODE} pixels (GLM-Image's code grid), "
                    f"got {checks.shown(value)}"
                )
        grid = (height // PIXELS_PER_CODE, width // PIXELS_PER_CODE)
        if min(self.preview_grid(grid)) < 1:
            side = self.config.preview_side
            raise ValueError(
                f"height={height}, width={width} is too elongated: GLM-Image's preview grid (about {side} x {side} "
                f"codes at the same aspect ratio) would be empty; keep the aspect ratio within {side**2}:1"
            )
        return grid

    def preview_grid(self, grid: tuple[int, int]) -> tuple[int, int]:
        return preview_grid(grid, self.config.preview_side)

    def image_layout(self, grid: tuple[int, int]) -> ImageLayout:
        return ImageLayout(grid, grid_positions=True)

    def preview_prefix(self, prefix: Prefix, layout: ImageLayout, codes: torch.Tensor) -> Prefix:
        """The prompt, then the preview's codes at their grid positions; the target starts past them."""
        rows = codes.shape[0]
        start = prefix.start_positions()
        if prefix.positions is None:
            text = torch.arange(prefix.length, device=codes.device)[None] - prefix.pad[:, None]
            text = text[..., None].expand(-1, -1, 3)
        else:
            text = prefix.positions
        image = start[:, None, None] + layout.grid_offsets(codes.device)[None, : layout.num_cells]
        return Prefix(
            ids=torch.cat([prefix.ids, codes.view(rows, -1)], 1),
            visible=torch.cat([prefix.visible, torch.ones_like(codes.view(rows, -1), dtype=torch.bool)], 1),
            pad=prefix.pad,
            positions=torch.cat([text, image], 1),
            next_position=start + layout.position_extent,
        )

    def session_adapter(self) -> GlmImageAdapter:
        model = self.model
        text_model = model.model.language_model
        return GlmImageAdapter(
            text_model,
            text_model.embed_tokens,
            model.lm_head,
            torch.arange(self.image_tokenizer.vocab_size),
            model.config.text_config.num_hidden_layers,
            LlamaStackDecoder(
                text_model,
                sandwich_norm=True,
                fused_mlp=True,
                mrope_section=text_model.rotary_emb.mrope_section,
            ),
        )

    def prompt_length(self, text: str, grid: tuple[int, int], *, negative: bool = False) -> int:
        return len(self._row(text, grid))

    def encode_prompts(
        self, prompts: list[str], negative_prompts: list[str] | None, grid: tuple[int, int], guided: bool
    ) -> Prefix:
        if guided or negative_prompts is not None:
            raise ValueError("GLM-Image's AR stage has no classifier-free guidance, so no unconditional rows")
        rows = [self._row(prompt, grid) for prompt in prompts]
        return left_pad_rows(rows, self.text_tokenizer.pad_token_id, self._execution_device)

    def _row(self, prompt: str, grid: tuple[int, int]) -> list[int]:
        """What the processor makes of a text-only chat for `grid` (diffusers' `generate_prior_tokens`):
        the chat template around the prompt, the two grids' sizes and the image-start token, with the
        tokenizer's own special tokens around it; control tokens written in the prompt are read as text."""
        tokenizer = self.text_tokenizer
        chat = [{"role": "user", "content": [{"type": "text", "text": PROMPT_MARK}]}]
        template = self.processor.apply_chat_template(chat, tokenize=False)
        before, after = template.split(PROMPT_MARK)
        preview = self.preview_grid(grid)
        begin, end = tokenizer.grid_bos_token, tokenizer.grid_eos_token
        sizes = f"{begin}{grid[0]} {grid[1]}{end}{begin}{preview[0]} {preview[1]}{end}{tokenizer.bos_token}"
        lead, trail = _special_tokens_around(tokenizer)
        return [*lead, *encode_with_prompt(tokenizer, before, prompt, after + sizes), *trail]

    # -- codes to pixels: diffusers' diffusion stage --------------------------------------------------
    def render(self, codes: torch.Tensor, call: CheckedInputs, prompts: list[str]):
        """The DiT, its scheduler, the glyph encoder and the VAE, run by diffusers' `GlmImagePipeline` on the
        codes as prior tokens; an interrupted decode (undecoded cells) gets the codes' false-colour view."""
        if bool((codes < 0).any()):
            return self.images_from_codes(codes, call.output_type)
        return self._diffuse(codes, prompts, call.generators, call.stage_options, call.output_type)

    @torch.no_grad()
    def paint(
        self,
        codes: torch.Tensor,
        prompt: str | list[str],
        *,
        seed: int | list[int] | None = None,
        generator: torch.Generator | list[torch.Generator] | None = None,
        num_inference_steps: int | None = None,
        dit_guidance_scale: float | None = None,
        output_type: str = "pil",
        threads: int | None = None,
    ):
        """The diffusion stage alone: the images of target `codes [N, H, W]` (a call's `output_type="latent"`
        codes) and their prompts (one, or one per image). `seed` / `generator` as the call that decoded the
        codes was given: each image's key is drawn first, as that call's AR stage drew it, so the images are
        that call's (at the same `threads`, as a call takes them). What a pipeline loaded with
        `vision_language_encoder=None` does."""
        self._check_paints()
        if not isinstance(codes, torch.Tensor) or codes.dim() != 3 or codes.dtype != torch.long:
            raise ValueError(
                f"codes must be a LongTensor [N, H, W] of decoded codes, got {_described(codes)}"
            )
        if bool((codes < 0).any()):
            raise ValueError(
                "codes must all be decoded (>= 0); an interrupted decode's -1 cells cannot be painted"
            )
        batch = len(codes)
        prompts = prompt_list("prompt", prompt, self.limits.max_prompt_chars)
        prompts = prompts * batch if len(prompts) == 1 else prompts
        if len(prompts) != batch:
            raise ValueError(f"got {len(prompts)} prompts for {batch} codes grids; pass one, or one per grid")
        if output_type not in OUTPUT_TYPES or output_type == "latent":
            raise ValueError(
                f"output_type must be 'pil', 'np' or 'pt' (paint makes images), got {output_type!r}"
            )
        options = self.diffusion_options(num_inference_steps, dit_guidance_scale)
        threads = checks.optional_integer("threads", threads, 1, MAX_THREADS)
        generators = image_generators(generator, seed, batch)
        image_keys(generators, batch)  # the AR stage drew each image's key first; the DiT draws after it
        with PROCESS_THREADS.during_call(threads, self._execution_device):
            return self._diffuse(codes.to(self._execution_device), prompts, generators, options, output_type)

    def _diffuse(
        self, codes: torch.Tensor, prompts: list[str], generators: Any, options: dict, output_type: str
    ):
        """diffusers' `GlmImagePipeline` over this pipeline's modules, on `codes [N, H, W]` as prior tokens."""
        components = self.components
        stage = DiffusersGlmImagePipeline(**{name: components[name] for name in DIFFUSION_COMPONENTS})
        stage.set_progress_bar_config(**self.progress_bar_options())
        return stage(
            prompt=prompts,
            prior_token_ids=upsample_codes(codes),
            height=codes.shape[1] * PIXELS_PER_CODE,
            width=codes.shape[2] * PIXELS_PER_CODE,
            num_inference_steps=options["num_inference_steps"],
            guidance_scale=options["guidance_scale"],
            generator=generators,
            output_type=output_type,
        ).images


# diffusers' `GlmImagePipeline`'s components (the hub repository's folders); given prior tokens it never
# runs the AR model, so a pipeline without one (`vision_language_encoder=None`) paints as well
DIFFUSION_COMPONENTS = (
    "tokenizer",
    "processor",
    "text_encoder",
    "vision_language_encoder",
    "vae",
    "transformer",
    "scheduler",
)


def _described(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {list(value.shape)}"
    return type(value).__name__


def _special_tokens_around(tokenizer: PreTrainedTokenizerBase) -> tuple[list[int], list[int]]:
    """The ids the tokenizer adds before and after a text with `add_special_tokens=True` (the processor
    tokenizes the rendered chat so)."""
    bare = tokenizer("x", add_special_tokens=False)["input_ids"]
    full = tokenizer("x", add_special_tokens=True)["input_ids"]
    for start in range(len(full) - len(bare) + 1):
        if full[start : start + len(bare)] == bare:
            return full[:start], full[start + len(bare) :]
    return [], []
