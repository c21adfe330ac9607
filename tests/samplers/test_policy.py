import pytest
import torch

from arjet.samplers import LogitsPolicy, SamplingOptions, Temperature, TopK, TopP
from arjet.samplers.decode import ImageRandom, sample

LOGITS = torch.tensor([[2.0, 1.0, 0.5, -1.0], [0.0, 3.0, 3.0, 1.0]])


def test_processors_return_new_tensors_and_never_edit_input():
    original = LOGITS.clone()
    for processor in (Temperature(0.5), TopK(2), TopP(0.7)):
        out = processor(LOGITS)
        assert out is not LOGITS
        assert torch.equal(LOGITS, original)


def test_top_k_keeps_the_k_largest():
    out = TopK(2)(LOGITS)
    assert torch.isinf(out[0, 2:]).all() and torch.isfinite(out[0, :2]).all()
    assert torch.isfinite(TopK(10)(LOGITS)).all()  # k larger than the vocabulary keeps everything


def test_top_p_keeps_the_smallest_set_reaching_p():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    out = TopP(0.75)(probs.log())
    assert torch.isfinite(out[0, :2]).all() and torch.isinf(out[0, 2:]).all()
    out = TopP(0.8)(probs.log())  # 0.5 + 0.3 reaches 0.8 exactly: the third token is not needed
    assert torch.isfinite(out[0, :2]).all() and torch.isinf(out[0, 2:]).all()
    assert torch.isfinite(TopP(0.01)(probs.log())[0, 0])  # the top token always stays


