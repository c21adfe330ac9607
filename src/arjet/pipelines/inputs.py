"""The arguments of a pipeline call, declared once and checked once.

`GenerationInputs` declares every argument `pipe(prompt, ...)` takes, with its default; `__call__` and
`check_inputs` build it from their keyword arguments, so a keyword it does not declare is refused by name
(a diffusers habit such as `num_inference_steps=` is told why AR pipelines have none). The pipeline's
`check_inputs` turns it into `CheckedInputs` with the checks here (prompts, seeds and generators, callback
tensors) and its own (sizes, the sampler against the model, prompt lengths), before any model work.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy
import torch

from .. import checks
from ..limits import AUTO_COMPILE
from ..samplers import LogitsPolicy, Sampler, SamplingOptions
from ..session.capture import EagerFallback

OUTPUT_TYPES = ("pil", "np", "pt", "latent")  # `GenerationInputs` says what each returns
# diffusers' arguments that have no meaning for an AR pipeline, and what to use instead
DIFFUSION_ONLY = {
    "num_inference_steps": "AR pipelines have no inference steps: an image takes one forward pass per code, "
    "fewer with a parallel sampler; choose the sampler instead (sampler='sjd')",
    "timesteps": "AR pipelines have no timesteps; choose the sampler instead (sampler='sjd')",
    "latents": "AR pipelines start from no latents: codes are sampled one after the other; pass seed= or "
    "generator= to fix them",
}


@dataclass(frozen=True)
class GenerationInputs:
    """The arguments of `pipe(prompt, ...)`, as given (the sampling options resolved against the defaults).

    `prompt`: a string or a list of strings. `negative_prompt`: one, or one per prompt (families whose
    unconditional branch is fixed refuse it). `sampler`: a registered name, a spec (`"sjd:window=32"`) or a
    `Sampler` object. `height` / `width`: pixels (None: the pipeline's default size); families that size
    images by shape (Emu3) also take `aspect_ratio="W:H"` instead. `sampling`: the `SamplingOptions` a call
    gives as four keywords, `guidance_scale` (CFG; 1 disables it; None: the checkpoint's or family's default),
    `temperature` (0 = greedy), `top_k` and `top_p`, which form the target distribution every sampler must
    respect; `top_k` / `top_p` None, and `temperature` left out, take the family's default (temperature 1,
    top-k the family's, no top-p; GLM-Image: its generation config's, as transformers' `generate` reads
    it): `from_call` resolves them, so `sampling` holds the numbers the decode uses.
    `num_images_per_prompt`: images per prompt. `seed=s` gives image `i` the generator `s + i` (or pass one
    seed or one `generator` per image); an image then decodes the same whatever else shares its batch.
    `return_dict`: an `ARPipelineOutput`, else the tuple `(images, codes, stats)`.
    `callback_on_step_end(pipe, step, forward_passes, tensors)` runs after every sampler step with copies of
    the tensors named in `callback_on_step_end_tensor_inputs` (default `["codes"]`). `compile`: how each
    fixed-shape decode step runs: "auto" (default: captured on a GPU, eager on the CPU), False (eagerly),
    "cuda-graphs", "inductor", "inductor-graphs" or True (see `BaseARPipeline.__call__`).

    `output_type`, what `images` holds for `N` images of `h x w` pixels:

    - `"pil"` (default): a list of `N` RGB `PIL.Image.Image`;
    - `"np"`: a float32 `numpy.ndarray [N, h, w, 3]`, values in [0, 1];
    - `"pt"`: a float32 `torch.Tensor [N, 3, h, w]` on the CPU, values in [0, 1];
    - `"latent"`: the image codes themselves, `LongTensor [N, H, W]` (the code grid, as `codes`), with no
      pixel decoding (and for GLM-Image no diffusion stage).

    `threads`: torch's CPU threads during this call only (1 to 1024; the process's count is restored after).
    None (default): on the CPU, one per core that other processes leave free, measured since the previous
    call, and at most the process's own count; unchanged where the user set it with `torch.set_num_threads`
    after importing arjet, or on a GPU (`arjet.pipelines.threads` has the rule)."""

    prompt: str | list[str]
    negative_prompt: str | list[str] | None = None
    sampler: str | Sampler = "ar"
    height: int | None = None
    width: int | None = None
    aspect_ratio: str | None = None
    sampling: SamplingOptions = SamplingOptions()
    num_images_per_prompt: int = 1
    generator: torch.Generator | list[torch.Generator] | None = None
    seed: int | list[int] | None = None
    output_type: str = "pil"
    return_dict: bool = True
    callback_on_step_end: Callable[..., dict[str, Any] | None] | None = None
    callback_on_step_end_tensor_inputs: list[str] | None = None
    compile: bool | str = AUTO_COMPILE
    threads: int | None = None

    @classmethod
    def from_call(
        cls,
        prompt: Any,
        negative_prompt: Any,
        options: dict[str, Any],
        defaults: SamplingOptions | None = None,
    ) -> GenerationInputs:
        """The inputs of `pipe(prompt, negative_prompt, **options)`, the sampling options given as keywords
        and resolved against `defaults` (the pipeline's `sampling_defaults()`: what the call leaves out or
        gives as None, the temperature only where left out); ValueError naming a keyword it lacks."""
        known = {item.name for item in dataclasses.fields(cls)} - {"prompt", "negative_prompt", "sampling"}
        known |= set(SamplingOptions.names())
        for name in options:
            if name in DIFFUSION_ONLY:
                raise ValueError(f"{name}= is not an argument of an AR pipeline: {DIFFUSION_ONLY[name]}")
            if name not in known:
                raise ValueError(
                    f"unexpected argument {name}=; a pipeline call takes prompt, negative_prompt and "
                    f"{', '.join(sorted(known))}"
                )
        options = {name: python_scalar(value) for name, value in options.items()}
        given = {name: options[name] for name in SamplingOptions.names() if name in options}
        sampling = SamplingOptions.from_kwargs(given, defaults)
        rest = {name: value for name, value in options.items() if name not in given}
        return cls(prompt, negative_prompt, sampling=sampling, **rest)


def python_scalar(value: Any) -> Any:
    """A NumPy number or bool (`np.int64(5)`, `np.float32(0.5)`: what indexing an array gives) as the Python
    one, element-wise through a list of seeds; anything else as it is, for the checks to judge."""
    if isinstance(value, list):
        return [python_scalar(item) for item in value]
    return value.item() if isinstance(value, numpy.generic) and numpy.ndim(value) == 0 else value


def call_fields() -> list[tuple[str, Any, Any]]:
    """(name, default, annotation) of every keyword `pipe(...)` takes, in `GenerationInputs`' order, with
    `sampling` spelled as its four values (`guidance_scale=`, `temperature=`, `top_k=`, `top_p=`)."""
    listed: list[tuple[str, Any, Any]] = []
    for item in dataclasses.fields(GenerationInputs):
        parts = dataclasses.fields(SamplingOptions) if item.name == "sampling" else [item]
        listed += [(part.name, part.default, part.type) for part in parts]
    return listed


def call_signature(extra: Sequence[inspect.Parameter] = ()) -> inspect.Signature:
    """`(self, prompt, negative_prompt=None, *, sampler="ar", ...)`: what `help(pipe)` shows for the call;
    `extra`: keyword-only arguments a family's call takes besides (GLM-Image's diffusion stage)."""
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for name, default, annotation in call_fields():
        positional = name in ("prompt", "negative_prompt")
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD if positional else inspect.Parameter.KEYWORD_ONLY
        default = inspect.Parameter.empty if default is dataclasses.MISSING else default
        parameters.append(inspect.Parameter(name, kind, default=default, annotation=annotation))
    return inspect.Signature([*parameters, *extra])


@dataclass
class CheckedInputs:
    """The arguments of a pipeline call once `check_inputs` has validated them and filled in the defaults."""

    prompts: list[str]
    negative_prompts: list[str] | None  # one per prompt, or None for the family's unconditional branch
    sampler: Sampler
    sampler_label: str  # the spec as given (`sjd:window=32`) or the object's name: what the stats say
    grid: tuple[int, int]
    sampling: SamplingOptions  # resolved: the checkpoint's or family's numbers where the call left them out
    generators: torch.Generator | list[torch.Generator] | None
    num_images_per_prompt: int
    batch_size: int  # prompts x num_images_per_prompt
    output_type: str
    return_dict: bool
    callback: Callable[..., dict[str, Any] | None] | None
    tensor_inputs: list[str]
    compile: str  # one of `arjet.session.capture.COMPILE_MODES` ("auto" resolved)
    stage_options: dict[str, Any] = dataclasses.field(
        default_factory=dict
    )  # a family's later stage's (a DiT's)
    threads: int | None = None  # torch's CPU threads for the call; None: chosen by `arjet.pipelines.threads`
    size: tuple[int, int] | None = None  # (height, width) in pixels, as asked for or defaulted
    # where "auto" chose to capture or compile: the pipeline's switch to eager steps if that fails (else None:
    # a failure raises)
    fallback: EagerFallback | None = None

    @property
    def guidance_scale(self) -> float:
        """The call's CFG scale (1: unguided), as `sampling` resolves it."""
        return self.sampling.guidance_scale

    @property
    def policy(self) -> LogitsPolicy:
        """Temperature, top-k and top-p as the samplers apply them."""
        return self.sampling.policy()


