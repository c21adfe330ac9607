"""Reading images from folders anyone may have put files in (a run folder, a folder of reference images).

Each file is checked by its header before a pixel is decoded: a file that is no image PIL reads, one cut
short, or one whose header claims more pixels than arjet decodes (a decompression bomb: a few kB of PNG
that would inflate to gigabytes) is a ValueError naming it, never PIL's exception, a warning, or a machine
out of memory.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import PIL.Image

# what a model makes or trains on (a run folder's images, a fine-tuning set's): every model arjet runs makes
# far smaller ones (the largest, GLM-Image's, are 2048 x 2048)
MODEL_IMAGE_PIXELS = 4096 * 4096
# real photographs for FID (a 24-megapixel camera's fit); PIL's own limit for a bomb is 89 million
REFERENCE_IMAGE_PIXELS = 8192 * 8192


def read_image(
    path: str | os.PathLike, max_pixels: int, size: tuple[int, int] | None = None
) -> PIL.Image.Image:
    """The image in `path` as RGB, decoded only after its header says it has at most `max_pixels` pixels
    (and, when `size` is given, exactly that width x height); ValueError naming the file otherwise."""
    with _decoded(Path(path), max_pixels, size) as image:
        return image.convert("RGB")


def check_image(
    path: str | os.PathLike, max_pixels: int, size: tuple[int, int] | None = None
) -> tuple[int, int]:
    """`read_image`'s checks, every pixel decoded (a file whose header is intact but whose data is cut off
    fails only there) and none kept: its (width, height)."""
    with _decoded(Path(path), max_pixels, size) as image:
        return image.size


@contextlib.contextmanager
def _decoded(path: Path, max_pixels: int, size: tuple[int, int] | None) -> Iterator[PIL.Image.Image]:
    """The image in `path`, its header checked before its pixels are decoded (`load`)."""
    with _opened(path, max_pixels) as image:
        _check_size(path, image.size, max_pixels, size)
        try:
            image.load()
        except (OSError, ValueError, SyntaxError) as error:  # cut short, a chunk that inflates too far
            raise _unreadable(path, error) from None
        yield image


def _opened(path: Path, max_pixels: int) -> PIL.Image.Image:
    """`PIL.Image.open(path)` (the header only), with PIL's bomb warning and errors as one ValueError."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", PIL.Image.DecompressionBombWarning)
            return PIL.Image.open(path)
    except (PIL.Image.DecompressionBombError, PIL.Image.DecompressionBombWarning):
        raise ValueError(
            f"{path} claims more pixels than PIL will decode (a decompression bomb); arjet reads images of at "
            f"most {max_pixels:,} pixels"
        ) from None
    except (OSError, ValueError, SyntaxError) as error:  # not an image (PIL's UnidentifiedImageError), ...
        raise _unreadable(path, error) from None


def _unreadable(path: Path, error: BaseException) -> ValueError:
    reason = str(error).splitlines()[0] if str(error) else type(error).__name__
    return ValueError(f"{path} is not an image arjet can read ({reason})")


def _check_size(path: Path, found: tuple[int, int], max_pixels: int, size: tuple[int, int] | None) -> None:
    width, height = found
    if width * height > max_pixels:
        raise ValueError(
            f"{path} is {width} x {height} pixels, more than the {max_pixels:,} arjet reads there"
        )
    if size is not None and found != tuple(size):
        raise ValueError(f"{path} is {width} x {height} pixels, not {size[0]} x {size[1]}")
