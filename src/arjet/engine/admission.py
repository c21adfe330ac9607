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
  last `history` images; and the same per group of requests that decode together (`GroupKey`: the sampler,
  the size, the sampling options), since `ar` can take ten times `mc-sjd`'s time. A request is judged by its
  group's latency once its group has one, else by the engine's. An image stopped at its time limit is
  counted at the seconds it had decoded: it would have taken at least that, and without it a group slower
  than the limit would be admitted, time out and be admitted again without end (its latency never
  measured). A group's latencies older than `horizon` seconds are forgotten, so that a group refused
  because it was slow under a load that has passed is tried again.

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
from collections.abc import Hashable
from dataclasses import dataclass

HORIZON = 300.0  # seconds a group's latencies count for
MAX_GROUPS = 256  # groups whose latencies are kept (the latest)


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

    def __init__(self, history: int, horizon: float = HORIZON):
        if history < 1:
            raise ValueError(f"history must be an integer >= 1, got {history!r}")
        self.history = history
        self._rounds: collections.deque[tuple[float, int]] = collections.deque()  # (seconds, images)
        self._seconds, self._images = 0.0, 0
        self._latencies: collections.deque[float] = collections.deque(maxlen=history)
        self._groups: collections.OrderedDict[Hashable, collections.deque[tuple[float, float]]] = (
            collections.OrderedDict()
        )  # a group's (when, seconds), the latest MAX_GROUPS groups
        self.horizon = horizon
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

    def record_image(self, seconds: float, group: Hashable = None, now: float = 0.0) -> None:
        """An image of `group` finished (or was stopped at its time limit) after decoding `seconds`, at `now`
        on the engine's clock."""
        seconds = max(seconds, 0.0)
        with self._lock:
            self._latencies.append(seconds)
            if group is None:
                return
            latest = self._groups.pop(group, None) or collections.deque(maxlen=self.history)
            latest.append((now, seconds))
            self._groups[group] = latest
            while len(self._groups) > MAX_GROUPS:
                self._groups.popitem(last=False)

    def group_latency(self, group: Hashable, now: float) -> float | None:
        """The mean seconds of `group`'s images decoded within `horizon` seconds of `now`; the engine's
        `latency` when it has none."""
        with self._lock:
            recent = [seconds for when, seconds in self._groups.get(group, ()) if now - when <= self.horizon]
        return sum(recent) / len(recent) if recent else self.latency

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

    def expected_wait(self, load: Load, latency: float | None = None) -> float | None:
        """Seconds until a request arriving at `load` is done, its own decode taking `latency` seconds
        (default: the engine's; None: unknown)."""
        period = self.period(load.lanes)
        if period is None:
            return None
        return load.start(load.waiting, period) + (self.latency if latency is None else latency)

    def retry_after(self, load: Load, limit: float, latency: float | None = None) -> float:
        """Whole seconds (at least one) until a request refused at `load` would fit in `limit` seconds: its
        wait shrinks second for second as the queue ahead of it drains."""
        wait = self.expected_wait(load, latency)
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
