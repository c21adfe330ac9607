"""`pipe(...)` refuses every bad or oversized request before any model work, with a message naming the argument.

Covers the argument types (seed, generator), the limits (images per call, prompt characters and tokens against
the model's positions, sampler windows against the grid), numbers that overflow float32 logits, prompt text
that spells control tokens (per family), and a fuzz test of a few hundred random bad calls.
"""

import random

import pytest
import torch

import arjet
from arjet.limits import DEMO_LIMITS, Limits
from arjet.pipelines.prompts import control_tokens, encode_with_prompt, unknown_words
from arjet.testing import tiny_pipeline

GRID = (3, 3)
PROMPT = "a red circle left of a blue square"


class ModelWork(AssertionError):
    pass


def _no_model_work(pipe):
    """Hooks that fail the test on any forward of the model, its language model or its image tokenizer."""

    def refuse(*args):
        raise ModelWork("model work before the arguments were checked")

    modules = [
        pipe.model,
        getattr(pipe.session_adapter(), "backbone", None) or pipe.model.model.language_model,
    ]
    return [module.register_forward_pre_hook(refuse) for module in modules]


@pytest.fixture(scope="module")
def pipes():
    built = {family: tiny_pipeline(family, grid=GRID, vocab_size=8) for family in arjet.testing.FAMILIES}
    for pipe in built.values():
        pipe.limits = Limits()  # the library's defaults, not the tiny models' statistical allowance
    return built


@pytest.fixture
def pipe(pipes, family):
    handles = _no_model_work(pipes[family])
    yield pipes[family]
    for handle in handles:
        handle.remove()


BAD_RANDOM = [
    (dict(seed=1.5), "seed must be an int or a list of 1 ints"),
    (dict(seed=float("nan")), "seed must be an int"),
    (dict(seed=True), "seed must be an int"),
    (dict(seed="3"), "seed must be an int"),
    (dict(seed=-1), "seed must be an integer from 0 to 2\\*\\*63 - 1, got -1"),
    (dict(seed=2**63), "seed must be an integer from 0 to 2\\*\\*63 - 1"),
    (dict(seed=2**64), "seed must be an integer from 0 to 2\\*\\*63 - 1"),
    (dict(seed=2**63 - 1, num_images_per_prompt=2), "seed \\+ 1 < 2\\*\\*63"),
    (dict(seed=[1.0]), "seed\\[0\\] must be an integer"),
    (dict(seed=[True]), "seed\\[0\\] must be an integer"),
    (dict(seed=[-5]), "seed\\[0\\] must be an integer from 0"),
    (dict(generator="x"), "generator must be a torch.Generator or a list of one per image, got str"),
    (dict(generator=3), "generator must be a torch.Generator"),
    (
        dict(generator=[torch.Generator(), "x"], num_images_per_prompt=2),
        "generator must be a torch.Generator",
    ),
    (dict(generator=[torch.Generator()] * 3), "got 3 generators for 1 images"),
    (dict(return_dict="yes"), "return_dict must be True or False"),
    (dict(callback_on_step_end_tensor_inputs="codes"), "callback_on_step_end_tensor_inputs must be a list"),
]


@pytest.mark.parametrize(("kwargs", "message"), BAD_RANDOM, ids=[m for _, m in BAD_RANDOM])
def test_seed_and_generator_types_are_named(pipe, kwargs, message):
    with pytest.raises(ValueError, match=message):
        pipe(PROMPT, **kwargs)


@pytest.mark.parametrize("prompt", ["a red \udcff circle", ["a red circle", "\ud800"]])
def test_a_prompt_that_is_not_text_is_named_before_the_tokenizer(pipe, prompt):
    with pytest.raises(ValueError, match="prompt holds U\\+D[8C][0F]{2} at character [06], a lone surrogate"):
        pipe(prompt)


