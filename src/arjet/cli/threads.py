"""How many CPU threads a command's torch uses: `--threads N` when given, else one per core that other
processes leave free, measured over the command's own start-up (imports, checks, loading), so choosing
costs no extra wait. The decision is `arjet.machine.ThreadChooser`'s, the one a pipeline call makes in
Python too; the command's count then holds for every call it makes (`ProcessThreads.pin`).

Why not torch's default (one thread per core): with two cores and another process busy on one, every
parallel region waits for the thread that shares its core, and the built-in model took 18 to 63 s per
image instead of 1.6 s. The process entry (`main.entry`) also makes OpenMP's idle threads sleep instead of
spin (`OMP_WAIT_POLICY=PASSIVE`, unless set), so a core that becomes busy later costs a little, not 40x.
"""

from __future__ import annotations

import argparse

from .. import machine


def mark_start() -> None:
    """Begin the measurement of other processes' load (each command calls it first)."""
    machine.THREADS.restart()


def default_threads() -> int:
    """One thread per core other processes left free since `mark_start`, at least one."""
    return machine.THREADS.choose()


def apply_threads(args: argparse.Namespace) -> int:
    """Fix torch's CPU threads for the command from `--threads`, or `default_threads()`; returns the count."""
    from ..pipelines.threads import PROCESS_THREADS

    threads = getattr(args, "threads", None) or default_threads()
    PROCESS_THREADS.pin(threads)
    return threads
