"""Where the prompt, the grid cells and the structural tokens sit in a model's token sequence."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ImageLayout:
    """The image body of a sequence: `H` rows of `W` codes, each row followed by `row_end_ids`.

    Janus has no row tokens; Emu3 and Lumina-mGPT end every row with one end-of-line token. The tokens that
    close the image (end-of-image, EOS) follow the last cell and are never fed while decoding, so they are
    not part of the layout.
    """

    grid: tuple[int, int]
    row_end_ids: tuple[int, ...] = ()

    @property
    def height(self) -> int:
        return self.grid[0]

    @property
    def width(self) -> int:
        return self.grid[1]

    @property
    def num_cells(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def row_stride(self) -> int:
        return self.grid[1] + len(self.row_end_ids)

    @property
    def body_length(self) -> int:
        return self.grid[0] * self.row_stride

    def cell_offset(self, cells: torch.Tensor) -> torch.Tensor:
        """Offset of each cell (flat raster index) from the start of the image body."""
        return (cells // self.width) * self.row_stride + cells % self.width


@dataclass
class Prefix:
    """The token ids before the first image code, one row per sequence of the (CFG-doubled) batch.

    `ids` is left-padded to a common length. `visible[i, j]` says whether later tokens attend to token j
    of row i (False for padding, and for prompt tokens hidden from an unconditional row). `pad` is each
    row's number of leading pad tokens: positions count from the first real token.
    """

    ids: torch.Tensor  # [N, P] long
    visible: torch.Tensor  # [N, P] bool
    pad: torch.Tensor  # [N] long

    def __post_init__(self) -> None:
        if self.ids.shape != self.visible.shape or self.pad.shape != self.ids.shape[:1]:
            raise ValueError(
                f"Prefix shapes disagree: ids {tuple(self.ids.shape)}, visible {tuple(self.visible.shape)}, "
                f"pad {tuple(self.pad.shape)}"
            )

    @property
    def length(self) -> int:
        return self.ids.shape[1]
