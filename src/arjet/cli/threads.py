"""How many CPU threads a command's torch uses: `--threads N` when given, else one per core that other
processes leave free, measured over the command's own start-up (imports, checks, loading), so choosing
costs no extra wait.

Why not torch's default (one thread per core): with two cores and another process busy on one, every
parallel region waits for the thread that shares its core, and the built-in model took 18 to 63 s per
image instead of 1.6 s. The process entry (`main.entry`) also makes OpenMP's idle threads sleep instead of
spin (`OMP_WAIT_POLICY=PASSIVE`, unless set), so a core that becomes busy later costs a little, not 40x.
"""

from __future__ import annotations

import argparse
import time

from .. import machine

MIN_SPAN = 0.2  # seconds: a shorter start-up measures too little, so sample this long instead
FREE_SHARE = 0.75  # of a core left free by other processes, for it to count: their load comes and goes

_start: tuple[tuple[float, float] | None, float] = (machine.cpu_seconds(), time.perf_counter())


def mark_start() -> None:
    """Begin the measurement of other processes' load (each command calls it first)."""
    global _start
    _start = (machine.cpu_seconds(), time.perf_counter())


def free_cores() -> float | None:
    """Cores of this process's affinity that other processes left free since `mark_start`, None when it
    cannot be measured (not Linux)."""
    reading, began = _start
    span = time.perf_counter() - began
    busy = machine.others_busy(reading, span) if span >= MIN_SPAN else machine.busy_cores(MIN_SPAN)
    return None if busy is None else max(0.0, machine.usable_cores() - busy)


def default_threads() -> int:
    """One thread per free core (a core counts when at least `FREE_SHARE` of it is free), at least one."""
    free = free_cores()
    cores = machine.usable_cores()
    return cores if free is None else max(1, min(cores, int(free + 1 - FREE_SHARE)))


def apply_threads(args: argparse.Namespace) -> int:
    """Set torch's CPU threads from `--threads`, or `default_threads()`; returns the count."""
    import torch

    threads = getattr(args, "threads", None) or default_threads()
    torch.set_num_threads(threads)
    return threads
