"""Run a pipeline in a worker thread and stream the canvas as codes are committed.

The pipeline's `callback_on_step_end` hands the committed codes over a queue; the consumer decodes at most
one canvas per `min_interval` seconds (the newest step wins) so that a fast sampler is not slowed down by
previews. Closing the stream (a visitor leaves) interrupts the decode at its next step, and so does passing
the `deadline` (a time on `clock`): the stream then raises `TimeBudgetExceeded`, and the decode slot is free
for the next request once the current step ends. Both rely on the pipeline calling `callback_on_step_end`
after every sampler step and stopping when the callback sets `pipe._interrupt = True`.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import PIL.Image
import torch

from ..pipelines.base import ARPipelineOutput


class TimeBudgetExceeded(RuntimeError):
    """A decode was stopped because it ran past its deadline."""


@dataclass
class Frame:
    """One update of the live view: the canvas so far (undecoded cells grey), or the finished output."""

    canvas: PIL.Image.Image
    decoded: int
    total: int
    output: ARPipelineOutput | None = None


def stream_decode(
    pipe: Any,
    prompt: str,
    sampler: Any,
    min_interval: float = 0.2,
    *,
    deadline: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    **kwargs: Any,
) -> Iterator[Frame]:
    """Frames of one image decoded by `pipe(prompt, sampler=sampler, **kwargs)`, the last with its output.
    Past `deadline` (compared with `clock()` after every step) the decode stops and `TimeBudgetExceeded`
    is raised instead of the last frame."""
    updates: queue.Queue = queue.Queue()
    stop = threading.Event()
    timed_out = threading.Event()

    def on_step(pipeline, step, forward_passes, tensors):
        updates.put(("step", tensors["codes"][0]))
        if deadline is not None and clock() > deadline:
            timed_out.set()
        if stop.is_set() or timed_out.is_set():
            pipeline._interrupt = True
        return {}

    def work():
        try:
            output = pipe(prompt, sampler=sampler, callback_on_step_end=on_step, **kwargs)
            updates.put(("done", output))
        except BaseException as error:  # handed to the consumer, which re-raises it in its own thread
            updates.put(("error", error))

    worker = threading.Thread(target=work, name="arjet-decode", daemon=True)
    worker.start()
    last_frame = 0.0
    try:
        while True:
            kind, payload = updates.get()
            if kind == "step":
                while not updates.empty() and updates.queue[0][0] == "step":
                    payload = updates.get()[1]  # only the newest canvas is worth drawing
                if time.monotonic() - last_frame < min_interval:
                    continue
                last_frame = time.monotonic()
                yield _frame(pipe, payload)
            elif kind == "error":
                raise payload
            elif timed_out.is_set():
                raise TimeBudgetExceeded("the decode ran past its time budget and was stopped")
            else:
                codes = payload.codes[0]
                yield Frame(payload.images[0], codes.numel(), codes.numel(), payload)
                return
    finally:
        stop.set()
        worker.join()


def _frame(pipe: Any, codes: torch.Tensor) -> Frame:
    canvas = pipe.decode_codes(codes[None], output_type="pil")[0]
    return Frame(canvas, int((codes >= 0).sum()), codes.numel())
