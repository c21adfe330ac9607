"""How long a new request would wait, from what the engine has measured, so that the engine refuses at once
what it cannot finish within a request's time limit (instead of queueing it to time out there).

`Throughput` follows two figures, both on the engine's clock:

- `rate`, the images per second the engine makes: a sliding ratio of sums, the images finished in its latest
  busy rounds over those rounds' seconds, over as many of the latest rounds as hold at least `history`
  finished images (the images the estimate looks back over). Only rounds that decoded something count, so
  an idle spell does not lower it; a ratio of sums (not a mean of per-round rates), so rounds that finish
  nothing weigh with their full time and one quick round cannot swing it; a history of whole images, so it
  follows a change of load within about `history` images. Time the engine spends measuring the adaptive
  mode's costs is not a decode's.
- `latency`, the seconds one image takes to decode (from its lane's start to its end): the mean of the
  last `history` images.

The expected wait (`Load.expected_wait`): each of the `lanes` lanes makes one image every `period =
max(lanes / rate, latency)` seconds (the longer of the two, so that lanes shared with another group's steps
are not counted as faster than they are), starting from where its current image stands (a free lane: now);
a request with `waiting` requests ahead of it in the queue starts when the lane cycle reaches it, and
finishes `latency` seconds later. Before the first image finishes there is no estimate, and nothing is
refused for lateness (`Engine.warm_up` measures one).
"""

from __future__ import annotations

import collections
import math
import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class Estimate:
    """The engine's estimates now: `throughput` images per second, `latency` seconds of one image's decode,
    `expected_wait` seconds a request submitted now would take to finish (None: nothing measured yet)."""

    throughput: float | None
    latency: float | None
    expected_wait: float | None


@dataclass(frozen=True)
class Load:
    """What the engine holds when a request arrives: `elapsed` seconds of the image in each busy lane,
    `waiting` requests queued before it, over `lanes` lanes."""

    lanes: int
    elapsed: list[float]
    waiting: int

    def start(self, position: int, period: float) -> float:
        """Seconds until the request at queue `position` (0: next) gets a lane, each lane making an image
        every `period` seconds."""
        remaining = sorted(max(period - elapsed, 0.0) for elapsed in self.elapsed)[: self.lanes]
        cycle = [0.0] * (self.lanes - len(remaining)) + remaining  # when each lane frees, soonest first
        return cycle[position % self.lanes] + (position // self.lanes) * period


class Throughput:
    """Images per second and seconds per image, as measured (see the module docstring)."""

    def __init__(self, history: int):
        if history < 1:
            raise ValueError(f"history must be an integer >= 1, got {history!r}")
        self.history = history
        self._rounds: collections.deque[tuple[float, int]] = collections.deque()  # (seconds, images)
        self._seconds, self._images = 0.0, 0
        self._latencies: collections.deque[float] = collections.deque(maxlen=history)
        self._lock = threading.Lock()  # written by the decode thread, read by submitting threads

    def record_round(self, seconds: float, images: int) -> None:
        """A busy round of the engine: `seconds` long, `images` finished in it."""
        seconds = max(seconds, 0.0)
        with self._lock:
            self._rounds.append((seconds, images))
            self._seconds += seconds
            self._images += images
            while len(self._rounds) > 1 and self._images - self._rounds[0][1] >= self.history:
                seconds_out, images_out = self._rounds.popleft()
                self._seconds -= seconds_out
                self._images -= images_out

    def record_image(self, seconds: float) -> None:
        """An image finished after decoding `seconds`."""
        with self._lock:
            self._latencies.append(max(seconds, 0.0))

    @property
    def rate(self) -> float | None:
        """Images per second (None before any image finished, or while the clock has not moved)."""
        with self._lock:
            if not self._images or self._seconds <= 0:
                return None
            return self._images / self._seconds

    @property
    def latency(self) -> float | None:
        with self._lock:
            return sum(self._latencies) / len(self._latencies) if self._latencies else None

    def period(self, lanes: int) -> float | None:
        """Seconds between two images of one lane (None: unknown)."""
        rate, latency = self.rate, self.latency
        if rate is None or latency is None:
            return None
        return max(lanes / rate, latency)

    def expected_wait(self, load: Load) -> float | None:
        """Seconds until a request arriving at `load` is done (None: unknown)."""
        period = self.period(load.lanes)
        if period is None:
            return None
        return load.start(load.waiting, period) + (self.latency or 0.0)

    def retry_after(self, load: Load, limit: float) -> float:
        """Whole seconds (at least one) until a request refused at `load` would fit in `limit` seconds: its
        wait shrinks second for second as the queue ahead of it drains."""
        wait = self.expected_wait(load)
        return float(max(1, math.ceil((wait or 0.0) - limit)))

    def drain_seconds(self, load: Load, images: int) -> float | None:
        """Whole seconds (at least one) until `images` of the requests waiting have started (None:
        unknown)."""
        period = self.period(load.lanes)
        if period is None:
            return None
        return float(max(1, math.ceil(load.start(images - 1, period))))

    def estimate(self, load: Load) -> Estimate:
        return Estimate(self.rate, self.latency, self.expected_wait(load))
