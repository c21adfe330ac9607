"""The processes of a data-parallel training run: one when a stage runs plainly, several under `accelerate
launch` or `torchrun`, which start one process per device and tell each its place through the environment
(`WORLD_SIZE`, `RANK`, `LOCAL_RANK` and the rendezvous address `MASTER_ADDR` / `MASTER_PORT`).

Every process holds the whole model and its own share of the data; the trained weights start as the first
process's, and after each backward pass the gradients are averaged over the processes (what a DDP wrapper
would do), so the weights stay the same everywhere. Clocks differ between processes, so each step they
agree on the time elapsed (the longest), which a time-based learning-rate schedule reads, and on whether
to go on: one whose budget ran out stops them all, at the same step, and none waits forever for the
others' gradients.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import torch
import torch.distributed as dist

if TYPE_CHECKING:
    from .scaffold import TrainingRun

T = TypeVar("T")


@dataclass(frozen=True)
class Processes:
    rank: int = 0  # this process's place, 0 to count - 1; process 0 logs and saves
    count: int = 1
    local_rank: int = 0  # its place on this machine (its GPU)

    @staticmethod
    def launched() -> int:
        """How many processes a launcher started (1 without one)."""
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))

    @classmethod
    def from_environment(cls, device: str = "cpu") -> Processes:
        """One process unless a launcher set `WORLD_SIZE` > 1; then join the process group (NCCL on GPUs,
        gloo on CPUs) unless a library has already."""
        count = cls.launched()
        if count == 1:
            return cls()
        if device.startswith("cuda:"):
            raise ValueError(
                f"--device {device}: with {count} processes each takes its own GPU; pass --device cuda"
            )
        rank = int(os.environ["RANK"])
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        if not dist.is_initialized():
            if device == "cuda":
                torch.cuda.set_device(local_rank)  # NCCL binds each process to its GPU
            dist.init_process_group("nccl" if device == "cuda" else "gloo")
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

    def steps(self, run: TrainingRun, device: str = "cpu") -> Iterator[tuple[int, float]]:
        """`run.steps()` with the seconds elapsed, both agreed by every process: the steps end everywhere as
        soon as they end in any, and the seconds are the longest of any process's."""
        mine = run.steps()
        while True:
            step = next(mine, None)
            seconds = run.seconds
            if self.count > 1:
                state = torch.tensor([float(step is None), seconds], dtype=torch.float64, device=device)
                dist.all_reduce(state, op=dist.ReduceOp.MAX)
                stopped, seconds = bool(state[0].item()), float(state[1].item())
                if stopped:
                    return
            elif step is None:
                return
            yield step, seconds

    def same_start(self, module: torch.nn.Module) -> None:
        """Give every process the first process's weights of `module`."""
        if self.count == 1:
            return
        with torch.no_grad():
            for tensor in (*module.parameters(), *module.buffers()):
                dist.broadcast(tensor, src=0)

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
        """Wait for every process to get here, then leave the group (before the first one saves, which can
        take longer than a collective's time-out)."""
        if self.count > 1 and dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()
