"""How much to speculate: the adaptive mode's choice of window, step by step, from the load.

A step of window `L` over a bucket of `b` lanes (`b` lanes computed, `n` of them busy) costs `t(b, L)`
seconds and commits `m(L)` codes per busy lane on average, so it makes `n * m(L) / t(b, L)` codes per
second; the engine picks the window that makes the most. Both figures are learnt on this device and this
model: `t` is measured for every shape when an adaptive group starts and then followed step by step (a
moving average of what steps really take), `m` is followed for each window from what its steps commit
(`m(1) = 1`: plain AR).

A Jacobi window's yield depends on how long it has been running: its drafts improve over the steps they
stay in the window, and a window just widened starts from stale guesses. So a window's yield is learnt only
from steps that follow `warm` steps of the same window, and every window other than the chosen one is tried
in bursts of `burst` consecutive steps: each one burst first, then the least recently tried one burst every
`probe_every` steps. A probe that confirms the choice doubles the interval (up to `max_probe_every`); one
that changes it brings the interval back, so a steady load pays almost nothing for watching the others.

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
        burst: int = 8,
        warm: int = 4,
        probe_every: int = 64,
        max_probe_every: int = 1024,
    ):
        if not 0 <= warm < burst:
            raise ValueError(
                f"warm must be below burst so that a burst teaches something, got {warm}, {burst}"
            )
        self.times = dict(times)
        self.windows = sorted({window for _, window in times})
        self.smoothing = smoothing
        self.burst, self.warm = burst, warm
        self.base_probe_every = self.probe_every = probe_every
        self.max_probe_every = max_probe_every
        self.codes: dict[int, float] = {1: 1.0}  # mean codes per busy lane per step, by window (warm steps)
        self.last_tried = dict.fromkeys(self.windows, -1)
        self.steps = 0
        self.window = self.windows[-1]  # the window of the latest step
        self.streak = 0  # steps of `window` in a row before the latest one
        self._burst_left = 0
        self._since_probe = 0
        self._best_before_probe: int | None = None

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

    def best(self, size: int, busy: int) -> int:
        return max(self.windows, key=lambda w: self.rate(size, busy, w) or 0.0)

    def choose(self, size: int, busy: int) -> int:
        """The window of the next step for `busy` lanes in a bucket of `size` lanes."""
        if self._burst_left:
            self._burst_left -= 1
            return self._use(self.window)
        unknown = [window for window in reversed(self.windows) if window not in self.codes]
        if unknown:
            return self._start_burst(unknown[0])
        best = self.best(size, busy)
        if self._best_before_probe is not None:  # a probe just ended: did it change the choice?
            confirmed = best == self._best_before_probe
            self.probe_every = (
                min(2 * self.probe_every, self.max_probe_every) if confirmed else self.base_probe_every
            )
            self._best_before_probe = None
        self._since_probe += 1
        others = [window for window in self.windows if window != best]
        if others and self._since_probe >= self.probe_every:
            self._since_probe = 0
            self._best_before_probe = best
            return self._start_burst(min(others, key=lambda w: self.last_tried[w]))
        return self._use(best)

    def _start_burst(self, window: int) -> int:
        self._burst_left = self.burst - 1
        self.last_tried[window] = self.steps
        return self._use(window)

    def _use(self, window: int) -> int:
        self.streak = self.streak + 1 if window == self.window else 0
        self.window = window
        self.steps += 1
        return window

    def observe(self, size: int, window: int, seconds: float, mean_codes: float | None) -> None:
        """Learn from a step of `window` over a bucket of `size` lanes that took `seconds` and committed
        `mean_codes` codes per running lane (None when no lane was running)."""
        key = (size, window)
        self.times[key] += self.smoothing * (seconds - self.times[key])
        if mean_codes is None or window == 1 or self.streak < self.warm:
            return
        known = self.codes.get(window)
        self.codes[window] = mean_codes if known is None else known + self.smoothing * (mean_codes - known)
