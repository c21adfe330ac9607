"""What every arjet pipeline shares: loading, the family hooks, and the numbered steps of `__call__`.

A model family subclasses `BaseARPipeline` and fills in five hooks: the grid for a requested size,
the prompt layout (`encode_prompts`), the session adapter, the image layout and the image tokenizer.
Everything a sampler does happens behind the decoding session (`arjet.session`); the call's arguments
are declared and checked in `inputs.py`, a call's AR stage (a session per grid, the step callback) is
`ar_stage.py`.
"""

from __future__ import annotations

import contextlib
import inspect
import time
import typing
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import PIL.Image
import torch
from diffusers import DiffusionPipeline
from diffusers.image_processor import VaeImageProcessor
from diffusers.utils import BaseOutput

from .. import checks
from .. import samplers as sampler_registry
from ..addons.drafter import Drafter
from ..addons.noise import NoiseConditioning
from ..limits import AUTO_COMPILE, DEFAULT_LIMITS, MAX_THREADS, Limits
from ..machine import text_config
from ..quantize import Quantization, is_quantized
from ..samplers import DecodeStats, ImageRandom, Sampler, SamplingOptions, StopFlag, requirements
from ..session import CompiledDecoder, DecodingSession, ImageLayout, ModelAdapter, Prefix
from ..session.capture import EagerFallback, compile_mode
from ..session.session import default_decoder
from ..vq.base import ImageTokenizer
from .adaptive import ADAPTIVE, choose_window, is_adaptive, widest_spec
from .ar_stage import sample_codes
from .components import load_component, quiet_loading, weight_classes
from .inputs import (
    OUTPUT_TYPES,
    CheckedInputs,
    GenerationInputs,
    call_signature,
    callback_tensor_inputs,
    image_generators,
    prompt_list,
    text_tokens,
)
from .loading import HUB_OPTIONS, checkpoint_kind, is_builtin, resolve_checkpoint, update_module_paths
from .prompts import warn_unknown_words
from .threads import PROCESS_THREADS

# what `from_pretrained` takes besides the hub's options and the pipeline's own components and settings
LOADING_OPTIONS = ("dtype", "torch_dtype", "quantization")

# what a pipeline may offer a sampler beyond the session's contract (a sampler declares what it needs in
# `requires`); each says what the capability is, for the message when a model lacks it
CAPABILITIES = {
    "codebook": "the image tokenizer's codebook",
    "noise_conditioning": "a checkpoint fine-tuned for noisy embeddings (a noise_conditioning component; "
    "`arjet train sjd2` makes one from any checkpoint)",
    "drafter": "a trained drafter (a drafter component; `arjet train drafter` trains one for any checkpoint, "
    "`arjet convert-drafter` converts LANTERN's released ones)",
}


@dataclass
class ARPipelineOutput(BaseOutput):
    """`images`: list of PIL images, `np.ndarray [N, h, w, 3]`, `torch.Tensor [N, 3, h, w]` (both in [0, 1]),
    or the codes for `output_type="latent"`. `codes`: `LongTensor [N, H, W]`. `stats[i]`: what image i cost.
    `preview_codes`: `LongTensor [N, h, w]`, the preview grid a family decodes before the target (GLM-Image);
    None for the others."""

    images: list[PIL.Image.Image] | np.ndarray | torch.Tensor
    codes: torch.Tensor
    stats: list[DecodeStats]
    preview_codes: torch.Tensor | None = None


