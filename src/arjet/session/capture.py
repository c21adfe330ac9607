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

`compile="auto"` (the default everywhere) is decided by `compile_mode` alone: eager steps on the CPU,
captured ones on CUDA, compiled layers inside them where the use lasts long enough to earn inductor's
compile (an engine: `arjet serve`, the demo, an eval's batches). An "auto" mode never does worse than
eager: a capture, replay or compile that fails falls back to eager steps for the pipeline, with one
warning (`EagerFallback`); an explicit mode raises instead. An engine bounds its graphs (`GraphBudget`).
"""

from __future__ import annotations

import collections
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from ..limits import AUTO_COMPILE, AUTO_LASTING, AUTO_ONE_OFF, CAPTURED_CHOICES, COMPILE_CHOICES

if TYPE_CHECKING:
    from .decoder import StaticDecoder
    from .session import DecodingSession

COMPILE_MODES = COMPILE_CHOICES  # declared once, in limits.py, beside the other bounds of a call
CAPTURED_MODES = CAPTURED_CHOICES  # steps captured as CUDA graphs (CUDA only)
COMPILED_MODES = ("inductor", "inductor-graphs")  # the decoder under `torch.compile`
CAPTURED_SPAN_SIZES = 2  # attention spans a captured session grows through (half the cache, then all of it)
OPT_OUT = "pass compile=False (--compile off) to run eager steps without trying"


def captures_on(device: torch.device) -> bool:
    """Whether steps on `device` can be captured as CUDA graphs."""
    return device.type == "cuda"


def compile_mode(
    compile: bool | str | None,
    device: torch.device,
    *,
    lasting: bool = False,
    fallback: EagerFallback | None = None,
) -> str:
    """The mode for a `compile=` argument: False / None / "none" (eager), "cuda-graphs", "inductor" (a
    `torch.compile` of the decoder), "inductor-graphs" (both), True (CUDA graphs on a CUDA device, else
    inductor) or "auto": eager where steps cannot be captured (the CPU, where eager is measured faster) or
    where `fallback` has fallen back already, else `AUTO_LASTING` for a use that lasts (`lasting`: an engine),
    `AUTO_ONE_OFF` for a call (`arjet.limits` says why). The one place "auto" is decided."""
    if compile is True:
        return "cuda-graphs" if captures_on(device) else "inductor"
    if compile is False or compile is None:
        return "none"
    if compile not in COMPILE_MODES:
        raise ValueError(f"compile must be True, False or one of {', '.join(COMPILE_MODES)}; got {compile!r}")
    if compile == AUTO_COMPILE:
        if not captures_on(device) or (fallback is not None and fallback.failure is not None):
            return "none"
        return AUTO_LASTING if lasting else AUTO_ONE_OFF
    if compile in CAPTURED_MODES and not captures_on(device):
        raise ValueError(
            f"compile={compile!r} needs a CUDA device; this pipeline runs on {device.type} "
            "(use compile='inductor' or compile=False)"
        )
    return compile


class EagerFallback:
    """The promise of `compile="auto"`: never worse than eager. The first capture, replay or compile that
    fails (an unsupported op, a kernel that syncs, the graph pool out of memory, a torch without the
    feature) is recorded here with one warning naming it and the opt-out; from then on the steps that share
    this object (a pipeline's calls, an engine's lanes) run eagerly. Explicit modes take none: they raise."""

    def __init__(self) -> None:
        self.failure: str | None = None  # "capture: RuntimeError: ..." once something failed

    def fail(self, where: str, error: BaseException) -> None:
        """`where` ("capture", "replay" or "compile") failed with `error`: warn once, then run eagerly."""
        if self.failure is not None:
            return
        self.failure = f"{where}: {type(error).__name__}: {error}"
        warnings.warn(
            f'compile="auto" could not use captured or compiled steps ({self.failure}); this pipeline decodes '
            f"with eager steps from now on (slower); {OPT_OUT}",
            RuntimeWarning,
            stacklevel=2,
        )


class FallbackDecoder:
    """A compiled decoder (`CompiledDecoder`) under "auto": a forward that fails (compiling happens in the
    first forward of each shape) is recorded in `fallback` and redone by the eager stack, which every later
    forward uses. Redoing is safe: a forward writes its keys and values at given slots, the same again."""

    def __init__(self, compiled: StaticDecoder, fallback: EagerFallback):
        self.compiled, self.fallback = compiled, fallback
        self.reads_span_only = compiled.reads_span_only

    @property
    def eager(self) -> StaticDecoder:
        return self.compiled.eager

    def new_cache(self, rows: int, capacity: int) -> object:
        return self.compiled.new_cache(rows, capacity)

    def rows(self, cache: object, rows: slice) -> object:
        return self.compiled.rows(cache, rows)

    def forward(self, *inputs: Any) -> torch.Tensor:
        if self.fallback.failure is None:
            try:
                return self.compiled.forward(*inputs)
            except Exception as error:  # inductor's and dynamo's errors have no common base but Exception
                self.fallback.fail("compile", error)
        return self.compiled.eager.forward(*inputs)


def step_decoder(
    make: Callable[[], StaticDecoder], mode: str, fallback: EagerFallback | None
) -> StaticDecoder | None:
    """The decoder of a session in `mode`: None (the session's own) unless it compiles, else `make()` (the
    pipeline's compiled decoder), wrapped to fall back to eager under "auto" (`fallback`); a torch that
    cannot compile at all falls back here."""
    if mode not in COMPILED_MODES:
        return None
    try:
        compiled = make()
    except Exception as error:
        if fallback is None:
            raise
        fallback.fail("compile", error)
        return None
    return compiled if fallback is None else FallbackDecoder(compiled, fallback)


REPLAY_EVENTS = 4096  # replays timed before their events are read (and freed)
CAPTURE_KEYS = (
    "graph_captures",
    "graph_replays",
    "eager_steps",
    "capture_seconds",
    "replay_seconds",
    "graph_memory_bytes",
)


@dataclass
class _Graph:
    graph: Any  # a `torch.cuda.CUDAGraph` (a stand-in runner's own object in tests)
    forwards: int  # forward passes one replay runs
    bytes: int  # device memory reserved while it was captured


class GraphBudget:
    """Captured graphs shared by many runners (an engine's lanes: buckets x windows x spans, several
    groups), at most `limit` of them alive (None: no bound). Capturing one more drops the least recently
    replayed graph; its runner captures it again when that shape comes back. `counts()`: what the runners
    did (for `GET /health` and the bench)."""

    def __init__(self, limit: int | None = None):
        self.limit = limit
        self._graphs: collections.OrderedDict[tuple[int, int], tuple[CudaGraphRunner, int]] = (
            collections.OrderedDict()
        )
        self.captures = self.replays = self.evictions = 0

    def captured(self, runner: CudaGraphRunner, span: int) -> None:
        self.captures += 1
        self._graphs[(id(runner), span)] = (runner, span)
        while self.limit is not None and len(self._graphs) > self.limit:
            _, (oldest, oldest_span) = self._graphs.popitem(last=False)
            oldest.drop(oldest_span)
            self.evictions += 1

    def replayed(self, runner: CudaGraphRunner, span: int) -> None:
        self.replays += 1
        self._graphs.move_to_end((id(runner), span))

    def forget(self, runner: CudaGraphRunner, span: int) -> None:
        self._graphs.pop((id(runner), span), None)

    def counts(self) -> dict[str, int | None]:
        """Graphs alive, the limit, captures, replays and evictions so far, and the device memory the live
        graphs reserved when captured (bytes; an estimate: graphs of a runner share a memory pool)."""
        memory = sum(runner.graphs[span].bytes for runner, span in self._graphs.values())
        return {
            "graphs": len(self._graphs),
            "max_graphs": self.limit,
            "graph_captures": self.captures,
            "graph_replays": self.replays,
            "graph_evictions": self.evictions,
            "graph_memory_bytes": memory,
        }


def warm_on_a_side_stream(step: Callable[[], Any]) -> None:
    """Run `step` once on a side stream, as CUDA graph capture wants its kernels' lazy state initialised off
    the capturing stream."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)


def capture_graph(step: Callable[[], Any], pool: Any = None) -> torch.cuda.CUDAGraph:
    """`step` recorded (not run) as a CUDA graph, its memory from `pool` (a `graph_pool_handle`, or its own)."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        step()
    return graph


class CudaGraphRunner:
    """Runs decode steps eagerly `warmup` times per attention span, then as a captured CUDA graph.

    `counts()` says what it did (the `CAPTURE_KEYS`): graphs captured, steps replayed, steps run eagerly,
    the seconds spent on the eager warm-up steps and the captures (timed with the device synchronised
    around them), the device time of the replays (CUDA events around each, read when `counts()` is called
    after the decode, or every `REPLAY_EVENTS` replays: the loop itself seldom waits for them), and the device
    memory its live graphs reserved when captured. `fallback`: under "auto", a capture or
    replay that fails is recorded there and the step runs eagerly, as every later one (None: it raises).
    `budget`: the bound on graphs this runner shares with others (an engine's).

    The device's part is five small methods (`_warm`, `_capture`, `_replay`, `_synchronize`, `_reserved`);
    tests replace them to run the rest on the CPU."""

    def __init__(
        self,
        session: DecodingSession,
        warmup: int = 1,
        *,
        fallback: EagerFallback | None = None,
        budget: GraphBudget | None = None,
    ):
        self.session = session
        session.span_sizes = min(session.span_sizes, CAPTURED_SPAN_SIZES)
        self.warmup = warmup
        self.fallback, self.budget = fallback, budget
        self.pool = None  # the graphs' memory pool, made at the first capture
        self.graphs: dict[int, _Graph] = {}
        self.eager_steps: dict[int, int] = {}
        self.captures = self.replays = 0
        self.capture_seconds = 0.0
        self._replay_events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
        self._replay_ms = 0.0  # of the replays whose events were read already

    def __call__(self, step: Callable[[], None]) -> None:
        if self.fallback is not None and self.fallback.failure is not None:  # failed here or elsewhere
            self.drop_all()
            step()
            return
        span = self.session.span
        captured = self.graphs.get(span)
        if captured is not None:
            try:
                self._replay(captured.graph)
            except Exception as error:
                self._fall_back("replay", error)
                step()
                return
            self.replays += 1
            self.session.count += captured.forwards
            if self.budget is not None:
                self.budget.replayed(self, span)
            return
        self._synchronize()
        start = time.perf_counter()
        if self.eager_steps.get(span, 0) < self.warmup:
            self.eager_steps[span] = self.eager_steps.get(span, 0) + 1
            self._warm(step)
        elif not self._capture_and_replay(step, span):
            return
        self._synchronize()
        self.capture_seconds += time.perf_counter() - start

    def _capture_and_replay(self, step: Callable[[], None], span: int) -> bool:
        """Capture `step` for `span` and replay it once; False when it fell back to eager instead."""
        before, reserved = self.session.count, self._reserved()
        try:
            graph = self._capture(step)  # recorded, not run: the replay below runs it
        except Exception as error:
            self.session.count = before  # the recording moved it; nothing ran
            self._fall_back("capture", error)
            step()
            return False
        self.graphs[span] = _Graph(graph, self.session.count - before, max(self._reserved() - reserved, 0))
        self.captures += 1
        if self.budget is not None:
            self.budget.captured(self, span)
        try:
            self._replay(graph)
        except Exception as error:
            self.session.count = before
            self._fall_back("replay", error)
            step()
            return False
        self.replays += 1
        return True

    def _fall_back(self, where: str, error: Exception) -> None:
        """Under "auto": record the failure, drop this runner's graphs (the steps run eagerly now). Else
        raise `error`."""
        if self.fallback is None:
            raise error
        self.fallback.fail(where, error)
        self.drop_all()

    def drop(self, span: int) -> None:
        """Free the graph of `span` (captured again if that span comes back)."""
        self.graphs.pop(span, None)
        if self.budget is not None:
            self.budget.forget(self, span)

    def drop_all(self) -> None:
        """Free every graph of this runner (its group is gone, or it fell back)."""
        for span in list(self.graphs):
            self.drop(span)

    # -- the device's part ---------------------------------------------------------------------------
    def _warm(self, step: Callable[[], None]) -> None:
        warm_on_a_side_stream(step)

    def _capture(self, step: Callable[[], None]) -> torch.cuda.CUDAGraph:
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        return capture_graph(step, self.pool)

    def _replay(self, graph: torch.cuda.CUDAGraph) -> None:
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        graph.replay()
        end.record()
        self._replay_events.append((begin, end))
        if len(self._replay_events) >= REPLAY_EVENTS:  # a long-lived engine's runner: read them now and then
            end.synchronize()
            self._replay_ms += self._events_ms()

    def _synchronize(self) -> None:
        torch.cuda.synchronize()

    def _reserved(self) -> int:
        return torch.cuda.memory_reserved()

    def counts(self) -> dict[str, int | float]:
        """What ran how (see the class docstring), keyed by `CAPTURE_KEYS`."""
        replay_ms = self._replay_ms + self._events_ms()
        values = (
            self.captures,
            self.replays,
            sum(self.eager_steps.values()),
            self.capture_seconds,
            replay_ms / 1e3,
            sum(graph.bytes for graph in self.graphs.values()),
        )
        return dict(zip(CAPTURE_KEYS, values, strict=True))

    def _events_ms(self) -> float:
        """The device milliseconds of the replays timed since the last read (their events then go)."""
        events, self._replay_events = self._replay_events, []
        return sum(begin.elapsed_time(end) for begin, end in events)
