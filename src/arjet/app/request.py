"""What a page visitor may ask for, checked before any model work: every bad value gets one readable line.

The demo is stricter than the library: short prompts, seeds below 2**31, bounded sampling numbers, and
sampler options typed by the registry's schema and capped at `MAX_OPTION_VALUES` (a visitor's window of
200000 would otherwise hold the one decode slot for minutes). The pipelines themselves run with
`arjet.limits.DEMO_LIMITS`, and every request has a time budget (`arjet app --time-limit`).
"""

from __future__ import annotations

import reprlib
from dataclasses import dataclass
from typing import Any

from .. import checks, samplers
from ..limits import DEMO_LIMITS

MAX_OPTIONS_CHARS = 200
MAX_SEED = 2**31 - 1
# the page's sliders and fields: the sampling numbers a visitor may pick (top-k 0: the model's default)
DEMO_SAMPLING_RANGES = {"guidance_scale": (0.0, 20.0), "temperature": (0.0, 5.0), "top_k": (0, 1_000_000)}
# the largest value of each size option a visitor may pick (windows, lags, neighbours, levels)
MAX_OPTION_VALUES = {"window": DEMO_LIMITS.max_window, "w": 64, "k": 64, "top": 16, "levels": 16}


@dataclass(frozen=True)
class DecodeRequest:
    """One generation asked for in the page; `sampler` is a registry spec (`"sjd:window=16"`)."""

    prompt: str
    sampler: str
    seed: int
    sampling: samplers.SamplingOptions  # the page sets guidance, temperature and top-k (None: the model's)


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
    max_prompt_chars: int = DEMO_LIMITS.max_prompt_chars,
) -> DecodeRequest:
    """A checked request; raises ValueError naming the bad value and what is allowed."""
    if prompt is not None and not isinstance(prompt, str):
        raise ValueError(f"The prompt must be text, got {type(prompt).__name__}: {reprlib.repr(prompt)}.")
    if not prompt or not prompt.strip():
        raise ValueError("The prompt is empty: describe an image, e.g. 'a red circle left of a blue square'.")
    if len(prompt) > max_prompt_chars:
        raise ValueError(f"The prompt has {len(prompt)} characters; at most {max_prompt_chars} are allowed.")
    checks.text("The prompt", prompt)
    if not isinstance(sampler, str) or sampler not in samplers.available():
        raise ValueError(
            f"Unknown sampler {reprlib.repr(sampler)}; choose one of {', '.join(samplers.available())}."
        )
    if options is not None and not isinstance(options, str):
        raise ValueError(
            f"The sampler options must be text, got {type(options).__name__}: {reprlib.repr(options)}."
        )
    options = options or ""
    if len(options) > MAX_OPTIONS_CHARS:
        raise ValueError(f"The sampler options have {len(options)} characters; at most {MAX_OPTIONS_CHARS}.")
    spec = sampler_spec(sampler, options)
    try:
        samplers.get(spec)
        _check_demo_options(sampler, spec.partition(":")[2])
    except ValueError as error:
        raise ValueError(f"Bad sampler options {options!r}: {error}") from None
    seed = _integer("seed", seed, 0, MAX_SEED)
    values = {
        name: _number(name, value, *DEMO_SAMPLING_RANGES[name])
        for name, value in (("guidance_scale", guidance_scale), ("temperature", temperature))
    }
    top_k = _integer("top_k", top_k, *DEMO_SAMPLING_RANGES["top_k"])  # 0: the model's default
    return DecodeRequest(prompt.strip(), spec, seed, samplers.SamplingOptions(top_k=top_k or None, **values))


def _check_demo_options(sampler: str, options: str) -> None:
    """Each size option within `MAX_OPTION_VALUES` (the registry has already checked types and ranges)."""
    if not options:
        return
    values = samplers.parse_options(options, samplers.options(sampler))
    for name, value in values.items():
        cap = MAX_OPTION_VALUES.get(name)
        if cap is not None and value is not None and value > cap:
            raise ValueError(f"{name}={value} is above this demo's limit of {cap}")


def _number(name: str, value: Any, low: float, high: float) -> float:
    return checks.number(name, value, low, high)


def _integer(name: str, value: Any, low: int, high: int) -> int:
    """A whole number; the page's number fields send `7.0` for 7."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return checks.integer(name, value, low, high)
