"""Atomic file writes: a reader (or a resumed run) sees the old file or the new one, never half of one.

Everything is written to a temporary file in the target's folder and moved into place with `os.replace`,
which is atomic on POSIX and Windows file systems.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import PIL.Image


@contextmanager
def atomic_target(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to `path`; on success it replaces `path`, on error it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(handle)
    try:
        yield Path(temporary)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def remove_temporaries(folder: str | os.PathLike) -> int:
    """Delete the temporary files of writes that never finished (a process killed mid-write leaves them);
    returns how many. Only call it while nothing writes into `folder`."""
    stale = list(Path(folder).rglob(".*.tmp"))
    for path in stale:
        path.unlink(missing_ok=True)
    return len(stale)


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_target(path) as temporary:
        temporary.write_text(text, encoding="utf-8")


def save_image(image: PIL.Image.Image, path: str | os.PathLike) -> None:
    """Save `image` as PNG at `path` atomically."""
    with atomic_target(path) as temporary:
        image.save(temporary, format="PNG")
