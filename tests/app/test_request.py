"""Every value a visitor can send is checked before model work, with a message naming it."""

import pytest

from arjet.app.request import make_request, sampler_spec
from arjet.limits import DEMO_LIMITS
from arjet.samplers import SamplingOptions

GOOD = dict(
    prompt="a red circle", sampler="sjd", options="", seed=0, guidance_scale=3.0, temperature=1.0, top_k=0
)


def _request(**changes):
    return make_request(**{**GOOD, **changes})


def test_a_good_request_becomes_pipeline_arguments():
    request = _request(options="window=8, init=random", seed=7.0, top_k=16)
    assert request.sampler == "sjd:window=8,init=random" and request.seed == 7
    assert request.sampling == SamplingOptions(guidance_scale=3.0, temperature=1.0, top_k=16)
    assert _request().sampling.top_k is None  # 0: the model's default


def test_sampler_spec_ignores_blank_options():
    assert sampler_spec("zipar", " , ") == "zipar"
    assert _request(options=None).sampler == "sjd"  # an empty field may come as None


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(prompt="   "), "prompt is empty"),
        (dict(prompt=None), "prompt is empty"),
        (dict(prompt="x" * (DEMO_LIMITS.max_prompt_chars + 1)), f"at most {DEMO_LIMITS.max_prompt_chars}"),
        (dict(sampler="fast"), "Unknown sampler 'fast'"),
        (dict(options="window"), "Bad sampler options 'window'"),
        (dict(options="speed=3"), "Bad sampler options 'speed=3'"),
        (dict(seed=-1), "seed must be an integer from 0 to 2147483647, got -1"),
        (dict(seed=1.5), "seed must be an integer"),
        (dict(seed=True), "seed must be an integer"),
        (dict(guidance_scale=25.0), "guidance_scale must be a finite number from 0 to 20, got 25.0"),
        (dict(guidance_scale=float("nan")), "guidance_scale must be a finite number from 0 to 20, got nan"),
        (dict(temperature=-0.1), "temperature must be a finite number from 0 to 5"),
        (dict(temperature=None), "temperature must be a finite number"),
        (dict(top_k=-3), "top_k must be an integer from 0 to 1000000"),
        (dict(top_k=1.5), "top_k must be an integer from 0 to 1000000, got 1.5"),
        (dict(prompt="a red \udcff circle"), "The prompt holds U\\+DCFF at character 6, a lone surrogate"),
        (dict(sampler=None), "Unknown sampler None"),
        (dict(options="window=65"), "window=65 is above this demo's limit of 64"),
        # values of the wrong type, as the page's API may send them: each named
        (dict(prompt=5), "The prompt must be text, got int: 5"),
        (dict(prompt=["a red circle"]), r"The prompt must be text, got list: \['a red circle'\]"),
        (dict(options=["window=8"]), r"The sampler options must be text, got list: \['window=8'\]"),
        (dict(sampler=5), "Unknown sampler 5"),
        (dict(seed="x"), "seed must be an integer from 0 to 2147483647, got 'x'"),
        (dict(guidance_scale="3"), "guidance_scale must be a finite number from 0 to 20, got '3'"),
        (dict(temperature="hot"), "temperature must be a finite number from 0 to 5, got 'hot'"),
        (dict(top_k=[1]), r"top_k must be an integer from 0 to 1000000, got \[1\]"),
    ],
)
def test_bad_values_are_named(changes, message):
    with pytest.raises(ValueError, match=message):
        _request(**changes)
