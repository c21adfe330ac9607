"""One decode: the target distribution, the randomness, the record of what was committed, and the loop.

A sampler's `run(decode)` receives one `Decode`, which bundles the four things every sampler uses: the
session (the model, as a grid of codes), the logits policy, the per-image random streams and the trace. The
file reads in that order.

**The logits policy.** Each processor is a small object `logits -> new logits` that validates its argument in
`__init__`, never edits its input, and is left out entirely at its identity setting. `LogitsPolicy` applies
them in the fixed order temperature -> top-k -> top-p (the order of transformers' `generate`) after the
session has already mixed CFG, then turns the result into probabilities. `temperature=0` means greedy: the
distribution becomes a point mass on the argmax, so every sampler (speculative ones included) reduces to
greedy decoding without a special case. `SamplingOptions` is the value the rest of arjet passes around: the
four numbers that shape the target distribution (guidance, temperature, top-k, top-p), validated once where
they enter (`pipe(...)`, the command line, the evaluation runner, the demo).

**Randomness.** Every random decision of a sampler is a uniform drawn from counter-based per-image streams on
the device, and categorical draws are by inverse CDF (`sample`). Image `i` owns a 63-bit key (from its seed
or its `torch.Generator`); the `t`-th draw of a decode is a hash of (key, t, element index), computed with
integer tensor ops on the sampler's device. So

- an image's draws depend only on its key and on how many draws the decode made before, never on the other
  images of the batch (what lets a sharded evaluation reproduce a one-process run);
- drawing needs no generator object, no host round trip and no per-image Python loop: each image's draw
  counter is a device tensor advanced in place, so a captured CUDA graph replays fresh numbers at every step;
- a view of some images (`lanes`) draws for them alone, and `reset` gives them new keys with their counters
  at zero, so an image started in the middle of others' decodes draws exactly what it would alone.

The hash is a 32-bit integer mixer (xor-shift / multiply rounds, multipliers below 2**31 so every product
stays inside int64 without overflow), applied to the image's mixed key, the mixed counter and the element
index in turn; uniforms carry 32 random bits.

**The trace and the loop.** The trace keeps everything on the device (codes, commit steps, tokens committed
per forward), so a decode loop never waits for the device: the built-in samplers are a fixed-shape `step`
run by `Decode.run` (`start`, then `advance` a few steps, then one `status` read of the device to see whether
every image is done). An engine's lanes take the same `start` / `advance` / `status` on their views.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from .. import checks
from ..limits import (  # KEY_LIMIT re-exported: image keys (and seeds) are in [0, KEY_LIMIT)
    KEY_LIMIT,
    MAX_LOGIT_SCALE,
)

if TYPE_CHECKING:
    from ..session import DecodingSession


# == the logits policy ======================================================================================
class LogitsProcessor:
    def __call__(self, logits: torch.Tensor) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError


class Temperature(LogitsProcessor):
    def __init__(self, temperature: float):
        if not isinstance(temperature, (int, float)) or not temperature > 0:
            raise ValueError(
                f"temperature must be a number > 0 for a Temperature processor, got {temperature!r} "
                "(temperature=0 means greedy and is handled by LogitsPolicy)"
            )
        self.temperature = float(temperature)

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        return logits / self.temperature


class TopK(LogitsProcessor):
    def __init__(self, top_k: int):
        if not checks.is_integer(top_k) or top_k <= 0:
            raise ValueError(f"top_k must be a positive integer, got {checks.shown(top_k)}")
        self.top_k = top_k

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        k = min(self.top_k, logits.shape[-1])
        kth = logits.topk(k, dim=-1).values[..., -1:]
        return logits.masked_fill(logits < kth, float("-inf"))


class TopP(LogitsProcessor):
    """Nucleus sampling: keep the most likely codes whose mass before each is below `top_p`, so always at
    least the most likely one (a `top_p` so small it is 0 in float32 keeps just that one: greedy)."""

    def __init__(self, top_p: float):
        if not checks.is_number(top_p) or not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {checks.shown(top_p)}")
        self.top_p = float(top_p)

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        # drop a token when the mass strictly before it already reaches top_p
        drop_sorted = (cumulative - sorted_logits.softmax(-1)) >= self.top_p
        # the most likely token always stays (transformers' min_tokens_to_keep=1): the mass before it is 0,
        # which a top_p below float32's smallest number (1e-300) would reach, emptying the distribution
        drop_sorted[..., 0] = False
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        return logits.masked_fill(drop, float("-inf"))


@dataclass(frozen=True)
class LogitsPolicy:
    """Temperature / top-k / top-p as one object: `policy.probs(logits)` gives the processed distribution."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    processors: Sequence[LogitsProcessor] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        t = self.temperature
        if not checks.is_number(t) or t < 0 or t != t:
            raise ValueError(f"temperature must be a number >= 0 (0 = greedy), got {checks.shown(t)}")
        processors: list[LogitsProcessor] = []
        if t not in (0, 1):
            processors.append(Temperature(t))
        if self.top_k is not None:
            processors.append(TopK(self.top_k))
        if self.top_p is not None:
            top_p = TopP(self.top_p)
            if top_p.top_p < 1:
                processors.append(top_p)
        object.__setattr__(self, "processors", tuple(processors))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def soft(self) -> LogitsPolicy:
        """The distribution behind greedy decoding: the same top-k / top-p at temperature 1."""
        return LogitsPolicy(temperature=1.0, top_k=self.top_k, top_p=self.top_p)

    def process(self, logits: torch.Tensor) -> torch.Tensor:
        """Processed logits (`-inf` outside the top-k / top-p set); greedy keeps only the argmax."""
        logits = logits.float()
        if self.greedy:
            best = logits.argmax(-1, keepdim=True)
            return torch.full_like(logits, float("-inf")).scatter(-1, best, 0.0)
        for processor in self.processors:
            logits = processor(logits)
        return logits

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        return self.process(logits).softmax(-1)


