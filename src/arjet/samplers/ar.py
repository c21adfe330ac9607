"""`ar`: plain autoregressive sampling, one code per forward pass, the reference every sampler is held to."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import torch

from .base import DecodeTrace, commit_first_cell, run_steps
from .policy import LogitsPolicy
from .random import ImageRandom, sample

if TYPE_CHECKING:
    from ..session import DecodingSession


class AR:
    name: ClassVar[str] = "ar"

    def run(
        self, session: DecodingSession, policy: LogitsPolicy, rng: ImageRandom, trace: DecodeTrace
    ) -> None:
        previous = commit_first_cell(session, policy, rng, trace)[:, None]
        cell = torch.ones_like(previous)
        keep = torch.ones_like(previous, dtype=torch.bool)

        def step() -> None:
            code = sample(policy.probs(session.logits(cell, previous)), rng.uniform(1))
            session.commit(keep)
            trace.commit(cell, code)
            previous.copy_(code)
            cell.add_(1)

        run_steps(step, trace, session.num_cells - 1, reach=1, exact=True)

    def __repr__(self) -> str:
        return "AR()"
