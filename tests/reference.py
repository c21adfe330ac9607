"""Independent reference computations for tests: full no-cache forwards through transformers' own masking."""

from __future__ import annotations

import torch

from arjet.session import Prefix


@torch.no_grad()
def full_sequence_logits(
    pipe,
    prefix: Prefix,
    codes: torch.Tensor,
    guidance_scale: float | None,
    hidden_cells: tuple[int, ...] = (),
) -> torch.Tensor:
    """Guided next-code logits `[B, N, V]` for every cell, from one uncached forward over prefix + all codes.

    Uses a 2D attention mask (transformers builds the causal mask) and explicit positions, so nothing of the
    session's slot cache or 4D masks is involved. `hidden_cells` are left out of the sequence (their tokens,
    and the row-end tokens that follow them, are masked from every query).
    """
    adapter = pipe.session_adapter()
    grid = tuple(codes.shape[1:])
    layout = pipe.image_layout(grid)
    rows = prefix.ids.shape[0]
    flat = codes.flatten(1)
    flat = torch.cat([flat, flat]) if rows != codes.shape[0] else flat
    body_embeds, is_cell, body_visible = [], [], []
    for cell in range(flat.shape[1]):
        body_embeds.append(adapter.embed_codes(flat[:, cell : cell + 1]))
        is_cell.append(True)
        body_visible.append(cell not in hidden_cells)
        if layout.row_end_ids and cell % grid[1] == grid[1] - 1:
            for token in layout.row_end_ids:
                body_embeds.append(adapter.embed_tokens(torch.full((rows, 1), token)))
                is_cell.append(False)
                body_visible.append(cell not in hidden_cells)
    embeds = torch.cat([adapter.embed_tokens(prefix.ids), *body_embeds], dim=1)
    length = embeds.shape[1]
    body_mask = torch.tensor(body_visible, dtype=torch.long).expand(rows, -1)
    mask = torch.cat([prefix.visible.long(), body_mask], dim=1)
    positions = (torch.arange(length)[None] - prefix.pad[:, None]).clamp(min=0)
    with torch.no_grad():
        hidden = adapter.hidden_states(embeds, positions, mask, None)
    # the output just before each cell predicts it: the last prefix token, then the token preceding each cell
    cell_positions = [i for i, flag in enumerate(is_cell) if flag]
    predictor = [prefix.length - 1] + [prefix.length + p for p in _predecessors(cell_positions)]
    logits = adapter.code_logits(hidden[:, predictor[: flat.shape[1]]]).float()
    if guidance_scale is None:
        return logits
    cond, uncond = logits.chunk(2)
    return uncond + guidance_scale * (cond - uncond)


def _predecessors(cell_positions: list[int]) -> list[int]:
    """Body index of the token just before each cell after the first."""
    return [position - 1 for position in cell_positions[1:]]
