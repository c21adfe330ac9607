"""How much to speculate: the adaptive mode's choice of window, step by step, from the load.

A step of window `L` over a bucket of `b` lanes (`b` lanes computed, `n` of them busy) costs `t(b, L)`
seconds and commits `m(L)` codes per busy lane on average, so it makes `n * m(L) / t(b, L)` codes per
second; the engine picks the window that makes the most. Both figures are measured on this device and this
model when an adaptive group starts (`CostModel.measure`):

- `t(b, L)`: every shape is stepped a few times; the fastest time counts (on a busy machine timings only
  ever come out too slow).
- `m(L)`: a few whole images are decoded at each fixed window, and `m(L)` is their codes over their
  forward passes (`m(1) = 1`: plain AR). Whole images, because a Jacobi window's yield changes along a
  decode (its drafts improve while they stay in the window, then come in bursts of accepted codes): a
  window's yield over a few steps says little about its yield over an image.

The choice is then a pure function of the load: a lone request gets the window with the best latency (a
wide one where a forward costs little more with it); a full engine gets a narrow window or none (`L = 1`)
once wider windows stop paying for their compute. Every window is exact, so the choice changes speed only,
never the distribution of any image.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

WINDOWS = (1, 2, 4, 8, 16)  # the adaptive mode's windows (each its own shape)


class CostModel:
    """Step times per (bucket, window) and codes per forward pass per window, as measured."""

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
        of `repeats` timed ones), and ask `codes_per_pass(window)` what each window > 1 commits per forward
        pass over whole images."""
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
        """Codes per second of a step of `window` with `busy` lanes in a bucket of `size`."""
        return busy * self.codes[window] / self.times[(size, window)]

    def choose(self, size: int, busy: int) -> int:
        """The window of the next step for `busy` lanes in a bucket of `size` lanes (on a tie, the narrower)."""
        return max(self.windows, key=lambda window: self.rate(size, busy, window))
