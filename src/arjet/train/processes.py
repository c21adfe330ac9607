"""The processes of a data-parallel training run: one when a stage runs plainly, several under `accelerate
launch` or `torchrun`, which start one process per device and tell each its place through the environment
(`WORLD_SIZE`, `RANK`, `LOCAL_RANK` and the rendezvous address `MASTER_ADDR` / `MASTER_PORT`).

Every process holds the whole model and its own share of the data; after each backward pass the gradients
are averaged over the processes (what a DDP wrapper would do), so the weights stay the same everywhere. A
time budget runs out at slightly different moments in different processes, so each step the processes
agree whether to go on: one that stops stops them all, at the same step, and none waits forever for the
others' gradients.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")


@dataclass(frozen=True)
class Processes:
    rank: int = 0  # this process's place, 0 to count - 1; process 0 logs and saves
    count: int = 1
    local_rank: int = 0  # its place on this machine (its GPU)

    @classmethod
    def from_environment(cls, device: str = "cpu") -> Processes:
        """One process unless a launcher set `WORLD_SIZE` > 1; then join the process group (NCCL on GPUs,
        gloo on CPUs) unless a library has already."""
        count = int(os.environ.get("WORLD_SIZE", "1"))
        if count <= 1:
            return cls()
        rank = int(os.environ["RANK"])
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        if not dist.is_initialized():
            dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
        return cls(rank, count, local_rank)

    @property
    def main(self) -> bool:
        return self.rank == 0

    def device(self, device: str) -> str:
        """The device this process trains on: `device`, with a bare "cuda" meaning its own GPU."""
        return f"cuda:{self.local_rank}" if device == "cuda" and self.count > 1 else device

    def shard(self, items: Sequence[T]) -> list[T]:
        """This process's share of `items`: every `count`-th one from its rank on."""
        return list(items[self.rank :: self.count])

    def total(self, value: int, device: str = "cpu") -> int:
        """`value` summed over the processes."""
        if self.count == 1:
            return value
        tensor = torch.tensor([value], dtype=torch.long, device=device)
        dist.all_reduce(tensor)
        return int(tensor.item())

    def steps(self, steps: Iterable[int], device: str = "cpu") -> Iterator[int]:
        """`steps` (a `TrainingRun`'s), ended in every process as soon as it ends in any."""
        mine = iter(steps)
        while True:
            step = next(mine, None)
            if self.count > 1:
                stopped = torch.tensor([step is None], dtype=torch.long, device=device)
                dist.all_reduce(stopped, op=dist.ReduceOp.MAX)
                if stopped.item():
                    return
            elif step is None:
                return
            yield step

    def average_gradients(self, parameters: Iterable[torch.nn.Parameter]) -> None:
        """Mean gradient over the processes. A parameter this process's batch did not reach counts as a zero
        gradient, so every process reduces the same tensors."""
        if self.count == 1:
            return
        for parameter in parameters:
            if parameter.grad is None:
                parameter.grad = torch.zeros_like(parameter)
            dist.all_reduce(parameter.grad)
            parameter.grad /= self.count

    def finish(self) -> None:
        """Wait for every process (the first one saves meanwhile), then leave the group."""
        if self.count > 1 and dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()
