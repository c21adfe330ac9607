"""The decoding session: the one contract between a model family and every sampler.

A sampler sees an `H x W` grid of codes in `0..V-1` and nothing else. It asks for the logits of some
cells given the code placed just before each of them, then commits the queries whose inputs should stay
in the KV cache. The session hides the prompt, the structural tokens, the vocabulary offsets, the CFG
batch and the cache.

Query semantics (`logits(cells, codes)`): query `j` of image `b` predicts cell `t = cells[b, j]` and feeds
`codes[b, j]` at cell `t - 1` (plus the row-end tokens that follow it, which the session inserts). Its
input attends to every filled slot before it and to the inputs of the same call that sit at or before
it and are shared with it: inputs of group 0 (the default) are shared with every query, inputs of a
group `g > 0` only with queries of group `g` (this keeps unverified drafts of different rows apart).
Positions are the true ones. Cell 0 is predicted by the prefill and needs no input. An *ephemeral* query
is visible only to itself: a placeholder (ZipAR's row starts) that is never kept.

Rollback is implicit: the inputs of a call stay in the cache only if `commit` keeps them; otherwise
their slots are simply overwritten later.
"""

from __future__ import annotations

import torch

from .adapter import ModelAdapter
from .cache import SlotCache
from .layout import ImageLayout, Prefix
from .noise import NoiseConditioning


