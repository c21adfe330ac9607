"""What a request to the engine is, what it gets back, and how it is grouped with others.

A request is one image: a prompt, a seed and the call options of `pipe(...)` (sampler, size, guidance,
temperature, top-k, top-p), checked by the pipeline's own `check_inputs` when it is submitted. Requests
whose decodes can share one batch (the same sampler, grid and target distribution) form a `GroupKey`; the
engine runs each group in lanes of its own (see `arjet.engine.engine`).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

import torch

from ..pipelines.inputs import CheckedInputs
from ..samplers import DecodeStats, Sampler

ADAPTIVE = "adaptive"  # the engine's own mode: MC-SJD whose window it chooses every step from the load

_ids = itertools.count(1)


class QueueFull(Exception):
    """The engine's queue holds `max_queue` requests already; try again later."""


class Cancelled(Exception):
    """The request was cancelled (its client left, or it ran past its time limit)."""


@dataclass(frozen=True)
class GroupKey:
    """What requests must share to decode in one batch of lanes."""

    sampler: str  # the sampler's label, or "adaptive"
    grid: tuple[int, int]
    guidance_scale: float
    temperature: float
    top_k: int | None
    top_p: float | None


@dataclass
class EngineResult:
    """One request's image codes `[H, W]` and what they cost: `stats` as `pipe(...)` reports them (forward
    passes of this image, seconds from its start to its end), `queued` seconds spent waiting for a lane."""

    codes: torch.Tensor
    stats: DecodeStats
    queued: float


@dataclass
class Request:
    """A submitted request: its checked call, its random key, and the future its result resolves."""

    prompt: str
    call: CheckedInputs
    key: torch.Tensor  # [1] the image's random key (as `pipe(...)` would draw it from its seed)
    group: GroupKey
    sampler: Sampler
    size: tuple[int | None, int | None] = (None, None)  # (height, width) in pixels as given (None: default)
    generator_state: torch.Tensor | None = None  # its generator before the key was drawn
    on_step: Callable[[torch.Tensor], None] | None = None  # gets the codes `[H, W]` after each step
    deadline: float | None = None  # time.monotonic() after which the request is cancelled
    withdraw: Callable[[Request], None] | None = None  # takes a cancelled request out of its queue at once
    id: int = field(default_factory=lambda: next(_ids))
    submitted: float = field(default_factory=time.monotonic)
    future: Future = field(default_factory=Future)
    _cancelled: threading.Event = field(default_factory=threading.Event)

    def cancel(self) -> None:
        """Stop the request: it leaves the queue at once, or frees its lane at the engine's next step."""
        if self.future.done():
            return
        self._cancelled.set()
        if self.withdraw is not None:
            self.withdraw(self)

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def expired(self, now: float) -> bool:
        return self.deadline is not None and now > self.deadline

    def result(self, timeout: float | None = None) -> EngineResult:
        return self.future.result(timeout)

    def fail(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)

    def finish(self, result: EngineResult) -> None:
        if not self.future.done():
            self.future.set_result(result)
