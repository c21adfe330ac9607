"""Running a decode's fixed-shape steps as CUDA graphs, and compiling the decoder forward.

A built-in sampler's step has the same shapes at every call for a given attention span (see
`DecodingSession.reserve`) and reads nothing back from the device, so on CUDA it can be captured once per
span and replayed: one launch per step instead of hundreds. `CudaGraphRunner` is the `runner` a
`DecodeTrace` takes: the first `warmup` steps of each span run eagerly (they are real steps; they also
initialise lazily created library state and compile a compiled decoder's code for the span's shapes), the
next one is captured and replayed, and later steps of that span only replay. Python code inside the step
does not run on replay, so every piece of state a step changes lives in a device tensor updated in place;
the one Python counter it moves (`session.count`) is advanced here. A span costs an eager step and a
capture, so a captured session grows its span through `CAPTURED_SPAN_SIZES` sizes only: attending over a
few more empty slots costs less than capturing again.

The other mode, `torch.compile` of the decoder (CPU or CUDA), is `arjet.session.CompiledDecoder`;
"inductor-graphs" runs a compiled decoder inside captured steps (the kernels fused, then launched at once).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from ..limits import CAPTURED_CHOICES, COMPILE_CHOICES

if TYPE_CHECKING:
    from .session import DecodingSession

COMPILE_MODES = COMPILE_CHOICES  # declared once, in limits.py, beside the other bounds of a call
CAPTURED_MODES = CAPTURED_CHOICES  # steps captured as CUDA graphs (CUDA only)
COMPILED_MODES = ("inductor", "inductor-graphs")  # the decoder under `torch.compile`
CAPTURED_SPAN_SIZES = 2  # attention spans a captured session grows through (half the cache, then all of it)


def compile_mode(compile: bool | str, device: torch.device) -> str:
    """The mode for a pipeline's `compile=` argument: False / "none" (eager), "cuda-graphs", "inductor" (a
    `torch.compile` of the decoder), "inductor-graphs" (both), or True (CUDA graphs on a CUDA device, else
    inductor)."""
    if compile is True:
        return "cuda-graphs" if device.type == "cuda" else "inductor"
    if compile is False or compile is None:
        return "none"
    if compile not in COMPILE_MODES:
        raise ValueError(f"compile must be True, False or one of {', '.join(COMPILE_MODES)}; got {compile!r}")
    if compile in CAPTURED_MODES and device.type != "cuda":
        raise ValueError(
            f"compile={compile!r} needs a CUDA device; this pipeline runs on {device.type} "
            "(use compile='inductor' or compile=False)"
        )
    return compile


CAPTURE_KEYS = ("graph_captures", "graph_replays", "eager_steps", "capture_seconds", "replay_seconds")


class CudaGraphRunner:
    """Runs decode steps eagerly `warmup` times per attention span, then as a captured CUDA graph.

    `counts()` says what it did (the `CAPTURE_KEYS`): graphs captured, steps replayed, steps run eagerly,
    the seconds spent on the eager warm-up steps and the captures (timed with the device synchronised
    around them), and the device time of the replays (CUDA events around each, read once when `counts()` is
    called after the decode: the loop itself never waits for them)."""

    def __init__(self, session: DecodingSession, warmup: int = 1):
        self.session = session
        session.span_sizes = min(session.span_sizes, CAPTURED_SPAN_SIZES)
        self.warmup = warmup
        self.pool = None  # the graphs' memory pool, made at the first capture
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, int]] = {}
        self.eager_steps: dict[int, int] = {}
        self.replays = 0
        self.capture_seconds = 0.0
        self._replay_events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []

    def __call__(self, step: Callable[[], None]) -> None:
        span = self.session.span
        captured = self.graphs.get(span)
        if captured is not None:
            graph, forwards = captured
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            graph.replay()
            end.record()
            self._replay_events.append((begin, end))
            self.replays += 1
            self.session.count += forwards
            return
        torch.cuda.synchronize()
        start = time.perf_counter()
        if self.eager_steps.get(span, 0) < self.warmup:
            self.eager_steps[span] = self.eager_steps.get(span, 0) + 1
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                step()
            torch.cuda.current_stream().wait_stream(side)
        else:
            graph = torch.cuda.CUDAGraph()
            if self.pool is None:
                self.pool = torch.cuda.graph_pool_handle()
            before = self.session.count
            with torch.cuda.graph(graph, pool=self.pool):
                step()  # recorded, not run: the replay below runs it
            forwards = self.session.count - before
            self.graphs[span] = (graph, forwards)
            graph.replay()
            self.replays += 1
        torch.cuda.synchronize()
        self.capture_seconds += time.perf_counter() - start

    def counts(self) -> dict[str, int | float]:
        """What ran how (see the class docstring), keyed by `CAPTURE_KEYS`."""
        replay_ms = sum(begin.elapsed_time(end) for begin, end in self._replay_events)
        values = (
            len(self.graphs),
            self.replays,
            sum(self.eager_steps.values()),
            self.capture_seconds,
            replay_ms / 1e3,
        )
        return dict(zip(CAPTURE_KEYS, values, strict=True))
