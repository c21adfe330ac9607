"""Image grids."""

from __future__ import annotations

import math
from collections.abc import Sequence

import PIL.Image


def image_grid(
    images: Sequence[PIL.Image.Image], columns: int | None = None, padding: int = 2, background: str = "white"
) -> PIL.Image.Image:
    """Tile `images` (all the same size) row by row into one image."""
    if not images:
        raise ValueError("image_grid needs at least one image")
    columns = columns or math.ceil(math.sqrt(len(images)))
    rows = math.ceil(len(images) / columns)
    width, height = images[0].size
    grid = PIL.Image.new(
        "RGB", (columns * (width + padding) + padding, rows * (height + padding) + padding), background
    )
    for index, image in enumerate(images):
        row, column = divmod(index, columns)
        grid.paste(
            image.convert("RGB"), (padding + column * (width + padding), padding + row * (height + padding))
        )
    return grid
