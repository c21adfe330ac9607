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
    """The drafter of `session` (`session.drafter`) over a cache of the session's cells, one row per CFG row,
    with `branches` more slots for the nodes of a draft tree (`forward_branches`)."""

    def __init__(self, session: DecodingSession, branches: int = 0):
        drafter = session.drafter
        if drafter is None:
            raise ValueError("this session has no drafter (the capability 'drafter')")
        self.session, self.drafter = session, drafter
        self.stack = drafter.stack()
        self.scratch = session.num_cells
        self.branch_base = session.num_cells + 1
        size = self.branch_base + branches
        self.cache = self.stack.new_cache(session.rows, size)
        self._keys = torch.arange(size, device=session.device)

    def start(self, first: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Pair the prefill's hidden state with cell 0's codes `first [B]`: the guided logits `[B, V]` that
        predict cell 1 and the drafter's output `[rows, 1, d]`."""
        cell = torch.zeros_like(first)[:, None]
        logits, out = self.forward(self.session.first_hidden[:, None], first[:, None], cell)
        return logits[:, 0], out

    def catch_up(
        self, queries: torch.Tensor, codes: torch.Tensor, cells: torch.Tensor, advanced: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Pair the cells a step committed (`cells [B, m]`, `-1`: not committed) with their codes `[B, m]`
        and the target's hidden state at the query of its last call that predicted each (`queries [B, m]`);
        returns the guided logits `[B, V]` and the output `[rows, 1, d]` at the last committed cell
        (`advanced [B]` of them), which predict the next one."""
        session = self.session
        width = session.last_hidden.shape[-1]
        rows_queries = session.both_halves(queries)
        hidden = session.last_hidden.gather(1, rows_queries[..., None].expand(-1, -1, width))
        logits, out = self.forward(hidden, codes, cells)
        last = (advanced - 1).clamp(min=0)
        logits = logits.gather(1, last[:, None, None].expand(-1, 1, logits.shape[-1]))[:, 0]
        rows_last = session.both_halves(last)
        return logits, out.gather(1, rows_last[:, None, None].expand(-1, 1, out.shape[-1]))

    def forward(
        self, hidden: torch.Tensor, codes: torch.Tensor, cells: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Run the pairs `(hidden [rows, m, d], codes [B, m])` at cells `[B, m]` (`-1` or past the image: not
        kept); returns the guided next-code logits `[B, m, V]` (float32) and the drafter's outputs
        `[rows, m, d]` (the hidden states a chain feeds next)."""
        inside = (cells >= 0) & (cells < self.scratch)
        slots = torch.where(inside, cells, self.scratch)
        allowed = self._keys[None, None, :] <= slots[..., None]  # [B, m, slots]
        return self._run(hidden, codes, slots, slots, allowed, counted=inside.any(1))

    def forward_branches(
        self,
        hidden: torch.Tensor,
        codes: torch.Tensor,
        cells: torch.Tensor,
        *,
        branch: torch.Tensor,
        ancestors: torch.Tensor,
        committed: torch.Tensor,
        counted: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Run tree nodes: the pairs `(hidden [rows, m, d], codes [B, m])` at the positions of cells `[B, m]`,
        written to branch slots `branch [B, m]` (`0 <= b < branches`). Each sees the cells before
        `committed [B]` (the pairs a catch-up wrote), the branch slots `ancestors [B, m, A]` (`-1`: none) and
        itself. `counted [B]` bool: the images whose drafter forward this is. Returns as `forward`."""
        slots = self.branch_base + branch
        keys = self._keys[None, None, :]
        seen = torch.where(ancestors >= 0, self.branch_base + ancestors, -1)
        allowed = (
            (keys < committed[:, None, None])
            | (keys == slots[..., None])
            | (keys[..., None] == seen[:, :, None, :]).any(-1)
        )
        return self._run(hidden, codes, cells.clamp(min=0), slots, allowed, counted=counted)

    @torch.inference_mode()
    def _run(
        self,
        hidden: torch.Tensor,
        codes: torch.Tensor,
        positions: torch.Tensor,
        slots: torch.Tensor,
        allowed: torch.Tensor,
        *,
        counted: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        session = self.session
        session.drafter_passes += counted.long()
        rows = session.both_halves
        embeds = rows(session.code_embeddings()[codes.clamp(min=0)])
        dtype = self.drafter.fc.weight.dtype
        mask = torch.zeros(rows(allowed).shape, dtype=dtype, device=session.device)
        mask = mask.masked_fill_(~rows(allowed), torch.finfo(dtype).min)[:, None]
        out = self.stack.forward(
            self.cache, self.drafter.fuse(embeds, hidden), rows(positions), rows(slots), mask
        )
        # the model's head reads the model's dtype (`hidden` may be the drafter's own, when it drafts deeper)
        logits = session.guide(session.adapter.code_logits(out.to(session.first_hidden.dtype)).float())
        return logits, out
