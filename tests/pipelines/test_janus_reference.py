"""`ar` on Janus reproduces transformers' own `generate(generation_mode="image")`."""

import pytest
import torch

from arjet.samplers import LogitsPolicy
from arjet.testing import tiny_pipeline

from stats import exact_joint, goodness_of_fit

PROMPT = "a red circle left of a blue square"


def _hf_generate(pipe, samples: int, **generation):
    prefix = pipe.encode_prompts([PROMPT], None, pipe.image_tokenizer.grid, guided=False)
    return pipe.model.generate(
        prefix.ids,
        attention_mask=torch.ones_like(prefix.ids),
        generation_mode="image",
        num_return_sequences=samples,
        **generation,
    )


def test_greedy_matches_transformers_generate_token_for_token():
    pipe = tiny_pipeline("janus", grid=(3, 3), vocab_size=16, logit_scale=3.0)
    ours = pipe("a red circle left of a blue square", temperature=0, guidance_scale=4.0, output_type="latent")
    theirs = _hf_generate(pipe, 1, do_sample=False, guidance_scale=4.0)
    assert torch.equal(ours.codes.flatten(1), theirs)


@pytest.mark.slow
def test_sampling_distribution_matches_transformers_generate():
    """Both samplers against the exact joint of a 2x2 grid; a wrong CFG mix is rejected by the same test."""
    grid, guidance, samples = (2, 2), 3.0, 3000
    pipe = tiny_pipeline("janus", grid=grid, vocab_size=4, logit_scale=3.0)
    policy = LogitsPolicy(temperature=0.8, top_k=3)
    exact = exact_joint(pipe, PROMPT, grid, policy, guidance)

    torch.manual_seed(0)
    theirs = _hf_generate(pipe, samples, do_sample=True, guidance_scale=guidance, temperature=0.8, top_k=3)
    ours = pipe(
        PROMPT,
        num_images_per_prompt=samples,
        seed=0,
        guidance_scale=guidance,
        temperature=0.8,
        top_k=3,
        output_type="latent",
    ).codes.flatten(1)
    assert goodness_of_fit(theirs, exact) > 1e-3
    assert goodness_of_fit(ours, exact) > 1e-3
    # negative controls: no CFG, and CFG with the [cond; uncond] halves swapped (c + s(u - c))
    for wrong_scale in (None, 1 - guidance):
        wrong = exact_joint(pipe, PROMPT, grid, policy, guidance_scale=wrong_scale)
        assert goodness_of_fit(ours, wrong) < 1e-3
