"""One call's AR stage: the sampler samples the codes of each of the family's grids through a session of its own.

Most families decode one grid. GLM-Image first decodes a small preview grid and then the target grid, whose
session starts from a prefix that holds the prompt and the preview's codes (`BaseARPipeline.preview_grid`,
`preview_prefix`); the same sampler, random streams, progress bar and step callback run through both, and
each image's stats add up.

Per step the decode loop reads only the call's `StopFlag` (`pipe.interrupt`); a user's step callback
(`StepHook`) runs only when one is given, and the progress bar moves whenever the loop reads the device.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from diffusers import DiffusionPipeline

from ..samplers import Decode, DecodeStats, DecodeTrace, ImageRandom, Interrupted, StopFlag
from ..session import DecodingSession, Prefix
from ..session.capture import CAPTURED_MODES, CudaGraphRunner, step_decoder
from .inputs import CheckedInputs


@dataclass
class SampledCodes:
    """The codes of the target grid `[N, H, W]` (-1 where an interrupted decode left a cell), those of the
    preview grid `[N, h, w]` (None for one-grid families) and what each image cost."""

    codes: torch.Tensor
    preview_codes: torch.Tensor | None
    stats: list[DecodeStats]


def sample_codes(
    pipe: Any,
    call: CheckedInputs,
    prefix: Prefix,
    rng: ImageRandom,
    session_class: Callable[..., DecodingSession] = DecodingSession,
) -> SampledCodes:
    """Run `call.sampler` over every grid of the call in turn (the preview grid, if the family has one, then
    the target), each through a decoding session (`session_class`); `pipe` is the family's `BaseARPipeline`."""
    batch, grid = call.batch_size, call.grid
    preview = pipe.preview_grid(grid)
    grids = [grid] if preview is None else [preview, grid]
    progress = pipe.progress_bar(total=batch * sum(h * w for h, w in grids))
    hook = StepHook(pipe, progress, call.callback, call.tensor_inputs)
    pipe._stop = stop = StopFlag()  # `pipe._interrupt = True` (in a callback, say) sets it
    decoder = step_decoder(pipe.compiled_decoder, call.compile, call.fallback)
    traces: list[DecodeTrace] = []
    runners: list[CudaGraphRunner] = []
    try:
        for stage in grids:
            if traces:  # the target grid's prompt: the prompt and the preview's codes
                done = traces[-1]
                prefix = pipe.preview_prefix(prefix, done.session.layout, done.codes)
                hook.next_grid(done.session.num_cells * batch, done.session.count)
            session = session_class(
                pipe.session_adapter(),
                pipe.image_layout(stage),
                prefix,
                call.guidance_scale if call.guidance_scale != 1 else None,
                codebook=pipe.image_tokenizer.codebook(),
                noise=pipe.noise_conditioning,
                drafter=pipe.drafter,
                decoder=decoder,
            )
            captured = call.compile in CAPTURED_MODES
            runner = CudaGraphRunner(session, fallback=call.fallback) if captured else None
            trace = DecodeTrace(
                session,
                hook if call.callback is not None else None,
                hook.progress_to,
                runner,
                check_every_step=call.callback is not None,
                stop=stop,
            )
            traces.append(trace)
            runners += [runner] if runner is not None else []
            call.sampler.run(Decode(session, call.policy, rng, trace))
    except Interrupted:
        pass
    finally:
        progress.close()
    stats = traces[0].stats(call.sampler_label)
    first = traces[0].codes.view(batch, *grids[0])
    if preview is None:
        codes, preview_codes = first, None
    elif len(traces) == 2:
        codes, preview_codes = traces[1].codes.view(batch, *grid), first
        stats = [chain_stats(a, b) for a, b in zip(stats, traces[1].stats(call.sampler_label), strict=True)]
    else:  # interrupted within the preview grid
        codes, preview_codes = torch.full((batch, *grid), -1, dtype=torch.long, device=first.device), first
        stats = [chain_stats(a, not_started(call.sampler_label, grid)) for a in stats]
    for item in stats:
        item.extra.update(capture_counts(runners))
    return SampledCodes(codes, preview_codes, stats)


