"""Teacher-forced forwards over whole image sequences, for any pipeline family (training losses).

The layout is the pipeline's own (`encode_prompts`, `image_layout`, session adapter), so a model is
trained on exactly the sequences it decodes at inference: prompt rows, code embeddings, row-end tokens.
"""

from __future__ import annotations

from functools import cache

import torch
import torch.nn.functional as F

from ..session import ImageLayout, Prefix


@cache
def _body_plan(
    grid: tuple[int, int], row_end_ids: tuple[int, ...]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For the inputs after the prefix (codes of cells 0..N-2 and the row-end tokens between rows):
    which cell's code each input is (-1 for a row-end token), the token id of row-end inputs, and for every
    cell the index of the input whose output predicts it (-1 = the last prefix token)."""
    layout = ImageLayout(grid, row_end_ids)
    cells = layout.num_cells
    source, tokens, predictor = [], [], [-1]
    for cell in range(cells - 1):
        source.append(cell)
        tokens.append(0)
        if row_end_ids and cell % layout.width == layout.width - 1:
            for token in row_end_ids:
                source.append(-1)
                tokens.append(token)
        predictor.append(len(source) - 1)
    return torch.tensor(source), torch.tensor(tokens), torch.tensor(predictor)


def teacher_forced_logits(
    pipe, prefix: Prefix, codes: torch.Tensor, code_inputs: torch.Tensor | None = None
) -> torch.Tensor:
    """Next-code logits `[B, N, V]` for every cell of `codes [B, H, W]` given the true codes before it.

    `code_inputs [B, N-1, d]`, when given, replaces the input embeddings of cells 0..N-2 (noisy inputs for
    SJD2 fine-tuning); the structural tokens keep their own embeddings.
    """
    adapter = pipe.session_adapter()
    grid = tuple(codes.shape[1:])
    layout = pipe.image_layout(grid)
    flat = codes.flatten(1)
    source, tokens, predictor = (t.to(flat.device) for t in _body_plan(grid, layout.row_end_ids))
    if code_inputs is None:
        code_inputs = adapter.embed_codes(flat[:, :-1])
    is_code = source >= 0
    body = code_inputs[:, source.clamp(min=0)]
    if layout.row_end_ids:
        token_embeds = adapter.embed_tokens(tokens.expand(flat.shape[0], -1))
        body = torch.where(is_code[None, :, None], body.to(token_embeds.dtype), token_embeds)
    prefix_embeds = adapter.embed_tokens(prefix.ids)
    embeds = torch.cat([prefix_embeds, body.to(prefix_embeds.dtype)], dim=1)
    mask = torch.cat(
        [
            prefix.visible.long(),
            torch.ones(flat.shape[0], body.shape[1], dtype=torch.long, device=flat.device),
        ],
        1,
    )
    hidden = adapter.hidden_states(embeds, _positions(prefix, layout, embeds.shape[1]), mask, None)
    return adapter.code_logits(hidden[:, prefix.length + predictor])


def _positions(prefix: Prefix, layout: ImageLayout, length: int) -> torch.Tensor:
    """Rotary positions of the prefix and the body, as the decoding session places them: counted from each
    row's first real token, or (grid positions) the prefix's own and each cell at its grid offset."""
    device = prefix.ids.device
    if not layout.grid_positions:
        return (torch.arange(length, device=device)[None] - prefix.pad[:, None]).clamp(min=0)
    text = prefix.positions
    if text is None:
        text = (torch.arange(prefix.length, device=device)[None] - prefix.pad[:, None]).clamp(min=0)
        text = text[..., None].expand(-1, -1, 3)
    body = layout.grid_offsets(device)[: length - prefix.length]
    return torch.cat([text, prefix.start_positions()[:, None, None] + body[None]], 1)


def code_loss(logits: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of `codes [B, H, W]` under `logits [B, N, V]`."""
    return F.cross_entropy(logits.float().flatten(0, 1), codes.flatten())
