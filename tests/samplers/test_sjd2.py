import functools

import pytest
import torch

from arjet.addons.noise import NoiseConditioning
from arjet.samplers import SJD2, LogitsPolicy
from arjet.testing import tiny_pipeline

from families import guidance, statistical_logit_scale
from stats import drawn, exact_joint, goodness_of_fit

PROMPT = "a red circle left of a blue square"
GRIDS = {"janus": (2, 2), "emu3": (2, 3), "lumina_mgpt": (2, 3), "glm_image": (2, 3)}
POLICY = LogitsPolicy(temperature=0.8, top_k=3)


def _with_noise_conditioning(pipe, levels=4):
    hidden = pipe.session_adapter().embed_codes(torch.zeros(1, 1, dtype=torch.long)).shape[-1]
    with torch.random.fork_rng():  # the same conditioning whichever tests ran before
        torch.manual_seed(0)
        noise = NoiseConditioning(hidden_size=hidden, levels=levels)
        torch.nn.init.normal_(noise.level_mlp[-1].weight, std=0.5)  # an untrained-but-active conditioning
    pipe.register_modules(noise_conditioning=noise)
    return pipe


@functools.cache
def _setup(family):
    scale = statistical_logit_scale(family)
    pipe = _with_noise_conditioning(
        tiny_pipeline(family, grid=GRIDS[family], vocab_size=4, logit_scale=scale)
    )
    return pipe, exact_joint(pipe, PROMPT, GRIDS[family], POLICY, guidance(family))


@pytest.mark.parametrize(
    "sampler",
    [
        SJD2(window=4),
        SJD2(window=3, levels=2),
        SJD2(window=8, levels=8),
        SJD2(window=5, levels=2, coupling=False),
    ],
    ids=repr,
)
@pytest.mark.slow
def test_sjd2_is_lossless_with_respect_to_the_noise_conditioned_model(family, sampler):
    pipe, exact = _setup(family)
    out = pipe(
        PROMPT,
        sampler=sampler,
        num_images_per_prompt=4000,
        seed=0,
        guidance_scale=guidance(family),
        temperature=POLICY.temperature,
        top_k=POLICY.top_k,
        output_type="latent",
    )
    assert goodness_of_fit(drawn(out), exact) > 1e-3


def test_sjd2_greedy_reproduces_greedy_ar(family):
    grid = (4, 4) if family == "janus" else (3, 4)
    pipe = _with_noise_conditioning(
        tiny_pipeline(family, grid=grid, vocab_size=16, logit_scale=3.0), levels=3
    )
    ar = pipe(["a red circle", "green star"], temperature=0).codes
    out = pipe(["a red circle", "green star"], sampler=SJD2(window=6), temperature=0)
    assert torch.equal(out.codes, ar)
    for stat in out.stats:
        assert sum(stat.accepted_per_step) == stat.tokens


def test_sjd2_refuses_a_model_without_the_fine_tune():
    pipe = tiny_pipeline("janus", grid=(3, 3), vocab_size=8)
    with pytest.raises(ValueError, match="needs a checkpoint fine-tuned for noisy embeddings"):
        pipe("a red circle", sampler="sjd2")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(window=1), "window must be an integer from 2 to 16384, got 1"),
        (dict(levels=0), "levels must be"),
        (dict(coupling="yes"), "coupling must be"),
    ],
)
def test_bad_sjd2_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SJD2(**kwargs)


@pytest.mark.parametrize(
    ("sampler", "trained", "levels"),
    [
        (SJD2(), 16, 4),
        (SJD2(window=128), 16, 8),
        (SJD2(), 2, 2),
        (SJD2(window=8), 16, 1),
        (SJD2(levels=16), 4, 16),
    ],
    ids=repr,
)
def test_default_denoising_levels_follow_the_window(sampler, trained, levels):
    assert sampler.denoising_levels(trained) == levels
