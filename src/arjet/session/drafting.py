"""A drafter running beside a decoding session: its own small static KV cache over the image's cells.

Slot `c` of the drafter's cache holds the pair of cell `c`: the target's hidden state at the input that
predicted cell `c` and the code of cell `c`, at position `c`; its output predicts cell `c + 1`. A query at
cell `c` attends to slots `0..c`, which are always fresh: the committed pairs before the window, then the
ones this step writes in order (a catch-up over the newly committed cells, then the draft chain), so a
rejected draft's pair is simply overwritten later and nothing is rolled back. Cells outside the image (and
padding, cell `-1`) write to a scratch slot nobody reads. The prompt is not in the drafter's cache (RoPE
makes the absolute offset irrelevant; see `docs` for what that means for converted official drafters).

Every image has one row per CFG branch, as in the target's cache: the conditional and unconditional rows
read their own target hidden states, and their logits are mixed with the session's guidance scale
(`DecodingSession.guide`) before the logits policy, as LANTERN's drafters do. Shapes are fixed by the call;
nothing reads the device.
"""

from __future__ import annotations

import torch

from .session import DecodingSession


class DraftingCache:
    """The drafter of `session` (`session.drafter`) over a cache of the session's cells, one row per CFG row."""

    def __init__(self, session: DecodingSession):
        drafter = session.drafter
        if drafter is None:
            raise ValueError("this session has no drafter (the capability 'drafter')")
        self.session, self.drafter = session, drafter
        self.stack = drafter.stack()
        self.scratch = session.num_cells
        self.cache = self.stack.new_cache(session.rows, session.num_cells + 1)
        self._keys = torch.arange(session.num_cells + 1, device=session.device)

    @torch.inference_mode()
    def forward(
        self, hidden: torch.Tensor, codes: torch.Tensor, cells: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Run the pairs `(hidden [rows, m, d], codes [B, m])` at cells `[B, m]` (`-1` or past the image: not
        kept); returns the guided next-code logits `[B, m, V]` (float32) and the drafter's outputs
        `[rows, m, d]` (the hidden states a chain feeds next)."""
        session = self.session
        inside = (cells >= 0) & (cells < self.scratch)
        session.drafter_passes += inside.any(1).long()
        slots = session.both_halves(torch.where(inside, cells, self.scratch))
        embeds = session.both_halves(session.code_embeddings()[codes.clamp(min=0)])
        allowed = self._keys[None, None, :] <= slots[..., None]  # [rows, m, slots]
        dtype = self.drafter.fc.weight.dtype
        mask = torch.zeros(allowed.shape, dtype=dtype, device=session.device)
        mask = mask.masked_fill_(~allowed, torch.finfo(dtype).min)[:, None]
        out = self.stack.forward(self.cache, self.drafter.fuse(embeds, hidden), slots, slots, mask)
        logits = session.guide(session.adapter.code_logits(out.to(hidden.dtype)).float())
        return logits, out
