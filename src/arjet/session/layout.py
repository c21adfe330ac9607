"""Where the prompt, the grid cells and the structural tokens sit in a model's token sequence."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class ImageLayout:
    """The image body of a sequence: `H` rows of `W` codes, each row followed by `row_end_ids`.

    Janus has no row tokens; Emu3 and Lumina-mGPT end every row with one end-of-line token. The tokens that
    close the image (end-of-image, EOS) follow the last cell and are never fed while decoding, so they are
    not part of the layout.

    Rotary positions: a body token's position is the body's start position plus its offset in the body
    (one position per token), unless `grid_positions`: then positions have three axes (temporal, height,
    width, the multimodal rotary embedding of GLM-Image and Qwen2-VL) and cell `(r, c)` sits at
    `start + (0, r, c)`; the tokens after the image continue at `start + max(H, W)` on every axis.
    """

    grid: tuple[int, int]
    row_end_ids: tuple[int, ...] = ()
    grid_positions: bool = False
    # the geometry, derived once (plain attributes: a decode step reads them without a call)
    height: int = field(init=False, repr=False, compare=False)
    width: int = field(init=False, repr=False, compare=False)
    num_cells: int = field(init=False, repr=False, compare=False)
    row_stride: int = field(init=False, repr=False, compare=False)  # tokens per row: its cells, then row ends
    body_length: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.grid_positions and self.row_end_ids:
            raise ValueError(
                "grid positions place cells by (row, column): a layout with them has no row-end tokens"
            )
        height, width = self.grid
        stride = width + len(self.row_end_ids)
        derived = (
            ("height", height),
            ("width", width),
            ("num_cells", height * width),
            ("row_stride", stride),
            ("body_length", height * stride),
        )
        for name, value in derived:
            object.__setattr__(self, name, value)  # frozen: derived once, here

    @property
    def position_extent(self) -> int:
        """Positions the image takes: the next token after it sits this far past the body's start."""
        return max(self.grid) if self.grid_positions else self.body_length

    def grid_offsets(self, device: torch.device | str | None = None) -> torch.Tensor:
        """`[body_length + 1, 3]` long: each body token's (temporal, height, width) offset from the body's start
        position under `grid_positions`, and a last row for the session's scratch slot (placed after the image)."""
        cells = torch.arange(self.num_cells, device=device)
        offsets = torch.stack([torch.zeros_like(cells), cells // self.width, cells % self.width], 1)
        after = torch.full((1, 3), self.position_extent, dtype=torch.long, device=device)
        return torch.cat([offsets, after])


@dataclass
class Prefix:
    """The token ids before the first image code, one row per sequence of the (CFG-doubled) batch.

    `ids` is left-padded to a common length. `visible[i, j]` says whether later tokens attend to token j
    of row i (False for padding, and for prompt tokens hidden from an unconditional row). `pad` is each
    row's number of leading pad tokens: positions count from the first real token.

    A prefix that holds an image already (GLM-Image's preview grid before its target grid) gives its rotary
    positions itself: `positions [N, P, 3]` (temporal, height, width) and `next_position [N]`, where the image
    body that follows starts.
    """

    ids: torch.Tensor  # [N, P] long
    visible: torch.Tensor  # [N, P] bool
    pad: torch.Tensor  # [N] long
    positions: torch.Tensor | None = None  # [N, P, 3] long; None: counted from each row's first real token
    next_position: torch.Tensor | None = None  # [N] long; None: each row's real length

    def __post_init__(self) -> None:
        if self.ids.shape != self.visible.shape or self.pad.shape != self.ids.shape[:1]:
            raise ValueError(
                f"Prefix shapes disagree: ids {tuple(self.ids.shape)}, visible {tuple(self.visible.shape)}, "
                f"pad {tuple(self.pad.shape)}"
            )
        if (self.positions is None) != (self.next_position is None):
            raise ValueError("pass a prefix's positions and next_position together")
        if self.positions is not None and (
            self.positions.shape[:2] != self.ids.shape or self.next_position.shape != self.pad.shape
        ):
            raise ValueError(
                f"Prefix positions {tuple(self.positions.shape)} and next_position "
                f"{tuple(self.next_position.shape)} disagree with ids {tuple(self.ids.shape)}"
            )

    def select(self, rows: torch.Tensor | slice) -> Prefix:
        """The prefix of rows `rows` (an index tensor or a slice); slices share storage with this one."""

        def pick(x: torch.Tensor | None) -> torch.Tensor | None:
            return None if x is None else x[rows]

        return Prefix(
            self.ids[rows], self.visible[rows], self.pad[rows], pick(self.positions), pick(self.next_position)
        )

    def start_positions(self) -> torch.Tensor:
        """`[N]`: the rotary position of each row's first image-body token."""
        return self.length - self.pad if self.next_position is None else self.next_position

    @property
    def length(self) -> int:
        return self.ids.shape[1]
