"""`run_decoder`: a family's transformers stack is called with the session's slot cache under the argument
name transformers reads today, so the keys land in the cache and nothing deprecated is passed."""

import warnings

import torch

from arjet.session import SlotCache
from arjet.testing import tiny_pipeline


def test_the_transformers_stack_writes_into_the_session_cache_without_deprecated_arguments(family):
    pipe = tiny_pipeline(family, vocab_size=8)
    adapter = pipe.session_adapter()
    cache = SlotCache(adapter.num_layers, capacity=4)
    cache.write_slots = torch.tensor([[1, 2]])
    embeds = adapter.embed_codes(torch.tensor([[3, 5]]))
    mask = torch.zeros(1, 1, 2, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # `past_key_values` warns until 5.40, then is gone
        hidden = adapter.hidden_states(embeds, torch.tensor([[0, 1]]), mask, cache)
    assert hidden.shape[:2] == (1, 2)
    for layer in cache.layers:  # an unread cache argument would leave every slot empty
        written = layer.keys[0].abs().sum(dim=(0, 2))
        assert (written[1:3] > 0).all() and (written[[0, 3]] == 0).all()
