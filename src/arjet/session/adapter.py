"""What a model family gives the decoding session: embeddings in, hidden states through, code logits out."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .decoder import StaticDecoder


class ModelAdapter:
    """The calls a session needs from a model; one small subclass per family implements the first four.

    `static_decoder()` may return the family's decoder stack run over its own weights with a static cache
    (see `arjet.session.decoder`), which the session then uses instead of `hidden_states` (it attends over
    the reserved span only and can be captured in a CUDA graph); None (the default) runs the transformers
    module. `forward_weights()` may list the weights one decoding forward reads (the bench's bandwidth floor);
    None (the default) when the family does not say."""

    num_layers: int
    code_vocab_size: int

    def embed_tokens(self, ids: torch.Tensor) -> torch.Tensor:
        """Input embeddings of text / structural token ids `[N, m] -> [N, m, d]`."""
        raise NotImplementedError

    def embed_codes(self, codes: torch.Tensor) -> torch.Tensor:
        """Input embeddings of image codes in `0..V-1`, `[N, m] -> [N, m, d]`."""
        raise NotImplementedError

    def hidden_states(
        self,
        inputs_embeds: torch.Tensor,
        position_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        cache: object,
    ) -> torch.Tensor:
        """Run the backbone with a float additive 4D mask and explicit positions; return `[N, m, d]`."""
        raise NotImplementedError

    def code_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Next-code logits over the image vocabulary, `[N, m, d] -> [N, m, V]`."""
        raise NotImplementedError

    def static_decoder(self) -> StaticDecoder | None:
        return None

    def forward_weights(self) -> list[torch.Tensor] | None:
        return None


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