def _top_p_before(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """The processor as it was before it kept the most likely token explicitly (the reference)."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    before = sorted_logits.softmax(-1).cumsum(-1) - sorted_logits.softmax(-1)
    drop_sorted = before >= top_p
    return logits.masked_fill(drop_sorted.scatter(-1, order, drop_sorted), float("-inf"))


@pytest.mark.parametrize("top_p", [1e-300, 1e-50, 1e-46])
def test_a_top_p_below_float32s_smallest_keeps_the_most_likely_code(top_p):
    """1e-300 is 0 in float32: every code's mass-before reached it, the old processor dropped them all and
    every draw came out code 0. Nucleus sampling keeps at least the most likely code (transformers'
    min_tokens_to_keep=1): the distribution is the argmax."""
    logits = torch.randn(64, 50, generator=torch.Generator().manual_seed(0))
    out = TopP(top_p)(logits)
    assert torch.equal(
        torch.isfinite(out),
        torch.zeros_like(out, dtype=torch.bool).scatter(-1, logits.argmax(-1, keepdim=True), True),
    )
    probs = LogitsPolicy(top_p=top_p).probs(logits)
    assert torch.equal(probs, LogitsPolicy(temperature=0).probs(logits))
    assert torch.isinf(_top_p_before(logits, top_p)).all()  # the control: the old rule kept nothing


@pytest.mark.parametrize("top_p", [0.01, 0.1, 0.5, 0.75, 0.9, 0.99, 0.999999])
def test_ordinary_top_p_values_keep_exactly_the_same_codes_as_before(top_p):
    """The target distribution of the lossless samplers does not move: for any top_p float32 can hold, the
    most likely code was already kept (its mass-before is 0)."""
    generator = torch.Generator().manual_seed(1)
    for scale in (0.1, 1.0, 10.0, 100.0):
        logits = scale * torch.randn(32, 1000, generator=generator)
        assert torch.equal(TopP(top_p)(logits), _top_p_before(logits, top_p))


def test_policy_order_is_temperature_then_top_k_then_top_p():
    policy = LogitsPolicy(temperature=0.5, top_k=3, top_p=0.9)
    assert [type(p) for p in policy.processors] == [Temperature, TopK, TopP]
    expected = TopP(0.9)(TopK(3)(LOGITS / 0.5)).softmax(-1)
    torch.testing.assert_close(policy.probs(LOGITS), expected)


def test_identity_settings_build_no_processor():
    assert LogitsPolicy(temperature=1.0, top_k=None, top_p=1.0).processors == ()


def test_temperature_zero_is_greedy():
    probs = LogitsPolicy(temperature=0).probs(LOGITS)
    assert probs[0].tolist() == [1.0, 0.0, 0.0, 0.0]
    assert probs.sum(-1).tolist() == [1.0, 1.0]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(temperature=-0.1), "temperature must be a number >= 0"),
        (dict(temperature=float("nan")), "temperature must be a number >= 0"),
        (dict(top_k=0), "top_k must be a positive integer, got 0"),
        (dict(top_k=2.5), "top_k must be a positive integer"),
        (dict(top_p=0), r"top_p must be in \(0, 1\]"),
        (dict(top_p=1.01), r"top_p must be in \(0, 1\]"),
    ],
)
def test_bad_policy_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LogitsPolicy(**kwargs)


def test_inverse_cdf_sampling_matches_the_distribution():
    probs = torch.tensor([0.1, 0.0, 0.6, 0.3]).expand(20000, 4)
    draws = sample(probs, torch.rand(20000, generator=torch.Generator().manual_seed(0), dtype=torch.float64))
    frequencies = torch.bincount(draws, minlength=4).double() / 20000
    assert frequencies[1] == 0
    torch.testing.assert_close(
        frequencies, torch.tensor([0.1, 0.0, 0.6, 0.3], dtype=torch.float64), atol=0.015, rtol=0
    )
    assert sample(torch.tensor([[0.0, 1.0]]), torch.tensor([0.999999])).item() == 1


def test_per_image_streams_do_not_depend_on_the_batch():
    make = lambda seeds: ImageRandom([torch.Generator().manual_seed(s) for s in seeds], len(seeds))  # noqa: E731
    together = make([1, 2]).uniform(5)
    alone = make([2]).uniform(5)
    assert torch.equal(together[1], alone[0])
    with pytest.raises(ValueError, match="one per image"):
        ImageRandom([torch.Generator()], 2)


# -- SamplingOptions: the four values as one -------------------------------------------------------------
def test_sampling_options_are_one_value_made_from_keywords():
    options = SamplingOptions.from_kwargs({"temperature": 0.5, "top_k": 3})
    assert options == SamplingOptions(None, 0.5, 3, None)
    assert SamplingOptions.names() == ("guidance_scale", "temperature", "top_k", "top_p")
    assert options.kwargs() == {"guidance_scale": None, "temperature": 0.5, "top_k": 3, "top_p": None}
    assert SamplingOptions.from_kwargs(options.kwargs()) == options
    assert hash(options) == hash(SamplingOptions(None, 0.5, 3, None))  # a group's key
    with pytest.raises(
        ValueError, match="unexpected sampling option.* seed; the sampling options are guidance"
    ):
        SamplingOptions.from_kwargs({"seed": 1})
    with pytest.raises(ValueError, match="temperature must be a finite number"):
        SamplingOptions.from_kwargs({"temperature": None})


def test_resolving_fills_only_the_numbers_left_out():
    """None guidance / top-k / top-p take the defaults'; the temperature is always the options' own, and the
    merged numbers are checked together (the overflow check sees the guidance the decode uses)."""
    defaults = SamplingOptions(5.0, 0.9, 50, 0.75)
    assert SamplingOptions(None, 0.5).resolved(defaults) == SamplingOptions(5.0, 0.5, 50, 0.75)
    assert SamplingOptions(2.0, 1.0, 3, 0.5).resolved(defaults) == SamplingOptions(2.0, 1.0, 3, 0.5)
    assert SamplingOptions.from_kwargs({"top_k": None}, defaults) == defaults
    with pytest.raises(ValueError, match="temperature=1e-30 with guidance_scale=5.0 scales the logits by 5e"):
        SamplingOptions(None, 1e-30).resolved(defaults)
    policy = SamplingOptions(None, 0.5, 3, 0.9).policy()
    assert (policy.temperature, policy.top_k, policy.top_p) == (0.5, 3, 0.9)
