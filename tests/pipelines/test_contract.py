"""The contract every pipeline keeps, run on a tiny random model of each family."""

import numpy as np
import PIL.Image
import pytest
import torch

import arjet
from arjet.testing import tiny_pipeline

GRID = (3, 3)
PROMPTS = ["a red circle left of a blue square", "three green triangles"]


@pytest.fixture
def pipe(family):
    return tiny_pipeline(family, grid=GRID, vocab_size=8, logit_scale=3.0)


def _downsample(pipe) -> int:
    return pipe.image_tokenizer.downsample


def test_generates_images_of_the_right_size_in_every_output_type(pipe):
    side = GRID[0] * _downsample(pipe)
    out = pipe(PROMPTS, seed=0)
    assert len(out.images) == 2 and all(isinstance(im, PIL.Image.Image) for im in out.images)
    assert out.images[0].size == (side, side)
    assert out.codes.dtype == torch.long and out.codes.shape == (2, *GRID)
    assert out.codes.min() >= 0 and out.codes.max() < 8
    array = pipe(PROMPTS[0], seed=0, output_type="np").images
    assert (
        isinstance(array, np.ndarray)
        and array.shape == (1, side, side, 3)
        and 0 <= array.min() <= array.max() <= 1
    )
    tensor = pipe(PROMPTS[0], seed=0, output_type="pt").images
    assert isinstance(tensor, torch.Tensor) and tensor.shape == (1, 3, side, side)
    latent = pipe(PROMPTS[0], seed=0, output_type="latent")
    assert torch.equal(latent.images, latent.codes)
    images, codes, stats = pipe(PROMPTS[0], seed=0, return_dict=False)
    assert torch.equal(codes, latent.codes) and len(stats) == 1


def test_stats_count_the_forwards_actually_run(pipe):
    calls = []
    backbone = pipe.session_adapter()
    module = getattr(backbone, "backbone", None) or pipe.model.model.language_model
    handle = module.register_forward_hook(lambda *args: calls.append(1))
    try:
        out = pipe(PROMPTS, seed=0)
    finally:
        handle.remove()
    cells = GRID[0] * GRID[1]
    assert len(calls) == cells  # prefill + one forward for every later cell
    for stat in out.stats:
        assert stat.forward_passes == cells and stat["forward_passes"] == cells
        assert stat.tokens == cells and stat.accepted_per_step == [1] * cells
        assert stat.seconds > 0 and stat.compression == 1.0
        assert stat.commit_step.shape == GRID and stat.commit_step.flatten().tolist() == list(
            range(1, cells + 1)
        )


def test_same_seed_same_codes_and_batch_equals_single(pipe):
    batch = pipe(PROMPTS, seed=[5, 6], num_images_per_prompt=1).codes
    again = pipe(PROMPTS, seed=[5, 6]).codes
    assert torch.equal(batch, again)
    single = torch.cat([pipe(PROMPTS[0], seed=5).codes, pipe(PROMPTS[1], seed=6).codes])
    assert torch.equal(batch, single)
    generators = [torch.Generator().manual_seed(5), torch.Generator().manual_seed(6)]
    assert torch.equal(pipe(PROMPTS, generator=generators).codes, batch)
    other = pipe(PROMPTS, seed=[7, 8]).codes
    assert not torch.equal(batch, other)


def test_num_images_per_prompt_repeats_each_prompt(pipe):
    out = pipe(PROMPTS, seed=0, num_images_per_prompt=2)
    assert out.codes.shape[0] == 4 and len(out.stats) == 4
    # seed=s gives image i the seed s + i: image 1 (prompt 0) equals a single call with seed 1
    assert torch.equal(out.codes[1], pipe(PROMPTS[0], seed=1).codes[0])


def test_save_pretrained_round_trip(pipe, tmp_path):
    before = pipe(PROMPTS, seed=3, output_type="np")
    pipe.save_pretrained(tmp_path / "saved")
    for loader in (type(pipe), arjet.ARPipeline):
        loaded = loader.from_pretrained(str(tmp_path / "saved"))
        assert type(loaded) is type(pipe)
        loaded.set_progress_bar_config(disable=True)
        after = loaded(PROMPTS, seed=3, output_type="np")
        assert torch.equal(before.codes, after.codes)
        np.testing.assert_allclose(before.images, after.images, atol=1e-6)


