"""Stream the canvases of images decoding side by side in an engine.

A visitor's images (one, or the chosen sampler and `ar` for a comparison) are requests to the model's
`Engine`, sharing its lanes with other visitors' images. The engine hands each image's codes to a queue
after every step; the consumer draws at most one canvas per `min_interval` seconds (the newest codes win)
so that previews never slow a decode down. Closing the stream (the visitor leaves) cancels the images,
which frees their lanes at the next step; an image past its time limit is stopped by the engine and the
stream raises `TimeBudgetExceeded`.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import PIL.Image
import torch

from ..engine import Cancelled, Engine, EngineResult
from ..pipelines.base import ARPipelineOutput
from ..samplers import SamplingOptions


class TimeBudgetExceeded(RuntimeError):
    """A decode was stopped because it ran past its time limit."""


@dataclass
class Frame:
    """One image's state in the live view: the canvas so far (undecoded cells grey), or the finished output."""

    canvas: PIL.Image.Image
    decoded: int
    total: int
    output: ARPipelineOutput | None = None


def stream_decode(
    engine: Engine,
    prompt: str,
    samplers: Sequence[Any],
    min_interval: float = 0.2,
    *,
    seed: int | None = None,
    sampling: SamplingOptions | None = None,
    time_limit: float | None = None,
) -> Iterator[list[Frame | None]]:
    """Frames of `prompt` decoded by each of `samplers` at once in `engine`, all with the same `seed` and
    `sampling` (None: the model's defaults) and `time_limit` (as `Engine.submit` takes them): every update
    is a list with the newest frame of each image (None before its first), the last one with every
    output."""
    updates: queue.Queue = queue.Queue()
    requests = []
    try:
        for index, sampler in enumerate(samplers):
            request = engine.submit(
                prompt,
                sampler=sampler,
                seed=seed,
                sampling=sampling,
                time_limit=time_limit,
                on_step=lambda codes, index=index: updates.put((index, codes)),
            )
            request.future.add_done_callback(lambda _, index=index: updates.put((index, None)))
            requests.append(request)
        yield from _frames(engine, requests, updates, min_interval)
    finally:
        for request in requests:
            request.cancel()  # nothing for finished images; a visitor who left frees the others' lanes


def _frames(engine: Engine, requests: list, updates: queue.Queue, min_interval: float):
    frames: list[Frame | None] = [None] * len(requests)
    latest: dict[int, torch.Tensor] = {}
    finished, last_drawn = 0, 0.0
    while finished < len(requests):
        index, codes = updates.get()
        if codes is not None:
            latest[index] = codes
            if time.monotonic() - last_drawn < min_interval:
                continue
            for waiting, newest in latest.items():
                frames[waiting] = _frame(engine.pipe, newest)
            latest.clear()
            last_drawn = time.monotonic()
            yield list(frames)
            continue
        try:
            result = requests[index].result()
        except Cancelled as error:
            if "time limit" in str(error):
                raise TimeBudgetExceeded("the decode ran past its time budget and was stopped") from None
            raise
        latest.pop(index, None)
        frames[index] = _finished(engine.pipe, result)
        finished += 1
        yield list(frames)


def _frame(pipe: Any, codes: torch.Tensor) -> Frame:
    canvas = pipe.images_from_codes(codes[None].to(pipe._execution_device), output_type="pil")[0]
    return Frame(canvas, int((codes >= 0).sum()), codes.numel())


def _finished(pipe: Any, result: EngineResult) -> Frame:
    image = result.image  # rendered here, in the visitor's thread, as `pipe(...)` renders it
    output = ARPipelineOutput(images=[image], codes=result.codes[None], stats=[result.stats])
    return Frame(image, result.codes.numel(), result.codes.numel(), output)
