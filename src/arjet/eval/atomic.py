"""Atomic file writes: a reader (or a resumed run) sees the old file or the new one, never half of one.

Everything is written to a temporary file in the target's folder and moved into place with `os.replace`,
which is atomic on POSIX and Windows file systems. Temporaries are named `.<name>.arjet-<random>.tmp`, so a
resumed run removes only the ones arjet left (`remove_temporaries`), never a user's own `*.tmp` files. They
are created with mode 0o666 minus the umask, like any file the process writes, so the finished file keeps
the modes the user asked for.
"""

from __future__ import annotations

import errno
import os
import secrets
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import PIL.Image

TEMPORARY_PATTERN = ".*.arjet-*.tmp"


def temporary_path(path: Path) -> Path:
    return path.parent / f".{path.name}.arjet-{secrets.token_hex(6)}.tmp"


@contextmanager
def atomic_target(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to `path`; on success it replaces `path`, on error it is removed."""
    path = Path(path)
    if path.is_dir():  # os.replace would fail naming the temporary, not the folder in the way
        raise IsADirectoryError(errno.EISDIR, "a folder is where this file is to be written", str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = temporary_path(path)
    os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # the umask applies
    try:
        yield temporary
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def remove_temporaries(folders: Iterable[str | os.PathLike]) -> int:
    """Delete arjet's temporaries (`.<name>.arjet-<random>.tmp`) of writes that never finished, directly in
    each of `folders` (not below them); returns how many. Only call it while nothing writes there."""
    stale = [path for folder in folders for path in Path(folder).glob(TEMPORARY_PATTERN) if path.is_file()]
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
