import pytest
import torch

from arjet.testing import tiny_pipeline


@pytest.fixture(scope="module")
def overflowing_model(tmp_path_factory):
    """A saved tiny Janus folder that loads but cannot decode: huge finite weights in its generation aligner
    leave the prompt's prefill finite and overflow on the first image code, so every decode fails with
    non-finite logits (the commands' warm-up included)."""
    folder = tmp_path_factory.mktemp("overflowing-janus")
    pipe = tiny_pipeline("janus", grid=(2, 2), vocab_size=8, logit_scale=3.0)
    with torch.no_grad():
        for weight in pipe.model.model.generation_aligner.parameters():
            weight.fill_(3e38)
    pipe.save_pretrained(folder)
    return folder
