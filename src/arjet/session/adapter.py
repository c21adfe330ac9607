"""What a model family gives the decoding session: embeddings in, hidden states through, code logits out."""

from __future__ import annotations

from typing import Protocol

import torch


class ModelAdapter(Protocol):
    """The four calls a session needs from a model; one small class per family implements them.

    An adapter may also offer `static_decoder() -> StaticDecoder | None` (see `arjet.session.decoder`): the
    family's decoder stack run over its own weights with a static cache, which the session then uses instead
    of `hidden_states` (it attends over the reserved span only and can be captured in a CUDA graph)."""

    num_layers: int
    code_vocab_size: int

    def embed_tokens(self, ids: torch.Tensor) -> torch.Tensor:
        """Input embeddings of text / structural token ids `[N, m] -> [N, m, d]`."""

    def embed_codes(self, codes: torch.Tensor) -> torch.Tensor:
        """Input embeddings of image codes in `0..V-1`, `[N, m] -> [N, m, d]`."""

    def hidden_states(
        self,
        inputs_embeds: torch.Tensor,
        position_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        cache: object,
    ) -> torch.Tensor:
        """Run the backbone with a float additive 4D mask and explicit positions; return `[N, m, d]`."""

    def code_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Next-code logits over the image vocabulary, `[N, m, d] -> [N, m, V]`."""


def run_decoder(backbone, inputs_embeds, position_ids, attention_mask, cache) -> torch.Tensor:
    """`hidden_states` for a transformers decoder stack (`LlamaModel`-like): explicit positions and mask,
    the session's cache (the `cache` argument: transformers 5.24 renamed `past_key_values`, which goes in
    5.40), last hidden state out."""
    output = backbone(
        inputs_embeds=inputs_embeds,
        position_ids=position_ids,
        attention_mask=attention_mask,
        cache=cache,
        use_cache=cache is not None,
    )
    return output.last_hidden_state