class BaseARPipeline(DiffusionPipeline):
    """Text-to-image with an autoregressive model, decoded by any registered sampler."""

    model_type: ClassVar[str] = ""  # the transformers `model_type` this family loads from a bare checkpoint
    model_class: ClassVar[type] = object
    ar_component: ClassVar[str] = "model"  # the component holding the AR model (`model_class`)
    # the components only a later stage (GLM-Image's DiT) uses: a pipeline loaded with each of them None
    # decodes codes (`output_type="latent"`) without their weights
    later_stage_components: ClassVar[tuple[str, ...]] = ()
    # what `quantization=` quantizes: component -> the module paths whose linear layers it quantizes (the AR
    # decoder's layers and its code head; never embeddings, norms or the VQ; "" is every linear layer)
    quantized_modules: ClassVar[dict[str, tuple[str, ...]]] = {}
    default_guidance_scale: ClassVar[float] = 1.0
    default_top_k: ClassVar[int | None] = None
    supports_negative_prompt: ClassVar[bool] = False
    # the AR stage mixes a conditional and an unconditional row (CFG); a family whose model defines no
    # unconditional branch refuses guidance_scale != 1, saying `guidance_hint`
    classifier_free_guidance: ClassVar[bool] = True
    guidance_hint: ClassVar[str] = ""
    _callback_tensor_inputs: ClassVar[list[str]] = ["codes", "commit_step"]
    _optional_components: ClassVar[list[str]] = ["noise_conditioning", "drafter"]
    # weights of a component this family never reads (by prefix), which its checkpoints may therefore lack
    unread_weights: ClassVar[dict[str, tuple[str, ...]]] = {}
    noise_conditioning: NoiseConditioning | None = None  # an optional component (SJD2's fine-tune)
    drafter: Drafter | None = None  # an optional component (EAGLE / LANTERN's drafter head)
    _stop: StopFlag | None = None  # the running call's stop flag (`interrupt`), made anew by each call
    _compiled: CompiledDecoder | None = None  # the decoder under torch.compile, made on first use
    _eager_fallback: EagerFallback | None = None  # see `eager_fallback`
    _adaptive_windows: dict | None = None  # sampler="adaptive": the window per call shape (`adaptive.py`)
    _limits: Limits = DEFAULT_LIMITS  # `limits`, checked when set
    quantization: Quantization | None = None  # the scheme the weights were quantized with (`quantize`)
    call_frames: ClassVar[int] = 0  # calls a family's own `__call__` adds before this one (for warnings)

    @property
    def limits(self) -> Limits:
        """What one call may ask for (see `arjet.limits`); `pipe.limits = arjet.Limits(...)` changes them."""
        return self._limits

    @limits.setter
    def limits(self, value: Limits) -> None:
        if not isinstance(value, Limits):
            raise ValueError(
                f"pipe.limits must be an arjet.Limits, got {checks.shown(value)}; e.g. "
                "pipe.limits = arjet.Limits(max_images_per_call=256), or arjet.Limits() for the defaults"
            )
        self._limits = value

    # -- loading ------------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str, *, strict: bool = True, **kwargs: Any):
        """Load a saved arjet pipeline folder of this class, or a bare transformers checkpoint of this family
        (a local folder, a built-in model's name such as `"shapes"`, or a hub id in the local cache), e.g.
        `JanusPipeline.from_pretrained("deepseek-community/Janus-Pro-1B")`. A local folder wins over a
        built-in name. A hub id that is not cached is downloaded only with `local_files_only=False`.
        `arjet.ARPipeline.from_pretrained` picks the class. Built-in models load in float32 unless `dtype=`
        says otherwise, as with `arjet.load`.

        Every weight component (the model, a VQ, noise conditioning) must match its checkpoint: weights
        missing from the folder or not in the model are a ValueError naming the component and some keys.
        `strict=False` loads what matches and leaves the rest at its random initialisation. Before anything
        loads, the folder's files are checked by their headers (`checks.check_checkpoint_files`): a JSON file
        malformed or nested too deep, a weights file cut short is a ValueError naming it.

        `quantization="int8"` (`"int4"`, `"fp8"`, an `arjet.Quantization`): the AR decoder's linear layers and
        its code head quantized through torchao as the checkpoint's tensors are read (see `quantize`); a
        scheme this machine cannot run is refused before any weight is read."""
        checks.boolean("strict", strict)
        with quiet_loading():
            return cls._load(pretrained_model_name_or_path, strict, kwargs)

    @classmethod
    def _load(cls, pretrained_model_name_or_path: str, strict: bool, kwargs: dict[str, Any]):
        cls.check_loading_options(kwargs)
        quantization = Quantization.parse(kwargs.pop("quantization", None))
        if quantization is not None:
            quantization.check(quantization.device, kwargs.get("dtype", kwargs.get("torch_dtype")))
        pipe = cls._load_weights(pretrained_model_name_or_path, strict, kwargs, quantization)
        if quantization is not None:
            pipe.quantization = quantization
            if quantization.drafter:
                pipe.quantize_drafter(quantization)
        return pipe

    @classmethod
    def _load_weights(
        cls,
        pretrained_model_name_or_path: str,
        strict: bool,
        kwargs: dict[str, Any],
        quantization: Quantization | None,
    ):
        folder = resolve_checkpoint(
            pretrained_model_name_or_path, **{k: kwargs[k] for k in HUB_OPTIONS if k in kwargs}
        )
        kwargs = {k: v for k, v in kwargs.items() if k not in HUB_OPTIONS}
        checks.check_checkpoint_files("the checkpoint", folder)  # headers only: a file cut short is named
        if is_builtin(folder) and kwargs.get("dtype") is None and kwargs.get("torch_dtype") is None:
            kwargs["dtype"] = torch.float32  # shipped in bfloat16 to stay small; float32 is faster on CPU
        kind, name = checkpoint_kind(folder)
        if kind == "pipeline":
            if cls.model_type and name != cls.__name__:
                raise ValueError(
                    f"{folder} holds a saved {name}, not a {cls.__name__}: load it with "
                    f"{name}.from_pretrained(...) or arjet.ARPipeline.from_pretrained(...), which picks the class"
                )
            components = cls.weight_components(folder, strict, kwargs, quantization)
            return super().from_pretrained(folder, **kwargs, **components)
        if name != cls.model_type:
            raise ValueError(
                f"{folder} holds a {name!r} model; {cls.__name__} loads {cls.model_type!r} checkpoints"
            )
        return cls(
            **cls.components_from_transformers(folder, strict=strict, quantization=quantization, **kwargs)
        )

    @classmethod
    def check_loading_options(cls, options: dict[str, Any]) -> None:
        """Refuse a keyword `from_pretrained` has no use for (diffusers' loader would ignore it silently),
        naming it and what is taken: the dtype, the hub's options, and the pipeline's own components and
        settings (`drafter=`, Lumina-mGPT's `resolution=`, ...)."""
        parameters = inspect.signature(cls.__init__).parameters.values()
        settings = [p.name for p in parameters if p.name != "self" and p.kind is not p.VAR_KEYWORD]
        unknown = sorted(set(options) - {*LOADING_OPTIONS, *HUB_OPTIONS, *settings})
        if unknown:
            raise ValueError(
                f"unexpected argument(s) {', '.join(f'{name}=' for name in unknown)} for loading a "
                f"{cls.__name__}; it takes strict, {', '.join(LOADING_OPTIONS + HUB_OPTIONS)}, and its "
                f"components and settings: {', '.join(settings)}"
            )

    @classmethod
    def weight_components(
        cls, folder: Path, strict: bool, kwargs: dict[str, Any], quantization: Quantization | None = None
    ) -> dict[str, Any]:
        """The weight components a saved pipeline folder names (model, VQ, noise conditioning ...), each loaded
        with its loader's report checked (`arjet.pipelines.components`); diffusers then assembles the
        pipeline from them and loads the rest (tokenizers). Components passed in `kwargs` are kept. The AR
        component is quantized as it loads when `quantization` says so."""
        index = cls.load_config(folder)
        hints = typing.get_type_hints(cls.__init__)
        dtype = kwargs.get("dtype", kwargs.get("torch_dtype"))
        loaded = {}
        for name, entry in index.items():
            if name in kwargs or not (isinstance(entry, list) and len(entry) == 2 and entry[1]):
                continue
            classes = weight_classes(hints.get(name))
            if not classes:
                continue  # holds no weights (a tokenizer)
            chosen = [option for option in classes if option.__name__ == entry[1]]
            if not chosen:
                raise ValueError(
                    f"{folder}/model_index.json names {entry[1]} for component {name!r}; {cls.__name__} takes "
                    f"{' or '.join(option.__name__ for option in classes)}"
                )
            extra = {} if dtype is None else {"dtype": dtype}
            extra.update(cls.quantizing(quantization, name))
            unread = cls.unread_weights.get(name, ())
            loaded[name] = load_component(
                chosen[0], folder / name, name, strict=strict, unread=unread, **extra
            )
        return loaded

    @classmethod
    def load_config(cls, *args: Any, **kwargs: Any):
        """diffusers' reader of `model_index.json`, with components whose arjet module has moved since the
        folder was saved (`arjet.tokenizers.*` is `arjet.vq.*` today) read at their new place."""
        loaded = super().load_config(*args, **kwargs)
        update_module_paths(loaded[0] if isinstance(loaded, tuple) else loaded)
        return loaded

    @classmethod
    def components_from_transformers(
        cls,
        folder,
        dtype: torch.dtype | None = None,
        *,
        strict: bool = True,
        quantization: Quantization | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """The pipeline's components built from a bare transformers checkpoint folder (`strict`,
        `quantization`: see `from_pretrained`)."""
        from transformers import AutoTokenizer

        dtype = kwargs.pop("torch_dtype", dtype)
        if kwargs:
            raise ValueError(f"unexpected arguments for {cls.__name__}.from_pretrained: {sorted(kwargs)}")
        unread = cls.unread_weights.get("model", ())
        model = load_component(
            cls.model_class,
            folder,
            "model",
            strict=strict,
            unread=unread,
            dtype=dtype or "auto",
            **cls.quantizing(quantization, cls.ar_component),
        ).eval()
        return {"model": model, "tokenizer": AutoTokenizer.from_pretrained(folder)}

    @classmethod
    def quantizing(cls, quantization: Quantization | None, component: str) -> dict[str, Any]:
        """`load_component`'s keywords that quantize `component` as it loads (none without `quantization`,
        or for a component `quantized_modules` does not name)."""
        if quantization is None or component not in cls.quantized_modules:
            return {}
        return {"quantization": quantization, "quantized": cls.quantized_modules[component]}

    def quantize(self, quantization: str | Quantization) -> BaseARPipeline:
        """Quantize the AR decoder's linear layers and its code head (`quantized_modules`) in place, and the
        drafter's with `Quantization(..., drafter=True)`; returns the pipeline. A scheme this machine cannot
        run, or weights quantized already, is a one-line ValueError. `from_pretrained(path,
        quantization=...)` quantizes as it reads the checkpoint instead, never holding the float model."""
        quantization = Quantization.parse(quantization)
        if quantization is None:
            raise ValueError("quantize needs a scheme: one of int8, int4, fp8")
        quantization.check(self.device, self.dtype)
        if quantization.drafter:
            self.check_drafter_quantizable()
        for name, paths in self.quantized_modules.items():
            if self.components[name] is not None:  # a stage loaded alone holds the other stage's as None
                quantization.apply(self.components[name], paths)
        self.quantization = quantization
        if quantization.drafter:
            self.quantize_drafter(quantization)
        return self

    def to(self, *args: Any, **kwargs: Any) -> BaseARPipeline:
        """diffusers' `to(device, dtype)`, with the device checked first (`checks.check_device`: "cpu:5" or a
        GPU this machine lacks would move nothing, or fail in torch's words) and a new dtype refused for
        quantized weights (their kernels keep theirs: the move failed at the first decode step instead)."""
        import torch

        for value in (*args, kwargs.get("device")):
            if isinstance(value, (str, torch.device)):
                checks.check_device(value, "pipe.to's device")
        dtypes = [value for value in (*args, kwargs.get("dtype")) if isinstance(value, torch.dtype)]
        if self.quantization is not None and dtypes and dtypes[0] != self.dtype:
            raise ValueError(
                f"this pipeline's weights are quantized ({self.quantization.scheme}) over {self.dtype}, which "
                f"they keep; load it again with dtype={dtypes[0]} and quantization="
                f"{self.quantization.scheme!r} instead of moving it to {dtypes[0]}"
            )
        return super().to(*args, **kwargs)

    def check_drafter_quantizable(self) -> None:
        if self.drafter is None:
            raise ValueError(
                "Quantization(drafter=True) quantizes the pipeline's drafter, and this pipeline has none"
            )

    def quantize_drafter(self, quantization: Quantization) -> None:
        """Quantize every linear layer of the drafter (its fusion and its block)."""
        self.check_drafter_quantizable()
        quantization.apply(self.drafter, ("",))

    def save_pretrained(self, *args: Any, **kwargs: Any) -> None:
        """diffusers' save, refused for quantized weights: arjet writes safetensors only, and a quantized
        weight is a tensor subclass safetensors cannot hold (saving it would pickle it)."""
        for name, component in self.components.items():
            if isinstance(component, torch.nn.Module) and any(map(is_quantized, component.parameters())):
                raise ValueError(
                    f"component {name!r} holds quantized weights, which arjet does not save (only safetensors of "
                    "plain tensors): save the float pipeline and load it with from_pretrained(..., quantization=...)"
                )
        super().save_pretrained(*args, **kwargs)

    # -- family hooks -------------------------------------------------------------------------------
    def native_size(self) -> tuple[int, int]:
        """(height, width) in pixels the checkpoint was trained for."""
        raise NotImplementedError

    def default_size(self) -> tuple[int, int]:
        """(height, width) when the caller gives neither: the config's `default_height` / `default_width`
        where the pipeline registers them, else the native size."""
        native = self.native_size()
        height, width = self.config.get("default_height"), self.config.get("default_width")
        return native[0] if height is None else height, native[1] if width is None else width

    def grid_for(self, height: int, width: int) -> tuple[int, int]:
        """The code grid (H, W) for an image of `height x width` pixels (positive integers); ValueError
        naming the size and what the model allows if it can't make it."""
        raise NotImplementedError

    def size_for_aspect_ratio(self, aspect_ratio: str) -> tuple[int, int]:
        """(height, width) in pixels for `aspect_ratio="W:H"`, for families that size images that way."""
        height, width = self.default_size()
        raise ValueError(
            f"{type(self).__name__} does not take an aspect_ratio (got {aspect_ratio!r}); "
            f"pass height and width (default {height}x{width})"
        )

    def encode_prompts(
        self, prompts: list[str], negative_prompts: list[str] | None, grid: tuple[int, int], guided: bool
    ) -> Prefix:
        """Token ids up to the first image code: `[cond; uncond]` rows when `guided`."""
        raise NotImplementedError

    def prompt_length(self, text: str, grid: tuple[int, int], *, negative: bool = False) -> int:
        """Tokens of the prefix row that carries `text` (a prompt, or with `negative` a negative prompt),
        chat template included, as `encode_prompts` lays it out. Tokenizes, never runs the model."""
        raise NotImplementedError

    def preview_grid(self, grid: tuple[int, int]) -> tuple[int, int] | None:
        """The grid a family decodes before the target `grid` (GLM-Image's preview); None: the target only."""
        return None

    def preview_prefix(self, prefix: Prefix, layout: ImageLayout, codes: torch.Tensor) -> Prefix:
        """The target grid's prefix: `prefix` followed by the preview's `codes [N, h*w]` laid out by `layout`
        (for families with a `preview_grid`)."""
        raise NotImplementedError(f"{type(self).__name__} decodes no preview grid")

    @property
    def text_tokenizer(self) -> Any:
        """The tokenizer of the AR model's prompts (the `tokenizer` component; GLM-Image's is its processor's)."""
        return self.tokenizer

    def sampling_defaults(self) -> SamplingOptions:
        """The sampling options where the call leaves them out (guidance, top-k, top-p: None; temperature:
        not given): the checkpoint's guidance scale, temperature 1, the family's `default_top_k`, no top-p."""
        return SamplingOptions(self.checkpoint_guidance_scale(), 1.0, self.default_top_k, None)

    def max_positions(self) -> int | None:
        """Positions the model was built for (prompt and image together), None when it has no such bound."""
        return getattr(text_config(self.model.config), "max_position_embeddings", None)

    def session_adapter(self) -> ModelAdapter:
        raise NotImplementedError

    def image_layout(self, grid: tuple[int, int]) -> ImageLayout:
        raise NotImplementedError

    @property
    def image_tokenizer(self) -> ImageTokenizer:
        raise NotImplementedError

    # -- the call -----------------------------------------------------------------------------------
    @torch.no_grad()
    def __call__(
        self, prompt: str | list[str], negative_prompt: str | list[str] | None = None, **options: Any
    ):
        """Generate images for `prompt` with `sampler` (a registered name or a sampler object); every argument
        is described in `arjet.pipelines.inputs.GenerationInputs`. Returns an `ARPipelineOutput` (or, with
        `return_dict=False`, the tuple `(images, codes, stats)`).

        `output_type`, what `images` holds for `N` images of `h x w` pixels: "pil" (default) a list of `N` RGB
        PIL images; "np" a float32 numpy array `[N, h, w, 3]` in [0, 1]; "pt" a float32 torch tensor
        `[N, 3, h, w]` in [0, 1]; "latent" the codes `LongTensor [N, H, W]` (no pixel decoding; GLM-Image:
        no diffusion stage). `codes` is always the code grid.

        `threads`: torch's CPU threads for this call only (None: one per core other processes leave free, on
        the CPU, unless `torch.set_num_threads` chose them; see `arjet.pipelines.threads`). The process's own
        count is restored when the call ends. Codes can differ in floating-point rounding between counts.

        `compile`: how each fixed-shape decode step runs. "auto" (default): "cuda-graphs" on a CUDA device,
        eagerly on the CPU (faster there); if capturing or replaying fails, the pipeline warns once and decodes
        eagerly from then on. False: eagerly. "cuda-graphs" (CUDA only): each step is captured once per
        attention span and replayed. "inductor": the decoder's layers run through `torch.compile` (slow the
        first time for each shape). "inductor-graphs" (CUDA only): both, the compiled layers inside the
        captured steps (what an engine's "auto" picks: it lives long enough to earn the compile). True picks
        "cuda-graphs" on a CUDA device, else "inductor". An explicit mode that fails raises. Codes are the
        same as eager up to floating-point rounding (bit for bit in float32).

        `callback_on_step_end(pipe, step, forward_passes, tensors)` runs after every sampler step;
        `tensors` holds copies of the allowlisted tensors named in `callback_on_step_end_tensor_inputs`
        (default `["codes"]`): `codes` `[N, H, W]` (-1 where not decoded yet) and `commit_step` `[N, H, W]`.
        Set `pipe._interrupt = True` to stop early (undecoded cells come out grey). Unlike diffusers'
        latents, these tensors cannot be replaced by the callback: committed codes already sit in the
        model's KV cache and the sampler alone decides the next ones, so the callback returns `tensors`
        unchanged (or None), and a returned tensor that differs from the decoded state raises ValueError.
        """
        # 1. check inputs: everything is validated before any encoding or model work; `sampler="adaptive"`
        # then takes the window its cost model finds fastest for this call (measured on the first such call)
        call = self.check_inputs(prompt, negative_prompt, **options)
        if is_adaptive(call.sampler_label):
            call = choose_window(self, call)

        with PROCESS_THREADS.during_call(call.threads, self._execution_device):
            return self._generate(call)

    __call__.__signature__ = call_signature()  # help(pipe) lists every argument `GenerationInputs` declares

    def _generate(self, call: CheckedInputs):
        """Steps 2 to 5 of `__call__`, on the call's CPU threads."""
        batch, grid = call.batch_size, call.grid

        # 2. prompts -> prefix token ids ([cond; uncond] when guided)
        warn_unknown_words(self.text_tokenizer, call.prompts, self.call_frames + 1)
        guided = call.guidance_scale != 1
        prompts = [p for p in call.prompts for _ in range(call.num_images_per_prompt)]
        negatives = call.negative_prompts
        if negatives is not None:
            negatives = [p for p in negatives for _ in range(call.num_images_per_prompt)]
        prefix = self.encode_prompts(prompts, negatives, grid, guided)
        rng = ImageRandom(call.generators, batch, self._execution_device)

        # 3. decode codes with the sampler through a session per grid (GLM-Image: its preview, then the target)
        start = time.perf_counter()
        decoded = sample_codes(self, call, prefix, rng, DecodingSession)
        codes = decoded.codes
        decoding = time.perf_counter() - start

        # 4. codes -> images
        latent = call.output_type == "latent"
        images = codes if latent else self.render(codes, call, prompts)
        seconds = time.perf_counter() - start
        for item in decoded.stats:
            item.seconds = seconds
            item.extra.update(batch_size=batch, decode_seconds=decoding, render_seconds=seconds - decoding)
        self.maybe_free_model_hooks()

        # 5. output
        if not call.return_dict:
            return images, codes, decoded.stats
        return ARPipelineOutput(
            images=images, codes=codes, stats=decoded.stats, preview_codes=decoded.preview_codes
        )

    def compiled_decoder(self) -> CompiledDecoder:
        """The decoder stack under `torch.compile`, built once per pipeline (compiling is the slow part)."""
        if self._compiled is None:
            self._compiled = CompiledDecoder(default_decoder(self.session_adapter()))
        return self._compiled

    @property
    def eager_fallback(self) -> EagerFallback:
        """Whether `compile="auto"` fell back to eager steps on this pipeline, and why (`failure`): shared by
        its calls and its engines, made on first use."""
        if self._eager_fallback is None:
            self._eager_fallback = EagerFallback()
        return self._eager_fallback

    @property
    def interrupt(self) -> bool:
        """Whether the running call was asked to stop; set it (in a step callback, say) to stop the decode
        after the step in progress. Each call starts unset."""
        return self._stop is not None and self._stop.requested

    @interrupt.setter
    def interrupt(self, value: bool) -> None:
        if self._stop is None:
            self._stop = StopFlag()
        self._stop.requested = bool(value)

    # diffusers' name for it, which callbacks written for diffusers pipelines set
    _interrupt = interrupt

    def progress_bar_options(self) -> dict[str, Any]:
        """A copy of the options `set_progress_bar_config` last set (none yet: `{}`)."""
        return dict(getattr(self, "_progress_bar_config", {}))  # diffusers makes it on first use

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """No progress bars from this pipeline inside (decodes whose progress is not the caller's); the
        options set before come back after."""
        before = self.progress_bar_options()
        self.set_progress_bar_config(**{**before, "disable": True})
        try:
            yield
        finally:
            self.set_progress_bar_config(**before)

    def check_inputs(
        self, prompt: str | list[str], negative_prompt: str | list[str] | None = None, **options: Any
    ) -> CheckedInputs:
        """Validate every argument of `__call__` (the same arguments) and resolve the defaults, before any model
        work (prompts are tokenized only to count their tokens, after every other check). Each bad value raises
        a `ValueError` that names it and says what is allowed; `self.limits` bounds the work (images per call,
        prompt length, sampler window)."""
        defaults = self.sampling_defaults()
        inputs = GenerationInputs.from_call(prompt, negative_prompt, options, defaults)
        limits = self.limits
        prompts = prompt_list("prompt", inputs.prompt, limits.max_prompt_chars)
        negatives = None
        if inputs.negative_prompt is not None:
            if not self.supports_negative_prompt:
                raise ValueError(
                    f"{type(self).__name__} does not take a negative_prompt (its unconditional branch is fixed); "
                    "pass negative_prompt=None"
                )
            negatives = prompt_list("negative_prompt", inputs.negative_prompt, limits.max_prompt_chars, True)
            if len(negatives) == 1 and len(prompts) > 1:
                negatives = negatives * len(prompts)
            if len(negatives) != len(prompts):
                raise ValueError(
                    f"got {len(negatives)} negative prompts for {len(prompts)} prompts; pass one, or one per prompt"
                )
        per_prompt = checks.integer("num_images_per_prompt", inputs.num_images_per_prompt, 1)
        batch = len(prompts) * per_prompt
        if batch > limits.max_images_per_call:
            raise ValueError(
                f"{len(prompts)} prompt(s) x num_images_per_prompt={per_prompt} is {batch} images, more than "
                f"limits.max_images_per_call={limits.max_images_per_call}; split the call, or raise the limit "
                "with pipe.limits = arjet.Limits(max_images_per_call=...)"
            )
        adaptive = is_adaptive(inputs.sampler)  # checked as its widest window; `__call__` chooses the window
        sampler = sampler_registry.get(widest_spec(limits.max_window) if adaptive else inputs.sampler)
        label = ADAPTIVE if adaptive else sampler_registry.label(inputs.sampler)
        sampling = inputs.sampling  # resolved: None left a number to the checkpoint or family
        if not self.classifier_free_guidance and sampling.guidance_scale != 1:
            raise ValueError(
                f"guidance_scale={sampling.guidance_scale!r}: {type(self).__name__}'s AR stage has no "
                "classifier-free guidance (the model defines no unconditional branch); pass guidance_scale=None "
                f"or 1{self.guidance_hint}"
            )
        size = self.image_size(inputs.height, inputs.width, inputs.aspect_ratio)
        grid = self.grid_for(*size)
        sampler.check_grid(grid, limits.max_window, vocab_size=self.session_adapter().code_vocab_size)
        self.check_requirements(sampler, label)
        if inputs.output_type not in OUTPUT_TYPES:
            raise ValueError(f"output_type must be one of {OUTPUT_TYPES}, got {inputs.output_type!r}")
        threads = checks.optional_integer("threads", inputs.threads, 1, MAX_THREADS)
        checks.boolean("return_dict", inputs.return_dict)
        fallback = self.eager_fallback if inputs.compile == AUTO_COMPILE else None
        mode = compile_mode(inputs.compile, self._execution_device, fallback=fallback)
        callback = inputs.callback_on_step_end
        if callback is not None and not callable(callback):
            raise ValueError(f"callback_on_step_end must be callable, got {callback!r}")
        tensor_inputs = callback_tensor_inputs(
            inputs.callback_on_step_end_tensor_inputs, self._callback_tensor_inputs
        )
        generators = image_generators(inputs.generator, inputs.seed, batch)
        self.check_prompt_lengths(prompts, negatives, grid)
        return CheckedInputs(
            prompts=prompts,
            negative_prompts=negatives,
            sampler=sampler,
            sampler_label=label,
            grid=grid,
            sampling=sampling,
            generators=generators,
            num_images_per_prompt=per_prompt,
            batch_size=batch,
            output_type=inputs.output_type,
            return_dict=inputs.return_dict,
            callback=callback,
            tensor_inputs=tensor_inputs,
            compile=mode,
            threads=threads,
            size=size,
            fallback=fallback if mode != "none" else None,
        )

    def image_size(self, height: Any, width: Any, aspect_ratio: Any) -> tuple[int, int]:
        """(height, width) in pixels from the call's arguments: given, from an aspect ratio, or the default."""
        for name, value in (("height", height), ("width", width)):
            if value is not None and (not checks.is_integer(value) or value <= 0):
                raise ValueError(
                    f"{name} must be a positive integer (pixels), or None for the default size; got {checks.shown(value)}"
                )
        if aspect_ratio is not None:
            if height is not None or width is not None:
                raise ValueError(
                    f"pass either aspect_ratio or height/width, not both (got aspect_ratio={aspect_ratio!r}, "
                    f"height={height!r}, width={width!r})"
                )
            return self.size_for_aspect_ratio(aspect_ratio)
        default_height, default_width = self.default_size()
        return (
            default_height if height is None else height,
            default_width if width is None else width,
        )

    def check_prompt_lengths(
        self, prompts: list[str], negatives: list[str] | None, grid: tuple[int, int]
    ) -> None:
        """Every prompt row must fit the model's positions next to the image (and `limits.max_prompt_tokens`)."""
        preview = self.preview_grid(grid)
        image = sum(
            self.image_layout(g).body_length for g in ([grid] if preview is None else [preview, grid])
        )
        positions = self.max_positions()
        limit = self.limits.max_prompt_tokens
        rows = [("prompt", p, False) for p in dict.fromkeys(prompts)]
        rows += [("negative_prompt", p, True) for p in dict.fromkeys(negatives or [])]
        for name, text, negative in rows:
            length = self.prompt_length(text, grid, negative=negative)
            shown = text if len(text) <= 60 else text[:57] + "..."
            if limit is not None and length > limit:
                raise ValueError(
                    f"{name} {shown!r} is {length} tokens (chat template included), more than "
                    f"limits.max_prompt_tokens={limit}; shorten it"
                )
            if positions is not None and length + image > positions:
                raise ValueError(
                    f"{name} {shown!r} is {length} tokens (chat template included) and the {grid[0]}x{grid[1]} image "
                    f"needs {image} positions, but this model has {positions}; shorten the {name} to at most "
                    f"{positions - image - (length - text_tokens(self.text_tokenizer, text))} tokens of text"
                )

    def capabilities(self) -> set[str]:
        """What this pipeline offers samplers beyond the session's contract (see `CAPABILITIES`)."""
        offered = set()
        if self.image_tokenizer.codebook() is not None:
            offered.add("codebook")
        if self.noise_conditioning is not None:
            offered.add("noise_conditioning")
        if self.drafter is not None:
            offered.add("drafter")
        return offered

    def check_requirements(self, sampler: Sampler, label: str | None = None) -> None:
        """Refuse a sampler that needs a capability this pipeline lacks (`arjet.samplers.requirements`), or a
        drafter that does not fit the model (`Drafter.check_target`)."""
        label = label or sampler_registry.label(sampler)
        offered = self.capabilities()
        needs = requirements(sampler)
        for capability, who in needs.items():
            if capability in offered:
                continue
            what = CAPABILITIES.get(capability, f"the capability {capability!r}")
            user = f"{label} uses {who}, which needs" if who else f"{label} needs"
            raise ValueError(
                f"{user} {what}, and this {type(self).__name__} has none; choose a sampler that does not "
                f"need {capability!r}"
            )
        if "drafter" in needs:  # a drafter set as an attribute, or a model swapped, since it was registered
            self.drafter.check_target(self.session_adapter(), self.device)

    def register_modules(self, **modules: Any) -> None:
        """diffusers' registration, with a drafter checked against the model first (`Drafter.check_target`:
        a drafter of another model's width is refused here, on loading a folder and in
        `pipe.register_modules(drafter=...)`, not in the middle of a decode)."""
        if modules.get("drafter") is None:
            return super().register_modules(**modules)
        drafter = modules.pop("drafter")
        super().register_modules(**modules)  # the model first (a family's `__init__` passes both)
        drafter.check_target(self.session_adapter(), self.device)
        super().register_modules(drafter=drafter)

    def checkpoint_guidance_scale(self) -> float:
        """The checkpoint's default CFG scale (its config may set one), else the family's (1: none)."""
        configured = self.config.get("default_guidance_scale")
        return self.default_guidance_scale if configured is None else configured

    # -- decoding codes to pixels -------------------------------------------------------------------
    def render(self, codes: torch.Tensor, call: CheckedInputs, prompts: list[str]):
        """The call's images for its decoded `codes [N, H, W]` (`prompts`: one per image): the image
        tokenizer's decode (`images_from_codes`); GLM-Image runs its diffusion stage instead."""
        return self.images_from_codes(codes, call.output_type)

    @torch.no_grad()
    def images_from_codes(self, codes: torch.Tensor, output_type: str = "pil"):
        """Images for codes `[N, H, W]` through the image tokenizer's decoder (`output_type` as in a call:
        "pil", "np" or "pt"). Undecoded cells (`-1`) are painted mid-grey, for live previews."""
        tokenizer = self.image_tokenizer
        missing = codes < 0
        pixels = tokenizer.decode(codes.clamp(min=0)).float()
        if not torch.isfinite(pixels).all():  # once per call, after the decode: black images otherwise
            raise ValueError(
                "the image tokenizer's decoder gave pixels that are not finite (NaN or inf): its weights or its "
                "config make it overflow; load a checkpoint whose VQ weights are sound"
            )
        if missing.any():
            factor = tokenizer.downsample
            hole = missing[:, None].float().repeat_interleave(factor, 2).repeat_interleave(factor, 3)
            pixels = pixels * (1 - hole)
        processor = VaeImageProcessor(do_resize=False, do_normalize=True)
        return processor.postprocess(pixels.cpu(), output_type=output_type)

    def decode_codes(self, codes: torch.Tensor, output_type: str = "pil"):
        """Deprecated: `images_from_codes` (the name said "decode" for what turns codes into pixels, while
        decoding is what makes the codes). Kept for one release."""
        warnings.warn(
            "pipe.decode_codes is deprecated; use pipe.images_from_codes (same arguments)",
            FutureWarning,
            stacklevel=2,
        )
        return self.images_from_codes(codes, output_type)