@dataclass(frozen=True)
class SamplingOptions:
    """The numbers that shape the target distribution every sampler must respect, checked when made.

    `guidance_scale`: CFG (1 disables it; None: the pipeline's default); `temperature`: 0 = greedy;
    `top_k`: None = the pipeline's default; `top_p`: in (0, 1], None or 1 = off. Infinities and NaN are
    refused (`guidance_scale=inf` would turn every mixed logit into NaN), and so are finite values that
    overflow once combined: the logits are scaled by about `guidance_scale / temperature`, which must stay
    at most `MAX_LOGIT_SCALE` (1e30) for float32 logits to stay finite (`temperature=1e-45` would otherwise
    give NaN probabilities and a grey image).

    The one declaration of these four values: a pipeline call (`GenerationInputs.sampling`), the engine's
    groups (`GroupKey.sampling`, `Engine.submit(sampling=...)`) and the adaptive mode's choices carry it
    whole; `names()` lists them and `from_kwargs` builds one from keyword arguments of those names."""

    guidance_scale: float | None = None
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self) -> None:
        guidance, temperature = self.guidance_scale, self.temperature
        if guidance is not None:
            checks.number("guidance_scale", guidance, 0.0, note="1 disables CFG")
        checks.number("temperature", temperature, 0.0, note="0 = greedy")
        if self.top_p is not None and (not checks.is_number(self.top_p) or not 0 < self.top_p <= 1):
            raise ValueError(f"top_p must be in (0, 1], got {checks.shown(self.top_p)}")
        scale = max(1.0, guidance or 1.0) / (temperature or 1.0)
        if not scale <= MAX_LOGIT_SCALE:
            given = f"temperature={temperature!r}" + (
                f" with guidance_scale={guidance!r}" if guidance is not None else ""
            )
            raise ValueError(
                f"{given} scales the logits by {scale:.3g}, which overflows float32 logits (grey images); keep "
                f"max(guidance_scale, 1) / temperature <= {MAX_LOGIT_SCALE:g} (temperature=0 means greedy)"
            )
        self.policy()  # checks top_k

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The four values' names, as keyword arguments of `pipe(...)` and `Engine.submit` spell them."""
        return tuple(item.name for item in fields(cls))

    @classmethod
    def from_kwargs(
        cls, values: Mapping[str, Any], defaults: SamplingOptions | None = None
    ) -> SamplingOptions:
        """The options named in `values`, the others at their defaults: the class's, or `defaults`' (which
        also fill a guidance scale, top-k or top-p given as None); ValueError naming any other key. Made
        once, from the merged values, so its checks see the numbers the decode will use."""
        unknown = sorted(set(values) - set(cls.names()))
        if unknown:
            raise ValueError(
                f"unexpected sampling option(s) {', '.join(unknown)}; the sampling options are "
                f"{', '.join(cls.names())}"
            )
        if defaults is None:
            return cls(**values)
        given = {name: value for name, value in values.items() if value is not None or name == "temperature"}
        return cls(**{**defaults.kwargs(), **given})

    def resolved(self, defaults: SamplingOptions) -> SamplingOptions:
        """These options with `defaults`' guidance scale, top-k and top-p where they leave them out (None);
        the temperature is always these options' own."""
        return SamplingOptions.from_kwargs(self.kwargs(), defaults)

    def policy(self) -> LogitsPolicy:
        """Temperature, top-k and top-p as the logits policy samplers apply (CFG is the session's)."""
        return LogitsPolicy(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p)

    def kwargs(self) -> dict[str, Any]:
        """The pipeline call's keyword arguments (`pipe(prompt, **options.kwargs())`)."""
        return asdict(self)