def chain_stats(preview: DecodeStats, target: DecodeStats) -> DecodeStats:
    """One image's cost over its preview grid, then its target grid: forward passes, tokens and the per-step
    counts add up; the target's commit map counts the forward passes from the preview's first one."""
    committed = target.commit_step > 0
    return DecodeStats(
        sampler=target.sampler,
        forward_passes=preview.forward_passes + target.forward_passes,
        tokens=preview.tokens + target.tokens,
        accepted_per_step=preview.accepted_per_step + target.accepted_per_step,
        commit_step=torch.where(committed, target.commit_step + preview.forward_passes, 0),
        extra={
            **preview.extra,
            **target.extra,
            **chained_bound(preview.extra, target.extra),
            "preview_grid": list(preview.commit_step.shape),
            "preview_forward_passes": preview.forward_passes,
            "preview_commit_step": preview.commit_step.tolist(),
        },
    )


def chained_bound(preview: dict, target: dict) -> dict:
    """The total-variation bound over both grids, where the decode reports one: the sums add up, the
    largest position is the larger of the two."""
    if "tv_bound" not in preview:
        return {}
    return {
        "tv_bound": preview["tv_bound"] + target.get("tv_bound", 0.0),
        "tv_bound_max": max(preview["tv_bound_max"], target.get("tv_bound_max", 0.0)),
    }


def not_started(sampler: str, grid: tuple[int, int]) -> DecodeStats:
    """The stats of a grid whose decode never began (the call was interrupted before it)."""
    return DecodeStats(sampler, 0, 0, [], torch.zeros(grid, dtype=torch.long))


def capture_counts(runners: list[CudaGraphRunner]) -> dict[str, int | float]:
    """The CUDA-graph counts of every grid's runner, summed (none unless the steps were captured)."""
    totals: dict[str, int | float] = {}
    for runner in runners:
        for key, value in runner.counts().items():
            totals[key] = totals.get(key, 0) + value
    return totals


class StepHook:
    """The trace's `on_progress`, and its `on_step` when the call has a step callback (which then reads the
    device after every step); the progress bar moves whenever the decode loop reads the device anyway. `pipe`
    is what the callback receives."""

    def __init__(
        self,
        pipe: DiffusionPipeline,
        progress: Any,
        callback: Callable[..., dict[str, Any] | None] | None,
        tensor_inputs: list[str],
    ):
        self.pipe = pipe
        self.progress = progress
        self.callback = callback
        self.tensor_inputs = tensor_inputs
        self.decoded = 0
        self.step = 0
        self.earlier_cells = 0  # cells (of the batch) and forward passes of the grids decoded before this one
        self.earlier_passes = 0

    def next_grid(self, cells: int, forward_passes: int) -> None:
        """The decode moves on to the next grid (GLM-Image's target after its preview), after `cells` cells
        of the batch and `forward_passes` forward passes."""
        self.earlier_cells += cells
        self.earlier_passes += forward_passes

    def progress_to(self, decoded: int) -> None:
        decoded += self.earlier_cells
        self.progress.update(decoded - self.decoded)
        self.decoded = decoded

    def __call__(self, trace: DecodeTrace) -> None:
        grid = trace.session.grid
        state = {"codes": trace.codes.view(-1, *grid), "commit_step": trace.commit_step.view(-1, *grid)}
        kwargs = {name: state[name].clone() for name in self.tensor_inputs}
        forward_passes = self.earlier_passes + trace.session.count
        returned = self.callback(self.pipe, self.step, forward_passes, kwargs)
        check_callback_return(returned, state)
        self.step += 1


def check_callback_return(returned: Any, state: dict[str, torch.Tensor]) -> None:
    """A callback's return is not applied (see `BaseARPipeline.__call__`); refuse one that tries to edit."""
    if returned is None:
        return
    if not isinstance(returned, dict):
        raise ValueError(
            f"callback_on_step_end must return its tensors dict (or None), got {type(returned).__name__}"
        )
    for name, value in returned.items():
        if name in state and not (isinstance(value, torch.Tensor) and torch.equal(value, state[name])):
            raise ValueError(
                f"callback_on_step_end returned a changed {name!r}: decoded codes cannot be replaced (they are "
                "already in the KV cache and the sampler picks the next ones); return the tensors unchanged, "
                "or set pipe._interrupt = True to stop"
            )
