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
Positions are the true ones (one per token, or the layout's grid positions: see `ImageLayout`). Cell 0 is predicted by the prefill (`first_logits`) and needs no input. An
*ephemeral* query is visible only to itself: a placeholder (ZipAR's row starts) that is never kept.

Tree inputs (SJD-PAC's sibling drafts): several inputs may stand at one position when all but one go to
*branch* slots, a region of `reserve_branches(n)` slots between the prompt and the image body; a branch
input has its cell's true position (and its own row-end tokens, also in the branch region) but no place in
the body, so it can never be committed. `sees [n, n]` then says which of the call's queries each query
sees (an ancestry, replacing the group rule); still only inputs at earlier positions. A path that left the
main line is kept by feeding its codes again, as ordinary inputs at their own slots, in a later call.

Hidden states: after every call `last_hidden [rows, n, d]` holds the target's last hidden state (after its
final norm) at each query's last input, per CFG row (an image's conditional row, then its unconditional
one), and `first_hidden [rows, d]` the prefill's at the prompt's last token: what a drafter reads
(`drafter`, the capability "drafter"; `arjet.session.drafting` runs it).

Rollback is implicit: the inputs of a call stay in the cache only if `commit` keeps them; otherwise
their slots are simply overwritten later.

Lanes: `lanes(start, stop)` is a view of images `start:stop` that shares this session's cache and
bookkeeping, so a call on it computes and writes only those images' rows (CFG's conditional and
unconditional rows of an image sit side by side, so every lane range is one slice of rows), and
`admit(prefix)` on a view starts new images in its rows: their prompt is prefilled and everything after it
forgotten, while the other images keep decoding. A continuous-batching engine runs on these two.

Shapes are fixed by the query tensor alone: a call with `n` queries packs `n` code inputs plus room for
the row-end tokens of at most `row_ends` of them, and attends over the first `span` slots of the cache
(`reserve`). Nothing here reads the device: misuse that can only be seen in the data (committing an
ephemeral input, more row ends than `row_ends`, an input beyond the span) is recorded on the device and
raised by `check()`, which the decode loop calls when it reads the device anyway.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from enum import IntEnum

import torch

from .adapter import DraftHead, ModelAdapter, NoisyEmbeddings
from .decoder import StaticDecoder, TransformersDecoder
from .layout import ImageLayout, Prefix


class Misuse(IntEnum):
    """Misuse of a session that only the data shows: flagged on the device, raised by `check()`."""

    EPHEMERAL_COMMITTED = 0
    TOO_MANY_ROW_ENDS = 1
    BEYOND_SPAN = 2
    BRANCH_COMMITTED = 3
    BRANCH_OUT_OF_RANGE = 4
    LOGITS_NOT_FINITE = 5  # not a caller's misuse: the model's (its weights or config), seen in any forward

    @property
    def message(self) -> str:
        return _MISUSE_MESSAGES[self]


_MISUSE_MESSAGES = {
    Misuse.EPHEMERAL_COMMITTED: "an ephemeral query was committed",
    Misuse.TOO_MANY_ROW_ENDS: "more queries crossed a row end than the call's row_ends allows",
    Misuse.BEYOND_SPAN: "an input was written beyond the reserved span",
    Misuse.BRANCH_COMMITTED: "a branch input was committed",
    Misuse.BRANCH_OUT_OF_RANGE: "a branch index was outside the reserved branch slots",
    Misuse.LOGITS_NOT_FINITE: (
        "the model's logits are not finite (NaN or inf): its weights or its config (a norm's epsilon, say) "
        "make its forward overflow or divide by zero (in the prompt's prefill or on the image's codes). Load "
        "a checkpoint whose weights and config are sound"
    ),
}


