"""A group of lanes: one decoding session whose images ("lanes") start and finish independently.

The session holds `lanes` images over one static KV cache with room for a prompt of `prompt_tokens` tokens.
Each lane has a view of the decode and of the sampler's stepper (`Decode.lanes`, `Stepper.lanes`): admitting
a request prefills its prompt in the lane's rows (laid out as a session of its own would: the image right
after the prompt), gives the lane the request's random key and starts the stepper there, exactly as
`pipe(...)` starts an image, while the other lanes keep their state. A step runs on the *bucket* of the first `k` lanes (`k` a
power of two covering every busy lane), so a lightly loaded engine computes only the lanes it uses; each
bucket (and, in adaptive mode, each window) is one fixed shape, on CUDA one captured graph per attention
span, kept within the engine's `GraphBudget`.
"""

from __future__ import annotations

import torch

from ..machine import available_bytes, kv_bytes_per_token
from ..pipelines.base import BaseARPipeline
from ..samplers import Decode, DecodeStats, DecodeStatus, DecodeTrace, ImageRandom, Sampler, Stepper
from ..session import DecodingSession, Prefix
from ..session.capture import CAPTURED_MODES, CudaGraphRunner, EagerFallback, GraphBudget, step_decoder
from .requests import GroupKey, Request


def check_lane_memory(pipe: BaseARPipeline, lanes: int, groups: int, prompt_tokens: int) -> None:
    """Refuse, before anything is allocated, `groups` groups of `lanes` lanes whose KV caches for the
    model's default image (with CFG rows where the model guides by default) would not fit in the memory free
    on the pipeline's device. An estimate of the caches alone: activations come on top."""
    model = pipe.model  # a pipeline loaded without its AR model refuses here, in one line
    per_slot = kv_bytes_per_token(model.config, model.dtype)  # the cache holds the AR model's dtype
    free = available_bytes(pipe._execution_device)
    if per_slot is None or free is None:
        return
    height, width = pipe.default_size()
    body = pipe.image_layout(pipe.grid_for(height, width)).body_length
    rows = 2 if pipe.checkpoint_guidance_scale() != 1 else 1
    needed = groups * lanes * rows * (prompt_tokens + body + 1) * per_slot
    if needed > free:
        raise ValueError(
            f"lanes={lanes} in up to {groups} group(s) with prompt_tokens={prompt_tokens} need about "
            f"{needed / 1e9:.3g} GB of KV cache for the model's default {height}x{width} image, more than "
            f"the {free / 1e9:.3g} GB free on {pipe._execution_device}; use fewer lanes, groups or prompt tokens"
        )


def buckets(lanes: int) -> list[int]:
    """Lane counts a step may run on: powers of two below `lanes`, and `lanes`."""
    sizes, size = [], 1
    while size < lanes:
        sizes.append(size)
        size *= 2
    return [*sizes, lanes]


