"""What a page visitor may ask for, checked before any model work: every bad value gets one readable line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import samplers

MAX_PROMPT_CHARS = 300
MAX_SEED = 2**31 - 1
LIMITS = {"guidance_scale": (0.0, 20.0), "temperature": (0.0, 5.0), "top_k": (0, 1_000_000)}


@dataclass(frozen=True)
class DecodeRequest:
    """One generation asked for in the page; `sampler` is a registry spec (`"sjd:window=16"`)."""

    prompt: str
    sampler: str
    seed: int
    guidance_scale: float
    temperature: float
    top_k: int  # 0 = the model's default

    def pipeline_kwargs(self) -> dict[str, Any]:
        return dict(
            seed=self.seed,
            guidance_scale=self.guidance_scale,
            temperature=self.temperature,
            top_k=self.top_k or None,
        )


def sampler_spec(name: str, options: str) -> str:
    """`"sjd"` + `"window=8, init=random"` -> `"sjd:window=8,init=random"`."""
    options = ",".join(part.strip() for part in (options or "").split(",") if part.strip())
    return f"{name}:{options}" if options else name


def make_request(
    prompt: Any,
    sampler: Any,
    options: Any,
    seed: Any,
    guidance_scale: Any,
    temperature: Any,
    top_k: Any,
    max_prompt_chars: int = MAX_PROMPT_CHARS,
) -> DecodeRequest:
    """A checked request; raises ValueError naming the bad value and what is allowed."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("The prompt is empty: describe an image, e.g. 'a red circle left of a blue square'.")
    if len(prompt) > max_prompt_chars:
        raise ValueError(f"The prompt has {len(prompt)} characters; at most {max_prompt_chars} are allowed.")
    if sampler not in samplers.available():
        raise ValueError(f"Unknown sampler {sampler!r}; choose one of {', '.join(samplers.available())}.")
    spec = sampler_spec(sampler, options if isinstance(options, str) else "")
    try:
        samplers.get(spec)
    except ValueError as error:
        raise ValueError(f"Bad sampler options {options!r}: {error}") from None
    seed = _integer("seed", seed, 0, MAX_SEED)
    values = {
        name: _number(name, value, *LIMITS[name])
        for name, value in (("guidance_scale", guidance_scale), ("temperature", temperature))
    }
    top_k = _integer("top_k", top_k, *LIMITS["top_k"])
    return DecodeRequest(prompt.strip(), spec, seed, top_k=top_k, **values)


def _number(name: str, value: Any, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ValueError(f"{name} must be a number from {low:g} to {high:g}, got {value!r}.")
    return float(value)


def _integer(name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be a whole number from {low} to {high}, got {value!r}.")
    return value
