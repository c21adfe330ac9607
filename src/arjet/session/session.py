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
Positions are the true ones. Cell 0 is predicted by the prefill (`first_logits`) and needs no input. An
*ephemeral* query is visible only to itself: a placeholder (ZipAR's row starts) that is never kept.

Rollback is implicit: the inputs of a call stay in the cache only if `commit` keeps them; otherwise
their slots are simply overwritten later.

Shapes are fixed by the query tensor alone: a call with `n` queries packs `n` code inputs plus room for
the row-end tokens of at most `row_ends` of them, and attends over the first `span` slots of the cache
(`reserve`). Nothing here reads the device: misuse that can only be seen in the data (committing an
ephemeral input, more row ends than `row_ends`, an input beyond the span) is recorded on the device and
raised by `check()`, which the decode loop calls when it reads the device anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .adapter import ModelAdapter
from .decoder import StaticDecoder, TransformersDecoder
from .layout import ImageLayout, Prefix
from .noise import NoiseConditioning

_ERRORS = (
    "an ephemeral query was committed",
    "more queries crossed a row end than the call's row_ends allows",
    "an input was written beyond the reserved span",
)


@dataclass
class _Inputs:
    """One call's inputs packed side by side per image: `n` code columns, then row-end token columns."""

    slots: torch.Tensor  # [B, width] cache slot of each input (the scratch slot for padding)
    qstart: torch.Tensor  # [B, width] slot of the first input of the input's query
    query: torch.Tensor  # [B, width] which query fed it
    group: torch.Tensor  # [B, width]
    real: torch.Tensor  # [B, width] bool: an input, not padding
    ephemeral: torch.Tensor  # [B, width] bool
    has_input: torch.Tensor  # [B, n] bool: the query feeds an input (cell >= 1)
    last: torch.Tensor  # [B, n] column of each query's last input


class DecodingSession:
    span_step_min = 64  # the attention span grows in steps of at least this many slots (tests lower it)

    def __init__(
        self,
        adapter: ModelAdapter,
        layout: ImageLayout,
        prefix: Prefix,
        guidance_scale: float | None = None,
        codebook: torch.Tensor | None = None,
        noise: NoiseConditioning | None = None,
        decoder: StaticDecoder | None = None,
    ):
        self.adapter = adapter
        self.codebook = codebook  # [V, d] VQ code vectors: the capability "codebook"
        self.noise = noise  # a fine-tune for noisy code embeddings: the capability "noise_conditioning"
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
        self.decoder: StaticDecoder = decoder or default_decoder(adapter)
        self.cache = self.decoder.new_cache(rows, self.capacity)
        self.filled = torch.zeros(rows, self.capacity, dtype=torch.bool, device=self.device)
        self.span = self.capacity
        self.frontier = torch.full((1,), prefix.length - 1, dtype=torch.long, device=self.device)
        self.errors = torch.zeros(len(_ERRORS), dtype=torch.bool, device=self.device)
        self.count = 0
        self.forward_passes = torch.zeros(self._batch, dtype=torch.long, device=self.device)
        self._keys = torch.arange(self.capacity, device=self.device)
        self._row_end_tokens = torch.tensor(layout.row_end_ids, dtype=torch.long, device=self.device)
        self._last: _Inputs | None = None
        self.first_logits = self._prefill()  # [B, V] guided logits of cell 0

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
        *,
        row_ends: int | None = None,
    ) -> torch.Tensor:
        """Guided next-code logits `[B, n, V]` (float32) for cells `[B, n]`; `-1` marks an unused query.

        `ephemeral [B, n]` bool marks placeholder queries; `group [B, n]` (ints >= 0, default 0): a query sees
        this call's inputs of group 0 and of its own group. Where `embedded [B, n]` is True the query feeds
        `embeddings [B, n, d]` (e.g. a noisy embedding, see `noise`) instead of the code's embedding.
        `row_ends`: at most this many queries of an image feed the last cell of a row (default `n`); it
        sizes the room for row-end tokens, so a sampler whose queries are short runs of cells passes its
        bound and forwards stay narrow."""
        cells = cells.to(self.device)
        codes = codes.to(self.device)
        if cells.shape != codes.shape or cells.dim() != 2 or cells.shape[0] != self._batch:
            raise ValueError(
                f"cells and codes must both be [batch={self._batch}, n]; got {tuple(cells.shape)} and "
                f"{tuple(codes.shape)}"
            )
        if (embeddings is None) != (embedded is None):
            raise ValueError("pass embeddings and embedded together")
        n = cells.shape[1]
        inputs = self._pack(cells, ephemeral, group, n if row_ends is None else min(row_ends, n))
        rows = self._both_halves
        embeds = rows(self._embed_inputs(cells, codes, inputs, embeddings, embedded))
        slots = rows(inputs.slots)
        hidden = self._forward(embeds, slots, self._allowed(inputs, slots))
        last = rows(inputs.last)
        hidden = hidden.gather(1, last[..., None].expand(-1, -1, hidden.shape[-1]))
        guided = self._guide(self.adapter.code_logits(hidden).float())
        first = torch.where((cells == 0)[..., None], self.first_logits[:, None, :], 0.0)
        reach = torch.where(inputs.real, inputs.slots, 0).amax().view(1)
        self.frontier.copy_(torch.maximum(self.frontier, reach))
        self._last = inputs
        self.count += 1
        self.forward_passes += inputs.has_input.any(1).long()
        return torch.where(inputs.has_input[..., None], guided, first)

    def commit(self, keep: torch.Tensor) -> None:
        """Keep the inputs of the last call's queries where `keep [B, n]` is True; drop the rest."""
        last, self._last = self._last, None
        if last is None:
            return
        keep = keep.to(self.device)
        if keep.shape != last.has_input.shape:
            raise ValueError(f"keep must be {tuple(last.has_input.shape)}, got {tuple(keep.shape)}")
        kept = last.real & keep.gather(1, last.query)
        self.errors[0] |= (kept & last.ephemeral).any()
        kept &= ~last.ephemeral
        slots = torch.where(kept, last.slots, self.scratch)
        self.filled.scatter_(1, self._both_halves(slots), True)
        self.filled[:, self.scratch] = False

    def reserve(self, cells: int) -> None:
        """Attend over enough slots for inputs up to `cells` cells past the furthest one fed so far (read at
        the last `check`); the span grows in a few fixed steps, each a shape of its own."""
        bound = self._frontier + 1 + (cells // self.layout.width + 2) * self.layout.row_stride
        step = self.span_step_min
        bucket = step * max(1, _ceil_div(_ceil_div(self.capacity, 8), step))
        self.span = min(self.capacity, bucket * _ceil_div(bound, bucket))

    def check(self) -> None:
        """Raise for misuse recorded on the device since the session began; also learns how far inputs reach.
        One read of the device (`status` / `apply_status` let a caller fold it into a read of its own)."""
        self.apply_status(self.status().tolist())

    def status(self) -> torch.Tensor:
        """`[k]` long: the misuse flags and the furthest slot fed so far, for `apply_status`."""
        return torch.cat([self.errors.long(), self.frontier])

    def apply_status(self, status: list[int]) -> None:
        *errors, self._frontier = status
        for message, happened in zip(_ERRORS, errors, strict=True):
            if happened:
                raise ValueError(f"decoding session misuse: {message}")

    def code_embeddings(self) -> torch.Tensor:
        """`[V, d]`: the input embedding of every code (what a clean draft feeds)."""
        if self._code_table is None:
            codes = torch.arange(self.vocab_size, device=self.device)[None]
            with torch.inference_mode():
                self._code_table = self.adapter.embed_codes(codes)[0].float()
        return self._code_table

    # -- internals ---------------------------------------------------------------------------------
    def _both_halves(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, x]) if self.guided else x

    def _guide(self, logits: torch.Tensor) -> torch.Tensor:
        if not self.guided:
            return logits
        cond, uncond = logits.chunk(2)
        return uncond + self.guidance_scale * (cond - uncond)

    def _forward(self, embeds: torch.Tensor, slots: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        mask = torch.zeros(allowed.shape, dtype=embeds.dtype, device=self.device)
        mask = mask.masked_fill_(~allowed, torch.finfo(embeds.dtype).min)[:, None]
        positions = slots - self.prefix.pad[:, None]
        return self.decoder.forward(self.cache, embeds, positions, slots, mask)

    @property
    def _span(self) -> int:
        return self.span if self.decoder.reads_span_only else self.capacity

    def _allowed(self, inputs: _Inputs, slots: torch.Tensor) -> torch.Tensor:
        """`[rows, width, span]`: which slots each input attends to."""
        span = self._span
        keys = self._keys[:span]
        rows = self._both_halves
        # which group's queries may see each slot written by this call (-1: none but its own query)
        shared = inputs.real & ~inputs.ephemeral
        inside = slots < span
        self.errors[2] |= (rows(inputs.real) & ~inside).any()
        slot_group = torch.full((slots.shape[0], span + 1), -1, dtype=torch.long, device=self.device)
        target = torch.where(rows(shared) & inside, slots, span)
        slot_group = slot_group.scatter_(1, target, rows(inputs.group))[:, None, :span]
        groups = rows(inputs.group)[..., None]
        sees_call_input = (slot_group == groups) | (slot_group == 0)
        return (self.filled[:, None, :span] | sees_call_input | (keys >= rows(inputs.qstart)[..., None])) & (
            keys <= slots[..., None]
        )

    @torch.inference_mode()
    def _prefill(self) -> torch.Tensor:
        prefix = self.prefix
        length = prefix.length
        slots = torch.arange(length, device=self.device).expand(self._rows, length).contiguous()
        keys = self._keys[: self._span]
        causal = keys[None, None, :] <= slots[..., None]
        visible = torch.zeros(self._rows, len(keys), dtype=torch.bool, device=self.device)
        visible[:, :length] = prefix.visible
        allowed = causal & (visible[:, None, :] | (keys == slots[..., None]))
        if self.decoder.reads_span_only:
            allowed = allowed[..., :length]
        hidden = self._forward(self.adapter.embed_tokens(prefix.ids), slots, allowed)
        self.filled[:, :length] = prefix.visible
        self._frontier = length - 1
        self.count += 1
        self.forward_passes += 1
        return self._guide(self.adapter.code_logits(hidden[:, -1:]).float())[:, 0]

    def _pack(
        self, cells: torch.Tensor, ephemeral: torch.Tensor | None, group: torch.Tensor | None, row_ends: int
    ) -> _Inputs:
        """Code inputs in columns `0..n-1` (column j: query j's code), then the row-end tokens of the queries
        that feed a row's last cell, in query order, `len(row_end_ids)` columns each, for at most `row_ends`
        queries; padding writes to the scratch slot."""
        layout = self.layout
        batch, n = cells.shape
        n_struct = len(layout.row_end_ids)
        has_input = cells >= 1
        prev = (cells - 1).clamp(min=0)
        base = torch.where(has_input, self.prefix.length + layout.cell_offset(prev), self.scratch)
        ephemeral = (
            torch.zeros_like(has_input) if ephemeral is None else ephemeral.to(self.device) & has_input
        )
        group = torch.zeros_like(cells) if group is None else group.to(self.device).expand_as(cells)
        query = torch.arange(n, device=self.device).expand(batch, n)
        fields = [
            base,
            base,
            query,
            group,
            has_input,
            ephemeral,
        ]  # slots, qstart, query, group, real, ephemeral
        last = query
        if n_struct and row_ends:
            at_row_end = has_input & (prev % layout.width == layout.width - 1)
            rank = at_row_end.long().cumsum(1) - 1
            self.errors[1] |= (at_row_end & (rank >= row_ends)).any()
            fits = at_row_end & (rank < row_ends)
            last = torch.where(fits, n + rank * n_struct + n_struct - 1, query)
            column = torch.where(fits, rank, row_ends)  # `row_ends` is a dump column, cut off below

            def compact(value: torch.Tensor, fill) -> torch.Tensor:
                blank = torch.full((batch, row_ends + 1), fill, dtype=value.dtype, device=self.device)
                return blank.scatter_(1, column, value)[:, :row_ends]

            qstart = torch.where(fits, base, self.scratch)
            # token j of the k-th row end sits in column n + k * n_struct + j
            extra = [
                _interleave(
                    [
                        compact(torch.where(fits, base + 1 + j, self.scratch), self.scratch)
                        for j in range(n_struct)
                    ]
                ),
                *(
                    _interleave([compact(value, fill)] * n_struct)
                    for value, fill in (
                        (qstart, self.scratch),
                        (query, 0),
                        (group, 0),
                        (fits, False),
                        (ephemeral & fits, False),
                    )
                ),
            ]
            fields = [torch.cat([field, more], 1) for field, more in zip(fields, extra, strict=True)]
        return _Inputs(*fields, has_input=has_input, last=last)

    def _embed_inputs(
        self,
        cells: torch.Tensor,
        codes: torch.Tensor,
        inputs: _Inputs,
        embeddings: torch.Tensor | None,
        embedded: torch.Tensor | None,
    ) -> torch.Tensor:
        embeds = self.adapter.embed_codes(codes.clamp(min=0))  # [B, n, d]
        if embeddings is not None:
            use = (embedded.to(self.device) & inputs.has_input)[..., None]
            embeds = torch.where(use, embeddings.to(embeds.dtype), embeds)
        extra = inputs.slots.shape[1] - cells.shape[1]
        if extra:
            tokens = self._row_end_tokens.repeat(extra // len(self.layout.row_end_ids))
            embeds = torch.cat([embeds, self.adapter.embed_tokens(tokens.expand(cells.shape[0], -1))], 1)
        return embeds


def default_decoder(adapter: ModelAdapter) -> StaticDecoder:
    """The adapter's own static decoder stack when it offers one, else transformers' module via a slot cache."""
    static = getattr(adapter, "static_decoder", None)
    decoder = static() if static is not None else None
    return decoder or TransformersDecoder(adapter.hidden_states, adapter.num_layers)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _interleave(blocks: list[torch.Tensor]) -> torch.Tensor:
    """`[B, k]` blocks b_0..b_{s-1} -> `[B, k*s]` ordered b_0[:, 0], b_1[:, 0], ..., b_0[:, 1], ..."""
    return torch.stack(blocks, -1).flatten(1)