def test_the_largest_seeds_are_accepted(pipe):
    assert pipe.check_inputs(PROMPT, seed=2**63 - 1).batch_size == 1
    assert pipe.check_inputs(PROMPT, seed=2**63 - 2, num_images_per_prompt=2).batch_size == 2


LIMITS = [
    (dict(num_images_per_prompt=10**9), "1000000000 images, more than limits.max_images_per_call=64"),
    (dict(prompt=["a red circle"] * 65), "65 prompt\\(s\\) x num_images_per_prompt=1 is 65 images"),
    (dict(prompt="red " * 2501), "prompt has 10004 characters, more than limits.max_prompt_chars=10000"),
    (dict(prompt="red " * 600), "is 6.. tokens .* the 3x3 image needs .* positions, but this model has 512"),
    (dict(sampler="sjd:window=300000"), "window must be an integer from 1 to 16384, got '300000'"),
    (dict(sampler=arjet.samplers.SJD(window=3000)), "window=3000 is larger than the 9 cells"),
    (
        dict(sampler="sjd:window=10000"),
        "window=10000 is larger than the 9 cells of this 3x3 grid; use window <= 16",
    ),
    (dict(sampler="sjd2:window=10000"), "use window <= 64"),
    (dict(sampler="zipar:w=100000"), "w must be an integer from 2 to 16384"),
    (dict(sampler="zipar+sjd:window=100"), "window=100 is larger than the 9 cells"),
    (
        dict(sampler="eagle2:tree_width=64,expand=64,tree_depth=16"),
        "tree_width=64, expand=64, tree_depth=16 make a tree of 57,409 nodes, more than the 9 cells of this "
        "3x3 grid; use a tree of at most 53 nodes",
    ),
    (dict(sampler="lantern:drafter=true,tree_width=64,expand=64,tree_depth=8"), "a tree of 24,641 nodes"),
]


@pytest.mark.parametrize(("kwargs", "message"), LIMITS, ids=[m for _, m in LIMITS])
def test_limits_are_checked_before_any_work(pipe, kwargs, message):
    kwargs = {"prompt": PROMPT, **kwargs}
    with pytest.raises(ValueError, match=message):
        pipe(**kwargs)


def test_an_operator_can_raise_or_tighten_the_limits(pipes):
    pipe = pipes["janus"]
    try:
        pipe.limits = Limits(max_images_per_call=100)
        assert pipe.check_inputs(PROMPT, num_images_per_prompt=100).batch_size == 100
        pipe.limits = Limits(max_prompt_tokens=5)
        with pytest.raises(ValueError, match="more than limits.max_prompt_tokens=5"):
            pipe.check_inputs(PROMPT)
    finally:
        pipe.limits = Limits()
    larger = tiny_pipeline("janus", grid=(10, 10), vocab_size=8)
    larger.check_inputs(PROMPT, sampler="sjd:window=65")  # within the 100 cells
    larger.limits = DEMO_LIMITS
    with pytest.raises(ValueError, match="window=65 is larger than the limit of 64; use window <= 64"):
        larger.check_inputs(PROMPT, sampler="sjd:window=65")
    with pytest.raises(ValueError, match="max_images_per_call must be an integer >= 1, got 0"):
        Limits(max_images_per_call=0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(temperature=1e-45), "temperature=1e-45 .* scales the logits by .*overflows float32"),
        (dict(temperature=1e-300), "temperature=1e-300 .* overflows float32"),
        (dict(guidance_scale=1e308), "guidance_scale=1e\\+308 scales the logits by 1e\\+308"),
        (dict(guidance_scale=1e38), "guidance_scale=1e\\+38"),
        (dict(guidance_scale=1e20, temperature=1e-20), "scales the logits by 1e\\+40"),
        (dict(temperature=0, guidance_scale=1e31), "guidance_scale=1e\\+31"),
    ],
)
def test_numbers_that_overflow_float32_logits_are_refused(pipe, kwargs, message):
    with pytest.raises(ValueError, match=message):
        pipe(PROMPT, **kwargs)


