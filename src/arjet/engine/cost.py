"""How much to speculate: the adaptive mode's choice of window, step by step, from the load.

A step of window `L` over a bucket of `b` lanes (`b` lanes computed, `n` of them busy) costs `t(b, L)`
seconds and commits `m(L)` codes per busy lane on average, so it makes `n * m(L) / t(b, L)` codes per
second; the engine picks the window that makes the most. Both figures are learnt on this device and this
model: `t` is measured for every shape when an adaptive group starts and then followed step by step (a
moving average of what steps really take: a busy machine or a warmer cache moves it), `m` is followed for
each window from what its steps commit (`m(1) = 1`: plain AR). A Jacobi window's yield is not a fixed
function of one acceptance rate (its drafts improve over the steps they stay in the window), so every
window's yield is measured, not modelled: each window is tried a few times first, and every `probe_every`
steps the window used least recently gets one step, so the figures follow the decode as it goes.

A lone request thus gets the window with the best latency (a wide one where a forward costs little more
with it); a full engine gets a narrow window or none (`L = 1`) once wider windows stop paying for their
compute. Every window is exact, so the choice changes speed only, never the distribution of any image.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

WINDOWS = (1, 2, 4, 8, 16)  # the adaptive mode's windows (each its own shape)


class CostModel:
    """Step times per (bucket, window) and committed codes per window, both followed as the decode goes."""

    def __init__(
        self,
        times: dict[tuple[int, int], float],
        *,
        smoothing: float = 0.1,
        trials: int = 3,
        probe_every: int = 64,
    ):
        self.times = dict(times)
        self.windows = sorted({window for _, window in times})
        self.smoothing = smoothing
        self.trials = trials  # steps each window gets before the model chooses by its figures
        self.probe_every = probe_every
        self.codes: dict[int, float] = {1: 1.0}  # mean codes per busy lane per step, by window
        self.tried = dict.fromkeys(self.windows, 0)
        self.last_used = dict.fromkeys(self.windows, 0)
        self.steps = 0

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

    def rate(self, size: int, busy: int, window: int) -> float | None:
        """Codes per second of a step of `window` with `busy` lanes in a bucket of `size` (None: its yield is
        not known yet)."""
        codes = self.codes.get(window)
        return None if codes is None else busy * codes / self.times[(size, window)]

    def choose(self, size: int, busy: int) -> int:
        """The window of the next step for `busy` lanes in a bucket of `size` lanes."""
        self.steps += 1
        untried = [window for window in reversed(self.windows) if self.tried[window] < self.trials]
        if untried:
            window = untried[0]
        elif self.steps % self.probe_every == 0:
            window = min(self.windows, key=lambda w: self.last_used[w])
        else:
            window = max(self.windows, key=lambda w: self.rate(size, busy, w) or 0.0)
        self.tried[window] += 1
        self.last_used[window] = self.steps
        return window

    def observe(self, size: int, window: int, seconds: float, mean_codes: float | None) -> None:
        """Learn from a step of `window` over a bucket of `size` lanes that took `seconds` and committed
        `mean_codes` codes per running lane (None when no lane was running)."""
        key = (size, window)
        self.times[key] += self.smoothing * (seconds - self.times[key])
        if mean_codes is None or window == 1:
            return
        known = self.codes.get(window)
        self.codes[window] = mean_codes if known is None else known + self.smoothing * (mean_codes - known)
