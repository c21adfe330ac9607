"""Lumina-mGPT (1.x, Chameleon architecture) text-to-image over transformers' Chameleon classes.

transformers' `ChameleonForConditionalGeneration.forward` masks every image-token logit, so the session
calls the backbone (`model.model`) and the LM head rows of the image tokens itself. Sequence (from
Lumina's item processor): `<s>Generate an image of {W}x{H} according to the following prompt:\\n{prompt}
<reserved08706>` then `<racm3:break>` (image start), one height and one width token in 32-pixel grid
units (`<reserved{8800+n}>`), rows of codes each closed by `<reserved08799>`, and `<eoss>`. Image codes
are the `IMGIMG...Z` tokens of the Chameleon vocabulary. CFG is batched as in SJD / Lumina-mGPT 2.0: the
unconditional row holds the same tokens with the prompt hidden except its last token. The VQGAN decoder
is arjet's own (`arjet.vq.ChameleonVQGAN`), since transformers ships only the encoder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import torch
from transformers import ChameleonForConditionalGeneration, PreTrainedTokenizerBase
from transformers.models.chameleon.modeling_chameleon import ChameleonImageVocabularyMapping

from .. import checks
from ..addons.drafter import Drafter
from ..addons.noise import NoiseConditioning
from ..session import ImageLayout, Prefix
from ..session.decoder import LlamaStackDecoder
from ..vq.chameleon_vqgan import ChameleonVQGAN
from .base import BaseARPipeline
from .components import load_component
from .prompts import encode_with_prompt, left_pad_rows

GRID_UNIT = 32  # pixels per height/width token
PROMPT_TEMPLATE = "Generate an image of {width}x{height} according to the following prompt:\n{prompt}"
TURN_END, IMAGE_START, ROW_END = "<reserved08706>", "<racm3:break>", "<reserved08799>"
IMAGE_CODE_PREFIX = "IMGIMG"  # Chameleon's image-code tokens are spelt IMGIMG<digits as letters>Z


# the training size of each released Lumina-mGPT 1.x text-to-image checkpoint, by its hub repository name
CHECKPOINT_RESOLUTIONS = {
    "Lumina-mGPT-7B-512": 512,
    "Lumina-mGPT-7B-512-MultiImage": 512,
    "Lumina-mGPT-7B-768": 768,
    "Lumina-mGPT-7B-768-Omni": 768,
    "Lumina-mGPT-7B-1024": 1024,
}


def checkpoint_resolution(folder: str | Path) -> int | None:
    """The training size of a released checkpoint found at `folder`: a local copy named like its hub
    repository (`.../Lumina-mGPT-7B-768`) or a hub cache snapshot (`.../models--Alpha-VLLM--Lumina-mGPT-7B-768/
    snapshots/<revision>`). None when the folder is neither."""
    for path in (Path(folder).absolute(), Path(folder).resolve()):
        names = [path.name]
        if path.parent.name == "snapshots":
            names.append(path.parent.parent.name.split("--")[-1])
        for name in names:
            if name in CHECKPOINT_RESOLUTIONS:
                return CHECKPOINT_RESOLUTIONS[name]
    return None


def _check_resolution(folder: str | Path, resolution: Any) -> int:
    if resolution is None:
        resolution = checkpoint_resolution(folder)
        if resolution is None:
            known = ", ".join(f"{name}: {size}" for name, size in CHECKPOINT_RESOLUTIONS.items())
            raise ValueError(
                f"cannot tell which Lumina-mGPT checkpoint {folder} is; pass the size it was trained for, e.g. "
                f"from_pretrained(..., resolution=768) (released checkpoints: {known})"
            )
    return _check_pixels("resolution", resolution)


def _check_pixels(name: str, value: Any) -> int:
    if not checks.is_integer(value) or value < GRID_UNIT or value % GRID_UNIT:
        raise ValueError(
            f"{name} must be a positive multiple of {GRID_UNIT} pixels, got {checks.shown(value)}"
        )
    return value


def image_token_name(code: int) -> str:
    """Chameleon's BPE name of image code `code`: digits spelled with letters A-J, e.g. 42 -> IMGIMGECZ."""
    return "IMGIMG" + "".join(chr(ord("A") + int(d)) for d in str(code)) + "Z"