class LaneGroup:
    """`lanes` images of one `GroupKey`, decoded by `sampler` (a continuous one) on `pipe`'s model."""

    def __init__(
        self,
        pipe: BaseARPipeline,
        key: GroupKey,
        sampler: Sampler,
        lanes: int,
        prompt_tokens: int,
        *,
        compile: str = "none",
        fallback: EagerFallback | None = None,
        budget: GraphBudget | None = None,
    ):
        self.pipe, self.key, self.sampler, self.lanes = pipe, key, sampler, lanes
        self.prompt_tokens = prompt_tokens
        self.guided = key.sampling.guidance_scale != 1
        device = pipe._execution_device
        rows = lanes * (2 if self.guided else 1)
        idle = Prefix(  # no prompt yet: every slot hidden (each query still sees itself, so nothing is NaN)
            torch.zeros(rows, prompt_tokens, dtype=torch.long, device=device),
            torch.zeros(rows, prompt_tokens, dtype=torch.bool, device=device),
            torch.zeros(rows, dtype=torch.long, device=device),
        )
        session = DecodingSession(
            pipe.session_adapter(),
            pipe.image_layout(key.grid),
            idle,
            key.sampling.guidance_scale if self.guided else None,
            codebook=pipe.image_tokenizer.codebook(),
            noise=pipe.noise_conditioning,
            decoder=step_decoder(pipe.compiled_decoder, compile, fallback),
        )
        policy = key.sampling.policy()
        random = ImageRandom.from_keys(torch.zeros(lanes, dtype=torch.long), device)
        self.decode = Decode(session, policy, random, DecodeTrace(session))
        self.stepper = sampler.stepper(self.decode)
        self.stepper.stop()  # no lane holds an image yet
        self.lane_views = [self._view(i, i + 1) for i in range(lanes)]
        self.bucket_views = {size: self._view(0, size) for size in buckets(lanes)}
        self.cuda_graphs = compile in CAPTURED_MODES
        self.fallback, self.budget = fallback, budget
        self.runners: dict[tuple[int, int | None], CudaGraphRunner] = {}  # by (bucket, adaptive window)
        self.requests: list[Request | None] = [None] * lanes
        self.started = [0.0] * lanes
        self.decoded = [0] * lanes  # cells decoded per lane, as last read from the device

    def _view(self, start: int, stop: int) -> tuple[Decode, Stepper]:
        decode = self.decode.lanes(start, stop)
        return decode, self.stepper.lanes(decode, start, stop)

    # -- lanes -------------------------------------------------------------------------------------------
    @property
    def busy(self) -> list[int]:
        return [lane for lane, request in enumerate(self.requests) if request is not None]

    def free_lane(self) -> int | None:
        return next((lane for lane, request in enumerate(self.requests) if request is None), None)

    def admit(self, lane: int, request: Request, prefix: Prefix, now: float) -> None:
        """Start `request` in `lane`: its prompt prefilled there, its key, cell 0, the stepper's start."""
        decode, stepper = self.lane_views[lane]
        decode.session.admit(prefix)
        decode.random.reset(request.key)
        decode.trace.reset()
        decode.start(stepper)
        self.requests[lane] = request
        self.started[lane] = now
        self.decoded[lane] = 1

    def release(self, lane: int) -> Request | None:
        """Free `lane` (its image stops where it stands); returns the request it held."""
        request, self.requests[lane] = self.requests[lane], None
        self.lane_views[lane][1].stop()
        return request

    # -- steps --------------------------------------------------------------------------------------------
    def bucket(self) -> int:
        """The smallest bucket covering every busy lane."""
        highest = max(self.busy, default=0)
        return next(size for size in self.bucket_views if size > highest)

    def step(self, size: int, window: int | None = None) -> None:
        """One step of the first `size` lanes (`window`: the adaptive mode's window for this step), as
        `Decode.run` takes it; the device was read after the previous step (`status`)."""
        decode, stepper = self.bucket_views[size]
        if window is not None:
            stepper.window = window
        if self.cuda_graphs:
            # the adaptive mode's window changes the step's shapes; a sampler's is fixed
            shape = (size, window)
            if shape not in self.runners:  # made before `advance` reserves: it sets the span sizes captured
                self.runners[shape] = CudaGraphRunner(
                    decode.session, fallback=self.fallback, budget=self.budget
                )
            decode.trace.runner = self.runners[shape]
        decode.advance(stepper)

    def release_graphs(self) -> None:
        """Free the group's captured graphs (it is being dropped)."""
        for runner in self.runners.values():
            runner.drop_all()

    def status(self) -> DecodeStatus:
        """One read of the device: which lanes are done, how far each is; raises session misuse."""
        status = self.decode.status()
        self.decoded = status.decoded
        return status

    def result(self, lane: int) -> tuple[torch.Tensor, DecodeStats]:
        """The codes `[H, W]` (on the CPU) and stats of the image in `lane`."""
        decode, _ = self.lane_views[lane]
        codes = decode.trace.codes[0].view(self.key.grid).to("cpu", copy=True)  # the lane is reused
        return codes, decode.trace.stats(self.key.sampler)[0]

    def codes(self, lane: int) -> torch.Tensor:
        """A copy of the lane's codes `[H, W]` so far (-1 where not decoded yet)."""
        return self.lane_views[lane][0].trace.codes[0].view(self.key.grid).clone()
