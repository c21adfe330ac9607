"""`arjet.eval.images`: images from folders anyone may have written, checked by their header before a
pixel is decoded."""

import io
import re
import struct
import zlib

import PIL.Image
import pytest

from arjet.eval.images import read_image
from arjet.eval.reference import FolderReference


def png_claiming(width: int, height: int) -> bytes:
    """A PNG of a few dozen bytes whose header claims `width x height` pixels (a decompression bomb's)."""
    buffer = io.BytesIO()
    PIL.Image.new("RGB", (1, 1)).save(buffer, format="PNG")
    data = bytearray(buffer.getvalue())
    data[16:24] = struct.pack(">II", width, height)  # IHDR: after the signature, its length and its type
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    return bytes(data)


def test_an_image_is_read_as_rgb(tmp_path):
    PIL.Image.new("L", (8, 6), 128).save(tmp_path / "a.png")
    image = read_image(tmp_path / "a.png", 48, (8, 6))
    assert image.mode == "RGB" and image.size == (8, 6)


@pytest.mark.parametrize(
    ("content", "size", "message"),
    [
        (png_claiming(5000, 5000), None, "is 5000 x 5000 pixels, more than the 16,777,216 arjet reads there"),
        (png_claiming(20000, 20000), None, "claims more pixels than PIL will decode (a decompression bomb)"),
        (png_claiming(8, 8), (4, 4), "is 8 x 8 pixels, not 4 x 4"),
        (
            png_claiming(8, 8),
            None,
            "is not an image arjet can read (",
        ),  # the header passes, the data is 1 pixel
        (b"not an image at all", None, "is not an image arjet can read (cannot identify image file"),
    ],
    ids=["too-many-pixels", "bomb", "other-size", "cut-short", "not-an-image"],
)
def test_a_file_that_is_no_image_or_too_large_is_named_before_it_is_decoded(tmp_path, content, size, message):
    path = tmp_path / "x.png"
    path.write_bytes(content)
    with pytest.raises(ValueError, match="^" + re.escape(f"{path} {message}")):
        read_image(path, 4096 * 4096, size)


def test_a_bomb_among_the_reference_images_is_named(tmp_path):
    PIL.Image.new("RGB", (16, 16)).save(tmp_path / "a.png")
    (tmp_path / "b.png").write_bytes(png_claiming(100_000, 100_000))
    images = FolderReference(tmp_path).images((8, 8))
    assert next(images).size == (8, 8)
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'b.png'} claims more pixels than PIL")):
        next(images)