def size_token_name(units: int) -> str:
    return f"<reserved{8800 + units:05d}>"


class LuminaMGPTPipeline(BaseARPipeline):
    """Lumina-mGPT 7B 512 / 768 / 1024. `resolution` is the checkpoint's training size: any `height x width`
    in multiples of 32 px with at most `resolution**2` pixels and an aspect ratio up to 4 is allowed."""

    model_type: ClassVar[str] = "chameleon"
    model_class: ClassVar[type] = ChameleonForConditionalGeneration
    quantized_modules: ClassVar[dict[str, tuple[str, ...]]] = {
        "model": ("model.layers", "lm_head"),
    }
    model_cpu_offload_seq = "model->vqgan"
    default_guidance_scale: ClassVar[float] = 3.0
    default_top_k: ClassVar[int | None] = 2000
    max_aspect_ratio: ClassVar[float] = 4.0
    # transformers' Chameleon VQ encoder: images decode through arjet's VQGAN, and Lumina-mGPT's fine-tuning
    # deletes `model.vqmodel` before saving, so its checkpoints lack these weights
    unread_weights: ClassVar[dict[str, tuple[str, ...]]] = {"model": ("model.vqmodel.",)}

    def __init__(
        self,
        model: ChameleonForConditionalGeneration,
        tokenizer: PreTrainedTokenizerBase,
        vqgan: ChameleonVQGAN,
        resolution: int = 768,
        default_height: int | None = None,
        default_width: int | None = None,
        noise_conditioning: NoiseConditioning | None = None,
        drafter: Drafter | None = None,
    ):
        super().__init__()
        self.register_modules(
            model=model,
            tokenizer=tokenizer,
            vqgan=vqgan,
            noise_conditioning=noise_conditioning,
            drafter=drafter,
        )
        self.register_to_config(
            resolution=resolution, default_height=default_height, default_width=default_width
        )

    @classmethod
    def components_from_transformers(
        cls,
        folder,
        vqgan: ChameleonVQGAN | str | Path | None = None,
        resolution: int | None = None,
        *,
        strict: bool = True,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Bare Lumina-mGPT checkpoint + the converted VQGAN (`vqgan=` a folder or module; default
        `<folder>/vqgan`). `resolution` (512, 768 or 1024) is the size the checkpoint was trained for; when
        not given it is read from the checkpoint's name (`Lumina-mGPT-7B-768`, as a local folder of that name
        or the hub cache folder of `Alpha-VLLM/Lumina-mGPT-7B-768`), else a ValueError asks for it."""
        resolution = _check_resolution(folder, resolution)
        if vqgan is None or isinstance(vqgan, (str, Path)):
            location = Path(vqgan) if vqgan is not None else Path(folder) / "vqgan"
            if not location.is_dir():
                raise FileNotFoundError(
                    f"Lumina-mGPT needs the Chameleon VQGAN decoder, expected at {location}: convert Meta's "
                    "vqgan.ckpt with `arjet convert-vqgan vqgan.ckpt OUT --config vqgan.yaml` and pass vqgan=OUT"
                )
            vqgan = load_component(ChameleonVQGAN, location, "vqgan", strict=strict)
        components = super().components_from_transformers(folder, strict=strict, **kwargs)
        return {**components, "vqgan": vqgan.eval(), "resolution": resolution}

    # -- hooks --------------------------------------------------------------------------------------
    @property
    def image_tokenizer(self) -> ChameleonVQGAN:
        return self.vqgan

    def native_size(self) -> tuple[int, int]:
        return self.config.resolution, self.config.resolution

    def grid_for(self, height: int, width: int) -> tuple[int, int]:
        _check_pixels("height", height)
        _check_pixels("width", width)
        limit = self.config.resolution
        if height * width > limit * limit:
            raise ValueError(
                f"height={height}, width={width} is {height * width} pixels; this {limit}-px Lumina-mGPT makes "
                f"at most {limit}x{limit} = {limit * limit} pixels (any sides in multiples of {GRID_UNIT})"
            )
        if max(height, width) > self.max_aspect_ratio * min(height, width):
            raise ValueError(
                f"height={height}, width={width} has an aspect ratio of {max(height, width) / min(height, width):g}; "
                f"Lumina-mGPT makes aspect ratios up to {self.max_aspect_ratio:g}"
            )
        factor = self.vqgan.downsample
        return height // factor, width // factor

    def image_layout(self, grid: tuple[int, int]) -> ImageLayout:
        return ImageLayout(grid, row_end_ids=(self._token_id(ROW_END),))

    def session_adapter(self):
        from .vocab_adapter import VocabularyCodeAdapter

        mapping = ChameleonImageVocabularyMapping(self.model.config.vocabulary_map).img2bpe
        code_ids = torch.tensor([mapping[code] for code in range(self.vqgan.vocab_size)])
        return VocabularyCodeAdapter(
            self.model.model,
            self.model.get_input_embeddings(),
            self.model.lm_head,
            code_ids,
            self.model.config.num_hidden_layers,
            LlamaStackDecoder(self.model.model, qk_norm=True, swin_norm=self.model.config.swin_norm),
        )

    def prompt_length(self, text: str, grid: tuple[int, int], *, negative: bool = False) -> int:
        return 1 + len(self._text_ids(text, grid)) + 4  # BOS, text, turn end, image start and two sizes

    def encode_prompts(
        self, prompts: list[str], negative_prompts: list[str] | None, grid: tuple[int, int], guided: bool
    ) -> Prefix:
        factor = self.vqgan.downsample
        height, width = grid[0] * factor, grid[1] * factor
        image_prefix = [
            self._token_id(IMAGE_START),
            self._token_id(size_token_name(height // GRID_UNIT)),
            self._token_id(size_token_name(width // GRID_UNIT)),
        ]
        bos, turn_end = self.tokenizer.bos_token_id, self._token_id(TURN_END)
        rows = [[bos, *self._text_ids(prompt, grid), turn_end, *image_prefix] for prompt in prompts]
        hidden = [[False] * len(row) for row in rows]
        if guided:
            # same tokens, but the text (all but its last token, the turn end) is hidden
            rows += rows
            hidden += [[True] * (len(row) - 4) + [False] * 4 for row in rows[: len(prompts)]]
        return left_pad_rows(rows, self.tokenizer.pad_token_id, self._execution_device, hidden)

    def _text_ids(self, prompt: str, grid: tuple[int, int]) -> list[int]:
        """Lumina's instruction around `prompt`; control tokens written in the prompt are read as plain
        text, and a prompt spelling an image-code token (`IMGIMG...`) is refused, since the text tokenizer
        would read it as that code."""
        if IMAGE_CODE_PREFIX in prompt:
            raise ValueError(
                f"prompt {prompt[:60]!r} contains {IMAGE_CODE_PREFIX!r}, the spelling of Lumina-mGPT's image-code "
                "tokens, which its text tokenizer would read as image codes; rephrase the prompt"
            )
        factor = self.vqgan.downsample
        height, width = grid[0] * factor, grid[1] * factor
        before, after = PROMPT_TEMPLATE.format(width=width, height=height, prompt="{prompt}").split(
            "{prompt}"
        )
        return encode_with_prompt(self.tokenizer, before, prompt, after)

    def _token_id(self, token: str) -> int:
        token_id = self.model.config.vocabulary_map.get(token)
        if token_id is None:
            raise ValueError(f"this Chameleon checkpoint's vocabulary has no {token!r} token")
        return token_id
