"""`ar`: plain autoregressive sampling, one code per forward pass, the reference every sampler is held to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from .base import Sampler
from .decoding import Decode, Stepper
from .random import sample


@dataclass
class AR(Sampler):
    name: ClassVar[str] = "ar"

    def run(self, decode: Decode) -> None:
        decode.run(ARStepper(decode), decode.session.num_cells - 1, reach=1, exact=True)


class ARStepper(Stepper):
    """The last code and the next cell; each step feeds one and samples the other."""

    def __init__(self, decode: Decode):
        self.decode = decode

    def start(self, first: torch.Tensor) -> None:
        self.previous = first[:, None]
        self.cell = torch.ones_like(self.previous)
        self.keep = torch.ones_like(self.previous, dtype=torch.bool)

    def step(self) -> None:
        session, policy = self.decode.session, self.decode.policy
        code = sample(policy.probs(session.logits(self.cell, self.previous)), self.decode.random.uniform(1))
        session.commit(self.keep)
        self.decode.trace.commit(self.cell, code)
        self.previous.copy_(code)
        self.cell.add_(1)