def test_a_top_p_too_small_for_float32_is_greedy_not_code_zero(pipes):
    """top_p=1e-300 is 0 in float32; nucleus sampling still keeps the most likely code, so the codes are the
    greedy ones (they all came out 0 before)."""
    pipe = pipes["janus"]
    codes = pipe(PROMPT, top_p=1e-300, seed=0, output_type="latent").codes
    assert torch.equal(codes, pipe(PROMPT, temperature=0, output_type="latent").codes)


def test_limits_must_be_limits_when_set(pipes):
    pipe = pipes["janus"]
    for value in (None, {"max_images_per_call": 2}, 64):
        with pytest.raises(ValueError, match=f"pipe.limits must be an arjet.Limits, got {value!r}"):
            pipe.limits = value
    assert pipe.limits == Limits()


def test_a_tiny_temperature_within_the_bound_is_greedy_not_grey(pipes):
    pipe = pipes["janus"]
    codes = pipe(PROMPT, temperature=1e-20, seed=0, output_type="latent").codes
    assert torch.equal(codes, pipe(PROMPT, temperature=0, output_type="latent").codes)
    assert codes.min() >= 0


# control tokens each family's template uses, written into a prompt
CONTROL_TEXT = {
    "janus": ["<begin_of_image>", "<｜end▁of▁sentence｜>", "<|Assistant|>", "<｜▁pad▁｜>"],
    "emu3": [
        "<|image start|>",
        "<|extra_200|>",
        "<|image token|>",
        "<|visual token 000003|>",
        "<|endoftext|>",
    ],
    "lumina_mgpt": ["<racm3:break>", "<reserved08706>", "</s>", "<s>", "<eoss>"],
    "glm_image": ["<sop>", "<eop>", "<|image_start|>", "<|image_3|>", "[gMASK]"],
}


def _control_ids(pipe, ids: list[int]) -> list[int]:
    """The ids of control tokens in `ids` (the unknown token, which plain text may become, is not one)."""
    tokenizer = pipe.text_tokenizer
    specials = set(tokenizer.convert_tokens_to_ids(control_tokens(tokenizer)))
    specials.discard(tokenizer.unk_token_id)
    return [i for i in ids if i in specials]


@pytest.mark.parametrize("index", range(4))
def test_control_tokens_written_in_a_prompt_are_read_as_plain_text(pipes, family, index):
    pipe = pipes[family]
    tokens = CONTROL_TEXT[family]
    token = tokens[index % len(tokens)]
    plain = pipe.encode_prompts(["a red circle"], None, GRID, guided=False)
    tricky = pipe.encode_prompts([f"a red {token} circle"], None, GRID, guided=False)
    plain_ids = plain.ids[0][plain.visible[0]].tolist()
    tricky_ids = tricky.ids[0][tricky.visible[0]].tolist()
    # the template's control tokens, and no others: the prompt's spelling of one is plain text
    assert _control_ids(pipe, tricky_ids) == _control_ids(pipe, plain_ids)
    assert len(tricky_ids) > len(plain_ids)
    assert pipe.prompt_length(f"a red {token} circle", GRID) == len(tricky_ids)
    out = pipe(f"a red {token} circle", seed=0, output_type="latent")  # and it decodes like any prompt
    assert out.codes.min() >= 0


def test_lumina_refuses_text_spelling_an_image_code(pipes):
    with pytest.raises(
        ValueError, match="contains 'IMGIMG', the spelling of Lumina-mGPT's image-code tokens"
    ):
        pipes["lumina_mgpt"].check_inputs("a IMGIMGAZ square")


def test_plain_prompts_are_tokenized_exactly_as_before(pipes, family):
    tokenizer = pipes[family].tokenizer
    for text in ("a red circle", "three green triangles on a blue background"):
        whole = tokenizer("<|User|>: " + text + "\n\n<begin_of_image>", add_special_tokens=False)["input_ids"]
        assert encode_with_prompt(tokenizer, "<|User|>: ", text, "\n\n<begin_of_image>") == whole


