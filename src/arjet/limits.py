"""Bounds on the work one pipeline call may ask for, checked before any tokenizing or model work.

Every pipeline carries a `Limits` (`pipe.limits`, default `Limits()`); an operator who needs more sets
`pipe.limits = arjet.Limits(max_images_per_call=256)`. The web demo runs with `DEMO_LIMITS`, stricter
still. Limits that come from the model itself are not settings: a prompt never runs past the model's
positions (the image needs its own), and a sampler's window or lag never exceeds the grid.

`EngineConfig` is what an engine (`arjet.engine.Engine`) takes on, with the named defaults of its faces
(`SERVE_ENGINE` for `arjet serve`, `DEMO_ENGINE` for the demo); the bounds every face checks against
(`MAX_LANES`, `MAX_QUEUE`, `MAX_THREADS`, `KEY_LIMIT`) are defined here, once. Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import checks

# guidance_scale / temperature scales the logits; above this a float32 logit of ordinary size overflows
# (the largest float32 is 3.4e38), which turns the distribution into NaN and the image into grey
MAX_LOGIT_SCALE = 1e30
KEY_LIMIT = 2**63  # image keys (and seeds) are integers in [0, KEY_LIMIT)
MAX_THREADS = 1024  # a call's `threads=`, as the command line's --threads
MAX_LANES = 1024  # images one engine group decodes at once (each lane is a row of a static cache, and a view)
# captured step graphs an engine keeps by default: a group of 8 lanes uses 4 buckets x 2 spans (x windows in
# adaptive mode); the least recently used go beyond it
MAX_GRAPHS = 64
MAX_QUEUE = 100_000  # requests the command line lets an engine queue (--max-queue)
# a drafter's rotary positions (`max_position_embeddings`): far more than any prompt and image take
MAX_POSITIONS = 1 << 20
# a call's or an engine's `compile=` besides True / False (`arjet.session.capture.compile_mode` maps them);
# "auto", the default: captured steps on a GPU, eager ones on the CPU
AUTO_COMPILE = "auto"
# What "auto" picks on CUDA, by use. Measured (artifacts/gpu/2026-11-26-h100-compiled, Lumina-mGPT-7B 768 px
# `ar`): a one-off call is faster captured (26 s in all) than compiled and captured (42 s, about 21 s of it
# compiling); every later image is faster compiled (20.9 s against 25.6 s per image).
AUTO_ONE_OFF = "cuda-graphs"
AUTO_LASTING = "inductor-graphs"
COMPILE_CHOICES = ("none", "cuda-graphs", "inductor", "inductor-graphs", AUTO_COMPILE)
CAPTURED_CHOICES = ("cuda-graphs", "inductor-graphs")  # those that capture steps as CUDA graphs (CUDA only)


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


def time_limit(value: Any) -> float | None:
    """A time limit in seconds (> 0), or None for none; ValueError naming the bad value otherwise."""
    if value is None:
        return None
    return checks.number(
        "time_limit", value, 0.0, exclusive_minimum=True, note="seconds, or None for no limit"
    )


@dataclass(frozen=True)
class EngineConfig:
    """What an engine takes on (`Engine(pipe, config, **overrides)`), checked when made.

    `lanes`: images a group decodes at once (1 to `MAX_LANES`; their KV caches must fit in the device's free
    memory, which the engine checks); `max_queue`: requests that may wait (`submit` raises `QueueFull`
    beyond it); `prompt_tokens`: the longest prompt (chat template included) a request may have, the size of
    every lane's prompt region; `max_groups`: groups decoding side by side; `time_limit`: seconds a request
    may take from its submission (None: no limit); `compile`: as `pipe(..., compile=)` (True, False or one of
    `COMPILE_CHOICES`; the engine checks it against its pipeline's device; "auto", the default, compiles and
    captures on a GPU, an engine living long enough to earn the compile); `max_graphs`: captured step graphs
    kept at once over every group (the least recently used goes first; None: no bound)."""

    lanes: int = 8
    max_queue: int = 64
    prompt_tokens: int = 256
    max_groups: int = 2
    time_limit: float | None = None
    compile: bool | str = AUTO_COMPILE
    max_graphs: int | None = MAX_GRAPHS

    def __post_init__(self) -> None:
        checks.integer("lanes", self.lanes, 1, MAX_LANES)
        for name, value in (
            ("max_queue", self.max_queue),
            ("prompt_tokens", self.prompt_tokens),
            ("max_groups", self.max_groups),
        ):
            checks.integer(name, value, 1)
        checks.optional_integer("max_graphs", self.max_graphs, 1)
        object.__setattr__(self, "time_limit", time_limit(self.time_limit))
        compile = self.compile
        if not (compile is None or isinstance(compile, bool) or compile in COMPILE_CHOICES):
            raise ValueError(
                f"compile must be True, False or one of {', '.join(COMPILE_CHOICES)}; got {compile!r}"
            )


DEFAULT_ENGINE = EngineConfig()
# `arjet serve`: a shared server's lanes and queue; a request waits at most two minutes
SERVE_ENGINE = EngineConfig(lanes=8, max_queue=64, time_limit=120.0)
# the demo (`arjet app`): fewer lanes, a short queue, a minute per request
DEMO_ENGINE = EngineConfig(lanes=4, max_queue=16, time_limit=60.0)
