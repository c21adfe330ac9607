"""`ar`: plain autoregressive sampling, one code per forward pass, the reference every sampler is held to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from .base import Sampler
from .decoding import Decode, Stepper
from .random import sample


@dataclass(frozen=True)
class AR(Sampler):
    name: ClassVar[str] = "ar"
    continuous: ClassVar[bool] = True

    def run(self, decode: Decode) -> None:
        decode.run(self.stepper(decode), decode.session.num_cells - 1, exact=True)

    def stepper(self, decode: Decode) -> ARStepper:
        return ARStepper(decode)


class ARStepper(Stepper):
    """The last code and the next cell of each image; each step feeds one and samples the other."""

    per_image = ("previous", "cell")

    def __init__(self, decode: Decode):
        self.decode = decode
        batch, device = decode.session.batch_size, decode.session.device
        self.previous = torch.zeros(batch, 1, dtype=torch.long, device=device)
        self.cell = torch.ones(batch, 1, dtype=torch.long, device=device)

    def start(self, first: torch.Tensor) -> None:
        self.previous.copy_(first[:, None])
        self.cell.fill_(1)

    def stop(self) -> None:
        self.cell.fill_(self.decode.session.num_cells)

    def step(self) -> None:
        session, policy = self.decode.session, self.decode.policy
        cell = torch.where(self.cell < session.num_cells, self.cell, -1)  # a finished image queries nothing
        code = sample(policy.probs(session.logits(cell, self.previous)), self.decode.random.uniform(1))
        session.commit(cell >= 0)
        self.decode.trace.commit(cell, code)
        self.previous.copy_(code)
        self.cell.add_(1)
