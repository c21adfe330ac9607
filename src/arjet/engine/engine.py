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
(`arjet.pipelines.adaptive`): every window is exact, so the images have exactly `ar`'s distribution, though
not the codes of a fixed window.

Admission: a request whose expected wait (`arjet.engine.admission`: the images ahead of it over the measured
throughput, plus its own decode) exceeds its time limit is refused at once (`Overloaded`), as one beyond
`max_queue` is (`QueueFull`); both say when to retry.

Containment: a failure stays with what failed. A step callback (`on_step`) that raises (anything, even
`SystemExit`) fails its own request; a group whose step raises (out of memory, say) fails its requests and
is dropped; anything else that raises in a round fails the requests in flight, and the engine goes on. Only
an exception that is not an `Exception` (KeyboardInterrupt, say) raised by the engine's own work stops the
decode thread; then `state` says "failed" and `submit` raises `EngineStopped`.
"""

from __future__ import annotations

import atexit
import collections
import dataclasses
import functools
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from .. import checks
from ..limits import AUTO_COMPILE, DEFAULT_ENGINE, KEY_LIMIT, MAX_LANES, EngineConfig
from ..limits import time_limit as _time_limit
from ..pipelines.adaptive import ADAPTIVE, WINDOWS, CostModel, is_adaptive, widest_spec, window_runs
from ..pipelines.base import BaseARPipeline
from ..pipelines.inputs import CheckedInputs
from ..samplers import DecodeStatus, Sampler, SamplingOptions
from ..samplers.decode import image_keys
from ..session.capture import GraphBudget, compile_mode
from .admission import Estimate, Load, Throughput
from .lanes import LaneGroup, buckets, check_lane_memory
from .requests import (
    Cancelled,
    DecodeFailed,
    EngineResult,
    EngineStopped,
    GroupKey,
    Overloaded,
    QueueFull,
    Request,
)

logger = logging.getLogger(__name__)
CALIBRATION_IMAGES = 4  # images per window that measure the adaptive mode's yields when a group starts
WARM_UP_PROMPT = "a red circle left of a blue square"
# The engines whose decode thread runs (a running thread holds its engine). Each is closed at exit: a daemon
# thread that the interpreter's finalisation stops inside a torch operation aborts the whole process
# ("terminate called without an active exception").
_RUNNING: weakref.WeakSet[Engine] = weakref.WeakSet()


@dataclass
class EngineStats:
    """What the engine has done since it started (read them while it runs: plain numbers)."""

    images: int = 0
    steps: int = 0
    lane_steps: int = 0  # lanes of the groups that stepped, step by step
    busy_lane_steps: int = 0  # of those, lanes holding an image
    windows: collections.Counter = field(default_factory=collections.Counter)  # adaptive steps by window
    queue_full: int = 0  # requests refused: `max_queue` waiting already
    overloaded: int = 0  # requests refused: expected to wait past their time limit
    expired: int = 0  # requests stopped at their time limit (waiting or decoding)
    failed: int = 0  # requests failed by an error (their group's, their own step callback's)
    group_failures: int = 0  # groups dropped after an error

    @property
    def utilisation(self) -> float:
        """Busy lanes over all lanes of the groups that stepped."""
        return self.busy_lane_steps / self.lane_steps if self.lane_steps else 0.0

    def snapshot(self) -> EngineStats:
        """A copy of the figures as they are now."""
        return EngineStats(**{name: _copy(value) for name, value in self._values()})

    def since(self, earlier: EngineStats) -> EngineStats:
        """What happened after `earlier` (a `snapshot`)."""
        return EngineStats(**{name: value - getattr(earlier, name) for name, value in self._values()})

    def _values(self) -> list[tuple[str, Any]]:
        return [(item.name, getattr(self, item.name)) for item in dataclasses.fields(self)]


def _copy(value: Any) -> Any:
    return collections.Counter(value) if isinstance(value, collections.Counter) else value


@dataclass
class _Plan:
    """What a round starts: requests in free lanes of existing groups, requests that open a group of their
    key (made outside the lock), and the requests of a non-continuous sampler to run as one call."""

    admissions: list[tuple[LaneGroup, int, Request]] = field(default_factory=list)
    opening: dict[GroupKey, list[Request]] = field(default_factory=dict)
    static: list[Request] = field(default_factory=list)


class Engine:
    """Decode many requests at once on `pipe` (see the module docstring).

    `config`: what the engine takes on (`arjet.limits.EngineConfig`: lanes, max_queue, prompt_tokens,
    max_groups, time_limit, compile, max_graphs; default `DEFAULT_ENGINE`), `overrides`: any of those fields
    by name, which replace the config's (`Engine(pipe, lanes=4)` and `Engine(pipe, SERVE_ENGINE, lanes=16)` both
    work). `lanes`: images a group decodes at once (at most `MAX_LANES`; their KV caches must fit in the
    device's free memory); `max_queue`: requests that may wait (`submit` raises `QueueFull` beyond it);
    `prompt_tokens`: the longest prompt (chat template included) a request may have, the size of every
    lane's prompt region; `max_groups`: groups decoding side by side; `time_limit`: seconds a request may
    take from its submission (None: no limit; a request expected to take longer is refused with
    `Overloaded`); `compile`: as `pipe(..., compile=)`, but "auto" (the default) picks compiled layers
    inside captured steps on a GPU (an engine lives long enough to earn the compile, which `warm_up` pays);
    `max_graphs`: captured graphs kept at once (`graph_counts`); `clock`: the clock of time limits and of the
    admission's estimates (tests step it by hand); the stats' durations use `time.monotonic`."""

    def __init__(
        self,
        pipe: BaseARPipeline,
        config: EngineConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        **overrides: Any,
    ):
        if config is not None and not isinstance(config, EngineConfig):
            raise ValueError(f"config must be an arjet.limits.EngineConfig or None, got {config!r}")
        config = dataclasses.replace(config or DEFAULT_ENGINE, **overrides)
        if not callable(clock):
            raise ValueError(f"clock must be a function returning seconds, got {clock!r}")
        self.pipe, self.config = pipe, config
        lanes, max_groups, prompt_tokens = config.lanes, config.max_groups, config.prompt_tokens
        self.lanes, self.max_queue, self.prompt_tokens = lanes, config.max_queue, prompt_tokens
        self.max_groups, self.time_limit = max_groups, config.time_limit
        # "auto": an engine lives long enough to earn inductor's compile (paid by `warm_up`, before serving)
        fallback = pipe.eager_fallback if config.compile == AUTO_COMPILE else None
        self.compile = compile_mode(config.compile, pipe._execution_device, lasting=True, fallback=fallback)
        self._fallback = fallback if self.compile != "none" else None
        self._graphs = GraphBudget(config.max_graphs)
        check_lane_memory(pipe, lanes, max_groups, prompt_tokens)
        self.clock = clock
        self.stats = EngineStats()
        self._throughput = Throughput(history=max(2 * lanes, 8))
        self._queue: collections.deque[Request] = collections.deque()
        self._lock = threading.Condition()
        self._groups: dict[GroupKey, LaneGroup] = {}
        self._costs: dict[GroupKey, CostModel] = {}
        self._taken: list[Request] = []  # requests this round took from the queue that hold no lane yet
        self._measuring = 0.0  # seconds of this round spent measuring the adaptive mode's costs
        self._closing = False
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    # -- the public face -----------------------------------------------------------------------------
    def start(self) -> Engine:
        """Start the decode thread (`submit` refuses requests before). An engine left running when the
        interpreter exits is closed then, as `close` does. A closed engine does not start again
        (`EngineStopped`): make a new one."""
        if self._closing:
            raise EngineStopped("the engine is closed and does not start again; make a new Engine")
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="arjet-engine", daemon=True)
            self._thread.start()
            _RUNNING.add(self)
        return self

    def close(self) -> None:
        """Stop the decode thread; requests still queued or decoding fail with `Cancelled`."""
        with self._lock:
            self._closing = True
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        _RUNNING.discard(self)

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
    def state(self) -> str:
        """The engine's state: "running", "not started", "closed", or "failed" (its decode thread stopped
        after an error: see `error`)."""
        if self._error is not None or (self._thread is not None and not self._thread.is_alive()):
            return "failed"
        if self._closing:
            return "closed"
        return "not started" if self._thread is None else "running"

    @property
    def error(self) -> BaseException | None:
        """What stopped the decode thread, if something did."""
        return self._error

    def graph_counts(self) -> dict[str, Any]:
        """The steps' mode and captured graphs: `compile` (the mode "auto" or the config chose), `fell_back`
        (why "auto" runs eager steps now, or None), and `GraphBudget.counts` (graphs alive and their bound,
        captures, replays, evictions, graph memory in bytes)."""
        failure = None if self._fallback is None else self._fallback.failure
        return {"compile": self.compile, "fell_back": failure, **self._graphs.counts()}

    @property
    def queued(self) -> int:
        with self._lock:
            return len(self._queue)

    @property
    def busy(self) -> int:
        """Lanes holding an image now, over every group."""
        return sum(len(group.busy) for group in list(self._groups.values()))

    def estimate(self) -> Estimate:
        """The measured throughput and latency, and the wait a request submitted now should expect."""
        with self._lock:
            return self._throughput.estimate(self._load())

    def submit(
        self,
        prompt: str,
        *,
        sampler: str | Sampler = "ar",
        seed: int | None = None,
        generator: torch.Generator | None = None,
        height: int | None = None,
        width: int | None = None,
        sampling: SamplingOptions | None = None,
        output_type: str = "pil",
        on_step: Callable[[torch.Tensor], None] | None = None,
        time_limit: float | None = None,
        **values: Any,
    ) -> Request:
        """Queue one image; returns the `Request` (`request.result()` waits for its `EngineResult`, whose
        `image` is in `output_type` as `pipe(...)` makes it; `request.cancel()` stops it). Every argument is
        checked as `pipe(...)` checks it, before it is queued; `sampler="adaptive"` is the engine's adaptive
        mode. `sampling`: the `SamplingOptions` (guidance scale, temperature, top-k, top-p), or give them as
        keywords (`guidance_scale=`, `temperature=`, `top_k=`, `top_p=`; not both): None numbers are the
        pipeline's defaults, temperature left out is 1. `on_step(codes)` gets the image's codes `[H, W]`
        (-1 where not decoded yet) after every step (from the engine's thread: keep it quick; if it raises,
        the request fails with its error). `time_limit`: seconds from now (None: the engine's). Raises
        `QueueFull` when `max_queue` requests wait already, `Overloaded` when the request is expected to take
        longer than its time limit (both with `retry_after` seconds), `EngineStopped` when the engine takes no
        more work, `RuntimeError` before `start` (nothing would decode it)."""
        self._check_running()
        limit = self.time_limit if time_limit is None else _time_limit(time_limit)
        if on_step is not None and not callable(on_step):
            raise ValueError(f"on_step must be a function of the codes or None, got {on_step!r}")
        request = self._request(
            prompt,
            sampler=sampler,
            seed=seed,
            generator=generator,
            height=height,
            width=width,
            sampling=_sampling_kwargs("submit", sampling, values),
            output_type=output_type,
            on_step=on_step,
            deadline=None if limit is None else self.clock() + limit,
        )
        self._enqueue(request, limit)
        return request

    def warm_up(
        self,
        sampler: str | Sampler = ADAPTIVE,
        *,
        prompt: str = WARM_UP_PROMPT,
        images: int | None = None,
        **options: Any,
    ) -> list[EngineResult]:
        """Before serving: decode `images` images (default: `lanes`) of `prompt` at once with `sampler` and the
        default size and sampling options (or `options`, as `submit` takes them), and wait for them. The
        adaptive mode measures its cost model for that group here, so a first adaptive request of the same
        options measures nothing; the throughput estimate starts from a full engine's. Starts the engine; the
        warm-up's images have no time limit and no queue bound. A failed image raises its `DecodeFailed`
        here (a model that cannot decode, say), which the engine's log leaves to the caller."""
        count = self.lanes if images is None else checks.integer("images", images, 1, MAX_LANES)
        self.start()
        self._check_running()
        values = {name: options.pop(name) for name in SamplingOptions.names() if name in options}
        options["sampling"] = _sampling_kwargs("warm_up", options.pop("sampling", None), values)
        requests = [
            self._request(prompt, sampler=sampler, seed=i, output_type="latent", **options)
            for i in range(count)
        ]
        for request in requests:
            request.raised_to_caller = True  # a failure is raised here, so the engine's log need not show it
            self._enqueue(request, None, bounded=False)
        return [request.result() for request in requests]

    def generate(self, prompts: Iterable[str], *, seed: int = 0, **options: Any) -> list[EngineResult]:
        """Every prompt through the engine (prompt `i` with seed `seed + i`), waiting for all; the results
        in prompt order. `options` as `submit`. All or none: every prompt is checked, and the queue's room
        for all of them, before any is queued (at most `max_queue` prompts; `QueueFull` when they do not fit
        now); if one is refused, or one fails, or the wait is interrupted, this call's other requests are
        cancelled rather than left decoding for nobody."""
        prompts = list(prompts)
        checks.seed("seed", seed, max(1, len(prompts)))
        requests = self._submit_together(prompts, seed, options)
        try:
            return [request.result() for request in requests]
        finally:
            for request in requests:
                request.cancel()  # a no-op for a finished request; frees the lanes of the others

    # -- requests ---------------------------------------------------------------------------------------
    def _check_running(self) -> None:
        if self._error is not None:
            raise EngineStopped(
                f"the engine's decode thread stopped after an error ({self._error!r})"
            ) from self._error
        if self._closing:
            raise EngineStopped("the engine is closed")

    def _request(
        self,
        prompt: str,
        *,
        sampler: str | Sampler = "ar",
        seed: int | None = None,
        generator: torch.Generator | None = None,
        height: int | None = None,
        width: int | None = None,
        sampling: dict[str, Any] | None = None,
        output_type: str = "pil",
        on_step: Callable[[torch.Tensor], None] | None = None,
        deadline: float | None = None,
    ) -> Request:
        """A checked request (as `pipe(...)` checks its arguments), not queued yet; `sampling`: the sampling
        options as `pipe(...)`'s keywords (`_sampling_kwargs`; None: the defaults)."""
        sampling = _sampling_kwargs("submit", None, {}) if sampling is None else sampling
        if not isinstance(prompt, str):
            raise ValueError(f"prompt must be a string, got {type(prompt).__name__}: {prompt!r}")
        adaptive = is_adaptive(sampler)
        if seed is None and generator is None:  # a seed of its own, so that a pipe(...) call can redo it
            seed = int(torch.randint(0, KEY_LIMIT - 1, ()))
        call = self.pipe.check_inputs(
            prompt,
            sampler=widest_spec(self.pipe.limits.max_window) if adaptive else sampler,
            seed=seed,
            generator=generator,
            height=height,
            width=width,
            **sampling,
            output_type=output_type,
        )
        length = self.pipe.prompt_length(prompt, call.grid)
        if length > self.prompt_tokens:
            raise ValueError(
                f"prompt {prompt[:40]!r} is {length} tokens (chat template included), more than this engine's "
                f"prompt_tokens={self.prompt_tokens}; shorten it"
            )
        resolved = call.sampling  # the group's top-p as given: None leaves it to each `pipe(...)` call
        options = SamplingOptions(
            resolved.guidance_scale, resolved.temperature, resolved.top_k, sampling["top_p"]
        )
        group = GroupKey(ADAPTIVE if adaptive else call.sampler_label, call.grid, options)
        generator = call.generators[0] if isinstance(call.generators, list) else call.generators
        generator_state = generator.get_state()  # for a pipe(...) call, which draws the key again
        return Request(
            prompt,
            call,
            image_keys([generator], 1),
            group,
            call.sampler,
            size=(height, width),
            generator_state=generator_state,
            on_step=on_step,
            deadline=deadline,
            withdraw=self._withdraw,
        )

    def _submit_together(self, prompts: list[str], seed: int, options: dict[str, Any]) -> list[Request]:
        """`generate`'s requests, all queued or none: under the lock (`submit` takes it again: it is
        reentrant), so the decode thread starts none of them before the last is checked and queued; if one
        is refused, those queued before it are taken back."""
        if len(prompts) > self.max_queue:
            raise ValueError(
                f"{len(prompts)} prompts are more than this engine's queue holds (max_queue={self.max_queue}), "
                f"so they could never wait together; pass at most {self.max_queue} per call"
            )
        requests: list[Request] = []
        with self._lock:
            self._check_room(len(prompts))
            try:
                for i, prompt in enumerate(prompts):
                    requests.append(self.submit(prompt, seed=seed + i, **options))
            except BaseException:
                for request in requests:
                    request.cancel()
                raise
        return requests

    def _enqueue(self, request: Request, limit: float | None, bounded: bool = True) -> None:
        """Queue `request`, or refuse it: `QueueFull` beyond `max_queue`, `Overloaded` when its expected wait
        is longer than `limit` seconds, `RuntimeError` before `start` (it would never run)."""
        with self._lock:
            if self._closing:
                raise EngineStopped("the engine is closed")
            if self._thread is None:
                raise RuntimeError(
                    "the engine is not started, so nothing would decode this request: call engine.start() "
                    "first (or use `with Engine(...) as engine:`)"
                )
            if bounded:
                self._check_room(1)
            if limit is not None:
                self._refuse_if_late(limit, request.group)
            self._queue.append(request)
            self._lock.notify_all()

    def _check_room(self, count: int) -> None:
        """Under the lock: `QueueFull` unless `count` more requests fit in the queue."""
        waiting = len(self._queue)
        if waiting + count <= self.max_queue:
            return
        self.stats.queue_full += 1
        what = "" if count == 1 else f"{count} more requests do not fit: "
        raise QueueFull(
            f"{what}{waiting} requests are waiting (max_queue={self.max_queue})",
            self._throughput.drain_seconds(self._load(), waiting + count - self.max_queue),
        )

    def _load(self) -> Load:
        """Under the lock: what a request queued now would find (lanes' progress, requests ahead of it). One
        group's lanes: requests of another group are counted as if they shared them (a wait overestimated,
        never under)."""
        now = self.clock()
        started = [
            r.started for group in list(self._groups.values()) for r in group.requests if r is not None
        ]
        started += [None] * len(self._taken)  # taken by this round, not started yet
        elapsed = [0.0 if start is None else now - start for start in started]
        return Load(self.lanes, elapsed, len(self._queue))

    def _refuse_if_late(self, limit: float, group: GroupKey) -> None:
        """Under the lock: `Overloaded` when a request of `group` queued now is expected to take longer than
        `limit` (its own decode: its group's latency)."""
        load, latency = self._load(), self._throughput.group_latency(group, self.clock())
        wait = self._throughput.expected_wait(load, latency)
        if wait is None or wait <= limit:
            return
        self.stats.overloaded += 1
        raise Overloaded(
            f"the engine expects this request to take {wait:.3g} s ({load.waiting} waiting before it, "
            f"{len(load.elapsed)} decoding, {self._throughput.rate:.3g} images/s, {latency:.3g} s to decode "
            f"it), longer than its time limit of {limit:g} s",
            self._throughput.retry_after(load, limit, latency),
            wait,
        )

    def _withdraw(self, request: Request) -> None:
        """A cancelled request leaves the queue now (one in a lane is freed by the decode thread)."""
        with self._lock:
            try:
                self._queue.remove(request)
            except ValueError:
                return  # already in a lane, or gone
        request.fail(Cancelled(f"request {request.id} was cancelled before it started"))

    # -- the decode thread ------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            with torch.no_grad():  # as `pipe(...)`: state made here is updated in place from any thread
                while True:
                    try:
                        if not self._round():
                            break
                    except Exception as error:  # outside any one group's work: a bug; the engine goes on
                        self._recover(error)
        except BaseException as error:  # KeyboardInterrupt and the like: the thread stops, and says so
            self._error = error
            raise
        finally:
            reason = (
                Cancelled("the engine stopped")
                if self._error is None
                else EngineStopped(f"the engine's decode thread stopped ({self._error!r})")
            )
            self._fail_all(reason)

    def _round(self) -> bool:
        """Admit what fits, step every group with a busy lane once, hand out finished images. False when
        the engine is closing."""
        with self._lock:
            while not self._closing and not self._queue and not self.busy:
                self._lock.wait()
            if self._closing:
                return False
            plan = self._plan()
            self._taken = [*plan.static, *(r for requests in plan.opening.values() for r in requests)]
        started, self._measuring, finished = self.clock(), 0.0, 0
        if plan.static:
            finished += self._run_static(plan.static)
        admissions = list(plan.admissions)
        for key, requests in plan.opening.items():
            admissions += self._open(key, requests)
        with self._lock:
            self._taken = []
        for group, lane, request in admissions:
            if self._groups.get(group.key) is group:  # not dropped after an error meanwhile
                self._contained(group, self._admit, group, lane, request)
        for group in list(self._groups.values()):
            if group.busy:
                finished += self._contained(group, self._step, group) or 0
        self._throughput.record_round(self.clock() - started - self._measuring, finished)
        return True

    def _plan(self) -> _Plan:
        """Under the lock: which queued requests start now (and where), or the requests of a non-continuous
        sampler to run as one call. Cancelled or expired requests leave the queue. The queue is replaced only
        at the end, so a failure half-way loses no request."""
        now, plan = self.clock(), _Plan()
        waiting: collections.deque[Request] = collections.deque()
        for request in list(self._queue):
            if request.cancelled or request.expired(now):
                self._stop(
                    request, "cancelled" if request.cancelled else "past its time limit", started=False
                )
            elif not self._shares_lanes(request):
                static, most = plan.static, self._call_images()
                if not static or static[0].group == request.group and len(static) < most:
                    static.append(request)
                else:
                    waiting.append(request)
            elif not self._place(request, plan):
                waiting.append(request)
        self._queue = waiting
        return plan

    def _place(self, request: Request, plan: _Plan) -> bool:
        """Under the lock: a lane for `request` in its group (reserved now), or a place in a group that opens
        this round; False when neither has room."""
        key = request.group
        group = self._groups.get(key)
        if group is not None:
            lane = group.free_lane()
            if lane is None:
                return False
            group.requests[lane] = request  # reserved now, started outside the lock
            plan.admissions.append((group, lane, request))
            return True
        opening = plan.opening.get(key)
        if opening is not None:
            if len(opening) >= self.lanes:
                return False
            opening.append(request)
            return True
        if len(self._groups) + len(plan.opening) >= self.max_groups and not self._drop_idle_group():
            return False
        plan.opening[key] = [request]
        return True

    def _drop_idle_group(self) -> bool:
        """Make room for a new group by dropping one whose lanes are all free; False when none is."""
        idle = next((key for key, group in self._groups.items() if not group.busy), None)
        if idle is None:
            return False
        self._groups.pop(idle).release_graphs()
        return True

    def _call_images(self) -> int:
        """Images one `pipe(...)` call of the engine's may decode: `lanes`, within the pipeline's limits."""
        return min(self.lanes, self.pipe.limits.max_images_per_call)

    def _shares_lanes(self, request: Request) -> bool:
        """Whether `request` decodes in a lane: its sampler starts images among others (or it runs in adaptive
        mode), and its family decodes one grid (GLM-Image's preview-then-target decodes run as whole calls)."""
        one_grid = self.pipe.preview_grid(request.group.grid) is None
        return one_grid and (request.sampler.continuous or request.group.sampler == ADAPTIVE)

    def _open(self, key: GroupKey, requests: list[Request]) -> list[tuple[LaneGroup, int, Request]]:
        """A new group for `requests` (its lanes reserved for them); if making it fails (out of memory, say),
        they fail and the engine goes on."""
        try:
            group = self._make_group(key, requests[0])
        except Exception as error:
            self._fail(
                requests, error, f"its group ({key.sampler}, {key.grid[0]}x{key.grid[1]}) could not be made"
            )
            return []
        for lane, request in enumerate(requests):
            group.requests[lane] = request
        self._groups[key] = group
        return [(group, lane, request) for lane, request in enumerate(requests)]

    def _make_group(self, key: GroupKey, request: Request) -> LaneGroup:
        group = LaneGroup(
            self.pipe,
            key,
            request.sampler,
            self.lanes,
            self.prompt_tokens,
            compile=self.compile,
            fallback=self._fallback,
            budget=self._graphs,
        )
        if key.sampler == ADAPTIVE and key not in self._costs:  # before any lane starts
            started = self.clock()
            self._costs[key] = self._measure_costs(group, request)
            self._measuring += self.clock() - started
        return group

    def _measure_costs(self, group: LaneGroup, request: Request) -> CostModel:
        """The adaptive mode's cost model for `group` (no lane started yet): its step times, and what each
        window commits per forward pass over `CALIBRATION_IMAGES` whole images of `request`'s prompt."""
        key = group.key
        windows = [window for window in WINDOWS if window <= group.stepper.reach]
        runs = window_runs(
            self.pipe,
            [request.prompt] * min(self._call_images(), CALIBRATION_IMAGES),
            [window for window in windows if window > 1],
            height=request.size[0],
            width=request.size[1],
            **key.sampling.kwargs(),
        )
        return CostModel.measure(group.step, buckets(self.lanes), windows, lambda w: runs[w].codes_per_pass)

    def _contained(self, group: LaneGroup, work: Callable[..., Any], *args: Any) -> Any:
        """`work(*args)` on `group`; if it raises, the group's requests fail and the group is dropped."""
        try:
            return work(*args)
        except Exception as error:
            if self._groups.get(group.key) is group:
                del self._groups[group.key]
            group.release_graphs()
            held = [request for request in group.requests if request is not None]
            group.requests = [None] * group.lanes
            self.stats.group_failures += 1
            self._fail(
                held,
                error,
                f"its group ({group.key.sampler}, {group.key.grid[0]}x{group.key.grid[1]}) failed",
            )
            return None

    def _admit(self, group: LaneGroup, lane: int, request: Request) -> None:
        prefix = self.pipe.encode_prompts([request.prompt], None, group.key.grid, group.guided)
        group.admit(lane, request, prefix, time.monotonic())
        request.started = self.clock()

    def _step(self, group: LaneGroup) -> int:
        """One step of `group`; the images it finished."""
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
        return self._finish(group, status)

    def _finish(self, group: LaneGroup, status: DecodeStatus) -> int:
        """Hand out finished images, stream codes to watchers, free lanes of cancelled or late requests; the
        images finished."""
        now, deadline_now, finished = time.monotonic(), self.clock(), 0
        for lane in group.busy:
            request = group.requests[lane]
            if status.done[lane]:
                codes, stats = group.result(lane)
                stats.seconds = now - group.started[lane]
                stats.extra["batch_size"] = 1
                group.release(lane)
                self._deliver(request, codes, stats, group.started[lane] - request.submitted)
                finished += 1
            elif request.cancelled or request.expired(deadline_now):
                group.release(lane)
                self._stop(request, "cancelled" if request.cancelled else "past its time limit")
            elif not self._watch(request, group.codes(lane)):
                group.release(lane)
        return finished

    def _watch(self, request: Request, codes: torch.Tensor) -> bool:
        """Hand `codes` to the request's `on_step`; False if it raised (the request then fails with its
        error, and nothing else does). A callback's `SystemExit`, `KeyboardInterrupt` or other
        `BaseException` is the caller's code stopping, not the engine's thread: it fails the request as a
        `DecodeFailed` (so that `result()` does not raise it into the caller's own thread)."""
        if request.on_step is None or request.future.done():
            return True
        try:
            request.on_step(codes)
        except BaseException as error:
            self.stats.failed += 1
            if not isinstance(error, Exception):  # SystemExit & co.: not re-raised in the caller's thread
                stopped = DecodeFailed(f"the request's on_step raised {error!r}")
                stopped.__cause__ = error
                error = stopped
            request.fail(error)
            return False
        return True

    def _deliver(self, request: Request, codes: torch.Tensor, stats: Any, queued: float) -> None:
        render = (
            None if request.call.output_type == "latent" else functools.partial(_render, self.pipe, request)
        )
        self.stats.images += 1
        if request.started is not None:
            now = self.clock()
            self._throughput.record_image(now - request.started, request.group, now)
        request.finish(EngineResult(codes, stats, queued, render))

    def _stop(self, request: Request, why: str, started: bool = True) -> None:
        if why != "cancelled":
            self.stats.expired += 1
            if started and request.started is not None:  # it would have taken at least this long
                now = self.clock()
                self._throughput.record_image(now - request.started, request.group, now)
        before = "" if started else " before it started"
        request.fail(Cancelled(f"request {request.id} was {why}{before}"))

    def _run_static(self, requests: list[Request]) -> int:
        """Requests of a sampler that cannot share lanes, as one `pipe(...)` call: their codes stream to their
        watchers after every step, and the call stops once every one of them is done, cancelled or late. A
        failing call fails them (and nothing else); the images finished."""
        key, started, clock_started = requests[0].group, time.monotonic(), self.clock()

        def on_step(pipe, step, forward_passes, tensors):
            if tensors["codes"].shape[1:] == key.grid:  # watchers see the target grid, not a preview
                for request, codes in zip(requests, tensors["codes"], strict=True):
                    self._watch(request, codes)
            now = self.clock()
            if all(
                request.future.done() or request.cancelled or request.expired(now) for request in requests
            ):
                pipe.interrupt = True
            return tensors

        watched = any(r.on_step is not None or r.deadline is not None for r in requests)
        try:
            out = self.pipe(
                [request.prompt for request in requests],
                sampler=requests[0].sampler,
                generator=[torch.Generator().set_state(request.generator_state) for request in requests],
                height=requests[0].size[0],
                width=requests[0].size[1],
                **key.sampling.kwargs(),
                output_type="latent",
                # under "auto", the call's own choice (it falls back as the lanes do)
                compile=self.compile if self._fallback is None else AUTO_COMPILE,
                callback_on_step_end=on_step if watched else None,
            )
        except Exception as error:
            self._fail(requests, error, "its call failed")
            return 0
        now, finished = self.clock(), 0
        for request, codes, stats in zip(requests, out.codes, out.stats, strict=True):
            if request.future.done():
                continue
            request.started = clock_started
            if request.cancelled or request.expired(now):
                self._stop(request, "cancelled" if request.cancelled else "past its time limit")
                continue
            stats.sampler = key.sampler
            self._deliver(request, codes.cpu(), stats, started - request.submitted)
            finished += 1
        return finished

    def _fail(self, requests: Iterable[Request], error: BaseException, where: str) -> None:
        """Fail `requests` with `DecodeFailed` (from `error`), and log the error once for the operator."""
        requests = [request for request in requests if not request.future.done()]
        unseen = [request for request in requests if not request.raised_to_caller]
        if unseen:
            logger.error(
                "%d request(s) failed: %s (%s: %s)",
                len(unseen),
                where,
                type(error).__name__,
                error,
                exc_info=error,
            )
        failure = DecodeFailed(f"decoding failed: {where} ({type(error).__name__}: {error})")
        failure.__cause__ = error
        self.stats.failed += len(requests)
        for request in requests:
            request.fail(failure)

    def _recover(self, error: Exception) -> None:
        """A round failed outside any group's work: every request waiting or in flight fails, the groups are
        dropped (their state may be half-updated), and the engine goes on with new requests."""
        with self._lock:
            held = self._held()
            self._queue, self._taken = collections.deque(), []
        self._clear_groups()
        self._fail(held, error, "the engine's round failed")

    def _fail_all(self, reason: BaseException) -> None:
        """The decode thread is ending: every request the engine holds fails with `reason`."""
        with self._lock:
            held = self._held()
            self._queue, self._taken = collections.deque(), []
        self._clear_groups()
        for request in held:
            request.fail(reason)

    def _clear_groups(self) -> None:
        for group in self._groups.values():
            group.release_graphs()
        self._groups.clear()

    def _held(self) -> list[Request]:
        """Under the lock: every request the engine holds (waiting, taken by the round, in a lane)."""
        in_lanes = [r for group in self._groups.values() for r in group.requests if r is not None]
        return [*self._queue, *self._taken, *in_lanes]


def _sampling_kwargs(where: str, sampling: SamplingOptions | None, values: dict[str, Any]) -> dict[str, Any]:
    """The sampling options of a request as `pipe(...)`'s four keywords: `sampling` whole, or `values` (any of
    the four names; temperature 1 where left out), not both; TypeError naming another keyword, as a call
    does. The pipeline checks the numbers (`check_inputs`), resolving None ones as `pipe(...)` does."""
    names = SamplingOptions.names()
    for name in values:
        if name not in names:
            raise TypeError(f"{where}() got an unexpected keyword argument {name!r}")
    if sampling is None:
        return {**dict.fromkeys(names), "temperature": 1.0, **values}
    if not isinstance(sampling, SamplingOptions):
        raise ValueError(f"sampling must be a SamplingOptions or None, got {sampling!r}")
    if values:
        raise ValueError(f"pass sampling= or {', '.join(sorted(values))}=, not both")
    return sampling.kwargs()


def _render(pipe: BaseARPipeline, request: Request, codes: torch.Tensor) -> Any:
    """The request's image from its codes `[H, W]`, as `pipe(...)` renders it (GLM-Image: its diffusion
    stage)."""
    call: CheckedInputs = request.call
    with torch.no_grad():
        return pipe.render(codes[None].to(pipe._execution_device), call, [request.prompt])[0]


@atexit.register
def _close_running_engines() -> None:
    """At interpreter exit: close every engine still running (its requests fail as `close` fails them)."""
    for engine in list(_RUNNING):
        engine.close()
