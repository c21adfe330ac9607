"""One call's AR stage: the sampler decodes each of the family's grids through a session of its own.

Most families decode one grid. GLM-Image first decodes a small preview grid and then the target grid, whose
session starts from a prefix that holds the prompt and the preview's codes (`BaseARPipeline.preview_grid`,
`preview_prefix`); the same sampler, random streams, progress bar and step callback run through both, and
each image's stats add up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..samplers import Decode, DecodeStats, DecodeTrace, ImageRandom, Interrupted
from ..session import DecodingSession, Prefix
from ..session.capture import CAPTURED_MODES, COMPILED_MODES, CudaGraphRunner
from .callbacks import StepHook
from .inputs import CheckedInputs


@dataclass
class DecodedCodes:
    """The codes of the target grid `[N, H, W]` (-1 where an interrupted decode left a cell), those of the
    preview grid `[N, h, w]` (None for one-grid families) and what each image cost."""

    codes: torch.Tensor
    preview_codes: torch.Tensor | None
    stats: list[DecodeStats]


def decode_codes(
    pipe: Any,
    call: CheckedInputs,
    prefix: Prefix,
    rng: ImageRandom,
    session_class: Callable[..., DecodingSession] = DecodingSession,
) -> DecodedCodes:
    """Run `call.sampler` over every grid of the call in turn (the preview grid, if the family has one, then
    the target), each through a decoding session (`session_class`); `pipe` is the family's `BaseARPipeline`."""
    batch, grid = call.batch_size, call.grid
    preview = pipe.preview_grid(grid)
    grids = [grid] if preview is None else [preview, grid]
    progress = pipe.progress_bar(total=batch * sum(h * w for h, w in grids))
    hook = StepHook(pipe, lambda: pipe.interrupt, progress, call.callback, call.tensor_inputs)
    decoder = pipe.compiled_decoder() if call.compile in COMPILED_MODES else None
    traces: list[DecodeTrace] = []
    runners: list[CudaGraphRunner] = []
    pipe._interrupt = False
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
            runner = CudaGraphRunner(session) if call.compile in CAPTURED_MODES else None
            trace = DecodeTrace(
                session, hook, hook.progress_to, runner, check_every_step=call.callback is not None
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
    return DecodedCodes(codes, preview_codes, stats)


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
            "preview_grid": list(preview.commit_step.shape),
            "preview_forward_passes": preview.forward_passes,
            "preview_commit_step": preview.commit_step.tolist(),
        },
    )


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
