"""A static KV cache addressed by absolute slot, for transformers decoder models.

Every batch row owns a fixed-size buffer of `capacity` slots; a forward writes its keys and values at the
slots the session planned for it (different per row, so ragged batches work) and attention sees the whole
buffer through the session's float 4D mask. Nothing is ever cropped or copied: which slots count as
"filled" is the session's business, so rollback is free and the shapes stay fixed.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin


class SlotLayer(CacheLayerMixin):
    is_compileable = True
    is_sliding = False

    def __init__(self, cache: SlotCache):
        super().__init__()
        self._cache = cache

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        rows, heads = key_states.shape[:2]
        capacity = self._cache.capacity
        self.keys = key_states.new_zeros(rows, heads, capacity, key_states.shape[-1])
        self.values = value_states.new_zeros(rows, heads, capacity, value_states.shape[-1])
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        index = self._cache.write_slots  # [rows, q]
        rows, heads, q, _ = key_states.shape
        k_index = index[:, None, :, None].expand(rows, heads, q, key_states.shape[-1])
        v_index = index[:, None, :, None].expand(rows, heads, q, value_states.shape[-1])
        self.keys.scatter_(2, k_index, key_states)
        self.values.scatter_(2, v_index, value_states)
        return self.keys, self.values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self._cache.capacity, 0

    def get_seq_length(self) -> int:
        return 0

    def get_max_length(self) -> int:
        return self._cache.capacity


class SlotCache(Cache):
    """KV cache with `capacity` absolute slots per row; `write_slots` says where the next forward writes."""

    def __init__(self, num_layers: int, capacity: int):
        self.capacity = capacity
        self.write_slots: torch.Tensor | None = None
        super().__init__(layers=[SlotLayer(self) for _ in range(num_layers)])

    def rows(self, rows: slice) -> SlotCache:
        """A view holding rows `rows` of this (already filled) cache: writes through it land in this one."""
        view = SlotCache(len(self.layers), self.capacity)
        for mine, theirs in zip(view.layers, self.layers, strict=True):
            if not theirs.is_initialized:
                raise RuntimeError("a slot cache is viewed by rows only once a forward has filled it")
            mine.keys, mine.values = theirs.keys[rows], theirs.values[rows]
            mine.is_initialized = True
        return view
