"""One `arjet eval` at a time in a run folder: the run holds an exclusive lock on the folder itself.

A second run into the same folder (the same command typed twice, two shells) would make every image twice
and time each one against the other; it is refused at once, before any model loads, naming the folder.
The lock is the operating system's (`flock` on the folder), so a killed run leaves none behind and the
same command resumes it. Where there is no `flock` (Windows) runs are not guarded.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None


@contextlib.contextmanager
def run_folder_lock(out: str | os.PathLike) -> Iterator[Path]:
    """Hold the lock of run folder `out` (created when missing, and removed again if the run leaves it
    empty); ValueError naming the folder when another run holds it."""
    out = Path(out)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(out, os.O_RDONLY)
    try:
        if fcntl is not None:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ValueError(
                    f"--out {str(out)!r} is busy: another arjet eval is writing this run now; wait until it ends "
                    "(the same command then resumes or reports it), or pass another --out"
                ) from None
        yield out
    finally:
        if created:
            with contextlib.suppress(OSError):
                out.rmdir()  # only if nothing was written (a refused start), and while the lock is held
        os.close(descriptor)  # releases the lock