# == randomness =============================================================================================
_MASK32 = 0xFFFFFFFF


def _mix(x: torch.Tensor) -> torch.Tensor:
    """A bijective 32-bit integer hash of `x` (int64 holding values in [0, 2**32))."""
    x = x ^ (x >> 16)
    x = (x * 0x21F0AAAD) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x735A2D97) & _MASK32
    return x ^ (x >> 15)


def image_keys(
    generator: torch.Generator | Sequence[torch.Generator] | None, batch_size: int
) -> torch.Tensor:
    """`[B]` int64 keys: one draw from each image's generator (a list: one per image), or `B` draws from a
    single generator (or torch's global one), taken once before decoding."""
    if isinstance(generator, Sequence):
        if len(generator) != batch_size:
            raise ValueError(f"got {len(generator)} generators for {batch_size} images; pass one per image")
        return torch.cat([_draw_keys(g, 1) for g in generator])
    return _draw_keys(generator, batch_size)


def seed_keys(seeds: Sequence[int]) -> torch.Tensor:
    """`[B]` keys for integer seeds: the same keys `torch.Generator().manual_seed(seed)` would give."""
    return image_keys([torch.Generator().manual_seed(seed) for seed in seeds], len(seeds))


def _draw_keys(generator: torch.Generator | None, count: int) -> torch.Tensor:
    device = generator.device if generator is not None else "cpu"
    return torch.randint(0, KEY_LIMIT - 1, (count,), generator=generator, device=device).cpu()


