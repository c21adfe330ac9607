"""`sampler="adaptive"`: MC-SJD at the window that makes the most codes per second, chosen by a cost model.

Every window of MC-SJD is exact (its images have `ar`'s distribution), so the window changes speed only. A
step of window `L` over a batch of `b` images (`n` of them still decoding) costs `t(b, L)` seconds and commits
`m(L)` codes per decoding image on average, so it makes `n * m(L) / t(b, L)` codes per second (`CostModel`).

- In a pipeline call (`pipe(..., sampler="adaptive")`) the batch is fixed: the call decodes at the one window
  that makes the most codes per second for it (`choose_window`). Both figures come from decoding the call's
  prompts (seed 0) at each window once, `t` as the decode's seconds per step and `m` as its codes per image
  per step; the choice is measured once per pipeline, grid, batch, sampling options, compile mode and
  threads, and kept on the pipeline (`pipe._adaptive_windows`). The call's stats name it:
  `adaptive (mc-sjd:window=8)`.
- The engine (`arjet.engine`) changes the window step by step with its load: it times every (lanes, window)
  step shape and asks `window_runs` for each window's `m(L)` over whole images.

`m(L)` comes from whole images, because a Jacobi window's yield changes along a decode (its drafts improve
while they stay in the window, then come in bursts of accepted codes): a few steps say little about an image.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .. import samplers as sampler_registry
from ..limits import AUTO_COMPILE
from ..samplers import SamplingOptions

if TYPE_CHECKING:
    from .inputs import CheckedInputs

ADAPTIVE = "adaptive"  # the mode's name, where a sampler spec is taken
WINDOWS = (1, 2, 4, 8, 16)  # the windows the mode chooses from (each its own step shape)


def is_adaptive(sampler: Any) -> bool:
    """Whether `sampler` names the adaptive mode (`"adaptive"`, spaces around it allowed)."""
    return isinstance(sampler, str) and sampler.strip() == ADAPTIVE


def widest_spec(max_window: int | None = None) -> str:
    """The sampler the adaptive mode narrows: MC-SJD at its widest window (within an operator's limit)."""
    widest = WINDOWS[-1] if max_window is None else max(w for w in WINDOWS if w <= max(max_window, 1))
    return f"mc-sjd:window={widest}"


def window_spec(window: int) -> str:
    return f"mc-sjd:window={window}"


class CostModel:
    """Step times per (batch, window) and codes per forward pass per window, as measured."""

    def __init__(self, times: dict[tuple[int, int], float], codes: dict[int, float]):
        windows = sorted({window for _, window in times})
        if sorted(codes) != windows:
            raise ValueError(
                f"codes per step are needed for the windows {windows}, got them for {sorted(codes)}"
            )
        if any(not value > 0 for value in (*times.values(), *codes.values())):
            raise ValueError(f"step times and codes per step must be positive, got {times} and {codes}")
        self.times = dict(times)
        self.codes = dict(codes)
        self.windows = windows

    @classmethod
    def measure(
        cls,
        step: Callable[[int, int], None],
        sizes: Sequence[int],
        windows: Sequence[int],
        codes_per_pass: Callable[[int], float],
        repeats: int = 2,
    ) -> CostModel:
        """Time `step(size, window)` for every shape (one untimed step for first-call set-up, then the fastest
        of `repeats` timed ones: on a busy machine timings only ever come out too slow), and ask
        `codes_per_pass(window)` what each window > 1 commits per forward pass over whole images."""
        import time

        times = {}
        for size in sizes:
            for window in windows:
                step(size, window)
                best = float("inf")
                for _ in range(repeats):
                    start = time.perf_counter()
                    step(size, window)
                    best = min(best, time.perf_counter() - start)
                times[(size, window)] = best
        codes = {window: 1.0 if window == 1 else codes_per_pass(window) for window in windows}
        return cls(times, codes)

    def rate(self, size: int, busy: int, window: int) -> float:
        """Codes per second of a step of `window` with `busy` images decoding in a batch of `size`."""
        return busy * self.codes[window] / self.times[(size, window)]

    def choose(self, size: int, busy: int) -> int:
        """The window of the next step for `busy` images in a batch of `size` (on a tie, the narrower)."""
        return max(self.windows, key=lambda window: self.rate(size, busy, window))


@dataclass(frozen=True)
class WindowRun:
    """One decode of a batch at one window: codes committed and forward passes, summed over its images;
    `steps` the batch's forward passes (its slowest image's); `seconds` the decode's."""

    tokens: int
    forward_passes: int
    steps: int
    seconds: float

    @property
    def codes_per_pass(self) -> float:
        """Codes an image commits per forward pass of its own."""
        return self.tokens / self.forward_passes


def window_runs(pipe: Any, prompts: list[str], windows: Sequence[int], **call: Any) -> dict[int, WindowRun]:
    """Each window's decode of `prompts` (seed 0, codes only, no progress bar) by `pipe`; `call`: the other
    arguments of the pipeline call (size, sampling options, ...)."""
    runs = {}
    with pipe.quiet():
        for window in windows:
            out = pipe(prompts, sampler=window_spec(window), seed=0, output_type="latent", **call)
            runs[window] = WindowRun(
                tokens=sum(stats.tokens for stats in out.stats),
                forward_passes=sum(stats.forward_passes for stats in out.stats),
                steps=max(stats.forward_passes for stats in out.stats),
                seconds=out.stats[0].extra["decode_seconds"],
            )
    return runs


def batch_cost(runs: dict[int, WindowRun], batch: int) -> CostModel:
    """The cost model of a fixed batch of `batch` images from one decode per window: a step of window `L`
    takes the decode's seconds per step and commits its codes per image per step."""
    times = {(batch, window): run.seconds / run.steps for window, run in runs.items()}
    codes = {window: run.tokens / (batch * run.steps) for window, run in runs.items()}
    return CostModel(times, codes)


@dataclass(frozen=True)
class ChoiceKey:
    """What the adaptive window of a pipeline call depends on."""

    grid: tuple[int, int]
    batch: int
    sampling: SamplingOptions
    compile: str
    threads: int | None
    device: str


def choose_window(pipe: Any, call: CheckedInputs) -> CheckedInputs:
    """`call` (checked with the adaptive mode's widest sampler) decoded at the window the cost model finds
    fastest for its batch: measured on the first such call (the call's prompts at its size, at every window
    the widest allows), then kept on `pipe`."""
    key = ChoiceKey(
        call.grid,
        call.batch_size,
        call.sampling,
        call.compile,
        call.threads,
        str(pipe._execution_device),
    )
    if pipe._adaptive_windows is None:
        pipe._adaptive_windows = {}
    window = pipe._adaptive_windows.get(key)
    if window is None:
        windows = [w for w in WINDOWS if w <= call.sampler.window]
        runs = window_runs(
            pipe,
            call.prompts,
            windows,
            negative_prompt=call.negative_prompts,
            num_images_per_prompt=call.num_images_per_prompt,
            height=call.size[0],
            width=call.size[1],
            **call.sampling.kwargs(),
            compile=AUTO_COMPILE if call.fallback is not None else call.compile,  # falls back as the call
            threads=call.threads,
        )
        window = batch_cost(runs, call.batch_size).choose(call.batch_size, call.batch_size)
        pipe._adaptive_windows[key] = window
    spec = window_spec(window)
    return replace(call, sampler=sampler_registry.get(spec), sampler_label=f"{ADAPTIVE} ({spec})")
