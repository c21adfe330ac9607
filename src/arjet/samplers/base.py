"""The sampler contract and the bookkeeping every sampler shares.

A sampler is `run(session, policy, rng, trace)`: it decodes every cell of the session's grid for every
image of the batch and records each commit in `trace`. It never sees a model family, a prompt or a
special token (see `arjet.session`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import torch

from .policy import LogitsPolicy
from .random import ImageRandom

if TYPE_CHECKING:
    from ..session import DecodingSession


class Interrupted(Exception):
    """Raised inside a sampler when the step hook asks to stop (the pipeline's `interrupt`)."""


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


StepHook = Callable[["DecodeTrace"], bool | None]


class DecodeTrace:
    """The codes decoded so far (`-1` = not yet) and, per image, what each forward pass committed."""

    def __init__(self, session: DecodingSession, on_step: StepHook | None = None):
        self.session = session
        batch, cells = session.batch_size, session.num_cells
        device = session.device
        self.codes = torch.full((batch, cells), -1, dtype=torch.long, device=device)
        self.commit_step = torch.full((batch, cells), 0, dtype=torch.long, device=device)
        self.accepted: list[list[int]] = [[] for _ in range(batch)]
        self.on_step = on_step

    @property
    def done(self) -> torch.Tensor:
        """[B] bool: every cell of the image is decoded."""
        return (self.codes >= 0).all(1)

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
        counts = valid.sum(1).tolist()
        for image, count in enumerate(counts):
            if count:
                self.accepted[image].append(count)
        if self.on_step is not None and self.on_step(self):
            raise Interrupted

    def stats(self, name: str) -> list[DecodeStats]:
        grid = self.session.grid
        passes = self.session.forward_passes.tolist()
        return [
            DecodeStats(
                sampler=name,
                forward_passes=passes[i],
                tokens=int((self.codes[i] >= 0).sum()),
                accepted_per_step=self.accepted[i],
                commit_step=self.commit_step[i].view(grid).cpu(),
            )
            for i in range(self.session.batch_size)
        ]


class Sampler(Protocol):
    """A decoding algorithm over the session's grid."""

    name: ClassVar[str]
    # optional `needs_codebook: bool`: the sampler compares codes (LANTERN) and needs the tokenizer's codebook

    def run(
        self, session: DecodingSession, policy: LogitsPolicy, rng: ImageRandom, trace: DecodeTrace
    ) -> None:
        """Decode every cell of every image, recording each commit in `trace`."""