class ImageRandom:
    """Per-image uniform and normal streams on `device`.

    `ImageRandom(generator, batch_size, device)` takes one `torch.Generator` per image (a list), a single
    generator, or None (torch's global generator); `ImageRandom.from_keys(keys, device)` takes the keys."""

    def __init__(
        self,
        generator: torch.Generator | Sequence[torch.Generator] | None,
        batch_size: int,
        device: torch.device | str = "cpu",
    ):
        self._setup(image_keys(generator, batch_size), device)

    @classmethod
    def from_keys(cls, keys: torch.Tensor, device: torch.device | str = "cpu") -> ImageRandom:
        rng = cls.__new__(cls)
        rng._setup(keys, device)
        return rng

    def _setup(self, keys: torch.Tensor, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self.batch_size = len(keys)
        self._key = _mixed_keys(keys.to(device=self.device, dtype=torch.long))  # [B, 1]
        # draws so far per image, advanced in place
        self.counter = torch.zeros(self.batch_size, 1, dtype=torch.long, device=self.device)

    def lanes(self, start: int, stop: int) -> ImageRandom:
        """The streams of images `start:stop`, sharing their keys and counters with this object."""
        view = ImageRandom.__new__(ImageRandom)
        view.device, view.batch_size = self.device, stop - start
        view._key, view.counter = self._key[start:stop], self.counter[start:stop]
        return view

    def reset(self, keys: torch.Tensor) -> None:
        """New keys `[B]` for these images, their counters back at zero (as a fresh object would have)."""
        self._key.copy_(_mixed_keys(keys.to(device=self.device, dtype=torch.long)))
        self.counter.zero_()

    def bits(self, *shape: int) -> torch.Tensor:
        """`[B, *shape]` int64 holding 32 random bits each; advances every image's draw counter by one."""
        count = 1
        for size in shape:
            count *= size
        self.counter.add_(1)
        stream = _mix(self._key ^ _mix(self.counter & _MASK32))  # [B, 1]
        index = torch.arange(count, device=self.device)
        return _mix(stream ^ index).view(self.batch_size, *shape)

    def uniform(self, *shape: int) -> torch.Tensor:
        """Uniforms in (0, 1) of shape `[B, *shape]` (float64), image `i` from its own stream."""
        return (self.bits(*shape).double() + 0.5) * 2.0**-32

    def normal(self, *shape: int) -> torch.Tensor:
        """Standard normal draws of shape `[B, *shape]` (float32), by Box-Muller from two uniforms each."""
        u = self.uniform(2, *shape)
        radius = torch.sqrt(-2.0 * torch.log(u[:, 0]))
        return (radius * torch.cos(2.0 * torch.pi * u[:, 1])).float()


def _mixed_keys(keys: torch.Tensor) -> torch.Tensor:
    return _mix(_mix(keys >> 32) ^ (keys & _MASK32))[:, None]


def sample(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Draw from `probs [..., V]` with uniforms `u [...]` by inverse CDF; zero-probability ids are never drawn."""
    cdf = probs.double().cumsum(-1)
    target = (u.to(cdf.dtype) * cdf[..., -1])[..., None]
    index = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    # rounding can push the target past the last non-zero entry: fall back to the largest-probability id there
    return torch.where(index < probs.shape[-1], index, probs.argmax(-1)).clamp_(max=probs.shape[-1] - 1)


# == the trace and the loop ================================================================================
CHECK_EVERY = 4  # decode steps between two reads of the device (is every image done?)


class Interrupted(Exception):
    """Raised inside a sampler's decode when its trace's `StopFlag` is set (the pipeline's `interrupt`), or
    its step hook returns True."""


@dataclass
class StopFlag:
    """Set `requested` to stop a decode after the step in progress; the decode loop reads it after every
    step (a plain attribute: no call, no device read)."""

    requested: bool = False


@dataclass
class BoundReported:
    """Whether any step of a decode reported a total-variation bound (it verifies with an acceptance rule);
    one object shared by a trace and its lane views, so an engine's lane reports what its steps did."""

    value: bool = False


@dataclass
class DecodeStats:
    """What one image cost: forward passes, committed tokens per step, and when each cell was committed."""

    sampler: str
    forward_passes: int
    tokens: int
    accepted_per_step: list[int]
    commit_step: torch.Tensor  # [H, W] long: the forward pass (1-based) whose output fixed each cell
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def compression(self) -> float:
        """Step compression: tokens per forward pass (plain AR gives exactly 1.0)."""
        return self.tokens / max(self.forward_passes, 1)

    def __repr__(self) -> str:
        """One line: the figures, with the per-step counts and the commit map shown by their sizes only."""
        height, width = self.commit_step.shape
        return (
            f"DecodeStats(sampler={self.sampler!r}, forward_passes={self.forward_passes}, tokens={self.tokens}, "
            f"compression={self.compression:.2f}, seconds={self.seconds:.3f}, "
            f"accepted_per_step=<{len(self.accepted_per_step)} steps>, commit_step=<{height}x{width}>)"
        )

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key] if key not in self.__dataclass_fields__ else getattr(self, key)

    def to_dict(self) -> dict[str, Any]:
        return {
            "sampler": self.sampler,
            "forward_passes": self.forward_passes,
            "tokens": self.tokens,
            "accepted_per_step": list(self.accepted_per_step),
            "compression": self.compression,
            "seconds": self.seconds,
            "commit_step": self.commit_step.tolist(),
            **self.extra,
        }


@dataclass
class DecodeStatus:
    """What one read of the device (`Decode.status`) says about every image."""

    done: list[bool]  # [B]: every cell decoded
    decoded: list[int]  # [B]: cells decoded so far

    @property
    def all_done(self) -> bool:
        return all(self.done)


StepHook = Callable[["DecodeTrace"], bool | None]
ProgressHook = Callable[[int], None]
StepRunner = Callable[[Callable[[], None]], None]


class DecodeTrace:
    """The codes decoded so far (`-1` = not yet), the forward pass that committed each cell, and how many
    cells each forward pass committed, per image, on the session's device.

    `on_step(trace)` runs after every commit (returning True interrupts); with `check_every_step` it reads the
    device every step anyway (a user's step callback), so the decode loop then also checks after every step
    whether every image is done, and no step (nor `on_step`) runs past the end. `on_progress(decoded)` receives
    the number of decoded cells of the whole batch whenever the decode loop reads the device; `runner(step)`
    runs one fixed-shape step (eagerly when None; a captured graph's replay, see `arjet.session.capture`)."""

    def __init__(
        self,
        session: DecodingSession,
        on_step: StepHook | None = None,
        on_progress: ProgressHook | None = None,
        runner: StepRunner | None = None,
        *,
        check_every_step: bool = False,
        stop: StopFlag | None = None,
    ):
        self.session = session
        batch, cells = session.batch_size, session.num_cells
        device = session.device
        self.codes = torch.full((batch, cells), -1, dtype=torch.long, device=device)
        self.commit_step = torch.full((batch, cells), 0, dtype=torch.long, device=device)
        # tokens committed by the k-th forward pass that committed any (each forward of a running image does)
        self.accepted = torch.zeros(batch, cells + 1, dtype=torch.long, device=device)
        self.steps = torch.zeros(batch, 1, dtype=torch.long, device=device)
        # the relaxed acceptance's total-variation bound of the committed codes: its sum, its largest position
        self.tv_bound = torch.zeros(batch, 2, device=device)
        self.bound_reported = BoundReported()
        self.on_step = on_step
        self.on_progress = on_progress
        self.runner = runner
        self.check_every_step = check_every_step
        self.stop = stop or StopFlag()
        self.hooks_by_loop = (
            False  # `Decode.run` calls `on_step` after each step (commit may be a graph replay)
        )

    @property
    def done(self) -> torch.Tensor:
        """[B] bool: every cell of the image is decoded."""
        return (self.codes >= 0).all(1)

    def lanes(self, session: DecodingSession, start: int, stop: int) -> DecodeTrace:
        """The record of images `start:stop` (sharing this trace's tensors), over `session`, their lane view.
        It runs no hooks."""
        view = DecodeTrace.__new__(DecodeTrace)
        view.session = session
        view.codes, view.commit_step = self.codes[start:stop], self.commit_step[start:stop]
        view.accepted, view.steps = self.accepted[start:stop], self.steps[start:stop]
        view.tv_bound, view.bound_reported = self.tv_bound[start:stop], self.bound_reported
        view.on_step = view.on_progress = view.runner = None
        view.stop = self.stop
        view.check_every_step = view.hooks_by_loop = False
        return view

    def reset(self) -> None:
        """Forget every commit (images started anew)."""
        self.codes.fill_(-1)
        self.commit_step.zero_()
        self.accepted.zero_()
        self.steps.zero_()
        self.tv_bound.zero_()

    def commit(
        self,
        cells: torch.Tensor,
        codes: torch.Tensor,
        valid: torch.Tensor | None = None,
        *,
        bound: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> None:
        """Record codes `[B, n]` as final at cells `[B, n]` (where `valid`), stamped with the current step.
        `bound`: what the step's verification adds to each image's total-variation bound, `(sum, max)` of
        its positions' bounds, `[B, ...]` each (a sampler that verifies with an acceptance rule passes its
        verdict's, `jacobi.Bound`; the stats then report it)."""
        if bound is not None:
            self.bound_reported.value = True
            total, worst = (part.reshape(part.shape[0], -1) for part in bound)
            self.tv_bound[:, 0] += total.sum(1)
            self.tv_bound[:, 1] = torch.maximum(self.tv_bound[:, 1], worst.amax(1))
        if valid is None:
            valid = cells >= 0
        scratch = self.codes.shape[1]  # invalid entries are written to an extra column, then dropped
        index = torch.where(valid, cells, scratch)
        step = self.session.forward_passes[:, None].expand_as(cells)
        for table, values in ((self.codes, codes), (self.commit_step, step)):
            padded = torch.cat([table, table[:, :1]], 1).scatter_(1, index, values.to(table.dtype))
            table.copy_(padded[:, :scratch])
        count = valid.sum(1, keepdim=True)
        self.accepted.scatter_(1, self.steps, count)
        self.steps += count > 0
        if not self.hooks_by_loop:
            self.after_step()

    def after_step(self) -> None:
        """Run the step hook; raise `Interrupted` when it or the stop flag asks to stop."""
        if self.on_step is not None and self.on_step(self):
            raise Interrupted
        if self.stop.requested:
            raise Interrupted

    def stats(self, name: str) -> list[DecodeStats]:
        grid = self.session.grid
        passes = self.session.forward_passes.tolist()
        steps = self.steps[:, 0].tolist()
        accepted = self.accepted.tolist()
        tokens = (self.codes >= 0).sum(1).tolist()
        commit_step = self.commit_step.to("cpu", copy=True)  # the trace may be reused (an engine lane)
        drafted = self.session.drafter_passes.tolist()
        bounds = self.tv_bound.tolist() if self.bound_reported.value else None
        return [
            DecodeStats(
                sampler=name,
                forward_passes=passes[i],
                tokens=tokens[i],
                accepted_per_step=accepted[i][: steps[i]],
                commit_step=commit_step[i].view(grid),
                extra={
                    **({"drafter_forwards": drafted[i]} if drafted[i] else {}),
                    **({"tv_bound": bounds[i][0], "tv_bound_max": bounds[i][1]} if bounds else {}),
                },
            )
            for i in range(self.session.batch_size)
        ]


def _eager(step: Callable[[], None]) -> None:
    step()


class Stepper:
    """A sampler's state between forwards. `Decode.run` commits cell 0 from the prefill and hands its codes to
    `start`, then calls `step` until every image is done; a step has the same shapes every time and reads
    nothing back from the device.

    Every piece of per-image state is a tensor whose first dimension is the image, named in `per_image` and
    updated in place (`start` included: it sets an image's state as at the beginning of its decode). So
    `lanes(decode, start, stop)` is a view that steps (or starts) images `start:stop` alone, sharing the
    state, which a continuous-batching engine uses to start an image while others keep decoding."""

    per_image: ClassVar[tuple[str, ...]] = ()
    reach: int = 1  # the furthest, in cells, one step may move the session's furthest input (sizes the span)

    def start(self, first: torch.Tensor) -> None:
        """Set up once cell 0 is committed (`first [B]`: its codes), e.g. guess the first drafts."""

    def step(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not implement step()")

    def stop(self) -> None:
        """Finish every image as it stands: from now on it queries nothing (until `start`)."""
        raise NotImplementedError(f"{type(self).__name__} cannot stop images early")

    def lanes(self, decode: Decode, start: int, stop: int) -> Stepper:
        """This stepper over images `start:stop`, through `decode` (their lane view of the decode)."""
        view = copy.copy(self)
        view.decode = decode
        for name in self.per_image:
            state = getattr(self, name)
            setattr(view, name, state[start:stop])
        return view


@dataclass
class Decode:
    """Everything one decode uses, passed to `Sampler.run` as one value."""

    session: DecodingSession
    policy: LogitsPolicy
    random: ImageRandom
    trace: DecodeTrace

    def lanes(self, start: int, stop: int) -> Decode:
        """This decode over images `start:stop` alone (views sharing the session, streams and trace)."""
        session = self.session.lanes(start, stop)
        return Decode(
            session, self.policy, self.random.lanes(start, stop), self.trace.lanes(session, start, stop)
        )

    def start(self, stepper: Stepper) -> None:
        """Commit cell 0 of every image from the prefill and start `stepper` there (an engine's lane view
        starts one image this way while the others keep decoding)."""
        stepper.start(self.commit_first_cell())

    def advance(self, stepper: Stepper, steps: int = 1, *, unchecked: int = 0) -> None:
        """Take `steps` steps of `stepper`, each through `trace.runner` and followed by the trace's step hook,
        with the session's span first reserved for all of them and the `unchecked` steps taken since the
        device was last read (`status`): a step reads nothing back, so the span must cover the furthest any
        image may have gone."""
        self.session.reserve(stepper.reach * (unchecked + steps))
        run = self.trace.runner or _eager
        for _ in range(steps):
            run(stepper.step)
            self.trace.after_step()

    def status(self) -> DecodeStatus:
        """Read the device once: which images are done and how many cells each has decoded; raises session
        misuse recorded since the last read, and reports the batch's decoded cells to `trace.on_progress`."""
        trace, session = self.trace, self.session
        batch = session.batch_size
        values = torch.cat([trace.done.long(), (trace.codes >= 0).sum(1), session.status()]).tolist()
        session.apply_status(values[2 * batch :])
        decoded = values[batch : 2 * batch]
        if trace.on_progress is not None:
            trace.on_progress(sum(decoded))
        return DecodeStatus([bool(done) for done in values[:batch]], decoded)

    def run(self, stepper: Stepper, max_steps: int, *, fixed_steps: bool = False) -> None:
        """Decode every image: cell 0 from the prefill (`start`), then steps (`advance`) until every image is
        done, reading the device (`status`) once every `CHECK_EVERY` steps (every step with
        `trace.check_every_step`) to see whether it is. With `fixed_steps`, the decode takes exactly `max_steps`
        steps and the device is read once, at the end."""
        self.start(stepper)
        trace = self.trace
        total = self.session.batch_size * self.session.num_cells
        every = 1 if trace.check_every_step else CHECK_EVERY
        trace.hooks_by_loop = True
        taken = unchecked = 0
        try:
            while taken < max_steps:
                chunk = min(every, max_steps - taken)
                self.advance(stepper, chunk, unchecked=unchecked)
                taken += chunk
                unchecked += chunk
                if fixed_steps and taken < max_steps:
                    if trace.on_progress is not None:
                        trace.on_progress(total * taken // max_steps)
                    continue
                unchecked = 0
                if self.status().all_done:
                    return
        finally:
            trace.hooks_by_loop = False

    def commit_first_cell(self) -> torch.Tensor:
        """Sample cell 0 from the prefill's distribution and commit it (the prefill's forward pass predicted
        it; no forward of its own is needed). Returns the codes `[B]`."""
        code = sample(self.policy.probs(self.session.first_logits), self.random.uniform(1)[:, 0])
        self.trace.commit(torch.zeros_like(code)[:, None], code[:, None])
        return code