class DecodingSession:
    def __init__(
        self,
        adapter: ModelAdapter,
        layout: ImageLayout,
        prefix: Prefix,
        guidance_scale: float | None = None,
        codebook: torch.Tensor | None = None,
        noise: NoiseConditioning | None = None,
    ):
        self.adapter = adapter
        self.codebook = codebook  # [V, d] VQ code vectors, for rules that compare codes (LANTERN)
        self.noise = noise  # present when the model was fine-tuned for noisy code embeddings (SJD2)
        self._code_table: torch.Tensor | None = None
        self.layout = layout
        self.prefix = prefix
        self.guided = guidance_scale is not None
        self.guidance_scale = guidance_scale
        rows = prefix.ids.shape[0]
        if self.guided and rows % 2:
            raise ValueError(f"a guided session needs [cond; uncond] rows, got {rows} rows")
        self._rows = rows
        self._batch = rows // 2 if self.guided else rows
        self.device = prefix.ids.device
        self.capacity = prefix.length + layout.body_length + 1
        self.scratch = self.capacity - 1  # padding inputs write here; never visible to a real query
        self.cache = SlotCache(adapter.num_layers, self.capacity)
        self.filled = torch.zeros(rows, self.capacity, dtype=torch.bool, device=self.device)
        self.count = 0
        self.forward_passes = torch.zeros(self._batch, dtype=torch.long, device=self.device)
        self._keys = torch.arange(self.capacity, device=self.device)
        self._last: dict[str, torch.Tensor] | None = None
        self._first_logits = self._prefill()

    # -- what samplers see -------------------------------------------------------------------------
    @property
    def grid(self) -> tuple[int, int]:
        return self.layout.grid

    @property
    def num_cells(self) -> int:
        return self.layout.num_cells

    @property
    def vocab_size(self) -> int:
        return self.adapter.code_vocab_size

    @property
    def batch_size(self) -> int:
        return self._batch

    @torch.inference_mode()
    def logits(
        self,
        cells: torch.Tensor,
        codes: torch.Tensor,
        ephemeral: torch.Tensor | None = None,
        group: torch.Tensor | None = None,
        embeddings: torch.Tensor | None = None,
        embedded: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Guided next-code logits `[B, n, V]` (float32) for cells `[B, n]`; `-1` marks an unused query.

        `ephemeral [B, n]` bool marks placeholder queries; `group [B, n]` (ints >= 0, default 0): a query sees
        this call's inputs of group 0 and of its own group. Where `embedded [B, n]` is True the query feeds
        `embeddings [B, n, d]` (e.g. a noisy embedding, see `noise`) instead of the code's embedding."""
        cells = cells.to(self.device)
        codes = codes.to(self.device)
        if cells.shape != codes.shape or cells.dim() != 2 or cells.shape[0] != self._batch:
            raise ValueError(
                f"cells and codes must both be [batch={self._batch}, n]; got {tuple(cells.shape)} and "
                f"{tuple(codes.shape)}"
            )
        batch, n = cells.shape
        out = torch.zeros(batch, n, self.vocab_size, device=self.device)
        out = torch.where((cells == 0)[..., None], self._first_logits[:, None, :], out)
        if (embeddings is None) != (embedded is None):
            raise ValueError("pass embeddings and embedded together")
        packed = self._pack(cells, codes, ephemeral, group)
        if packed is None:
            self._last = None
            return out

        rows = self._both_halves
        slots, qstart, groups = rows(packed["slots"]), rows(packed["qstart"]), rows(packed["group"])
        embeds = rows(self._embed_inputs(packed, embeddings, embedded))
        # which group's queries may see each slot written by this call (-1: none but its own query)
        shared = packed["real"] & ~packed["ephemeral"]
        slot_group = torch.full_like(self.filled, -1, dtype=torch.long)
        slot_group.scatter_(1, slots, rows(torch.where(shared, packed["group"], -1)))
        slot_group[:, self.scratch] = -1
        sees_call_input = (slot_group[:, None, :] == groups[..., None]) | (slot_group[:, None, :] == 0)
        allowed = (self.filled[:, None, :] | sees_call_input | (self._keys >= qstart[..., None])) & (
            self._keys <= slots[..., None]
        )
        hidden = self._forward(embeds, slots, allowed)

        last_input = rows((packed["ends"] - 1).clamp(min=0))
        hidden = hidden.gather(1, last_input[..., None].expand(-1, -1, hidden.shape[-1]))
        guided = self._guide(self.adapter.code_logits(hidden).float())
        out = torch.where((packed["n_inputs"] > 0)[..., None], guided, out)

        self._last = packed
        self.count += 1
        self.forward_passes += (packed["n_inputs"].sum(1) > 0).long()
        return out

    def commit(self, keep: torch.Tensor) -> None:
        """Keep the inputs of the last call's queries where `keep [B, n]` is True; drop the rest."""
        last, self._last = self._last, None
        if last is None:
            return
        keep = keep.to(self.device)
        if keep.shape != last["n_inputs"].shape:
            raise ValueError(f"keep must be {tuple(last['n_inputs'].shape)}, got {tuple(keep.shape)}")
        kept = last["real"] & keep.gather(1, last["query"])
        if (kept & last["ephemeral"]).any():
            raise ValueError("an ephemeral query cannot be committed")
        slots = torch.where(kept, last["slots"], self.scratch)
        self.filled.scatter_(1, self._both_halves(slots), True)
        self.filled[:, self.scratch] = False

    # -- internals ---------------------------------------------------------------------------------
    def _both_halves(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, x]) if self.guided else x

    def _guide(self, logits: torch.Tensor) -> torch.Tensor:
        if not self.guided:
            return logits
        cond, uncond = logits.chunk(2)
        return uncond + self.guidance_scale * (cond - uncond)

    def _mask(self, allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        mask = torch.zeros(allowed.shape, dtype=dtype, device=self.device)
        return mask.masked_fill_(~allowed, torch.finfo(dtype).min)[:, None]

    def _forward(self, embeds: torch.Tensor, slots: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        positions = slots - self.prefix.pad[:, None]
        self.cache.write_slots = slots
        return self.adapter.hidden_states(embeds, positions, self._mask(allowed, embeds.dtype), self.cache)

    @torch.inference_mode()
    def _prefill(self) -> torch.Tensor:
        prefix = self.prefix
        length = prefix.length
        slots = torch.arange(length, device=self.device).expand(self._rows, length)
        causal = self._keys[None, None, :] <= slots[..., None]
        visible = torch.zeros_like(self.filled)
        visible[:, :length] = prefix.visible
        allowed = causal & (visible[:, None, :] | (self._keys == slots[..., None]))
        hidden = self._forward(self.adapter.embed_tokens(prefix.ids), slots.contiguous(), allowed)
        self.filled[:, :length] = prefix.visible
        self.count += 1
        self.forward_passes += 1
        return self._guide(self.adapter.code_logits(hidden[:, -1:]).float())[:, 0]

    def _pack(
        self,
        cells: torch.Tensor,
        codes: torch.Tensor,
        ephemeral: torch.Tensor | None,
        group: torch.Tensor | None,
    ) -> dict[str, torch.Tensor] | None:
        """Lay the inputs of every query side by side per image: the code, then any row-end tokens."""
        layout = self.layout
        n_struct = len(layout.row_end_ids)
        has_input = cells >= 1
        prev = (cells - 1).clamp(min=0)
        at_row_end = has_input & (prev % layout.width == layout.width - 1) & (n_struct > 0)
        n_inputs = has_input.long() + at_row_end.long() * n_struct
        ends = n_inputs.cumsum(1)
        width = int(ends[:, -1].max()) if cells.shape[1] else 0
        if width == 0:
            return None
        if ephemeral is None:
            ephemeral = torch.zeros_like(has_input)
        ephemeral = ephemeral.to(self.device) & has_input
        group = torch.zeros_like(cells) if group is None else group.to(self.device)
        starts = ends - n_inputs
        base_slot = self.prefix.length + layout.cell_offset(prev)
        query_ids = torch.arange(cells.shape[1], device=self.device).expand_as(cells)

        batch = cells.shape[0]
        dump = width  # an extra column that absorbs writes of absent inputs, sliced off below

        def blank(value, dtype):
            return torch.full((batch, width + 1), value, dtype=dtype, device=self.device)

        packed = {
            "slots": blank(self.scratch, torch.long),
            "qstart": blank(self.scratch, torch.long),
            "query": blank(0, torch.long),
            "code": blank(0, torch.long),
            "token": blank(0, torch.long),
            "is_code": blank(False, torch.bool),
            "real": blank(False, torch.bool),
            "ephemeral": blank(False, torch.bool),
            "group": blank(0, torch.long),
        }
        for j in range(1 + n_struct):
            exists = has_input if j == 0 else at_row_end
            column = torch.where(exists, starts + j, dump)
            token = layout.row_end_ids[j - 1] if j else 0
            values = {
                "slots": base_slot + j,
                "qstart": base_slot,
                "query": query_ids,
                "code": codes,
                "token": torch.full_like(cells, token),
                "is_code": torch.full_like(has_input, j == 0),
                "real": exists,
                "ephemeral": ephemeral,
                "group": group,
            }
            for key, value in values.items():
                packed[key].scatter_(1, column, value)
        packed = {key: value[:, :width] for key, value in packed.items()}
        packed["slots"] = torch.where(packed["real"], packed["slots"], self.scratch)
        packed["qstart"] = torch.where(packed["real"], packed["qstart"], self.scratch)
        packed["n_inputs"] = n_inputs
        packed["ends"] = ends
        return packed

    def code_embeddings(self) -> torch.Tensor:
        """`[V, d]`: the input embedding of every code (what a clean draft feeds)."""
        if self._code_table is None:
            codes = torch.arange(self.vocab_size, device=self.device)[None]
            with torch.inference_mode():
                self._code_table = self.adapter.embed_codes(codes)[0].float()
        return self._code_table

    def _embed_inputs(
        self, packed: dict[str, torch.Tensor], embeddings: torch.Tensor | None, embedded: torch.Tensor | None
    ) -> torch.Tensor:
        embeds = self.adapter.embed_codes(packed["code"])
        if embeddings is not None:
            given = embeddings.to(embeds.dtype).gather(
                1, packed["query"][..., None].expand(-1, -1, embeddings.shape[-1])
            )
            use = (embedded.to(self.device).gather(1, packed["query"]) & packed["is_code"])[..., None]
            embeds = torch.where(use, given, embeds)
        if self.layout.row_end_ids:
            tokens = self.adapter.embed_tokens(packed["token"])
            embeds = torch.where(packed["is_code"][..., None], embeds, tokens)
        return embeds