def test_unknown_words_name_control_text_too(pipes):
    assert unknown_words(pipes["janus"].tokenizer, "a <begin_of_image> circle") == [
        "<",
        "begin_of_image",
        ">",
    ]


# -- fuzz: a few hundred random bad calls ---------------------------------------------------------------
BAD_VALUES = {
    "prompt": [None, 3, "", "   ", [], ["ok", None], [""], {"a": 1}, "x" * 10_001, b"bytes"],
    "negative_prompt": [3, [None], ["a", "b", "c"], "x" * 10_001],
    "sampler": ["warp", "sjd:window=0", "sjd:coupling=maybe", "sjd:acceptance=foo", "sjd:window=8,window=9",
                "sjd:windw=3", "sjd:window=300000", "zipar:w=0", "sjd2:window=1", 3, None, "lantern:delta=-1"],
    "height": [0, -1, 7, 1.5, "64", True, 10**12],
    "width": [0, -3, 5.5, "6", False, 10**12],
    "aspect_ratio": ["wide", "0:1", 1.5, "1:x", "100000:1", ":"],
    "guidance_scale": [-1.0, float("nan"), float("inf"), "3", True, 1e308, 1e38, [1.0]],
    "temperature": [-0.5, float("nan"), float("-inf"), "1", None, 1e-45, 1e-300, True],
    "top_k": [0, -2, 1.5, "5", True],
    "top_p": [0, 0.0, 1.5, -0.1, float("nan"), "0.9", True],
    "num_images_per_prompt": [0, -1, 1.0, "2", True, 10**9, None],
    "seed": [1.5, float("nan"), -1, 2**63, 2**64, True, "0", [1, 2, 3], [None], [1.0]],
    "generator": ["x", 1, [torch.Generator(), "x"], [torch.Generator()] * 5, object()],
    "output_type": ["jpeg", None, 3, "PIL"],
    "return_dict": ["yes", 1, None],
    "callback_on_step_end": ["print", 3],
    "callback_on_step_end_tensor_inputs": [["latents"], "codes", 3],
    "threads": [0, -1, 1025, 1.5, "2", True],
}  # fmt: skip
# what the error message says for each argument
NAMES = {
    "negative_prompt": ("negative_prompt", "negative prompts"),
    "aspect_ratio": ("aspect_ratio", "image tokens"),
    "height": ("height",),
    "width": ("width",),
    "callback_on_step_end_tensor_inputs": ("callback_on_step_end_tensor_inputs", "callback tensor inputs"),
    "guidance_scale": ("guidance_scale",),
    "temperature": ("temperature",),
    "generator": ("generator",),
}


def _fuzz_cases(count: int, seed: int) -> list[tuple[str, object]]:
    rng = random.Random(seed)
    names = sorted(BAD_VALUES)
    cases = []
    for _ in range(count):
        name = rng.choice(names)
        cases.append((name, rng.choice(BAD_VALUES[name])))
    return cases


@pytest.mark.parametrize("family_name", arjet.testing.FAMILIES)
def test_fuzz_random_bad_arguments_raise_a_named_value_error_before_model_work(pipes, family_name):
    pipe = pipes[family_name]
    handles = _no_model_work(pipe)
    try:
        for name, value in _fuzz_cases(120, seed=hash(family_name) % 1000):
            kwargs = {"prompt": PROMPT, name: value}
            if name == "negative_prompt" and not pipe.supports_negative_prompt:
                kwargs[name] = "blurry"
            try:
                pipe(**kwargs)
            except ValueError as error:
                message = str(error)
                names = NAMES.get(name, (name,))
                if name in ("height", "width") and family_name == "janus":
                    names = (*names, "makes 6x6 images only")
                assert any(n in message for n in names), (name, value, message)
            else:
                pytest.fail(f"{family_name}: {name}={value!r} was accepted")
    finally:
        for handle in handles:
            handle.remove()
