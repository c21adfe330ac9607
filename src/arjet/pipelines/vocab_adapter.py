"""Session adapter for models whose image codes are ordinary entries of the LM vocabulary (Emu3, Chameleon)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..session.adapter import ModelAdapter, run_decoder
from ..session.decoder import StaticDecoder


class VocabularyCodeAdapter(ModelAdapter):
    """Code `k` is token `code_token_ids[k]`: embedded by the LM's input embeddings and scored by the LM head
    restricted to those rows (so logits over text tokens are never computed)."""

    def __init__(
        self,
        backbone: nn.Module,
        embeddings: nn.Embedding,
        lm_head: nn.Linear,
        code_token_ids: torch.Tensor,
        num_layers: int,
        static_decoder: StaticDecoder | None = None,
    ):
        self.backbone = backbone
        self._static_decoder = static_decoder
        self.embeddings = embeddings
        self.num_layers = num_layers
        self.code_vocab_size = len(code_token_ids)
        ids = code_token_ids.to(lm_head.weight.device)
        first = int(ids[0])
        contiguous = bool((ids == torch.arange(first, first + len(ids), device=ids.device)).all())
        # a contiguous id range is a view of the head, not a copy (Lumina's and Emu3's are)
        self._head_weight = lm_head.weight[first : first + len(ids)] if contiguous else lm_head.weight[ids]
        self._head_bias = None if lm_head.bias is None else lm_head.bias[ids]
        self._token_ids = ids

    def embed_tokens(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embeddings(ids)

    def embed_codes(self, codes: torch.Tensor) -> torch.Tensor:
        return self.embeddings(self._token_ids[codes])

    def hidden_states(self, inputs_embeds, position_ids, attention_mask, cache) -> torch.Tensor:
        return run_decoder(self.backbone, inputs_embeds, position_ids, attention_mask, cache)

    def code_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(hidden, self._head_weight, self._head_bias)

    def static_decoder(self) -> StaticDecoder | None:
        return self._static_decoder

    def forward_weights(self) -> list[torch.Tensor]:
        """The weights one decoding forward reads (`arjet.bench.floor`): decoder layers, final norm, code head rows."""
        head = [self._head_weight] if self._head_bias is None else [self._head_weight, self._head_bias]
        return [*self.backbone.layers.parameters(), *self.backbone.norm.parameters(), *head]
