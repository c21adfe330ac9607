"""How much to speculate: the adaptive mode's choice of window, step by step, from the load.

The engine measures, when an adaptive group starts, how long one step takes for every (bucket of lanes,
window) shape on this device, and it estimates from the decode itself how often a draft is accepted. For
MC-SJD with a window of `L` positions a lane commits on average `e(L) = 1 + a + ... + a^(L-1)` codes per
step (`a`: the chance a draft passes, given the one before it did); with `n` busy lanes in a bucket of `b`,
a step of window `L` makes `n * e(L)` codes in `t(b, L)` seconds. The engine picks the window with the most
codes per second: a lone request gets a wide window (a forward costs little more with it), a full engine
under load gets a narrow one or none (`L = 1` is plain AR). Every window is exact, so the choice changes
speed only, never the distribution of any image.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

WINDOWS = (1, 2, 4, 8, 16)  # the adaptive mode's windows (each its own shape)


def expected_codes(acceptance: float, window: int) -> float:
    """`e(L)`: codes a lane commits per step with `window` positions when each draft passes with
    `acceptance` given the previous one did."""
    a = min(max(acceptance, 0.0), 0.999)
    return (1 - a**window) / (1 - a)


def acceptance_from(mean_codes: float, window: int) -> float:
    """The `a` with `expected_codes(a, window) == mean_codes` (bisection; 0 for one code or less)."""
    if window <= 1 or mean_codes <= 1:
        return 0.0
    target = min(mean_codes, window - 1e-6)
    low, high = 0.0, 0.999
    for _ in range(50):
        middle = (low + high) / 2
        if expected_codes(middle, window) < target:
            low = middle
        else:
            high = middle
    return (low + high) / 2


class CostModel:
    """Step times per (bucket, window), measured once; the acceptance rate, learned as the decode goes."""

    def __init__(self, times: dict[tuple[int, int], float], acceptance: float = 0.5, smoothing: float = 0.1):
        self.times = times
        self.acceptance = acceptance
        self.smoothing = smoothing
        self.windows = sorted({window for _, window in times})

    @classmethod
    def measure(
        cls, step: Callable[[int, int], None], sizes: Sequence[int], windows: Sequence[int], repeats: int = 2
    ) -> CostModel:
        """Time `step(size, window)` for every shape: one untimed step (first-call set-up), then the fastest
        of `repeats` timed ones (timings on a busy machine only ever come out too slow)."""
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
        return cls(times)

    def choose(self, size: int, busy: int) -> int:
        """The window with the most codes per second for `busy` lanes in a bucket of `size` lanes."""
        return max(
            self.windows,
            key=lambda window: busy * expected_codes(self.acceptance, window) / self.times[(size, window)],
        )

    def observe(self, window: int, mean_codes: float) -> None:
        """Learn from a step of `window` whose busy lanes committed `mean_codes` codes each on average."""
        if window > 1:
            measured = acceptance_from(mean_codes, window)
            self.acceptance += self.smoothing * (measured - self.acceptance)
