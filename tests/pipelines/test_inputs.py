"""`arjet.pipelines.inputs`: the call's arguments declared once, unknown keywords refused by name, one check of
seeds and generators."""

import inspect
import pydoc

import numpy as np
import pytest
import torch

from arjet.pipelines.inputs import OUTPUT_TYPES, GenerationInputs, image_generators
from arjet.samplers import SamplingOptions
from arjet.testing import tiny_pipeline


@pytest.fixture(scope="module")
def pipe():
    return tiny_pipeline("emu3", grid=(2, 3), vocab_size=8)


def test_the_call_and_check_inputs_take_exactly_the_declared_arguments(pipe):
    """The call's keywords are `GenerationInputs`' fields, `sampling` spelled as `SamplingOptions`' four."""
    declared = []
    for name in inspect.signature(GenerationInputs).parameters:
        declared += SamplingOptions.names() if name == "sampling" else [name]
    assert SamplingOptions.names() == ("guidance_scale", "temperature", "top_k", "top_p")
    shown = inspect.signature(type(pipe).__call__).parameters
    assert list(shown) == ["self", *declared]
    assert shown["sampler"].default == "ar" and shown["temperature"].default == 1.0
    assert shown["guidance_scale"].default is None


def test_the_sampling_keywords_become_one_resolved_value(pipe):
    """`pipe(guidance_scale=..., temperature=..., top_k=..., top_p=...)` is one `SamplingOptions`, None numbers
    and a left-out temperature filled from the pipeline's defaults; the call's policy is its."""
    call = pipe.check_inputs("a red circle", temperature=0.5, top_p=0.9)
    defaults = pipe.sampling_defaults()
    assert call.sampling == SamplingOptions(defaults.guidance_scale, 0.5, defaults.top_k, 0.9)
    assert call.guidance_scale == defaults.guidance_scale
    assert (call.policy.temperature, call.policy.top_k, call.policy.top_p) == (0.5, defaults.top_k, 0.9)
    assert pipe.check_inputs("a red circle").sampling == defaults
    given = GenerationInputs.from_call("a", None, {"top_k": None, "guidance_scale": 2.0}, defaults)
    assert given.sampling == SamplingOptions(2.0, defaults.temperature, defaults.top_k, defaults.top_p)


def test_numpy_numbers_are_taken_as_the_python_ones_and_numpy_bools_still_refused(pipe):
    """What indexing an array gives (`np.int64`, `np.float32`) is the number it holds; a bool is no count."""
    given = pipe.check_inputs(
        "a", seed=[np.int64(3)], top_k=np.int64(5), top_p=np.float32(0.5), height=np.int32(16)
    )
    assert (given.sampling.top_k, given.sampling.top_p, given.size[0]) == (5, 0.5, 16)
    assert type(given.sampling.top_k) is int and given.generators[0].initial_seed() == 3
    with pytest.raises(ValueError, match="top_k must be a positive integer, got True"):
        pipe.check_inputs("a", top_k=np.bool_(True))


def test_help_says_what_each_output_type_returns(pipe):
    """`help(pipe)` and `GenerationInputs` name every output type and what it gives."""
    for text in (pydoc.render_doc(pipe, renderer=pydoc.plaintext), GenerationInputs.__doc__):
        text = " ".join(text.split())
        for output_type, returns in {
            '"pil"': "PIL",
            '"np"': "[N, h, w, 3]",
            '"pt"': "[N, 3, h, w]",
            '"latent"': "[N, H, W]",
        }.items():
            assert output_type in text and returns in text, (output_type, returns)
        assert "[0, 1]" in text and "threads" in text
    assert set(OUTPUT_TYPES) == {"pil", "np", "pt", "latent"}


@pytest.mark.parametrize(
    ("keyword", "message"),
    [
        (
            "num_inference_steps",
            "num_inference_steps= is not an argument of an AR pipeline: AR pipelines have no",
        ),
        ("latents", "latents= is not an argument of an AR pipeline"),
        ("samplr", "unexpected argument samplr=; a pipeline call takes prompt, negative_prompt and"),
    ],
)
def test_unknown_keywords_get_one_line_value_errors_before_model_work(pipe, keyword, message, monkeypatch):
    monkeypatch.setattr(pipe, "encode_prompts", lambda *a, **k: pytest.fail("encoded before the check"))
    for call in (pipe, pipe.check_inputs):
        with pytest.raises(ValueError, match=message) as caught:
            call("a red circle", **{keyword: 10})
        assert "\n" not in str(caught.value)


def test_seeds_become_one_generator_per_image():
    generators = image_generators(None, 5, 3)
    assert [g.initial_seed() for g in generators] == [5, 6, 7]
    assert [g.initial_seed() for g in image_generators(None, [9, 2], 2)] == [9, 2]
    assert image_generators(None, None, 4) is None
    one = torch.Generator()
    assert image_generators(one, None, 4) is one
    assert image_generators([one, one], None, 2) == [one, one]


@pytest.mark.parametrize(
    ("generator", "seed", "message"),
    [
        (torch.Generator(), 1, "pass either generator or seed, not both"),
        (None, [1, 2], "a list of 3 ints .* got 2 seeds"),
        (None, [1, -1, 2], r"seed\[1\] must be an integer from 0 to 2\*\*63 - 1, got -1"),
        (None, 2**63 - 2, r"seed \+ 2 < 2\*\*63"),
        (None, "0", "seed must be an int or a list of 3 ints"),
        ("x", None, "generator must be a torch.Generator .* got str"),
        ([torch.Generator()] * 2, None, "got 2 generators for 3 images"),
    ],
)
def test_bad_seeds_and_generators_are_named(generator, seed, message):
    with pytest.raises(ValueError, match=message):
        image_generators(generator, seed, 3)
