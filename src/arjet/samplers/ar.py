"""`ar`: plain autoregressive sampling, one code per forward pass, the reference every sampler is held to."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import torch

from .base import DecodeTrace
from .policy import LogitsPolicy
from .random import ImageRandom, sample

if TYPE_CHECKING:
    from ..session import DecodingSession


class AR:
    name: ClassVar[str] = "ar"

    def run(
        self, session: DecodingSession, policy: LogitsPolicy, rng: ImageRandom, trace: DecodeTrace
    ) -> None:
        batch = session.batch_size
        previous = torch.zeros(batch, 1, dtype=torch.long, device=session.device)
        for cell in range(session.num_cells):
            cells = torch.full((batch, 1), cell, dtype=torch.long, device=session.device)
            probs = policy.probs(session.logits(cells, previous))
            previous = sample(probs, rng.uniform(1))
            session.commit(torch.ones_like(cells, dtype=torch.bool))
            trace.commit(cells, previous)

    def __repr__(self) -> str:
        return "AR()"
