"""Per-step plumbing between a sampler's trace and the pipeline: progress bar, step callback, interrupt."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from diffusers import DiffusionPipeline

from ..samplers import DecodeTrace


class StepHook:
    """The trace's `on_step` / `on_progress`. Only a callback reads the device after every step; the progress
    bar moves whenever the decode loop reads it anyway. `interrupted()` says whether to stop (the pipeline's
    `interrupt`); `pipe` is what the callback receives."""

    def __init__(
        self,
        pipe: DiffusionPipeline,
        interrupted: Callable[[], bool],
        progress: Any,
        callback: Callable[..., dict[str, Any] | None] | None,
        tensor_inputs: list[str],
    ):
        self.pipe = pipe
        self.interrupted = interrupted
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

    def __call__(self, trace: DecodeTrace) -> bool:
        if self.callback is not None:
            grid = trace.session.grid
            state = {"codes": trace.codes.view(-1, *grid), "commit_step": trace.commit_step.view(-1, *grid)}
            kwargs = {name: state[name].clone() for name in self.tensor_inputs}
            forward_passes = self.earlier_passes + trace.session.count
            returned = self.callback(self.pipe, self.step, forward_passes, kwargs)
            check_callback_return(returned, state)
        self.step += 1
        return self.interrupted()


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