def prompt_list(name: str, value: Any, max_chars: int, allow_empty: bool = False) -> list[str]:
    """`value` (a string or a list of strings) as a list, each within `max_chars`; ValueError naming `name`."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not items:
        raise ValueError(
            f"{name} must be a non-empty string or a non-empty list of strings, got {checks.shown(value)}"
        )
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"{name} must contain only strings, got {type(item).__name__}: {item!r}")
        checks.text(name, item)
        if not allow_empty and not item.strip():
            raise ValueError(f"{name} must not be empty or whitespace, got {item!r}")
        if len(item) > max_chars:
            raise ValueError(
                f"{name} has {len(item)} characters, more than limits.max_prompt_chars={max_chars}; shorten it"
            )
    return list(items)


def callback_tensor_inputs(names: Any, allowed: list[str]) -> list[str]:
    """The tensors a step callback asked for (default `["codes"]`), each one the pipeline allows."""
    if names is None:
        return ["codes"]
    if isinstance(names, str) or not isinstance(names, (list, tuple)):
        raise ValueError(
            f"callback_on_step_end_tensor_inputs must be a list of names from {allowed}, got {names!r}"
        )
    unknown = [name for name in names if name not in allowed]
    if unknown:
        raise ValueError(f"callback tensor inputs {unknown} not allowed; choose from {allowed}")
    return list(names) or ["codes"]


def image_generators(generator: Any, seed: Any, batch: int) -> torch.Generator | list[torch.Generator] | None:
    """What keys each image's random stream: `seed` (an int `s`, image i gets `s + i`, or a list of one int
    per image, each `0 <= seed < 2**63`) as one generator per image; or `generator` (a `torch.Generator`, or
    a list of one per image) as given; not both. ValueError naming the argument."""
    if generator is not None and seed is not None:
        raise ValueError("pass either generator or seed, not both")
    if seed is not None:
        if isinstance(seed, (list, tuple)):
            if len(seed) != batch:
                raise ValueError(
                    f"seed must be an int or a list of {batch} ints (one per image), got {len(seed)} seeds"
                )
            for index, item in enumerate(seed):
                checks.seed(f"seed[{index}]", item)
            seeds = list(seed)
        elif checks.is_integer(seed):
            checks.seed("seed", seed, batch)
            seeds = [seed + i for i in range(batch)]
        else:
            raise ValueError(f"seed must be an int or a list of {batch} ints (one per image), got {seed!r}")
        return [torch.Generator("cpu").manual_seed(s) for s in seeds]
    if generator is None:
        return None
    several = isinstance(generator, (list, tuple))
    if several and len(generator) != batch:
        raise ValueError(f"got {len(generator)} generators for {batch} images; pass one per image")
    for item in generator if several else [generator]:
        if not isinstance(item, torch.Generator):
            raise ValueError(
                f"generator must be a torch.Generator or a list of one per image, got {type(item).__name__}: "
                f"{item!r}"
            )
    return list(generator) if several else generator


def text_tokens(tokenizer: Any, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"])