@dataclass
class _Inputs:
    """One call's inputs packed side by side per image: `n` code columns, then row-end token columns."""

    slots: torch.Tensor  # [B, width] cache slot of each input (the scratch slot for padding)
    home: torch.Tensor  # [B, width] the slot of the input's position in the body (= slots but for branches)
    qstart: torch.Tensor  # [B, width] slot of the first input of the input's query
    query: torch.Tensor  # [B, width] which query fed it
    group: torch.Tensor  # [B, width]
    real: torch.Tensor  # [B, width] bool: an input, not padding
    ephemeral: torch.Tensor  # [B, width] bool
    branch: torch.Tensor  # [B, width] bool: the input sits in the branch region
    has_input: torch.Tensor  # [B, n] bool: the query feeds an input (cell >= 1)
    last: torch.Tensor  # [B, n] column of each query's last input


@dataclass
class _Reach:
    """The furthest slot fed so far as last read from the device (`check`); a session and its lane views
    share it, so a view's `reserve` sizes its span from what every lane has fed."""

    frontier: int


class DecodingSession:
    span_step_min = 64  # the attention span grows in steps of at least this many slots (tests lower it)
    span_sizes = 8  # ... through at most this many sizes (each a shape: a captured step's graph, say)

    def __init__(
        self,
        adapter: ModelAdapter,
        layout: ImageLayout,
        prefix: Prefix,
        guidance_scale: float | None = None,
        codebook: torch.Tensor | None = None,
        noise: NoisyEmbeddings | None = None,
        decoder: StaticDecoder | None = None,
        drafter: DraftHead | None = None,
    ):
        self.adapter = adapter
        self.codebook = codebook  # [V, d] VQ code vectors: the capability "codebook"
        self.noise = noise  # a fine-tune for noisy code embeddings: the capability "noise_conditioning"
        self.drafter = drafter  # an EAGLE-style head over the hidden states: the capability "drafter"
        self._code_table: torch.Tensor | None = None
        self.layout = layout
        self.guided = guidance_scale is not None
        self.guidance_scale = guidance_scale
        rows = prefix.ids.shape[0]
        if self.guided and rows % 2:
            raise ValueError(f"a guided session needs [cond; uncond] rows, got {rows} rows")
        self._rows = rows
        self._batch = rows // 2 if self.guided else rows
        self.prefix = self._side_by_side(prefix)
        self.device = prefix.ids.device
        self._is_view = False
        self.decoder: StaticDecoder = decoder or default_decoder(adapter)
        self.misuse = torch.zeros(len(Misuse), dtype=torch.bool, device=self.device)  # flags by `Misuse`
        self.count = 0
        self.forward_passes = torch.zeros(self._batch, dtype=torch.long, device=self.device)
        self.drafter_passes = torch.zeros_like(self.forward_passes)  # the drafter's, `arjet.session.drafting`
        self._row_end_tokens = torch.tensor(layout.row_end_ids, dtype=torch.long, device=self.device)
        self._start = self.prefix.start_positions().clone()  # [rows] each row's first body position
        self._grid_offsets = layout.grid_offsets(self.device) if layout.grid_positions else None
        self._last: _Inputs | None = None
        self._queried = False
        self._allocate(branches=0)
        # [B, V] guided logits of cell 0; a plain tensor (the prefill runs in inference mode), so that `admit`
        # can write a new image's into it in place
        self.first_logits = self._prefill().clone()
        self._flag_not_finite(self.first_logits)
        self._reach = _Reach(self.prefix.length + self.body_offset - 1)

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

    @property
    def rows(self) -> int:
        """Sequences in the cache: two per image under CFG (side by side), else one."""
        return self._rows

    def reserve_branches(self, count: int) -> None:
        """Room for `count` branch inputs (see `logits(branch=)`), each with slots for its row-end tokens.
        Call it before the first `logits`: the cache grows by re-running the prefill into a larger one (the
        same logits; not counted as a forward pass)."""
        if count <= self.branches:
            return
        if self._queried or self._is_view:
            raise RuntimeError(
                "reserve_branches must come before the session's first logits call or lane view"
            )
        self._allocate(count)
        self._prefill(counted=False)
        self._reach = _Reach(self.prefix.length + self.body_offset - 1)

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
        branch: torch.Tensor | None = None,
        sees: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Guided next-code logits `[B, n, V]` (float32) for cells `[B, n]`; `-1` marks an unused query.

        `ephemeral [B, n]` bool marks placeholder queries; `group [B, n]` (ints >= 0, default 0): a query sees
        this call's inputs of group 0 and of its own group. Where `embedded [B, n]` is True the query feeds
        `embeddings [B, n, d]` (e.g. a noisy embedding, see `noise`) instead of the code's embedding.
        `row_ends`: at most this many queries of an image feed the last cell of a row (default `n`); it
        sizes the room for row-end tokens, so a sampler whose queries are short runs of cells passes its
        bound and forwards stay narrow.

        Trees: `branch [B, n]` long (default all `-1`): where `b >= 0` the query's input goes to branch slot
        `b` (`0 <= b < ` the count given to `reserve_branches`) instead of its cell's slot, at the same
        position. `sees [n, n]` or `[B, n, n]` bool: query `i` sees the inputs of query `j` of this call
        where `sees[..., i, j]` (and `j`'s inputs sit at earlier positions), instead of the group rule."""
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
        if sees is not None:
            if group is not None:
                raise ValueError("pass either group or sees, not both")
            if sees.shape[-2:] != (n, n) or sees.dim() not in (2, 3):
                raise ValueError(f"sees must be [n, n] or [batch, n, n] with n={n}; got {tuple(sees.shape)}")
            sees = sees.to(self.device, torch.bool).expand(self._batch, n, n)
        inputs = self._pack(cells, ephemeral, group, n if row_ends is None else min(row_ends, n), branch)
        rows = self.both_halves
        embeds = rows(self._embed_inputs(cells, codes, inputs, embeddings, embedded))
        positions = self._body_positions(rows(inputs.home))
        hidden = self._forward(embeds, rows(inputs.slots), self._allowed(inputs, sees), positions)
        last = rows(inputs.last)
        hidden = hidden.gather(1, last[..., None].expand(-1, -1, hidden.shape[-1]))
        self.last_hidden = hidden
        guided = self.guide(self.adapter.code_logits(hidden).float())
        self._flag_not_finite(guided, inputs.has_input)
        first = torch.where((cells == 0)[..., None], self.first_logits[:, None, :], 0.0)
        reach = torch.where(inputs.real, inputs.home, 0).amax().view(1)
        self.frontier.copy_(torch.maximum(self.frontier, reach))
        self._last = inputs
        self._queried = True
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
        self.misuse[Misuse.EPHEMERAL_COMMITTED] |= (kept & last.ephemeral).any()
        self.misuse[Misuse.BRANCH_COMMITTED] |= (kept & last.branch).any()
        kept &= ~last.ephemeral & ~last.branch
        slots = torch.where(kept, last.slots, self.scratch)
        self.filled.scatter_(1, self.both_halves(slots), True)
        self.filled[:, self.scratch] = False

    def reserve(self, cells: int) -> None:
        """Attend over enough slots for inputs up to `cells` cells past the furthest one fed so far (read at
        the last `check`); the span grows in a few fixed steps, each a shape of its own."""
        bound = self._reach.frontier + 1 + (cells // self.layout.width + 2) * self.layout.row_stride
        step = self.span_step_min
        bucket = step * max(1, _ceil_div(_ceil_div(self.capacity, self.span_sizes), step))
        self.span = min(self.capacity, bucket * _ceil_div(bound, bucket))

    def check(self) -> None:
        """Raise for misuse recorded on the device since the session began; also learns how far inputs reach.
        One read of the device (`status` / `apply_status` let a caller fold it into a read of its own)."""
        self.apply_status(self.status().tolist())

    def status(self) -> torch.Tensor:
        """`[k]` long: the misuse flags and the furthest slot fed so far, for `apply_status`."""
        return torch.cat([self.misuse.long(), self.frontier])

    def apply_status(self, status: list[int]) -> None:
        *flags, self._reach.frontier = status
        if flags[Misuse.LOGITS_NOT_FINITE]:
            raise ValueError(Misuse.LOGITS_NOT_FINITE.message)
        for misuse, happened in zip(Misuse, flags, strict=True):
            if happened:
                raise ValueError(f"decoding session misuse: {misuse.message}")

    def code_embeddings(self) -> torch.Tensor:
        """`[V, d]`: the input embedding of every code (what a clean draft feeds)."""
        if self._code_table is None:
            codes = torch.arange(self.vocab_size, device=self.device)[None]
            with torch.inference_mode():
                self._code_table = self.adapter.embed_codes(codes)[0].float()
        return self._code_table

    # -- lanes ---------------------------------------------------------------------------------------
    def lanes(self, start: int, stop: int) -> DecodingSession:
        """A view of images `start:stop`: it shares this session's cache, bookkeeping and misuse flags, and a
        call on it computes and writes only those images' rows. Its `count` counts its own calls."""
        if not 0 <= start < stop <= self._batch:
            raise ValueError(f"lanes {start}:{stop} are not inside this session's {self._batch} images")
        per = 2 if self.guided else 1
        rows = slice(per * start, per * stop)
        view = copy.copy(self)
        view._is_view = True
        view._batch, view._rows = stop - start, per * (stop - start)
        view.prefix = self.prefix.select(rows)
        view._start = self._start[rows]
        view.cache = self.decoder.rows(self.cache, rows)
        view.filled = self.filled[rows]
        view.forward_passes = self.forward_passes[start:stop]
        view.drafter_passes = self.drafter_passes[start:stop]
        view.first_logits = self.first_logits[start:stop]
        view.first_hidden = self.first_hidden[rows]
        view.prompt_end, view.body_start = self.prompt_end[start:stop], self.body_start[start:stop]
        view.count = 0
        view._last = None
        return view

    def admit(self, prefix: Prefix) -> None:
        """Start new images in this session's rows (usually a lane view's): `prefix` (`[cond; uncond]` rows as
        the constructor takes, at most the session's prefix length) replaces their prompt, everything they
        had in the cache is forgotten, and the prompt is prefilled (one forward pass, counted), giving the new
        `first_logits`. The rows then lay out their prompt, branch slots and image exactly as a session made
        for `prefix` alone would (the image starts right after the prompt), so they compute what it would.
        Other images of the session are untouched."""
        length = prefix.length
        if prefix.ids.shape[0] != self._rows or length > self.prefix.length:
            raise ValueError(
                f"admit needs a prefix of {self._rows} rows of at most {self.prefix.length} tokens (the session's "
                f"prefix region); got {tuple(prefix.ids.shape)}"
            )
        prefix = self._side_by_side(prefix)
        self.prefix.ids[:, :length] = prefix.ids.to(self.device)
        self.prefix.visible[:, :length] = prefix.visible.to(self.device)
        self.prefix.visible[:, length:] = False
        self.prefix.pad.copy_(prefix.pad.to(self.device))
        if (prefix.positions is None) != (self.prefix.positions is None):
            raise ValueError("admit needs a prefix with rotary positions exactly when the session's has them")
        if prefix.positions is not None:
            self.prefix.positions[:, :length] = prefix.positions.to(self.device)
        self._start.copy_(prefix.start_positions().to(self.device))
        self.prompt_end.fill_(length)
        self.body_start.fill_(length + self.body_offset)
        self.filled.zero_()
        self.forward_passes.zero_()
        self.drafter_passes.zero_()
        self._last = None
        self.first_logits.copy_(self._prefill(length))
        self._flag_not_finite(self.first_logits)

    # -- internals ---------------------------------------------------------------------------------
    def _flag_not_finite(self, logits: torch.Tensor, queried: torch.Tensor | None = None) -> None:
        """Flag logits `[B, (n,) V]` that hold a NaN or an infinity where `queried [B, n]` (NaN weights, an
        epsilon of NaN, weights so large the forward overflows, perhaps only on image codes' embeddings and
        so only after the prefill), which would decode every code as 0: on the device, read with the other
        flags at the next status read, never here."""
        finite = torch.isfinite(logits).all(-1)
        if queried is not None:
            finite |= ~queried
        self.misuse[Misuse.LOGITS_NOT_FINITE] |= ~finite.all()

    def _side_by_side(self, prefix: Prefix) -> Prefix:
        """`[cond; uncond]` rows reordered so that each image's two rows sit side by side."""
        if not self.guided:
            return prefix
        order = torch.arange(self._rows, device=prefix.ids.device).view(2, -1).t().flatten()
        return prefix.select(order)

    def both_halves(self, x: torch.Tensor) -> torch.Tensor:
        """Per-image `[B, ...]` as per-row `[rows, ...]` (each image's value for both of its CFG rows)."""
        if not self.guided:
            return x
        return x[:, None].expand(x.shape[0], 2, *x.shape[1:]).reshape(2 * x.shape[0], *x.shape[1:])

    def guide(self, logits: torch.Tensor) -> torch.Tensor:
        """Per-row logits `[rows, ...]` mixed per image with the guidance scale: `[B, ...]`."""
        if not self.guided:
            return logits
        cond, uncond = logits.view(self._batch, 2, *logits.shape[1:]).unbind(1)
        return uncond + self.guidance_scale * (cond - uncond)

    def _body_positions(self, home: torch.Tensor) -> torch.Tensor:
        """Rotary positions `[rows, m]` (`[rows, m, 3]` with grid positions) of inputs at body slots `home`."""
        offset = home - self.both_halves(self.body_start)[:, None]
        if self._grid_offsets is None:
            return offset + self._start[:, None]
        return self._start[:, None, None] + self._grid_offsets[offset.clamp(0, len(self._grid_offsets) - 1)]

    def _forward(
        self,
        embeds: torch.Tensor,
        slots: torch.Tensor,
        allowed: torch.Tensor,
        positions: torch.Tensor,
        *,
        eager: bool = False,
    ) -> torch.Tensor:
        """The decoder over `embeds`; `eager`: never through compiled code (the prefill)."""
        mask = torch.zeros(allowed.shape, dtype=embeds.dtype, device=self.device)
        mask = mask.masked_fill_(~allowed, torch.finfo(embeds.dtype).min)[:, None]
        decoder = self.decoder.eager if eager else self.decoder
        return decoder.forward(self.cache, embeds, positions, slots, mask)

    @property
    def _span(self) -> int:
        return self.span if self.decoder.reads_span_only else self.capacity

    def _allowed(self, inputs: _Inputs, sees: torch.Tensor | None) -> torch.Tensor:
        """`[rows, width, span]`: which slots each input attends to: its own query's inputs up to itself, and at
        earlier positions the filled slots and the inputs of this call its query shares (group 0 or its own
        group; or what `sees [B, n, n]` allows)."""
        span = self._span
        keys = self._keys[:span]
        rows = self.both_halves
        batch, width = inputs.slots.shape
        shared = inputs.real & ~inputs.ephemeral
        inside = inputs.slots < span
        self.misuse[Misuse.BEYOND_SPAN] |= (inputs.real & ~inside).any()
        # for each slot this call writes: its position (as a body slot) and who wrote it; `span`: a dump column
        target = torch.where(shared & inside, inputs.slots, span)
        keys_and_dump = torch.arange(span + 1, device=self.device).expand(batch, -1)
        slot_home = keys_and_dump.scatter(1, target, inputs.home)[:, None, :span]
        if sees is None:
            slot_group = torch.full((batch, span + 1), -1, dtype=torch.long, device=self.device)
            slot_group = slot_group.scatter_(1, target, inputs.group)[:, None, :span]
            groups = inputs.group[..., None]
            sees_call_input = (slot_group == groups) | (slot_group == 0)
        else:
            n = sees.shape[-1]
            slot_query = torch.full((batch, span + 1), n, dtype=torch.long, device=self.device)
            slot_query = slot_query.scatter_(1, target, inputs.query)[:, :span]
            sees = torch.cat([sees, torch.zeros_like(sees[..., :1])], -1)  # column n: nobody
            per_input = sees.gather(1, inputs.query[..., None].expand(-1, -1, n + 1))  # [B, width, n + 1]
            sees_call_input = per_input.gather(2, slot_query[:, None, :].expand(-1, width, -1))
        earlier = slot_home <= inputs.home[..., None]
        own = (keys >= inputs.qstart[..., None]) & (keys <= inputs.slots[..., None])
        return rows((sees_call_input & earlier) | own) | (self.filled[:, None, :span] & rows(earlier))

    def _allocate(self, branches: int) -> None:
        """The cache and its bookkeeping: prompt, `branches` branch inputs (each with room for its row-end
        tokens), the image body, one scratch slot."""
        layout, prefix = self.layout, self.prefix
        self.branches = branches
        self._branch_stride = 1 + len(layout.row_end_ids)
        self.body_offset = branches * self._branch_stride  # the branch region, between prompt and image
        # per image: where its prompt ends and its image begins (a lane admitted later has its own)
        self.prompt_end = torch.full((self._batch,), prefix.length, dtype=torch.long, device=self.device)
        self.body_start = self.prompt_end + self.body_offset
        self.capacity = prefix.length + self.body_offset + layout.body_length + 1
        self.scratch = self.capacity - 1  # padding inputs write here; never visible to a real query
        self.cache = self.decoder.new_cache(self._rows, self.capacity)
        self.filled = torch.zeros(self._rows, self.capacity, dtype=torch.bool, device=self.device)
        self.span = self.capacity
        first_body = prefix.length + self.body_offset
        self.frontier = torch.full((1,), first_body - 1, dtype=torch.long, device=self.device)
        self._keys = torch.arange(self.capacity, device=self.device)

    @torch.inference_mode()
    def _prefill(self, length: int | None = None, counted: bool = True) -> torch.Tensor:
        """Run the first `length` prompt slots (default: the whole prefix region); the guided logits of the
        image's first cell `[B, V]`."""
        prefix = self.prefix
        length = prefix.length if length is None else length
        ids, shown = prefix.ids[:, :length], prefix.visible[:, :length]
        slots = torch.arange(length, device=self.device).expand(self._rows, length).contiguous()
        keys = self._keys[: self._span]
        causal = keys[None, None, :] <= slots[..., None]
        visible = torch.zeros(self._rows, len(keys), dtype=torch.bool, device=self.device)
        visible[:, :length] = shown
        allowed = causal & (visible[:, None, :] | (keys == slots[..., None]))
        if self.decoder.reads_span_only:
            allowed = allowed[..., :length]
        positions = slots - prefix.pad[:, None] if prefix.positions is None else prefix.positions[:, :length]
        hidden = self._forward(self.adapter.embed_tokens(ids), slots, allowed, positions, eager=True)
        self.filled[:, :length] = shown
        if counted:
            self.count += 1
            self.forward_passes += 1
        if self._is_view:  # a lane view's admit: its rows of the session's tensor
            self.first_hidden.copy_(hidden[:, -1])
        else:
            self.first_hidden = hidden[:, -1].clone()
        return self.guide(self.adapter.code_logits(hidden[:, -1:]).float())[:, 0]

    def _pack(
        self,
        cells: torch.Tensor,
        ephemeral: torch.Tensor | None,
        group: torch.Tensor | None,
        row_ends: int,
        branch: torch.Tensor | None = None,
    ) -> _Inputs:
        """Code inputs in columns `0..n-1` (column j: query j's code), then the row-end tokens of the queries
        that feed a row's last cell, in query order, `len(row_end_ids)` columns each, for at most `row_ends`
        queries; padding writes to the scratch slot. A branch input and its row-end tokens go to its block
        of the branch region."""
        layout = self.layout
        batch, n = cells.shape
        n_struct = len(layout.row_end_ids)
        has_input = cells >= 1
        prev = (cells - 1).clamp(min=0)
        offset = (
            prev // layout.width
        ) * layout.row_stride + prev % layout.width  # the cell's place in the body
        home = torch.where(has_input, self.body_start[:, None] + offset, self.scratch)
        if branch is None:
            is_branch = torch.zeros_like(has_input)
            base = home
        else:
            branch = branch.to(self.device).expand_as(cells)
            is_branch = has_input & (branch >= 0)
            self.misuse[Misuse.BRANCH_OUT_OF_RANGE] |= (is_branch & (branch >= self.branches)).any()
            block = self.prompt_end[:, None] + branch * self._branch_stride
            base = torch.where(is_branch, torch.where(branch < self.branches, block, self.scratch), home)
        ephemeral = (
            torch.zeros_like(has_input) if ephemeral is None else ephemeral.to(self.device) & has_input
        )
        group = torch.zeros_like(cells) if group is None else group.to(self.device).expand_as(cells)
        query = torch.arange(n, device=self.device).expand(batch, n)
        # slots, home, qstart, query, group, real, ephemeral, branch
        fields = [base, home, base, query, group, has_input, ephemeral, is_branch]
        last = query
        if n_struct and row_ends:
            at_row_end = has_input & (prev % layout.width == layout.width - 1)
            rank = at_row_end.long().cumsum(1) - 1
            self.misuse[Misuse.TOO_MANY_ROW_ENDS] |= (at_row_end & (rank >= row_ends)).any()
            fits = at_row_end & (rank < row_ends)
            last = torch.where(fits, n + rank * n_struct + n_struct - 1, query)
            column = torch.where(fits, rank, row_ends)  # `row_ends` is a dump column, cut off below

            def compact(value: torch.Tensor, fill) -> torch.Tensor:
                blank = torch.full((batch, row_ends + 1), fill, dtype=value.dtype, device=self.device)
                return blank.scatter_(1, column, value)[:, :row_ends]

            def following(start: torch.Tensor) -> torch.Tensor:
                """The row-end tokens' slots after a code at `start`, interleaved in the columns' order."""
                return _interleave(
                    [
                        compact(
                            torch.where(fits & (start < self.scratch), start + 1 + j, self.scratch),
                            self.scratch,
                        )
                        for j in range(n_struct)
                    ]
                )

            qstart = torch.where(fits, base, self.scratch)
            # token j of the k-th row end sits in column n + k * n_struct + j
            extra = [
                following(base),
                following(home),
                *(
                    _interleave([compact(value, fill)] * n_struct)
                    for value, fill in (
                        (qstart, self.scratch),
                        (query, 0),
                        (group, 0),
                        (fits, False),
                        (ephemeral & fits, False),
                        (is_branch & fits, False),
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
    return adapter.static_decoder() or TransformersDecoder(adapter.hidden_states, adapter.num_layers)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _interleave(blocks: list[torch.Tensor]) -> torch.Tensor:
    """`[B, k]` blocks b_0..b_{s-1} -> `[B, k*s]` ordered b_0[:, 0], b_1[:, 0], ..., b_0[:, 1], ..."""
    return torch.stack(blocks, -1).flatten(1)
