"""Bounds on the work one pipeline call may ask for, checked before any tokenizing or model work.

Every pipeline carries a `Limits` (`pipe.limits`, default `Limits()`); an operator who needs more sets
`pipe.limits = arjet.Limits(max_images_per_call=256)`. The web demo runs with `DEMO_LIMITS`, stricter
still. Limits that come from the model itself are not settings: a prompt never runs past the model's
positions (the image needs its own), and a sampler's window or lag never exceeds the grid.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import checks

# guidance_scale / temperature scales the logits; above this a float32 logit of ordinary size overflows
# (the largest float32 is 3.4e38), which turns the distribution into NaN and the image into grey
MAX_LOGIT_SCALE = 1e30


@dataclass(frozen=True)
class Limits:
    """`max_images_per_call`: prompts x `num_images_per_prompt` in one call (the batch is decoded at once,
    so memory grows with it). `max_prompt_chars`: characters per prompt, checked before tokenizing.
    `max_prompt_tokens`: prompt tokens (chat template included) per row; None = as many as the model's
    positions leave after the image. `max_window`: the largest sampler window (`sjd:window=`, `sjd2:window=`,
    ...); None = bounded by the grid only."""

    max_images_per_call: int = 64
    max_prompt_chars: int = 10_000
    max_prompt_tokens: int | None = None
    max_window: int | None = None

    def __post_init__(self) -> None:
        checks.integer("max_images_per_call", self.max_images_per_call, 1)
        checks.integer("max_prompt_chars", self.max_prompt_chars, 1)
        checks.optional_integer("max_prompt_tokens", self.max_prompt_tokens, 1)
        checks.optional_integer("max_window", self.max_window, 1)


DEFAULT_LIMITS = Limits()
# the public demo: one image per request, short prompts, windows a shared CPU / GPU slot can afford
DEMO_LIMITS = Limits(max_images_per_call=1, max_prompt_chars=300, max_prompt_tokens=256, max_window=64)