def test_callback_sees_partial_codes_and_can_interrupt(pipe):
    seen = []

    def callback(p, step, timestep, tensors):
        seen.append(tensors["codes"].clone())
        if step == 3:
            p._interrupt = True
        return tensors

    out = pipe(
        PROMPTS[0], seed=0, callback_on_step_end=callback, callback_on_step_end_tensor_inputs=["codes"]
    )
    assert len(seen) == 4
    assert (seen[0] >= 0).sum() == 1 and (seen[-1] >= 0).sum() == 4
    assert (out.codes >= 0).sum() == 4  # stopped early: the rest stays -1 and is painted grey
    assert out.images[0].size[0] == GRID[1] * _downsample(pipe)


def test_greedy_is_deterministic_without_a_seed(pipe):
    assert torch.equal(pipe(PROMPTS, temperature=0).codes, pipe(PROMPTS, temperature=0).codes)


def test_sampler_object_is_accepted(pipe):
    from arjet.samplers import AR

    assert torch.equal(
        pipe(PROMPTS[0], seed=1, sampler=AR()).codes, pipe(PROMPTS[0], seed=1, sampler="ar").codes
    )


BAD_INPUTS = [
    (dict(prompt=""), "prompt must not be empty"),
    (dict(prompt="   "), "prompt must not be empty"),
    (dict(prompt=42), "prompt must be a non-empty string"),
    (dict(prompt=[]), "prompt must be a non-empty string"),
    (dict(prompt=["ok", None]), "prompt must contain only strings"),
    (dict(sampler="nope"), "unknown sampler 'nope'; available: ar"),
    (dict(top_k=0), "top_k must be a positive integer, got 0"),
    (dict(top_k=-3), "top_k must be a positive integer"),
    (dict(top_p=0.0), r"top_p must be in \(0, 1\], got 0.0"),
    (dict(top_p=1.5), r"top_p must be in \(0, 1\]"),
    (dict(temperature=-1.0), "temperature must be a number >= 0"),
    (dict(guidance_scale=-2.0), "guidance_scale must be a number >= 0"),
    (dict(num_images_per_prompt=0), "num_images_per_prompt must be >= 1"),
    (dict(height=7), "height"),
    (dict(output_type="jpeg"), "output_type must be one of"),
    (dict(seed=[1, 2, 3]), "seed must be an int or a list of 1 ints"),
    (dict(callback_on_step_end_tensor_inputs=["latents"]), "callback tensor inputs"),
]


@pytest.mark.parametrize(("kwargs", "message"), BAD_INPUTS, ids=[m for _, m in BAD_INPUTS])
def test_bad_input_raises_before_any_model_work(pipe, kwargs, message):
    calls = []
    handle = pipe.model.register_forward_pre_hook(lambda *a: calls.append(1))
    forwards = []
    module = getattr(pipe.session_adapter(), "backbone", None) or pipe.model.model.language_model
    handle2 = module.register_forward_pre_hook(lambda *a: forwards.append(1))
    kwargs = {"prompt": "a red circle", **kwargs}
    try:
        with pytest.raises(ValueError, match=message):
            pipe(**kwargs)
    finally:
        handle.remove()
        handle2.remove()
    assert not calls and not forwards


def test_negative_prompt_only_where_the_family_uses_it(pipe):
    if pipe.supports_negative_prompt:
        a = pipe(PROMPTS[0], negative_prompt="blurry", seed=0).codes
        b = pipe(PROMPTS[0], negative_prompt="a red circle", seed=0).codes
        assert a.shape == b.shape
        with pytest.raises(ValueError, match="negative prompts for 2 prompts"):
            pipe(PROMPTS, negative_prompt=["x", "y", "z"])
    else:
        with pytest.raises(ValueError, match="does not take a negative_prompt"):
            pipe(PROMPTS[0], negative_prompt="blurry")
