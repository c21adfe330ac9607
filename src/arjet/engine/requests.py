"""What a request to the engine is, what it gets back, and how it is grouped with others.

A request is one image: a prompt, a seed and the call options of `pipe(...)` (sampler, size, guidance,
temperature, top-k, top-p), checked by the pipeline's own `check_inputs` when it is submitted. Requests
whose decodes can share one batch (the same sampler, grid and target distribution) form a `GroupKey`; the
engine runs each group in lanes of its own (see `arjet.engine.engine`).
"""

from __future__ import annotations

import functools
import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import torch

from ..pipelines.inputs import CheckedInputs
from ..samplers import DecodeStats, Sampler, SamplingOptions

_ids = itertools.count(1)


class QueueFull(Exception):
    """The engine cannot take the request now (`max_queue` requests wait already); try again in
    `retry_after` seconds (the engine's estimate; None before it has one)."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class Overloaded(QueueFull):
    """The request would wait longer than its time limit: `expected_wait` seconds (the images ahead of it
    over the engine's measured throughput, plus its own decode). Refused at once rather than left to time
    out in the queue; `retry_after`: when enough of the queue ahead should have cleared."""

    def __init__(self, message: str, retry_after: float, expected_wait: float):
        super().__init__(message, retry_after)
        self.expected_wait = expected_wait


class Cancelled(Exception):
    """The request was cancelled (its client left, or it ran past its time limit)."""


class EngineStopped(RuntimeError):
    """The engine takes no more work: it was closed, or its decode thread stopped after an error."""


class DecodeFailed(RuntimeError):
    """The request's decode failed (its group's step raised: out of memory, say); the group is dropped and
    the engine goes on serving the other requests."""


@dataclass(frozen=True)
class GroupKey:
    """What requests must share to decode in one batch of lanes."""

    sampler: str  # the sampler's label, or "adaptive"
    grid: tuple[int, int]
    sampling: SamplingOptions  # the target distribution (guidance resolved, top-k the family's if left out)


@dataclass
class EngineResult:
    """One request's image codes `[H, W]` and what they cost: `stats` as `pipe(...)` reports them (forward
    passes of this image, seconds from its start to its end), `queued` seconds spent waiting for a lane.
    `image`: the image in the request's `output_type`, as `pipe(...).images[0]` (the codes for "latent"),
    rendered on first use in the thread that reads it, never on the engine's decode thread."""

    codes: torch.Tensor
    stats: DecodeStats
    queued: float
    render: Callable[[torch.Tensor], Any] | None = field(default=None, repr=False, compare=False)

    @functools.cached_property
    def image(self) -> Any:
        return self.codes if self.render is None else self.render(self.codes)


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
    deadline: float | None = None  # the engine's clock after which the request is cancelled
    started: float | None = None  # the engine's clock when its decode started
    withdraw: Callable[[Request], None] | None = None  # takes a cancelled request out of its queue at once
    raised_to_caller: bool = False  # its failure is raised to its caller (a warm-up's): the engine logs none
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
