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
    preview_codes: torch.Tensor | None = None,
) -> torch.Tensor:
    """Guided next-code logits `[B, N, V]` for every cell, from one uncached forward over prefix + all codes.

    Uses a 2D attention mask (transformers builds the causal mask) and explicit positions, so nothing of the
    session's slot cache or 4D masks is involved. `hidden_cells` are left out of the sequence (their tokens,
    and the row-end tokens that follow them, are masked from every query). `preview_codes [B, h, w]` (GLM-Image)
    go between the prefix and `codes`; the logits then cover the preview's cells first, then `codes`' cells.
    """
    adapter = pipe.session_adapter()
    grid = tuple(codes.shape[1:])
    layout = pipe.image_layout(grid)
    rows = prefix.ids.shape[0]
    grids = [codes] if preview_codes is None else [preview_codes, codes]
    flat = torch.cat([g.flatten(1) for g in grids], 1)
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
    if layout.grid_positions:
        positions = _grid_positions(prefix, [tuple(g.shape[1:]) for g in grids])
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


def _grid_positions(prefix: Prefix, grids: list[tuple[int, int]]) -> torch.Tensor:
    """`[B, S, 3]` multimodal rotary positions as transformers' `get_rope_index` places a prompt and the image
    grids generated after it: the prompt's tokens at `j` on every axis, then each grid's cell `(r, c)` at
    `(s, s + r, s + c)`, where `s` starts after the prompt and moves on by the grid's longer side."""
    text = (torch.arange(prefix.length)[None] - prefix.pad[:, None]).clamp(min=0)
    parts = [text[..., None].expand(-1, -1, 3)]
    start = prefix.length - prefix.pad
    for height, width in grids:
        rows, columns = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
        offsets = torch.stack(
            [torch.zeros(height * width, dtype=torch.long), rows.flatten(), columns.flatten()], 1
        )
        parts.append(start[:, None, None] + offsets[None])
        start = start + max(height, width)
    return torch.cat(parts, 1)


@torch.no_grad()
def transformers_glm_image_logits(
    pipe, prefix: Prefix, preview_codes: torch.Tensor, codes: torch.Tensor
) -> torch.Tensor:
    """GLM-Image's next-code logits `[B, n, V]` for the preview's cells, then the target's, from transformers'
    own model as `generate` runs it: a prefill that places the two grids with `get_rope_index` (the processor's
    `image_grid_thw`: target, then preview), then one token at a time through its own cache."""
    model = pipe.vision_language_encoder
    batch = codes.shape[0]
    grids = torch.tensor([[1, *codes.shape[1:]], [1, *preview_codes.shape[1:]]] * batch)
    images = dict(image_grid_thw=grids, images_per_sample=torch.full((batch,), 2))
    mask = prefix.visible.long()
    out = model(input_ids=prefix.ids, attention_mask=mask, use_cache=True, **images)
    logits, cache = [out.logits[:, -1]], out.cache
    tokens = torch.cat([preview_codes.flatten(1), codes.flatten(1)], 1)
    for step in range(tokens.shape[1] - 1):
        mask = torch.cat([mask, torch.ones(batch, 1, dtype=torch.long)], 1)
        out = model(
            input_ids=tokens[:, step : step + 1], attention_mask=mask, cache=cache, use_cache=True, **images
        )
        logits.append(out.logits[:, -1])
        cache = out.cache
    return torch.stack(logits, 1).float()


def _predecessors(cell_positions: list[int]) -> list[int]:
    """Body index of the token just before each cell after the first."""
    return [position - 1 for position in cell_positions[1:]]
