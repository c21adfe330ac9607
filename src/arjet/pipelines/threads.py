"""How many CPU threads torch uses during a pipeline call.

torch's default is one thread per core; where other processes keep cores busy, every parallel region then
waits for the threads that share a core (beside two busy processes on two cores, `pipe(prompt,
sampler="sjd")` on the built-in model took 19.7 s instead of 1.2 s). So a call on the CPU runs on one thread
per core that other processes leave free, decided as the command line decides (`arjet.machine.
ThreadChooser`: their load measured since the previous call, or since arjet was imported, so choosing adds
no wait), and never on more threads than the process has. The process's own setting is restored when the
call ends, also when it raises.

A call leaves the count alone where someone chose it:

- `threads=N` in the call: that many, for the call only (on any device);
- `torch.set_num_threads` called after arjet first looked (when its pipelines were imported): the count
  then differs from the one arjet saw, and the user's stands (a count set before arjet was imported is the
  one it saw, and caps the call's choice: a call only ever lowers it);
- the command line fixed it for the whole command (`--threads`, or its own choice at start: `pin`);
- a call on a CUDA device: the CPU's threads hardly matter there.

Calls that overlap (threads of one process) share the first one's setting; the last to end restores the
process's.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from .. import machine


class ProcessThreads:
    """The process's torch threads as arjet found them, and the count each call runs on."""

    def __init__(self, chooser: machine.ThreadChooser):
        self.chooser = chooser
        self.seen = torch.get_num_threads()  # the count arjet first saw: torch's own unless set before
        self.pinned = False
        self._lock = threading.Lock()
        self._calls = 0
        self._saved = self.seen

    def pin(self, threads: int) -> None:
        """Fix the count for every later call (the command line's choice for its whole command)."""
        torch.set_num_threads(threads)
        self.pinned = True

    def chosen_elsewhere(self) -> bool:
        """Whether the command line or the user chose the process's count (see the module docstring)."""
        return self.pinned or torch.get_num_threads() != self.seen

    def for_call(self, requested: int | None, device: torch.device) -> int | None:
        """The count a call runs on: `requested`, else the free cores' (CPU only, at most the process's
        count), else None: leave the process's as it is."""
        if requested is not None:
            return requested
        if device.type != "cpu" or self.chosen_elsewhere():
            return None
        return min(torch.get_num_threads(), self.chooser.choose())

    @contextmanager
    def during_call(self, requested: int | None, device: torch.device) -> Iterator[int]:
        """Run the body on the call's count (yielded); the process's own count is back afterwards."""
        with self._lock:
            if self._calls == 0:
                self._saved = torch.get_num_threads()
            self._calls += 1
            threads = self.for_call(requested, device)
            if threads is not None and threads != torch.get_num_threads():
                torch.set_num_threads(threads)
        try:
            yield torch.get_num_threads()
        finally:
            with self._lock:
                self._calls -= 1
                if self._calls == 0 and torch.get_num_threads() != self._saved:
                    torch.set_num_threads(self._saved)


PROCESS_THREADS = ProcessThreads(machine.THREADS)
