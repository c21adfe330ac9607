"""What a model family gives the decoding session: embeddings in, hidden states through, code logits out;
and what the session needs of a model's add-ons (`arjet.addons`: a drafter, noise conditioning)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

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


class DraftHead(Protocol):
    """A draft head over the target's hidden states (`arjet.addons.Drafter`): what a session holds as
    `drafter` and `arjet.session.drafting` runs."""

    fc: torch.nn.Linear  # the fusion `fc(cat[e(x_{t+1}), h_t])`; its weight's dtype is the head's

    def fuse(self, code_embeddings: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """The block's input from code embeddings and the target's hidden states, `[..., d]` each."""

    def stack(self) -> StaticDecoder:
        """The head's block as a static-cache decoder (one per decode)."""


class NoisyEmbeddings(Protocol):
    """Noise conditioning of a model fine-tuned for noisy code embeddings (`arjet.addons.NoiseConditioning`):
    what a session holds as `noise` and SJD2 feeds through it. Levels run from 0 (clean) to 1 (pure noise)."""

    @property
    def levels(self) -> int:
        """The denoising levels the model was trained with."""

    def add_noise(self, clean: torch.Tensor, t: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """Normalised state at level `t` for clean embeddings `[..., d]`."""

    def model_input(self, z: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """What the model is fed for normalised state `z` at level `t`."""

    def denoise_step(
        self, z: torch.Tensor, clean_estimate: torch.Tensor, t: torch.Tensor, t_next: torch.Tensor
    ) -> torch.Tensor:
        """One step from level `t` to `t_next < t` towards the clean embedding estimate."""


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
