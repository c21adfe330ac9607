"""`ar`: plain autoregressive sampling, one code per forward pass, the reference every sampler is held to.

Notation (`B` images, `V` the image vocabulary):

| here       | paper (symbol)                         | shape       |
|------------|----------------------------------------|-------------|
| `cell`     | `n`: the cell each image decodes next  | `[B, 1]`    |
| `previous` | `x_{n-1}`: the last committed code     | `[B, 1]`    |
| `p`        | `p_θ(x_n)` given `x_{<n}` (processed:  | `[B, 1, V]` |
|            | CFG, temperature, top-k, top-p)        |             |
| `code`     | `x_n ~ p`                              | `[B, 1]`    |
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from .base import Sampler
from .decode import Decode, Stepper, sample


@dataclass(frozen=True)
class AR(Sampler):
    name: ClassVar[str] = "ar"
    continuous: ClassVar[bool] = True

    def run(self, decode: Decode) -> None:
        decode.run(self.stepper(decode), decode.session.num_cells - 1, fixed_steps=True)

    def stepper(self, decode: Decode) -> ARStepper:
        return ARStepper(decode)


class ARStepper(Stepper):
    """The last code and the next cell of each image; each step feeds one and samples the other."""

    per_image = ("previous", "cell")

    def __init__(self, decode: Decode):
        self.decode = decode
        batch, device = decode.session.batch_size, decode.session.device
        self.previous = torch.zeros(batch, 1, dtype=torch.long, device=device)  # [B, 1]
        self.cell = torch.ones(batch, 1, dtype=torch.long, device=device)  # [B, 1]

    def start(self, first: torch.Tensor) -> None:
        self.previous.copy_(first[:, None])
        self.cell.fill_(1)

    def stop(self) -> None:
        self.cell.fill_(self.decode.session.num_cells)

    def step(self) -> None:
        session, policy = self.decode.session, self.decode.policy
        # a finished image queries nothing
        cell = torch.where(self.cell < session.num_cells, self.cell, -1)  # [B, 1]

        # 1. forward: the last committed code predicts the next cell
        p = policy.probs(session.logits(cell, self.previous))  # [B, 1, V]

        # 2. sample: x_n ~ p
        code = sample(p, self.decode.random.uniform(1))  # [B, 1]

        # 3. commit: to the cache and the trace; the code is the next step's input
        session.commit(cell >= 0)
        self.decode.trace.commit(cell, code)
        self.previous.copy_(code)
        self.cell.add_(1)
