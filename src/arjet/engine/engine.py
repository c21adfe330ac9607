"""Many images at once: a continuous-batching engine over a pipeline.

Requests (one image each: prompt, seed, sampler, size, sampling options) wait in a bounded queue; one
thread decodes. Requests that can share a batch (`GroupKey`: the same sampler, grid and target distribution)
run in a `LaneGroup` of `lanes` lanes over one static KV cache; when a lane's image is done, the next request
of its group takes the lane at the next step (its prompt prefilled into that lane) while the others keep
decoding. Up to `max_groups` groups decode side by side (one step of each per round; each has a cache of its
own); requests of another group wait until one empties. A sampler that cannot start images in the middle of
others (`Sampler.continuous` is False: zipar, sjd2), or a family that decodes a preview grid before the
target (GLM-Image), runs its queued requests as one `pipe(...)` call when the first of them reaches the front.

Exact per request: an image's codes depend only on its own seed and options. Every lane has its own random
stream keyed by the request's seed and counted from its own start, its own rows of the cache and its own
sampler state, so a request decodes to the same codes as `pipe(prompt, seed=...)` alone, whatever arrives
before, beside or after it (bit for bit on the CPU in float32; tested). In adaptive mode (`sampler=
"adaptive"`: MC-SJD with a window of up to 16) the engine picks each step's window from the load
(`arjet.engine.cost`): every window is exact, so the images have exactly `ar`'s distribution, though not the
codes of a fixed window.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from .. import samplers as sampler_registry
from ..pipelines.base import BaseARPipeline
from ..samplers import Sampler, SamplingOptions
from ..samplers.capture import compile_mode
from ..samplers.random import KEY_LIMIT, image_keys
from .cost import WINDOWS, CostModel
from .lanes import LaneGroup, buckets
from .requests import ADAPTIVE, Cancelled, EngineResult, GroupKey, QueueFull, Request

ADAPTIVE_SPEC = "mc-sjd:window=16"  # the sampler the adaptive mode narrows step by step
CALIBRATION_IMAGES = 4  # images per window that measure the adaptive mode's yields when a group starts


@dataclass
class EngineStats:
    """What the engine has done since it started (read them while it runs: plain numbers)."""

    images: int = 0
    steps: int = 0
    lane_steps: int = 0  # lanes of the groups that stepped, step by step
    busy_lane_steps: int = 0  # of those, lanes holding an image
    windows: collections.Counter = field(default_factory=collections.Counter)  # adaptive steps by window

    @property
    def utilisation(self) -> float:
        """Busy lanes over all lanes of the groups that stepped."""
        return self.busy_lane_steps / self.lane_steps if self.lane_steps else 0.0

    def snapshot(self) -> EngineStats:
        """A copy of the figures as they are now."""
        return EngineStats(
            self.images, self.steps, self.lane_steps, self.busy_lane_steps, collections.Counter(self.windows)
        )

    def since(self, earlier: EngineStats) -> EngineStats:
        """What happened after `earlier` (a `snapshot`)."""
        return EngineStats(
            self.images - earlier.images,
            self.steps - earlier.steps,
            self.lane_steps - earlier.lane_steps,
            self.busy_lane_steps - earlier.busy_lane_steps,
            self.windows - earlier.windows,
        )


class Engine:
    """Decode many requests at once on `pipe` (see the module docstring).

    `lanes`: images a group decodes at once; `max_queue`: requests that may wait (`submit` raises `QueueFull`
    beyond it); `prompt_tokens`: the longest prompt (chat template included) a request may have, the size of
    every lane's prompt region (default: 256, or less when the model's positions leave less next to the
    image); `max_groups`: groups decoding side by side; `time_limit`: seconds a request may take from its
    submission (None: no limit); `compile`: as `pipe(..., compile=)`."""

    def __init__(
        self,
        pipe: BaseARPipeline,
        *,
        lanes: int = 8,
        max_queue: int = 64,
        prompt_tokens: int = 256,
        max_groups: int = 2,
        time_limit: float | None = None,
        compile: bool | str = False,
        clock: Callable[[], float] = time.monotonic,
    ):
        for name, value in (("lanes", lanes), ("max_queue", max_queue), ("prompt_tokens", prompt_tokens)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if not isinstance(max_groups, int) or max_groups < 1:
            raise ValueError(f"max_groups must be an integer >= 1, got {max_groups!r}")
        if time_limit is not None and not time_limit > 0:
            raise ValueError(f"time_limit must be a number of seconds > 0 or None, got {time_limit!r}")
        self.pipe = pipe
        self.lanes, self.max_queue, self.prompt_tokens = lanes, max_queue, prompt_tokens
        self.max_groups, self.time_limit = max_groups, time_limit
        self.compile = compile_mode(compile, pipe._execution_device)
        self.clock = clock  # of time limits only (tests step it by hand); durations use time.monotonic
        self.stats = EngineStats()
        self._queue: collections.deque[Request] = collections.deque()
        self._lock = threading.Condition()
        self._groups: dict[GroupKey, LaneGroup] = {}
        self._costs: dict[GroupKey, CostModel] = {}
        self._closing = False
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    # -- the public face -----------------------------------------------------------------------------
    def start(self) -> Engine:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="arjet-engine", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop the decode thread; requests still queued or decoding fail with `Cancelled`."""
        with self._lock:
            self._closing = True
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> Engine:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def groups(self) -> list[LaneGroup]:
        """The lane groups decoding now (one per sampler, size and target distribution in use)."""
        return list(self._groups.values())

    @property
    def closing(self) -> bool:
        """Whether `close` has been called (the decode thread stops at the end of its current step)."""
        return self._closing

    @property
    def queued(self) -> int:
        with self._lock:
            return len(self._queue)

    @property
    def busy(self) -> int:
        """Lanes holding an image now, over every group."""
        return sum(len(group.busy) for group in list(self._groups.values()))

    def submit(
        self,
        prompt: str,
        *,
        sampler: str | Sampler = "ar",
        seed: int | None = None,
        generator: torch.Generator | None = None,
        height: int | None = None,
        width: int | None = None,
        guidance_scale: float | None = None,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        on_step: Callable[[torch.Tensor], None] | None = None,
        time_limit: float | None = None,
    ) -> Request:
        """Queue one image; returns the `Request` (`request.result()` waits for its `EngineResult`,
        `request.cancel()` stops it). Every argument is checked as `pipe(...)` checks it, before it is queued;
        `sampler="adaptive"` is the engine's adaptive mode. `on_step(codes)` gets the image's codes `[H, W]`
        (-1 where not decoded yet) after every step (from the engine's thread: keep it quick). Raises
        `QueueFull` when `max_queue` requests wait already."""
        if self._error is not None:
            raise RuntimeError("the engine stopped after an error") from self._error
        if not isinstance(prompt, str):
            raise ValueError(f"prompt must be a string, got {type(prompt).__name__}: {prompt!r}")
        adaptive = isinstance(sampler, str) and sampler.strip() == ADAPTIVE
        if seed is None and generator is None:  # a seed of its own, so that a pipe(...) call can redo it
            seed = int(torch.randint(0, KEY_LIMIT - 1, ()))
        call = self.pipe.check_inputs(
            prompt,
            sampler=ADAPTIVE_SPEC if adaptive else sampler,
            seed=seed,
            generator=generator,
            height=height,
            width=width,
            guidance_scale=guidance_scale,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
        )
        length = self.pipe.prompt_length(prompt, call.grid)
        if length > self.prompt_tokens:
            raise ValueError(
                f"prompt {prompt[:40]!r} is {length} tokens (chat template included), more than this engine's "
                f"prompt_tokens={self.prompt_tokens}; shorten it"
            )
        options = SamplingOptions(call.guidance_scale, temperature, call.policy.top_k, top_p)
        group = GroupKey(
            ADAPTIVE if adaptive else call.sampler_label,
            call.grid,
            options.guidance_scale,
            options.temperature,
            options.top_k,
            options.top_p,
        )
        limit = self.time_limit if time_limit is None else time_limit
        generator = call.generators[0] if isinstance(call.generators, list) else call.generators
        generator_state = generator.get_state()  # for a pipe(...) call, which draws the key again
        request = Request(
            prompt,
            call,
            image_keys([generator], 1),
            group,
            call.sampler,
            size=(height, width),
            generator_state=generator_state,
            on_step=on_step,
            deadline=None if limit is None else self.clock() + limit,
            withdraw=self._withdraw,
        )
        with self._lock:
            if self._closing:
                raise RuntimeError("the engine is closed")
            if len(self._queue) >= self.max_queue:
                raise QueueFull(f"{len(self._queue)} requests are waiting (max_queue={self.max_queue})")
            self._queue.append(request)
            self._lock.notify_all()
        return request

    def _withdraw(self, request: Request) -> None:
        """A cancelled request leaves the queue now (one in a lane is freed by the decode thread)."""
        with self._lock:
            try:
                self._queue.remove(request)
            except ValueError:
                return  # already in a lane, or gone
        request.fail(Cancelled(f"request {request.id} was cancelled before it started"))

    def generate(self, prompts: Iterable[str], *, seed: int = 0, **options: Any) -> list[EngineResult]:
        """Every prompt through the engine (prompt `i` with seed `seed + i`), waiting for all; the results
        in prompt order. `options` as `submit`."""
        requests = [self.submit(prompt, seed=seed + i, **options) for i, prompt in enumerate(prompts)]
        return [request.result() for request in requests]

    # -- the decode thread ------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            with torch.no_grad():  # as `pipe(...)`: state made here is updated in place from any thread
                while self._round():
                    pass
        except BaseException as error:  # a bug or misuse: fail every request rather than hang them
            self._error = error
            raise
        finally:
            self._fail_everything(self._error)

    def _round(self) -> bool:
        """Admit what fits, step every group with a busy lane once, hand out finished images. False when
        the engine is closing."""
        with self._lock:
            while not self._closing and not self._queue and not self.busy:
                self._lock.wait()
            if self._closing:
                return False
            admissions, static = self._plan()
        now = time.monotonic()
        if static:
            self._run_static(static)
        for group, _, request in admissions:  # a new adaptive group measures its costs before any lane starts
            if group.key.sampler == ADAPTIVE and group.key not in self._costs:
                self._costs[group.key] = self._measure_costs(group, request)
        for group, lane, request in admissions:
            prefix = self.pipe.encode_prompts([request.prompt], None, group.key.grid, group.guided)
            group.admit(lane, request, prefix, now)
        for group in list(self._groups.values()):
            if group.busy:
                self._step(group)
        return True

    def _plan(self) -> tuple[list[tuple[LaneGroup, int, Request]], list[Request]]:
        """Under the lock: which queued requests start now (and in which lane), or the requests of a
        non-continuous sampler to run as one call. Cancelled or expired requests leave the queue."""
        now = self.clock()
        admissions: list[tuple[LaneGroup, int, Request]] = []
        waiting: collections.deque[Request] = collections.deque()
        static: list[Request] = []
        while self._queue:
            request = self._queue.popleft()
            if request.cancelled or request.expired(now):
                request.fail(Cancelled(f"request {request.id} was cancelled before it started"))
                continue
            if not self._shares_lanes(request):
                if not static or static[0].group == request.group and len(static) < self.lanes:
                    static.append(request)
                else:
                    waiting.append(request)
                continue
            group = self._group_for(request.group, request.sampler)
            lane = None if group is None else group.free_lane()
            if lane is None:
                waiting.append(request)
                continue
            group.requests[lane] = request  # reserved now, started outside the lock
            admissions.append((group, lane, request))
        self._queue = waiting
        return admissions, static

    def _shares_lanes(self, request: Request) -> bool:
        """Whether `request` decodes in a lane: its sampler starts images among others (or it runs in adaptive
        mode), and its family decodes one grid (GLM-Image's preview-then-target decodes run as whole calls)."""
        one_grid = self.pipe.preview_grid(request.group.grid) is None
        return one_grid and (request.sampler.continuous or request.group.sampler == ADAPTIVE)

    def _group_for(self, key: GroupKey, sampler: Sampler) -> LaneGroup | None:
        """The group of `key`, made when fewer than `max_groups` exist (an empty one is dropped for it)."""
        group = self._groups.get(key)
        if group is not None:
            return group
        if len(self._groups) >= self.max_groups:
            empty = next((k for k, g in self._groups.items() if not g.busy), None)
            if empty is None:
                return None
            del self._groups[empty]
        decoder = sampler_registry.get(ADAPTIVE_SPEC) if key.sampler == ADAPTIVE else sampler
        group = LaneGroup(self.pipe, key, decoder, self.lanes, self.prompt_tokens, compile=self.compile)
        self._groups[key] = group
        return group

    def _measure_costs(self, group: LaneGroup, request: Request) -> CostModel:
        """The adaptive mode's cost model for `group` (no lane started yet): its step times, and what each
        window commits per forward pass over `CALIBRATION_IMAGES` whole images of `request`'s prompt."""
        key = group.key
        images = min(self.lanes, CALIBRATION_IMAGES)

        def codes_per_pass(window: int) -> float:
            out = self.pipe(
                [request.prompt] * images,
                sampler=f"mc-sjd:window={window}",
                seed=0,
                height=request.size[0],
                width=request.size[1],
                guidance_scale=key.guidance_scale,
                temperature=key.temperature,
                top_k=key.top_k,
                top_p=key.top_p,
                output_type="latent",
            )
            return sum(stats.tokens for stats in out.stats) / sum(stats.forward_passes for stats in out.stats)

        windows = [window for window in WINDOWS if window <= group.stepper.reach]
        return CostModel.measure(group.step, buckets(self.lanes), windows, codes_per_pass)

    def _step(self, group: LaneGroup) -> None:
        busy = group.busy
        size = group.bucket()
        cost = self._costs.get(group.key)
        window = None if cost is None else cost.choose(size, len(busy))
        group.step(size, window)
        status = group.status()  # reads the device
        self.stats.steps += 1
        self.stats.lane_steps += group.lanes
        self.stats.busy_lane_steps += len(busy)
        if window is not None:
            self.stats.windows[window] += 1
        self._finish(group, status)

    def _finish(self, group: LaneGroup, status) -> None:
        """Hand out finished images, stream codes to watchers, free lanes of cancelled or late requests."""
        now, deadline_now = time.monotonic(), self.clock()
        for lane in group.busy:
            request = group.requests[lane]
            if status.done[lane]:
                codes, stats = group.result(lane)
                stats.seconds = now - group.started[lane]
                stats.extra["batch_size"] = 1
                group.release(lane)
                self.stats.images += 1
                request.finish(EngineResult(codes, stats, group.started[lane] - request.submitted))
            elif request.cancelled or request.expired(deadline_now):
                group.release(lane)
                why = "cancelled" if request.cancelled else "past its time limit"
                request.fail(Cancelled(f"request {request.id} was {why}"))
            elif request.on_step is not None:
                request.on_step(group.codes(lane))

    def _run_static(self, requests: list[Request]) -> None:
        """Requests of a sampler that cannot share lanes, as one `pipe(...)` call: their codes stream to their
        watchers after every step, and the call stops once every one of them is cancelled or late."""
        key, started = requests[0].group, time.monotonic()

        def on_step(pipe, step, forward_passes, tensors):
            if tensors["codes"].shape[1:] == key.grid:  # watchers see the target grid, not a preview
                for request, codes in zip(requests, tensors["codes"], strict=True):
                    if request.on_step is not None:
                        request.on_step(codes)
            now = self.clock()
            if all(request.cancelled or request.expired(now) for request in requests):
                pipe._interrupt = True
            return tensors

        watched = any(r.on_step is not None or r.deadline is not None for r in requests)
        out = self.pipe(
            [request.prompt for request in requests],
            sampler=requests[0].sampler,
            generator=[torch.Generator().set_state(request.generator_state) for request in requests],
            height=requests[0].size[0],
            width=requests[0].size[1],
            guidance_scale=key.guidance_scale,
            temperature=key.temperature,
            top_k=key.top_k,
            top_p=key.top_p,
            output_type="latent",
            callback_on_step_end=on_step if watched else None,
        )
        now = self.clock()
        for request, codes, stats in zip(requests, out.codes, out.stats, strict=True):
            if request.cancelled or request.expired(now):
                why = "cancelled" if request.cancelled else "past its time limit"
                request.fail(Cancelled(f"request {request.id} was {why}"))
                continue
            stats.sampler = key.sampler
            self.stats.images += 1
            request.finish(EngineResult(codes.cpu(), stats, started - request.submitted))

    def _fail_everything(self, error: BaseException | None) -> None:
        reason = (
            Cancelled("the engine stopped") if error is None else RuntimeError(f"the engine failed: {error}")
        )
        with self._lock:
            queued, self._queue = list(self._queue), collections.deque()
        for request in queued:
            request.fail(reason)
        for group in self._groups.values():
            for lane in group.busy:
                request = group.release(lane)
                if request is not None:
                    request.fail(reason)
