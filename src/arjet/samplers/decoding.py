"""One decode: what a sampler's `run(decode)` receives, the record of what it committed, and its loop.

`Decode` bundles the four things every sampler uses: the session (the model, as a grid of codes), the
logits policy (temperature, top-k, top-p), the per-image random streams and the trace. The trace keeps
everything on the device (codes, commit steps, tokens committed per forward), so a decode loop never waits
for the device: the built-in samplers are a fixed-shape `step` run by `Decode.run`, which reads the
device once every few steps to see whether every image is done.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from .policy import LogitsPolicy
from .random import ImageRandom, sample

if TYPE_CHECKING:
    from ..session import DecodingSession

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

    def commit(self, cells: torch.Tensor, codes: torch.Tensor, valid: torch.Tensor | None = None) -> None:
        """Record codes `[B, n]` as final at cells `[B, n]` (where `valid`), stamped with the current step."""
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
        return [
            DecodeStats(
                sampler=name,
                forward_passes=passes[i],
                tokens=tokens[i],
                accepted_per_step=accepted[i][: steps[i]],
                commit_step=commit_step[i].view(grid),
                extra={"drafter_forwards": drafted[i]} if drafted[i] else {},
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

    def run(self, stepper: Stepper, max_steps: int, *, exact: bool = False) -> None:
        """Decode every image: cell 0 from the prefill (`start`), then steps (`advance`) until every image is
        done, reading the device (`status`) once every `CHECK_EVERY` steps (every step with
        `trace.check_every_step`) to see whether it is. With `exact`, the decode takes exactly `max_steps`
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
                if exact and taken < max_steps:
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
